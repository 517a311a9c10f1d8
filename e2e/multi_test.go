package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"chatd/internal/store/postgres/pgtest"
)

// TestMultiInstance runs three chatd processes on one PostgreSQL database (a fresh schema) behind
// HAProxy, round-robin without stickiness, and checks what a client of the balancer relies on: a stream
// resumed on another instance gets every event once; a cancel sent to another instance stops the run;
// one Idempotency-Key sent to two instances makes one run; on_active_run holds across instances; and
// when the instance running a run is killed, another one recovers the run once its lease ends.
func TestMultiInstance(t *testing.T) {
	haproxy := needHAProxy(t)
	dsn := pgtest.NewSchema(t)
	bin := buildChatd(t)
	up := newModel(t)
	env := append(chatdEnv(up, "5s"), "CHATD_LEASE_TTL=2s", "CHATD_SWEEP_INTERVAL=500ms")
	var inst []*process
	for i := range 3 {
		inst = append(inst, startChatd(t, fmt.Sprintf("chatd-%d", i+1), bin, dsn, env...))
	}
	lb := startHAProxy(t, haproxy, inst)

	t.Run("ResumeElsewhere", func(t *testing.T) { testResumeElsewhere(t, lb, inst) })
	t.Run("CancelElsewhere", func(t *testing.T) { testCancelElsewhere(t, inst) })
	t.Run("IdempotencyKey", func(t *testing.T) { testKeyElsewhere(t, inst) })
	t.Run("OnActiveRun", func(t *testing.T) { testOnActiveRun(t, inst) })
	t.Run("KillOwner", func(t *testing.T) { testKillOwner(t, lb, inst) })
}

// needHAProxy returns haproxy's path; without it the test skips, or fails under CI.
func needHAProxy(t testing.TB) string {
	path, err := exec.LookPath("haproxy")
	if err != nil {
		msg := "haproxy is not installed (apt-get install haproxy): the multi-instance test needs a real balancer"
		if os.Getenv("CHATD_CI") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// startHAProxy balances a free port round-robin over the instances, with no stickiness, and returns a
// process whose base is the balancer.
func startHAProxy(t testing.TB, bin string, inst []*process) *process {
	t.Helper()
	port := freePort(t)
	var servers strings.Builder
	for i, p := range inst {
		fmt.Fprintf(&servers, "  server c%d %s check inter 200ms fall 1 rise 1\n", i+1, strings.TrimPrefix(p.base, "http://"))
	}
	cfg := fmt.Sprintf(`global
  maxconn 512
defaults
  mode http
  timeout connect 5s
  timeout client 5m
  timeout server 5m
  retries 3
  option redispatch
frontend chatd
  bind 127.0.0.1:%d
  default_backend instances
backend instances
  balance roundrobin
%s`, port, servers.String())
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &process{name: "haproxy", base: fmt.Sprintf("http://127.0.0.1:%d", port), out: &logBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, "-db", "-f", path)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start haproxy: %v", err)
	}
	go func() {
		p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("haproxy output:\n%s", p.out)
		}
	})
	p.waitHealthy(t)
	return p
}

// dropStream is a send or a resume read as it comes, which the test may drop.
type dropStream struct {
	*liveStream
	cancel context.CancelFunc
}

// get opens GET path (a run's events) with Last-Event-ID lastID.
func (p *process) get(t testing.TB, path, lastID string) *dropStream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "GET", p.base+path, nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s on %s: %v", path, p.name, err)
	}
	return p.readStream(t, resp, cancel)
}

// send posts a message on /v1/chat/stream; the stream can be dropped.
func (p *process) send(t testing.TB, body map[string]any, key string) *dropStream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	resp, err := p.post(ctx, "/v1/chat/stream", body, key)
	if err != nil {
		cancel()
		t.Fatalf("send to %s: %v", p.name, err)
	}
	return p.readStream(t, resp, cancel)
}

func (p *process) readStream(t testing.TB, resp *http.Response, cancel context.CancelFunc) *dropStream {
	t.Helper()
	if resp.StatusCode != 200 {
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("%s: %d %s", p.name, resp.StatusCode, raw)
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
	t.Cleanup(cancel)
	return &dropStream{liveStream: s, cancel: cancel}
}

func isEvent(typ string) func(event) bool { return func(e event) bool { return e.Type == typ } }

// runID is the run id of a stream's run_start.
func runID(t *testing.T, events []event) string {
	t.Helper()
	for _, e := range events {
		if e.Type == "run_start" {
			if id, _ := e.Data["run_id"].(string); id != "" {
				return id
			}
		}
	}
	t.Fatalf("no run_start with a run id in %v", events)
	return ""
}

// exactlyOnce checks that events are numbered 1, 2, 3 … without a gap or a repeat, and end with done.
func exactlyOnce(t *testing.T, events []event, status string) {
	t.Helper()
	for i, e := range events {
		if e.seq() != i+1 {
			t.Fatalf("event %d is %s; want id %d (every event once, in order)", i, e, i+1)
		}
	}
	last := events[len(events)-1]
	if last.Type != "done" || last.Data["status"] != status {
		t.Fatalf("last event %s; want done %s", last, status)
	}
}

// testResumeElsewhere: a stream dropped mid-run and resumed through the balancer, and on each instance,
// gets the events after the last one it saw, each once.
func testResumeElsewhere(t *testing.T, lb *process, inst []*process) {
	s := lb.send(t, map[string]any{"message": "resume me elsewhere (slow)"}, "")
	seen, err := s.until(isEvent("text_delta"), patience)
	if err != nil {
		t.Fatal(err)
	}
	s.cancel() // the client goes away; the run goes on
	id, last := runID(t, seen), seen[len(seen)-1].ID
	for _, p := range append([]*process{lb}, inst...) {
		rest, err := p.get(t, "/v1/runs/"+id+"/events", last).rest(patience)
		if err != nil {
			t.Fatalf("resume on %s: %v", p.name, err)
		}
		exactlyOnce(t, append(slices.Clone(seen), rest...), "completed")
	}
}

// testCancelElsewhere: a run streaming on one instance is cancelled through another.
func testCancelElsewhere(t *testing.T, inst []*process) {
	s := inst[0].send(t, map[string]any{"message": "cancel me elsewhere (never finishes)"}, "")
	seen, err := s.until(isEvent("text_delta"), patience)
	if err != nil {
		t.Fatal(err)
	}
	id := runID(t, seen)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second) // the cancel's own bound
	defer cancel()
	resp, err := inst[1].post(ctx, "/v1/runs/"+id+"/cancel", map[string]any{}, "")
	if err != nil {
		t.Fatalf("cancel on %s: %v", inst[1].name, err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 || !strings.Contains(string(raw), "cancelling") {
		t.Fatalf("cancel on %s: %d %s", inst[1].name, resp.StatusCode, raw)
	}
	asked := time.Now()
	rest, err := s.rest(patience)
	if err != nil {
		t.Fatal(err)
	}
	all := append(seen, rest...)
	exactlyOnce(t, all, "cancelled")
	if !slices.ContainsFunc(all, isEvent("cancelled")) {
		t.Errorf("no cancelled event in %v", all[len(all)-3:])
	}
	t.Logf("the owner stopped the run %s after the cancel was asked elsewhere", time.Since(asked))
}

// testKeyElsewhere: one Idempotency-Key sent to two instances at once makes one run.
func testKeyElsewhere(t *testing.T, inst []*process) {
	body := map[string]any{"message": "only once, please"}
	a := inst[0].send(t, body, "multi-key-1")
	b := inst[1].send(t, body, "multi-key-1")
	ea, err := a.rest(patience)
	if err != nil {
		t.Fatal(err)
	}
	eb, err := b.rest(patience)
	if err != nil {
		t.Fatal(err)
	}
	if ra, rb := runID(t, ea), runID(t, eb); ra != rb {
		t.Fatalf("one key on two instances made runs %s and %s", ra, rb)
	}
	var sess string
	for _, e := range ea {
		if e.Type == "run_start" {
			sess, _ = e.Data["session_id"].(string)
		}
	}
	if n := len(userRecords(inst[2].records(t, sess), "only once, please")); n != 1 {
		t.Fatalf("the message is stored %d times", n)
	}
}

// testOnActiveRun: a session's active run on one instance is seen by sends to the others: reject refuses,
// enqueue queues behind it (and starts once it ends), interrupt stops it and starts.
func testOnActiveRun(t *testing.T, inst []*process) {
	first := inst[0].send(t, map[string]any{"message": "busy for a while (never finishes)"}, "")
	seen, err := first.until(isEvent("text_delta"), patience)
	if err != nil {
		t.Fatal(err)
	}
	var sess string
	for _, e := range seen {
		if e.Type == "run_start" {
			sess, _ = e.Data["session_id"].(string)
		}
	}
	firstID := runID(t, seen)

	r := inst[1].chat(t, map[string]any{"session_id": sess, "message": "refused", "on_active_run": "reject"}, "")
	if r.status != http.StatusConflict || r.errorCode() != "session_busy" {
		t.Fatalf("reject on %s: %d %s; want 409 session_busy", inst[1].name, r.status, r.body)
	}

	queued := inst[2].send(t, map[string]any{"session_id": sess, "message": "waits its turn", "on_active_run": "enqueue"}, "")
	qs, err := queued.until(isEvent("run_start"), patience)
	if err != nil {
		t.Fatal(err)
	}
	queuedID := runID(t, qs)

	next := inst[1].chat(t, map[string]any{"session_id": sess, "message": "interrupting", "on_active_run": "interrupt"}, "")
	if next.status != 200 || next.last().Type != "done" {
		t.Fatalf("interrupt on %s: %d %s %v", inst[1].name, next.status, next.body, next.last())
	}
	if got := inst[2].waitEnded(t, firstID); got.Status != "cancelled" {
		t.Errorf("the interrupted run is %s; want cancelled", got.Status)
	}
	// The queued run came before the interrupting send: it ran first, or the interrupting send
	// stopped it too; either way it has ended, and the session's records pair up.
	rest, err := queued.rest(patience)
	if err != nil {
		t.Fatal(err)
	}
	if last := rest[len(rest)-1]; last.Type != "done" {
		t.Fatalf("the queued run's stream ended with %s", last)
	}
	if got := inst[0].waitEnded(t, queuedID); got.Status != "completed" && got.Status != "cancelled" {
		t.Errorf("the queued run is %s", got.Status)
	}
	if err := checkRecords(inst[0].records(t, sess)); err != nil {
		t.Error(err)
	}
}

// testKillOwner: the instance running a run is killed; another one recovers the run once its lease ends
// (2s here), and the session takes the next message.
func testKillOwner(t *testing.T, lb *process, inst []*process) {
	owner := inst[2]
	s := owner.send(t, map[string]any{"message": "killed mid-run (never finishes)"}, "")
	// Killed while the answer to the tool results streams: its stored part is kept by the recovery.
	results := 0
	seen, err := s.until(func(e event) bool {
		if e.Type == "tool_complete" {
			results++
		}
		return results == 2 && e.Type == "text_delta"
	}, patience)
	if err != nil {
		t.Fatal(err)
	}
	id := runID(t, seen)
	killed := time.Now()
	owner.kill()
	got := inst[0].waitEnded(t, id)
	if got.Status != "interrupted" {
		t.Fatalf("the killed instance's run is %s; want interrupted", got.Status)
	}
	t.Logf("recovered %s after the kill (lease 2s, sweep 500ms)", time.Since(killed))
	log := inst[1].replay(t, id, "")
	if last := log[len(log)-1]; last.Type != "done" || last.Data["status"] != "interrupted" {
		t.Fatalf("the recovered log ends with %s", last)
	}
	if err := checkSeq(log); err != nil {
		t.Error(err)
	}
	sess := got.SessionID
	if err := checkRecords(inst[1].records(t, sess)); err != nil {
		t.Error(err)
	}
	r := lb.chat(t, map[string]any{"session_id": sess, "message": "after the kill"}, "")
	if r.status != 200 || r.last().Type != "done" || r.last().Data["status"] != "completed" {
		t.Fatalf("the next message after recovery: %d %s %v", r.status, r.body, r.last())
	}
}
