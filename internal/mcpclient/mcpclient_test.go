package mcpclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"chatd/internal/tool"
)

// transports starts the test server once per transport, each under the server name "srv", and runs f.
func transports(t *testing.T, extra string, f func(t *testing.T, m *Manager, reg *tool.Registry)) {
	t.Run("http", func(t *testing.T) {
		srv := httpServer(t, newTestServer(nil), nil)
		m, reg := startManager(t, httpConfig("srv", srv.URL, extra), nil, testOptions())
		f(t, m, reg)
	})
	t.Run("sse", func(t *testing.T) {
		srv := sseServer(t, newTestServer(nil))
		m, reg := startManager(t, httpConfig("srv", srv.URL, `,"type":"sse"`+extra), nil, testOptions())
		f(t, m, reg)
	})
	t.Run("stdio", func(t *testing.T) {
		m, reg := startManager(t, stdioConfig("srv", "1", extra), nil, testOptions())
		f(t, m, reg)
	})
}

// --- Start-up ---

// TestStartConnectsInParallel holds each server's first request until the other's has arrived too: one
// server at a time, neither would connect within the ConnectTimeout.
func TestStartConnectsInParallel(t *testing.T) {
	var arrived sync.WaitGroup
	arrived.Add(2)
	barrier := func(h http.Handler) http.Handler {
		var once sync.Once
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			once.Do(func() {
				arrived.Done()
				done := make(chan struct{})
				go func() { arrived.Wait(); close(done) }()
				select {
				case <-done:
				case <-r.Context().Done():
				}
			})
			h.ServeHTTP(w, r)
		})
	}
	a := httpServer(t, newTestServer(nil), barrier)
	b := httpServer(t, newTestServer(nil), barrier)
	m, _ := startManager(t, `{"mcpServers":{"a":{"url":"`+a.URL+`"},"b":{"url":"`+b.URL+`"}}}`, nil, testOptions())
	for _, s := range m.Servers() {
		if s.State != StateConnected || s.Attempts != 1 {
			t.Errorf("%s: %s after %d attempts (%s), want connected at the first", s.Name, s.State, s.Attempts, s.LastError)
		}
	}
}

// TestStartDoesNotWaitForAHungServer: a child that never answers initialize holds Start up for
// StartupWait only, while a failing command is reported with its stderr and retried, a disabled server
// never starts, and a good server is connected.
//
// The hung child's attempt is bounded by a ConnectTimeout that does not run out during the test, so
// that it is still under way when Start returns however slow the machine is; StartupWait is ample for
// the good server to connect on a loaded machine. TestConnectTimeout shows the attempt ending.
func TestStartDoesNotWaitForAHungServer(t *testing.T) {
	good := httpServer(t, newTestServer(nil), nil)
	marker := filepath.Join(t.TempDir(), "started")
	config := `{"mcpServers":{
		"good": {"url": "` + good.URL + `"},
		"hang": {"command": ` + testBinary() + `, "env": {"` + serverEnv + `": "hang"}},
		"boom": {"command": "sh", "args": ["-c", "echo boom >&2; exit 3"]},
		"off": {"command": "sh", "args": ["-c", "touch ` + marker + `"], "disabled": true}
	}}`
	opts := testOptions()
	opts.ConnectTimeout = time.Hour // Close ends the attempt
	opts.StartupWait = 10 * time.Second
	m, reg := startManager(t, config, nil, opts)

	// Start has returned while the hung server's first attempt is still under way.
	if s := status(t, m, "hang"); s.State != StateConnecting || s.Attempts != 1 || s.LastError != "" {
		t.Errorf("hang after Start: %+v, want connecting in its first attempt", s)
	}
	if s := status(t, m, "good"); s.State != StateConnected || s.Tools == 0 || s.ConnectedAt == nil || s.Protocol == "" {
		t.Errorf("good after Start: %+v, want connected with tools", s)
	}
	mustCall(t, reg, "good__echo", `{"text":"hi"}`)

	eventually(t, func() bool {
		s := status(t, m, "boom")
		return s.State != StateConnected && strings.Contains(s.LastError, "boom") && s.Attempts >= 3 && s.LastErrorAt != nil
	})
	if s := status(t, m, "hang"); s.State != StateConnecting || s.Attempts != 1 {
		t.Errorf("hang while boom was retried: %+v, want still connecting in its first attempt", s)
	}
	if s := status(t, m, "off"); s.State != StateDisabled || s.Attempts != 0 || s.Tools != 0 {
		t.Errorf("off: %+v, want disabled and never started", s)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the disabled server's command ran: %v", err)
	}
	if got := names(reg, "mcp:off"); len(got) != 0 {
		t.Errorf("the disabled server has tools: %v", got)
	}
}

// TestConnectTimeout: the attempt of a child that never answers initialize fails at ConnectTimeout,
// says so, and Start waits no longer than that attempt.
func TestConnectTimeout(t *testing.T) {
	opts := testOptions()
	opts.ConnectTimeout = 300 * time.Millisecond
	opts.StartupWait = time.Hour
	m, _ := startManager(t, `{"mcpServers":{"hang": {"command": `+testBinary()+`, "env": {"`+serverEnv+`": "hang"}}}}`, nil, opts)
	eventually(t, func() bool {
		s := status(t, m, "hang")
		return s.State == StateFailed && strings.Contains(s.LastError, "no answer to initialize within 300ms")
	})
}

// testBinary is this test binary's path as a JSON string, to run it as a stdio server.
func testBinary() string {
	b, _ := json.Marshal(os.Args[0])
	return string(b)
}

// TestHTTPServerGoneAndBack: calls to a server that went away fail at once and say why, rather than
// when their timeout runs out; once it is back on its address, it is connected again.
func TestHTTPServerGoneAndBack(t *testing.T) {
	ts := newTestServer(nil)
	srv := httpServer(t, ts, nil)
	m, reg := startManager(t, httpConfig("srv", srv.URL, `,"timeout":"`+longTimeout+`"`), nil, testOptions())
	addr := srv.Listener.Addr().String()
	stopHTTP(srv)

	out := callPromptly(t, reg, "srv__echo", `{"text":"hi"}`)
	if out.Success || !strings.Contains(out.Content, "MCP server srv") {
		t.Errorf("call to a server gone away: %+v, want a prompt failure naming the server", out)
	}
	eventually(t, func() bool { return status(t, m, "srv").State != StateConnected })
	eventually(t, func() bool { return status(t, m, "srv").State == StateFailed })
	out = callPromptly(t, reg, "srv__echo", `{"text":"hi"}`)
	if out.Success || !strings.Contains(out.Content, "MCP server srv is unavailable") {
		t.Errorf("call to a failed server: %+v, want a prompt failure saying it is unavailable", out)
	}

	// Back on the same address, it is found again.
	restartHTTP(t, addr, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ts.Server }, nil))
	eventually(t, func() bool { return connected(m, "srv") })
	if out := mustCall(t, reg, "srv__echo", `{"text":"back"}`); out.Content != "back" {
		t.Errorf("after the restart: %q", out.Content)
	}
}

// TestCallWaitingForAFailedAttempt: a call waiting for an attempt under way fails as soon as the
// attempt does.
func TestCallWaitingForAFailedAttempt(t *testing.T) {
	var e expiring
	var hold atomic.Bool // new sessions wait for fail, then get a 503, while set
	fail := make(chan struct{})
	ts := newTestServer(nil)
	srv := httpServer(t, ts, func(h http.Handler) http.Handler {
		h = e.wrap(h)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if hold.Load() && r.Header.Get("Mcp-Session-Id") == "" {
				select {
				case <-fail:
				case <-ts.release:
				}
				http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	m, reg := startManager(t, httpConfig("srv", srv.URL, `,"timeout":"`+longTimeout+`"`), nil, testOptions())
	mustCall(t, reg, "srv__echo", `{"text":"hi"}`)
	hold.Store(true)
	e.expire()

	// The first call finds its session gone and waits for the reconnect, which waits for fail.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first := make(chan tool.Outcome, 1)
	go func() { first <- reg.Call(ctx, "srv__echo", json.RawMessage(`{"text":"first"}`)) }()
	eventually(t, func() bool {
		s := status(t, m, "srv")
		return s.State == StateConnecting && s.Attempts >= 2
	})
	second := make(chan tool.Outcome, 1)
	go func() { second <- call(t, reg, "srv__echo", `{"text":"second"}`) }()
	eventually(t, func() bool { return waitingCalls() == 2 })
	close(fail)
	out := receive(t, second, "the waiting call did not end when the attempt failed")
	if out.Success || !strings.Contains(out.Content, "MCP server srv is unavailable (failed)") ||
		!strings.Contains(out.Content, "Service Unavailable") {
		t.Errorf("call waiting for a failed attempt: %+v", out)
	}
	// The first call, a retry, still waits for a reconnect.
	select {
	case out := <-first:
		t.Errorf("the retried call gave up at the failed attempt: %+v", out)
	default:
	}
	cancel()
	<-first
}

// waitingCalls counts the calls waiting for a session.
func waitingCalls() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return bytes.Count(buf, []byte("mcpclient.(*server).session("))
}

// --- Tools ---

func TestToolsListedOverPages(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "paged"}, &mcp.ServerOptions{PageSize: 2})
	for i := range 5 {
		s.AddTool(&mcp.Tool{Name: "t" + strconv.Itoa(i), InputSchema: objectSchema},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("ok"), nil })
	}
	srv := httpServer(t, &testServer{Server: s, release: make(chan struct{})}, nil)
	m, reg := startManager(t, httpConfig("paged", srv.URL, ""), nil, testOptions())
	want := []string{"paged__t0", "paged__t1", "paged__t2", "paged__t3", "paged__t4"}
	if diff := cmp.Diff(want, names(reg, "mcp:paged")); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	if s := status(t, m, "paged"); s.Tools != 5 {
		t.Errorf("status counts %d tools, want 5", s.Tools)
	}
}

func TestToolInfo(t *testing.T) {
	transports(t, `,"timeout":"7s","tools":{"sleep":{"timeout":"3s"}}`, func(t *testing.T, m *Manager, reg *tool.Registry) {
		got := names(reg, "mcp:srv")
		for _, left := range []string{"srv__ref_file", "srv__ref_http"} {
			if slices.Contains(got, left) {
				t.Errorf("%s, whose schema refers outside itself, is registered", left)
			}
		}
		for _, want := range []string{"srv__echo", "srv__look", "srv__progress", "srv__structured"} {
			if !slices.Contains(got, want) {
				t.Errorf("%s is not registered; have %v", want, got)
			}
		}
		if s := status(t, m, "srv"); s.Tools != len(got) {
			t.Errorf("status counts %d tools, the registry has %d", s.Tools, len(got))
		}
		look, _ := reg.Info("srv__look")
		if !look.ReadOnly || look.Source != "mcp:srv" || look.Description != "Reads nothing." || look.Timeout != 7*time.Second {
			t.Errorf("srv__look: %+v, want read-only, from mcp:srv, with its description and the server's timeout", look)
		}
		echo, _ := reg.Info("srv__echo")
		if echo.ReadOnly || echo.Destructive || !bytes.Contains(echo.InputSchema, []byte(`"text"`)) {
			t.Errorf("srv__echo: %+v, want neither read-only nor destructive (it says nothing), with its input schema", echo)
		}
		if wipe, _ := reg.Info("srv__wipe"); !wipe.Destructive || look.Destructive {
			t.Errorf("srv__wipe destructive %v (want true), srv__look %v (want false)", wipe.Destructive, look.Destructive)
		}
		if sleep, _ := reg.Info("srv__sleep"); sleep.Timeout != 3*time.Second {
			t.Errorf("srv__sleep times out after %s, want the tool's own 3s", sleep.Timeout)
		}
	})
}

// TestToolListChanged: tools added or removed on a connected server reach the registry.
func TestToolListChanged(t *testing.T) {
	transports(t, "", func(t *testing.T, m *Manager, reg *tool.Registry) {
		registered := func() bool { _, ok := reg.Info("srv__grown"); return ok }
		if registered() {
			t.Fatal("srv__grown is registered before it exists")
		}
		mustCall(t, reg, "srv__grow", `{}`)
		eventually(t, registered)
		if out := mustCall(t, reg, "srv__grown", `{}`); out.Content != "new" {
			t.Errorf("srv__grown: %q", out.Content)
		}
		mustCall(t, reg, "srv__shrink", `{}`)
		eventually(t, func() bool { return !registered() })
		// The status counts the tools just after the registry has them.
		eventually(t, func() bool { return status(t, m, "srv").Tools == len(names(reg, "mcp:srv")) })
	})
}

// --- Calls ---

func TestCallResults(t *testing.T) {
	transports(t, "", func(t *testing.T, m *Manager, reg *tool.Registry) {
		out := mustCall(t, reg, "srv__args", `{"n": 1, "s": "x", "list": [true, null]}`)
		var got, want any
		_ = json.Unmarshal([]byte(out.Content), &got)
		_ = json.Unmarshal([]byte(`{"n":1,"s":"x","list":[true,null]}`), &want)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("the arguments the server saw (-want +got):\n%s", diff)
		}

		for _, tc := range []struct {
			tool    string
			want    tool.Outcome
			payload string
		}{
			{tool: "echo", want: tool.Outcome{Content: "hello", Success: true}},
			{tool: "two_texts", want: tool.Outcome{Content: "one\ntwo", Success: true}},
			{tool: "fail", want: tool.Outcome{Content: "the disk is full"}},
			{tool: "image", want: tool.Outcome{
				Content:     "a chart\n[image 1: image/png, " + strconv.Itoa(len(pngBytes)) + " bytes, shown to the user]",
				Attachments: []tool.Attachment{{MediaType: "image/png", Name: "image-1", Data: pngBytes}}, Success: true}},
			{tool: "structured", want: tool.Outcome{Content: `{"temp":21.5,"unit":"C"}`, Success: true}, payload: `{"temp":21.5,"unit":"C"}`},
			{tool: "link", want: tool.Outcome{Content: "[resource link: file:///srv/report.txt (report), text/plain: the weekly report]", Success: true}},
			{tool: "resource", want: tool.Outcome{Content: "[resource mem://notes/1]\nbuy milk", Success: true}},
			{tool: "protocol_error", want: tool.Outcome{Content: "MCP server srv refused the call: no such thing"}},
		} {
			out := call(t, reg, "srv__"+tc.tool, `{"text":"hello"}`)
			if (tc.payload == "") != (out.Payload == nil) || tc.payload != "" && !jsonEqual(out.Payload, tc.payload) {
				t.Errorf("%s: payload %s, want %q", tc.tool, out.Payload, tc.payload)
			}
			out.Arguments, out.Duration, out.Payload = nil, 0, nil
			if diff := cmp.Diff(tc.want, out); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.tool, diff)
			}
		}
		// A refused call leaves the connection as it was.
		if s := status(t, m, "srv"); s.State != StateConnected || s.Attempts != 1 {
			t.Errorf("after the calls: %+v", s)
		}
	})
}

func jsonEqual(a []byte, b string) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal([]byte(b), &y) == nil && cmp.Equal(x, y)
}

// reporter records progress reports, and those that come once its call has returned.
type reporter struct {
	mu       sync.Mutex
	reports  []tool.Progress
	late     []tool.Progress
	returned atomic.Bool
	started  chan struct{} // a report with the message "started" came
	once     sync.Once
	changed  chan struct{} // a report came since the last receive
}

func newReporter() *reporter {
	return &reporter{started: make(chan struct{}), changed: make(chan struct{}, 1)}
}

func (r *reporter) report(p tool.Progress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.returned.Load() {
		r.late = append(r.late, p)
		return
	}
	r.reports = append(r.reports, p)
	if p.Message == "started" {
		r.once.Do(func() { close(r.started) })
	}
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// waitReports waits until n reports have come before the call returned.
func (r *reporter) waitReports(t *testing.T, n int) {
	t.Helper()
	for {
		if reports, _ := r.got(); len(reports) >= n {
			return
		}
		receive(t, r.changed, fmt.Sprintf("fewer than %d progress reports came", n))
	}
}

func (r *reporter) got() (reports, late []tool.Progress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reports), slices.Clone(r.late)
}

// seen asks the server what it saw: "cancelled=… notified=… late=…".
func seen(t *testing.T, reg *tool.Registry) string {
	return mustCall(t, reg, "srv__seen", `{}`).Content
}

func TestProgress(t *testing.T) {
	transports(t, "", func(t *testing.T, m *Manager, reg *tool.Registry) {
		r := newReporter()
		done := make(chan tool.Outcome, 1)
		go func() {
			out := reg.Call(tool.WithProgress(t.Context(), r.report), "srv__progress", json.RawMessage(`{}`))
			r.returned.Store(true)
			done <- out
		}()
		r.waitReports(t, 3)
		mustCall(t, reg, "srv__proceed", `{}`)
		out := receive(t, done, "srv__progress did not return once told to")
		if !out.Success || out.Content != "done" {
			t.Fatalf("srv__progress: %+v", out)
		}
		want := []tool.Progress{{Progress: 1, Total: 3, Message: "step 1"}, {Progress: 2, Total: 3, Message: "step 2"},
			{Progress: 3, Total: 3, Message: "step 3"}}
		reports, _ := r.got()
		if diff := cmp.Diff(want, reports); diff != "" {
			t.Errorf("reports (-want +got):\n%s", diff)
		}
		// The server reports once more on the call's token after it returned; that report goes nowhere.
		mustCall(t, reg, "srv__report_late", `{}`)
		if got := seen(t, reg); !strings.Contains(got, "late=1") {
			t.Errorf("the server saw %s, want late=1", got)
		}
		mustCall(t, reg, "srv__echo", `{"text":"after"}`)
		if _, late := r.got(); len(late) != 0 {
			t.Errorf("reports after the call returned: %+v", late)
		}
	})
}

// TestCancel: cancelling a call's context ends the server's handler (notifications/cancelled reaches the
// server), the call returns at once, and a report the server sends after that is dropped.
func TestCancel(t *testing.T) {
	transports(t, "", func(t *testing.T, m *Manager, reg *tool.Registry) {
		r := newReporter()
		ctx, cancel := context.WithCancel(tool.WithProgress(t.Context(), r.report))
		defer cancel()
		done := make(chan tool.Outcome, 1)
		go func() {
			out := reg.Call(ctx, "srv__block", json.RawMessage(`{}`))
			r.returned.Store(true)
			done <- out
		}()
		receive(t, r.started, "srv__block did not start")
		cancel()
		out := receive(t, done, "the cancelled call did not return")
		if out.Success || !strings.Contains(out.Content, "cancelled") {
			t.Errorf("cancelled call: %+v", out)
		}
		eventually(t, func() bool { return seen(t, reg) == "cancelled=1 notified=1 late=1" })
		mustCall(t, reg, "srv__echo", `{"text":"after"}`)
		if _, late := r.got(); len(late) != 0 {
			t.Errorf("reports after the call was cancelled: %+v", late)
		}
		if s := status(t, m, "srv"); s.State != StateConnected || s.Attempts != 1 {
			t.Errorf("a cancel broke the connection: %+v", s)
		}
	})
}

// TestTimeout: the server's timeout and a tool's own bound the calls; the session outlives them. The
// calls that only look (echo, seen) have a timeout of their own that a loaded machine cannot reach.
func TestTimeout(t *testing.T) {
	extra := `,"timeout":"300ms","tools":{"sleep":{"timeout":"200ms"},"echo":{"timeout":"` + longTimeout + `"},"seen":{"timeout":"` + longTimeout + `"}}`
	transports(t, extra, func(t *testing.T, m *Manager, reg *tool.Registry) {
		// srv__sleep would sleep 10 minutes and srv__block never returns: only the timeouts end them.
		for _, tc := range []struct{ tool, args, want string }{
			{"sleep", `{"ms":600000}`, "tool srv__sleep timed out after 200ms"},
			{"block", `{}`, "tool srv__block timed out after 300ms"},
		} {
			out := callPromptly(t, reg, "srv__"+tc.tool, tc.args)
			if out.Success || out.Content != tc.want {
				t.Errorf("%s: %+v, want %q", tc.tool, out, tc.want)
			}
		}
		mustCall(t, reg, "srv__echo", `{"text":"still there"}`)
		// The server's handlers saw their calls end.
		eventually(t, func() bool { return strings.HasPrefix(seen(t, reg), "cancelled=1 notified=2") })
	})
}

// --- Failure and reconnect ---

func TestStdioChildKilledMidCall(t *testing.T) {
	m, reg := startManager(t, stdioConfig("srv", "1", `,"timeout":"`+longTimeout+`"`), nil, testOptions())
	pid := status(t, m, "srv").PID
	if pid == 0 {
		t.Fatal("no PID for a connected stdio server")
	}
	r := newReporter()
	done := make(chan tool.Outcome, 1)
	go func() {
		done <- reg.Call(tool.WithProgress(t.Context(), r.report), "srv__wait_for_kill", json.RawMessage(`{}`))
	}()
	receive(t, r.started, "srv__wait_for_kill did not start")
	if p, err := os.FindProcess(pid); err != nil {
		t.Fatal(err)
	} else if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	// The call's timeout is 10 minutes: one that returns within patience did not wait for it.
	out := receive(t, done, "the call to a killed child did not return")
	if out.Success || !strings.Contains(out.Content, "MCP server srv: ") ||
		!strings.Contains(out.Content, "may or may not have run") {
		t.Errorf("call to a killed child: %+v, want a failure saying the child is gone", out)
	}
	eventually(t, func() bool {
		s := status(t, m, "srv")
		return s.State == StateConnected && s.PID != 0 && s.PID != pid
	})
	if s := status(t, m, "srv"); s.Attempts != 2 || s.LastError == "" {
		t.Errorf("after the reconnect: %+v, want a second attempt and the error kept", s)
	}
	out = mustCall(t, reg, "srv__pid", `{}`)
	if want := strconv.Itoa(status(t, m, "srv").PID); out.Content != want {
		t.Errorf("the new child says its PID is %s, the status %s", out.Content, want)
	}
}

// expiring forgets sessions on demand, the way a restarted server does: requests carrying the
// session ID in force when expire is called get 404.
type expiring struct {
	last    atomic.Value // string: the last session ID seen
	expired atomic.Value // string
}

func (e *expiring) wrap(h http.Handler) http.Handler {
	e.expired.Store("")
	e.last.Store("")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Mcp-Session-Id")
		if id != "" && id == e.expired.Load().(string) {
			http.Error(w, "session not found", http.StatusNotFound)
			return
		}
		if id != "" {
			e.last.Store(id)
		}
		h.ServeHTTP(w, r)
	})
}

func (e *expiring) expire() string {
	id := e.last.Load().(string)
	e.expired.Store(id)
	return id
}

// TestHTTPSessionExpired: a call that finds its session gone (404) re-initializes. A tool the server
// calls idempotent is sent once more and runs once; any other fails saying it may have run, and is not
// sent again; the next call goes out on the new session.
func TestHTTPSessionExpired(t *testing.T) {
	ts := newTestServer(nil)
	var e expiring
	srv := httpServer(t, ts, e.wrap)
	m, reg := startManager(t, httpConfig("srv", srv.URL, ""), nil, testOptions())
	mustCall(t, reg, "srv__echo", `{"text":"hi"}`)
	if id := e.expire(); id == "" {
		t.Fatal("the server gave no session ID")
	}
	out := mustCall(t, reg, "srv__count_idem", `{}`)
	if out.Content != "1" || ts.counted.Load() != 1 {
		t.Errorf("the tool ran %d times (it says %s), want once", ts.counted.Load(), out.Content)
	}
	if s := status(t, m, "srv"); s.State != StateConnected || s.Attempts != 2 {
		t.Errorf("after the session expired: %+v, want connected by a second attempt", s)
	}
	if e.last.Load().(string) == e.expired.Load().(string) {
		t.Error("the call went out on the expired session")
	}

	e.expire()
	out = call(t, reg, "srv__count", `{}`)
	if out.Success || !strings.Contains(out.Content, "lost its session (HTTP 404)") || !strings.Contains(out.Content, "may or may not have run") {
		t.Errorf("a tool not marked idempotent after a 404: %+v", out)
	}
	if n := ts.counted.Load(); n != 1 {
		t.Errorf("the tool not marked idempotent ran %d times in all, want 1 (the first tool's run only)", n)
	}
	eventually(t, func() bool { return connected(m, "srv") && status(t, m, "srv").Attempts == 3 })
	if out := mustCall(t, reg, "srv__count", `{}`); out.Content != "2" {
		t.Errorf("the next call: %q, want 2", out.Content)
	}
}

// TestHungServer: a tool that never returns gives a failed result within its timeout, and neither the
// session nor Close is stuck behind it. (Over HTTP, Close would wait the SDK's 5s for the DELETE that
// the server holds up behind the hung handler; the test lets the handler go first.)
func TestHungServer(t *testing.T) {
	for _, kind := range []string{"http", "stdio"} {
		t.Run(kind, func(t *testing.T) {
			// echo, called after the hung call, has a timeout a loaded machine cannot reach.
			extra := `,"timeout":"300ms","tools":{"echo":{"timeout":"` + longTimeout + `"}}`
			config := stdioConfig("srv", "1", extra)
			ts := newTestServer(nil)
			if kind == "http" {
				config = httpConfig("srv", httpServer(t, ts, nil).URL, extra)
			}
			m, reg := startManager(t, config, nil, testOptions())
			out := call(t, reg, "srv__hang", `{}`)
			if out.Success || out.Content != "tool srv__hang timed out after 300ms" {
				t.Errorf("hung call: %+v", out)
			}
			mustCall(t, reg, "srv__echo", `{"text":"next"}`)
			if s := status(t, m, "srv"); s.State != StateConnected || s.Attempts != 1 {
				t.Errorf("after the hung call: %+v", s)
			}
			ts.unblock()
			closed := make(chan struct{})
			go func() { m.Close(); close(closed) }()
			receive(t, closed, "Close is stuck behind a hung call")
		})
	}
}

// --- Environment and secrets ---

func TestStdioEnvironment(t *testing.T) {
	t.Setenv("CHATD_SECRET_TEST", "must-not-leak")
	getenv := fakeEnv(map[string]string{"SRC": "from-chatd"})
	m, reg := startManager(t, stdioConfig("srv", "1", `,"env":{"`+serverEnv+`":"1","NAMED":"${SRC}"}`), getenv, testOptions())
	_ = m
	got := strings.Split(mustCall(t, reg, "srv__env", `{}`).Content, "\n")
	want := []string{serverEnv + "=1", "NAMED=from-chatd"}
	for _, k := range []string{"PATH", "HOME"} {
		if v := os.Getenv(k); v != "" {
			want = append(want, k+"="+v)
		}
	}
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the child's environment (-want +got):\n%s", diff)
	}
}

// syncBuffer is a bytes.Buffer for a logger written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestSecretsRedacted(t *testing.T) {
	const secret = "tok-Very5ecret"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	config := `{"mcpServers":{
		"remote": {"url": "http://` + dead + `/mcp?token=${TOKEN}", "headers": {"X-Key": "${TOKEN}"}},
		"child": {"command": "sh", "args": ["-c", "echo \"key is $API_KEY\" >&2; exit 1"], "env": {"API_KEY": "${TOKEN}"}}
	}}`
	var logs syncBuffer
	opts := testOptions()
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	m, _ := startManager(t, config, fakeEnv(map[string]string{"TOKEN": secret}), opts)
	for _, name := range []string{"remote", "child"} {
		eventually(t, func() bool { return status(t, m, name).LastError != "" })
		s := status(t, m, name)
		if strings.Contains(s.LastError, secret) || !strings.Contains(s.LastError, "[redacted]") {
			t.Errorf("%s: last error %q, want the secret redacted", name, s.LastError)
		}
	}
	if !strings.Contains(status(t, m, "child").LastError, "key is [redacted]") {
		t.Errorf("child: last error %q lost the child's stderr", status(t, m, "child").LastError)
	}
	m.Close()
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the secret is in the log:\n%s", logs.String())
	}
}

// --- Close ---

func TestCloseStopsChildren(t *testing.T) {
	m, reg := startManager(t, stdioConfig("srv", "1", ""), nil, testOptions())
	pid := status(t, m, "srv").PID
	if pid == 0 || !processAlive(pid) {
		t.Fatalf("no running child: PID %d", pid)
	}
	m.Close()
	if processAlive(pid) {
		t.Errorf("the child %d is still there after Close", pid)
	}
	if s := status(t, m, "srv"); s.State != StateClosed || s.PID != 0 {
		t.Errorf("after Close: %+v", s)
	}
	out := call(t, reg, "srv__echo", `{"text":"hi"}`)
	if out.Success || out.Content != "MCP server srv is closed" {
		t.Errorf("call after Close: %+v", out)
	}
}

// TestCloseFailsWaitingCalls: a call waiting for a reconnect fails as soon as the manager closes.
func TestCloseFailsWaitingCalls(t *testing.T) {
	var e expiring
	var hold atomic.Bool // new sessions wait while set
	ts := newTestServer(nil)
	srv := httpServer(t, ts, func(h http.Handler) http.Handler {
		h = e.wrap(h)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if hold.Load() && r.Header.Get("Mcp-Session-Id") == "" {
				<-ts.release // until the test ends
				http.Error(w, "gone", http.StatusServiceUnavailable)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	m, reg := startManager(t, httpConfig("srv", srv.URL, `,"timeout":"`+longTimeout+`"`), nil, testOptions())
	mustCall(t, reg, "srv__echo", `{"text":"hi"}`)
	hold.Store(true)
	e.expire()
	done := make(chan tool.Outcome, 1)
	go func() { done <- call(t, reg, "srv__echo", `{"text":"waiting"}`) }()
	eventually(t, func() bool { return status(t, m, "srv").Attempts >= 2 }) // the reconnect is under way
	select {
	case out := <-done:
		t.Fatalf("the call did not wait for the reconnect: %+v", out)
	default:
	}
	m.Close()
	if out := receive(t, done, "the waiting call did not end at Close"); out.Success || out.Content != "MCP server srv is closed" {
		t.Errorf("waiting call at Close: %+v", out)
	}
}

// TestHeadersStayWithTheirHost: the configured headers go to the server's host, and not to the host a
// redirect points at.
func TestHeadersStayWithTheirHost(t *testing.T) {
	ts := newTestServer(nil)
	var seen atomic.Value // the Authorization header the server got
	seen.Store("")
	real := httpServer(t, ts, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if a := r.Header.Get("Authorization"); a != "" {
				seen.Store(a)
			}
			h.ServeHTTP(w, r)
		})
	})
	// The configured URL is on "localhost", the server it redirects to on 127.0.0.1: another host.
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cr3t-token" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		http.Redirect(w, r, real.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(front.Close)
	u := strings.Replace(front.URL, "127.0.0.1", "localhost", 1)
	m, _ := startManager(t, httpConfig("srv", u+"/mcp", `,"headers":{"Authorization":"Bearer s3cr3t-token"}`), nil, testOptions())
	eventually(t, func() bool { return status(t, m, "srv").Attempts >= 1 && status(t, m, "srv").State != StateConnecting })
	if got := seen.Load().(string); got != "" {
		t.Errorf("the host a redirect pointed at got the Authorization header %q", got)
	}
}
