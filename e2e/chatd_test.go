package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"chatd/internal/sse"
)

// This file holds what the end-to-end tests share: building chatd, running it as a process, and the
// shapes and calls of its HTTP API.

// patience is how long a test waits for a process, a browser or a server to reach a state that takes
// a moment on an idle machine and many seconds on a loaded one (eight test runs at once on two cores
// made the browser test 14 times slower) before it gives up: a safety net, never what a test measures.
const patience = 2 * time.Minute

// poll checks cond every 20ms until it holds, and reports whether it did within patience. It is for
// states of other processes, which announce no change.
func poll(cond func() bool) bool {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(patience)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			return cond()
		}
	}
	return true
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// logBuffer collects a process's output safely.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// built is the chatd binary of this test run, built once for every test (linking it costs seconds of
// CPU on a loaded machine); TestMain removes its directory.
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

func buildChatd(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		built.err = errors.New("the first test to build chatd failed before it could") // statSources may t.Fatal
		statSources(t)
		built.err = nil
		if built.dir, built.err = os.MkdirTemp("", "chatd-e2e-"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "chatd")
		cmd := exec.Command("go", "build", "-o", built.bin, "chatd/cmd/chatd")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// statSources stats the module's Go files, go.mod, go.sum and the web UI's build that chatd embeds. go test caches a passing
// package's result until the package, or a file or environment variable its tests read, changes; it
// does not see what `go build` reads for the binary these tests run. Stated here, chatd's sources
// become inputs of this package's result, so a change to chatd runs the end-to-end tests again.
func statSources(t testing.TB) {
	t.Helper()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "web", "artifacts", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		embedded := strings.HasPrefix(path, filepath.FromSlash("../internal/webui/dist/"))
		if strings.HasSuffix(path, ".go") || embedded || path == "../go.mod" || path == "../go.sum" {
			_, err = os.Stat(path)
		}
		return err
	})
	if err != nil {
		t.Fatalf("stat chatd's sources: %v", err)
	}
}

// event is one run event as a client reads it.
type event struct {
	ID   string
	Type string
	Data map[string]any
}

// seq is the event's sequence number, or -1 when its id is not a number.
func (e event) seq() int {
	n, err := strconv.Atoi(e.ID)
	if err != nil {
		return -1
	}
	return n
}

func (e event) String() string {
	data, _ := json.Marshal(e.Data)
	if len(data) > 160 {
		data = append(data[:160], "…"...)
	}
	return fmt.Sprintf("%s %s %s", e.ID, e.Type, data)
}

// readEvents decodes run events from an SSE body and hands each to each until it returns false. It
// returns the error that ended the body, nil at its clean end.
func readEvents(body io.Reader, each func(event) bool) error {
	for ev, err := range sse.Scan(body) {
		if err != nil {
			return err
		}
		var data map[string]any
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			return fmt.Errorf("event %s %s: %w: %s", ev.ID, ev.Type, err, ev.Data)
		}
		if !each(event{ID: ev.ID, Type: ev.Type, Data: data}) {
			return nil
		}
	}
	return nil
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// record is a stored record as GET /v1/sessions/{id}/messages returns it.
type record struct {
	ID         string
	RunID      string `json:"run_id"`
	Role       string
	Content    string
	ToolCallID string `json:"tool_call_id"`
	Name       string
	Success    *bool
	ToolCalls  []struct {
		ID, Name  string
		Arguments map[string]any
	} `json:"tool_calls"`
	FinishReason string `json:"finish_reason"`
	Model        string
}

// runInfo is GET /v1/runs/{id}.
type runInfo struct {
	ID          string
	SessionID   string `json:"session_id"`
	Status      string
	Agent       string
	Model       string
	CreatedAt   *time.Time `json:"created_at"`
	StartedAt   *time.Time `json:"started_at"`
	EndedAt     *time.Time `json:"ended_at"`
	LastEventID int        `json:"last_event_id"`
}

// process is one chatd process serving a database file. It is killed, if still running, when the test
// that started it ends, and its output is logged if that test failed.
type process struct {
	name   string
	base   string
	cmd    *exec.Cmd
	out    *logBuffer
	exited chan struct{} // closed once the process is reaped
}

// startChatd runs bin serve on a free port with the database file db (or a postgres:// URL) and waits
// until /healthz answers.
func startChatd(t testing.TB, name, bin, db string, env ...string) *process {
	t.Helper()
	// Port 0: chatd takes a free port and says which in its log. A port picked here and passed on could
	// be taken by another process meanwhile (several test runs at once), and the test would talk to it.
	// A chatd that logs only warnings does not say: it gets a port picked here.
	addr := "127.0.0.1:0"
	if slices.Contains(env, "CHATD_LOG_LEVEL=warn") || slices.Contains(env, "CHATD_LOG_LEVEL=error") {
		addr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	}
	return startChatdAt(t, name, bin, db, addr, env...)
}

// startChatdAt is startChatd listening on addr, which may be a port that a killed chatd held, so that a
// balancer configured with its address finds it again.
func startChatdAt(t testing.TB, name, bin, db, addr string, env ...string) *process {
	t.Helper()
	p := &process{name: name, out: &logBuffer{}, exited: make(chan struct{})}
	if !strings.HasSuffix(addr, ":0") {
		p.base = "http://" + addr
	}
	dbArg := "sqlite:" + db
	if strings.HasPrefix(db, "postgres://") {
		dbArg = db
	}
	p.cmd = exec.Command(bin, "serve", "--addr", addr, "--db", dbArg)
	// The tests script their model's answers run by run: a title call after a session's first answer
	// would take one. The tests of titles name a title model (a later entry wins).
	p.cmd.Env = append(append(os.Environ(), "CHATD_TITLE_MODEL=none"), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.out)
		}
	})
	p.waitHealthy(t)
	return p
}

// listeningRE finds the address chatd listens on in its log.
var listeningRE = regexp.MustCompile(`(?:msg="chatd listening" url=|"msg":"chatd listening","url":")(http://[^\s"]+)`)

func (p *process) waitHealthy(t testing.TB) {
	t.Helper()
	healthy := poll(func() bool {
		select {
		case <-p.exited:
			t.Fatalf("%s exited at start-up (%v):\n%s", p.name, p.cmd.ProcessState, p.out)
		default:
		}
		if p.base == "" {
			m := listeningRE.FindStringSubmatch(p.out.String())
			if m == nil {
				return false
			}
			p.base = m[1]
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", p.base+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if !healthy {
		t.Fatalf("%s did not answer /healthz within %s:\n%s", p.name, patience, p.out)
	}
}

// kill ends the process with SIGKILL, as a crash or the OOM killer would, and reaps it.
func (p *process) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Kill()
	<-p.exited
}

// terminate sends SIGTERM, as a service manager stopping chatd does.
func (p *process) terminate(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM %s: %v", p.name, err)
	}
}

// waitExit waits up to d for the process to exit and returns its exit code; ok is false on timeout.
func (p *process) waitExit(d time.Duration) (code int, ok bool) {
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode(), true
	case <-time.After(d):
		return 0, false
	}
}

// waitLog waits up to d for s to appear in the process's output.
func (p *process) waitLog(s string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !strings.Contains(p.out.String(), s) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// post sends body as JSON, with an Idempotency-Key when key is set. The caller closes the body.
func (p *process) post(ctx context.Context, path string, body any, key string) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", p.base+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return http.DefaultClient.Do(req)
}

// reply is the whole answer to a send on /v1/chat/stream.
type reply struct {
	status int
	header http.Header
	body   []byte  // the answer when it is not a stream
	events []event // the stream's events
	err    error   // what ended the stream, if not its end
}

func (r *reply) last() event {
	if len(r.events) == 0 {
		return event{}
	}
	return r.events[len(r.events)-1]
}

// errorCode is the code of an error answer ({"error":{"code":…}}).
func (r *reply) errorCode() string {
	var e struct{ Error struct{ Code string } }
	json.Unmarshal(r.body, &e)
	return e.Error.Code
}

// chat sends a message on /v1/chat/stream and reads the answer to its end.
func (p *process) chat(t *testing.T, body map[string]any, key string) *reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	resp, err := p.post(ctx, "/v1/chat/stream", body, key)
	if err != nil {
		t.Fatalf("send %v to %s: %v", body, p.name, err)
	}
	defer resp.Body.Close()
	r := &reply{status: resp.StatusCode, header: resp.Header}
	if resp.StatusCode != 200 {
		r.body, _ = io.ReadAll(resp.Body)
		return r
	}
	r.err = readEvents(resp.Body, func(ev event) bool {
		r.events = append(r.events, ev)
		return true
	})
	return r
}

// liveStream is a send whose events are read as they come.
type liveStream struct {
	header http.Header
	events chan event // closed at the stream's end
	err    error      // what ended the stream; read after events is closed
}

// openStream sends a message on /v1/chat/stream and returns its stream once the answer's headers came;
// the stream is read until it ends or the test ends.
func (p *process) openStream(t *testing.T, body map[string]any) *liveStream {
	t.Helper()
	resp, err := p.post(t.Context(), "/v1/chat/stream", body, "")
	if err != nil {
		t.Fatalf("send %v to %s: %v", body, p.name, err)
	}
	if resp.StatusCode != 200 {
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("send %v to %s: %d %s", body, p.name, resp.StatusCode, raw)
	}
	s := &liveStream{header: resp.Header, events: make(chan event, 100000)}
	go func() {
		defer close(s.events)
		defer resp.Body.Close()
		s.err = readEvents(resp.Body, func(ev event) bool {
			s.events <- ev
			return true
		})
	}()
	return s
}

// until reads events until one satisfies stop, up to d, and returns them.
func (s *liveStream) until(stop func(event) bool, d time.Duration) ([]event, error) {
	var out []event
	timeout := time.After(d)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				return out, fmt.Errorf("the stream ended (%v) after %d events", s.err, len(out))
			}
			out = append(out, ev)
			if stop(ev) {
				return out, nil
			}
		case <-timeout:
			return out, fmt.Errorf("still waiting after %s and %d events", d, len(out))
		}
	}
}

// rest reads the stream's remaining events, up to d.
func (s *liveStream) rest(d time.Duration) ([]event, error) {
	var out []event
	timeout := time.After(d)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				return out, s.err
			}
			out = append(out, ev)
		case <-timeout:
			return out, errors.New("the stream did not end within " + d.String())
		}
	}
}

func (p *process) createSession(t *testing.T) string {
	t.Helper()
	resp, err := p.post(t.Context(), "/v1/sessions", map[string]any{"title": "e2e"}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s struct{ ID string }
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 || json.Unmarshal(raw, &s) != nil || s.ID == "" {
		t.Fatalf("create session: %d %s", resp.StatusCode, raw)
	}
	return s.ID
}

func (p *process) records(t *testing.T, sessionID string) []record {
	t.Helper()
	var got struct{ Messages []record }
	getJSON(t, p.base+"/v1/sessions/"+sessionID+"/messages", &got)
	return got.Messages
}

func (p *process) run(t *testing.T, id string) runInfo {
	t.Helper()
	var r runInfo
	getJSON(t, p.base+"/v1/runs/"+id, &r)
	return r
}

// waitEnded polls a run until it has a terminal status.
func (p *process) waitEnded(t *testing.T, id string) runInfo {
	t.Helper()
	var r runInfo
	if !poll(func() bool {
		r = p.run(t, id)
		return r.Status != "running" && r.Status != "queued"
	}) {
		t.Fatalf("run %s is still %s %s later", id, r.Status, patience)
	}
	return r
}

// replay reads GET /v1/runs/{id}/events with Last-Event-ID lastID ("" for none) to its end.
func (p *process) replay(t *testing.T, id, lastID string) []event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", p.base+"/v1/runs/"+id+"/events", nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("replay run %s: %v", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("replay run %s: %d %s", id, resp.StatusCode, raw)
	}
	var out []event
	if err := readEvents(resp.Body, func(ev event) bool {
		out = append(out, ev)
		return true
	}); err != nil {
		t.Fatalf("replay run %s: %v (after %d events)", id, err, len(out))
	}
	return out
}
