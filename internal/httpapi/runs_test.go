package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"chatd/internal/httpapi"
	"chatd/internal/llm/llmtest"
	"chatd/internal/metrics"
	"chatd/internal/runevent"
	"chatd/internal/sse"
)

// openStream starts a streamed send (or any SSE GET when body is "") and returns the response and an
// iterator over its events. The caller closes the body.
func (e *env) openStream(t *testing.T, ctx context.Context, method, path, body string, header map[string]string) *http.Response {
	t.Helper()
	return openOK(t, ctx, method, e.srv.URL+path, body, header)
}

// openOK sends a request (JSON, with the header given) and returns its answer unread; anything but 200
// fails the test.
func openOK(t *testing.T, ctx context.Context, method, url, body string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, raw)
	}
	return resp
}

// readEvents decodes SSE events from r until stop returns true or the stream ends.
func readEvents(t *testing.T, r io.Reader, stop func(event) bool) []event {
	t.Helper()
	var out []event
	for ev, err := range sse.Scan(r) {
		if err != nil {
			return out // the connection was dropped
		}
		var data map[string]any
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			t.Fatalf("event %s %s: %s", ev.ID, ev.Type, ev.Data)
		}
		out = append(out, event{ID: ev.ID, Type: ev.Type, Data: data})
		if stop != nil && stop(out[len(out)-1]) {
			return out
		}
	}
	return out
}

func text(events []event) string {
	var b strings.Builder
	for _, ev := range events {
		if ev.Type == "text_delta" {
			b.WriteString(ev.Data["text"].(string))
		}
	}
	return b.String()
}

func lastRecord(t *testing.T, e *env, sessionID string) runevent.Record {
	t.Helper()
	_, raw := e.do(t, "GET", "/v1/sessions/"+sessionID+"/messages", "")
	var got struct{ Messages []runevent.Record }
	if err := json.Unmarshal(raw, &got); err != nil || len(got.Messages) == 0 {
		t.Fatalf("messages: %s %v", raw, err)
	}
	return got.Messages[len(got.Messages)-1]
}

// TestResumeAfterDroppedConnection: a client that loses the stream mid-answer resumes with
// Last-Event-ID and gets every later event exactly once; what it read in two parts is the stored answer.
func TestResumeAfterDroppedConnection(t *testing.T) {
	long := strings.Repeat("All work and no play makes Jack a dull boy. ", 8)
	e := newEnv(t, httpapi.Options{}, llmtest.Turn{Text: long, ChunkRunes: 4, Delay: 2 * time.Millisecond})
	ctx, drop := context.WithCancel(t.Context())
	resp := e.openStream(t, ctx, "POST", "/v1/chat/stream", `{"message":"tell me"}`, nil)
	runID, sessionID := resp.Header.Get("X-Run-Id"), resp.Header.Get("X-Session-Id")
	deltas := 0
	first := readEvents(t, resp.Body, func(ev event) bool {
		if ev.Type == "text_delta" {
			deltas++
		}
		return deltas == 10
	})
	drop()
	resp.Body.Close()
	lastID := first[len(first)-1].ID

	resp2 := e.openStream(t, t.Context(), "GET", "/v1/runs/"+runID+"/events", "", map[string]string{"Last-Event-ID": lastID})
	rest := readEvents(t, resp2.Body, nil)
	resp2.Body.Close()
	all := append(first, rest...)
	checkIDs(t, all)
	if last := all[len(all)-1]; last.Type != "done" || last.Data["status"] != "completed" {
		t.Fatalf("resumed stream ends with %+v", last)
	}
	if got, stored := text(all), lastRecord(t, e, sessionID).Content; got != long || stored != long {
		t.Errorf("text read in two parts = %q\nstored = %q", got, stored)
	}

	// After the end the log replays from the store, from the start or from ?after=.
	_, full := e.getEvents(t, runID, "")
	if len(full) != len(all) || full[len(full)-1].Type != "done" {
		t.Fatalf("replay of the ended run: %d events, want %d", len(full), len(all))
	}
	_, tail := e.getEvents(t, runID, "?after="+strconv.Itoa(len(all)-2))
	if len(tail) != 2 || tail[1].Type != "done" {
		t.Errorf("replay after %d: %v", len(all)-2, types(tail))
	}
	if r, raw := e.do(t, "GET", "/v1/runs/"+runID+"/events?after=x", ""); r.StatusCode != 400 || !strings.Contains(string(raw), "invalid_event_id") {
		t.Errorf("bad after: %d %s", r.StatusCode, raw)
	}
	if r, _ := e.do(t, "GET", "/v1/runs/nope/events", ""); r.StatusCode != 404 {
		t.Errorf("unknown run's events: %d", r.StatusCode)
	}
}

func (e *env) getEvents(t *testing.T, runID, query string) (*http.Response, []event) {
	t.Helper()
	// A safety net against a stream that never ends, not a measure: a loaded machine may take seconds.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	resp := e.openStream(t, ctx, "GET", "/v1/runs/"+runID+"/events"+query, "", nil)
	defer resp.Body.Close()
	return resp, readEvents(t, resp.Body, nil)
}

// TestCancelMidStream: cancel stops the model call, keeps the partial answer and ends the stream with
// cancelled, then done cancelled; a second cancel says the run had ended.
func TestCancelMidStream(t *testing.T) {
	e := newEnv(t, httpapi.Options{}, llmtest.Turn{Text: "Half an answer, and then", Block: true})
	resp := e.openStream(t, t.Context(), "POST", "/v1/chat/stream", `{"message":"go on"}`, nil)
	defer resp.Body.Close()
	runID, sessionID := resp.Header.Get("X-Run-Id"), resp.Header.Get("X-Session-Id")
	var streamed string
	events := readEvents(t, resp.Body, func(ev event) bool {
		if ev.Type == "text_delta" {
			streamed += ev.Data["text"].(string)
		}
		return streamed == "Half an answer, and then"
	})
	if r, raw := e.do(t, "GET", "/v1/runs/"+runID, ""); r.StatusCode != 200 || !strings.Contains(string(raw), `"status":"running"`) {
		t.Errorf("run while streaming: %d %s", r.StatusCode, raw)
	}
	r, raw := e.do(t, "POST", "/v1/runs/"+runID+"/cancel", "")
	if r.StatusCode != http.StatusAccepted || !strings.Contains(string(raw), `"status":"cancelling"`) {
		t.Fatalf("cancel: %d %s", r.StatusCode, raw)
	}
	events = append(events, readEvents(t, resp.Body, nil)...)
	checkIDs(t, events)
	n := len(events)
	if events[n-2].Type != "cancelled" || events[n-2].Data["reason"] != "cancelled by the user" || events[n-1].Data["status"] != "cancelled" {
		t.Fatalf("stream ends with %v", types(events[n-3:]))
	}
	if rec := lastRecord(t, e, sessionID); rec.Role != "assistant" || rec.Content != "Half an answer, and then" || rec.FinishReason != "cancelled" {
		t.Errorf("stored partial answer = %+v", rec)
	}
	r, raw = e.do(t, "POST", "/v1/runs/"+runID+"/cancel", "")
	if r.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"already_ended":true`) || !strings.Contains(string(raw), `"status":"cancelled"`) {
		t.Errorf("second cancel: %d %s", r.StatusCode, raw)
	}
	r, raw = e.do(t, "GET", "/v1/runs/"+runID, "")
	var run struct {
		Status, Model string
		SessionID     string     `json:"session_id"`
		EndedAt       *time.Time `json:"ended_at"`
		LastEventID   int64      `json:"last_event_id"`
	}
	if err := json.Unmarshal(raw, &run); err != nil || r.StatusCode != 200 {
		t.Fatalf("run: %d %s", r.StatusCode, raw)
	}
	if run.Status != "cancelled" || run.EndedAt == nil || run.LastEventID != int64(n) || run.SessionID != sessionID || run.Model != "openai/gpt-4o-mini" {
		t.Errorf("run after cancel = %s", raw)
	}
	if r, raw := e.do(t, "POST", "/v1/runs/nope/cancel", ""); r.StatusCode != 404 || !strings.Contains(string(raw), "run_not_found") {
		t.Errorf("cancel unknown: %d %s", r.StatusCode, raw)
	}
	if r, _ := e.do(t, "GET", "/v1/runs/nope", ""); r.StatusCode != 404 {
		t.Errorf("unknown run: %d", r.StatusCode)
	}
}

// gated answers each request with its own text, holding the stream before its finish until released.
type gated struct {
	mu    sync.Mutex
	gates map[string]chan struct{}
}

func (g *gated) gate(msg string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates[msg] == nil {
		g.gates[msg] = make(chan struct{})
	}
	return g.gates[msg]
}

// respond answers the last user message m with "re: m", waiting for its gate.
func (g *gated) respond(_ int, req llmtest.Request) llmtest.Turn {
	msgs := req.Messages()
	m := fmt.Sprint(msgs[len(msgs)-1]["content"])
	gate := g.gate(m)
	return llmtest.Turn{Text: "re: " + m, BeforeFinish: func() { <-gate }}
}

// TestOnActiveRun: a second send to a busy session is refused, interrupts the active run, or waits
// behind it, as on_active_run says.
func TestOnActiveRun(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	g := &gated{gates: map[string]chan struct{}{}}
	e.upstream.Respond = g.respond

	first := e.openStream(t, t.Context(), "POST", "/v1/chat/stream", `{"message":"one"}`, nil)
	defer first.Body.Close()
	sessionID, firstRun := first.Header.Get("X-Session-Id"), first.Header.Get("X-Run-Id")
	readEvents(t, first.Body, func(ev event) bool { return ev.Type == "text_delta" })

	// reject (the default)
	r, raw := e.do(t, "POST", "/v1/chat", `{"message":"two","session_id":"`+sessionID+`"}`)
	if r.StatusCode != 409 || !strings.Contains(string(raw), `"run_id":"`+firstRun+`"`) {
		t.Fatalf("reject: %d %s", r.StatusCode, raw)
	}

	// enqueue: starts when the first has ended.
	second := e.openStream(t, t.Context(), "POST", "/v1/chat/stream", `{"message":"two","session_id":"`+sessionID+`","on_active_run":"enqueue"}`, nil)
	defer second.Body.Close()
	if r, raw := e.do(t, "GET", "/v1/runs/"+second.Header.Get("X-Run-Id"), ""); !strings.Contains(string(raw), `"status":"queued"`) {
		t.Errorf("enqueued run: %d %s", r.StatusCode, raw)
	}
	close(g.gate("one"))
	close(g.gate("two"))
	if evs := readEvents(t, first.Body, nil); evs[len(evs)-1].Data["status"] != "completed" {
		t.Errorf("first run ended %v", evs[len(evs)-1])
	}
	evs := readEvents(t, second.Body, nil)
	checkIDs(t, evs)
	if evs[0].Type != "run_start" || evs[1].Type != "status" || evs[len(evs)-1].Data["status"] != "completed" || text(evs) != "re: two" {
		t.Errorf("queued run's events: %v %q", types(evs), text(evs))
	}

	// interrupt: the active run is cancelled, then the new one runs.
	third := e.openStream(t, t.Context(), "POST", "/v1/chat/stream", `{"message":"three","session_id":"`+sessionID+`"}`, nil)
	defer third.Body.Close()
	defer close(g.gate("three")) // its answer never finishes: the upstream handler waits here until the end
	// All of its text streamed (the answer waits at its gate): the partial answer kept is all of it.
	var partial strings.Builder
	readEvents(t, third.Body, func(ev event) bool {
		if ev.Type == "text_delta" {
			partial.WriteString(ev.Data["text"].(string))
		}
		return partial.String() == "re: three"
	})
	close(g.gate("four"))
	fourth := e.openStream(t, t.Context(), "POST", "/v1/chat/stream", `{"message":"four","session_id":"`+sessionID+`","on_active_run":"interrupt"}`, nil)
	defer fourth.Body.Close()
	evs = readEvents(t, third.Body, nil)
	if n := len(evs); n < 2 || evs[n-2].Data["reason"] != "interrupted by a new message" || evs[n-1].Data["status"] != "cancelled" {
		t.Errorf("interrupted run ends with %v", evs)
	}
	if evs := readEvents(t, fourth.Body, nil); evs[len(evs)-1].Data["status"] != "completed" {
		t.Errorf("interrupting run ended %v", evs[len(evs)-1])
	}

	_, raw = e.do(t, "GET", "/v1/sessions/"+sessionID+"/messages", "")
	var got struct{ Messages []runevent.Record }
	json.Unmarshal(raw, &got)
	var seq []string
	for _, m := range got.Messages {
		seq = append(seq, m.Role+":"+m.Content)
	}
	want := "user:one assistant:re: one user:two assistant:re: two user:three assistant:re: three user:four assistant:re: four"
	if strings.Join(seq, " ") != want {
		t.Errorf("stored conversation:\n got %s\nwant %s", strings.Join(seq, " "), want)
	}
}

// TestIdempotencyKey: a retried send returns the original run instead of starting another.
func TestIdempotencyKey(t *testing.T) {
	e := newEnv(t, httpapi.Options{}, llmtest.Turn{Text: "once"})
	send := func(body, key string) (*http.Response, []byte) {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", e.srv.URL+"/v1/chat", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp, raw
	}
	r1, raw1 := send(`{"message":"hello"}`, "key-1")
	r2, raw2 := send(`{"message":"hello"}`, "key-1")
	if r1.StatusCode != 200 || r2.StatusCode != 200 || r1.Header.Get("X-Run-Id") != r2.Header.Get("X-Run-Id") || r2.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %s / %d %s", r1.StatusCode, raw1, r2.StatusCode, raw2)
	}
	var a, b map[string]any
	json.Unmarshal(raw1, &a)
	json.Unmarshal(raw2, &b)
	if a["run_id"] != b["run_id"] || fmt.Sprint(a["message"]) != fmt.Sprint(b["message"]) {
		t.Errorf("the retry answered another run:\n%s\n%s", raw1, raw2)
	}
	if len(e.upstream.Requests()) != 1 {
		t.Errorf("the model was called %d times", len(e.upstream.Requests()))
	}
	// The retried stream replays the original run from its first event.
	resp := e.openStream(t, t.Context(), "POST", "/v1/chat/stream", `{"message":"hello"}`, map[string]string{"Idempotency-Key": "key-1"})
	evs := readEvents(t, resp.Body, nil)
	resp.Body.Close()
	if evs[0].Type != "run_start" || evs[0].Data["run_id"] != a["run_id"] || evs[len(evs)-1].Type != "done" {
		t.Errorf("replayed stream: %v", types(evs))
	}
	if r, raw := send(`{"message":"another"}`, "key-1"); r.StatusCode != 409 || !strings.Contains(string(raw), "idempotency_key_reused") {
		t.Errorf("key reused: %d %s", r.StatusCode, raw)
	}
	if r, raw := send(`{"message":"x"}`, "caf\u00e9"); r.StatusCode != 400 || !strings.Contains(string(raw), "invalid_idempotency_key") {
		t.Errorf("bad key: %d %s", r.StatusCode, raw)
	}
	_, raw := e.do(t, "GET", "/v1/sessions/"+a["session_id"].(string)+"/messages", "")
	if n := strings.Count(string(raw), `"content":"hello"`); n != 1 {
		t.Errorf("the message is stored %d times", n)
	}
}

// smallBuffers makes the kernel buffer little of a connection, so that a client that stops reading
// blocks the server's writes after a few kilobytes rather than megabytes.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4 << 10)
	}
	return c, err
}

// TestSlowReaderIsDisconnected: a reader that stops reading holds up nobody — 50 other readers of the
// same run get every event and finish while it is stuck, with a write timeout longer than the test — and
// with a short write timeout it is disconnected; it resumes from its last id. Nothing waits on the
// clock: a reader held up would never finish (the test's deadline catches it), and the cut is awaited
// in the server's log.
func TestSlowReaderIsDisconnected(t *testing.T) {
	long := strings.Repeat("0123456789", 1600) // 16 kB of text, 48 kB of events: more than the stuck reader's buffers hold
	// start serves a run that streams long, then holds its end until release is closed, with a reader
	// that reads nothing connected to it.
	start := func(t *testing.T, opts httpapi.Options) (e *env, runID string, stuck net.Conn, release chan struct{}) {
		e = newEnv(t, opts)
		e.srv.Close()
		e.srv = httptest.NewUnstartedServer(e.srv.Config.Handler)
		e.srv.Listener = smallBuffers{e.srv.Listener}
		e.srv.Start()
		release = make(chan struct{})
		t.Cleanup(func() {
			select {
			case <-release:
			default:
				close(release)
			}
		})
		e.upstream.Respond = func(int, llmtest.Request) llmtest.Turn {
			return llmtest.Turn{Text: long, ChunkRunes: 16, BeforeFinish: func() { <-release }}
		}
		resp := e.openStream(t, t.Context(), "POST", "/v1/chat/stream", `{"message":"go"}`, nil)
		runID = resp.Header.Get("X-Run-Id")
		resp.Body.Close()
		// The stuck reader: a raw connection with a small receive buffer that reads nothing.
		stuck, err := net.Dial("tcp", e.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stuck.Close() })
		stuck.(*net.TCPConn).SetReadBuffer(4 << 10)
		fmt.Fprintf(stuck, "GET /v1/runs/%s/events HTTP/1.1\r\nHost: localhost\r\n\r\n", runID)
		return e, runID, stuck, release
	}

	t.Run("holds up nobody", func(t *testing.T) {
		e, runID, stuck, release := start(t, httpapi.Options{WriteTimeout: time.Hour})
		var wg sync.WaitGroup
		following := make(chan struct{}, 50)
		for range 50 {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a safety net, not a measure
				defer cancel()
				resp := e.openStream(t, ctx, "GET", "/v1/runs/"+runID+"/events", "", nil)
				defer resp.Body.Close()
				first := true
				evs := readEvents(t, resp.Body, func(event) bool {
					if first {
						first = false
						following <- struct{}{}
					}
					return false
				})
				if len(evs) == 0 || evs[len(evs)-1].Type != "done" || text(evs) != long {
					t.Errorf("a reader got %d events, text %d bytes", len(evs), len(text(evs)))
				}
			})
		}
		for range 50 {
			<-following // every reader follows the live run
		}
		close(release)
		wg.Wait()
		// The stuck reader is still connected: the others finished while it was stuck.
		stuck.SetReadDeadline(time.Now().Add(time.Minute))
		resp, err := http.ReadResponse(bufio.NewReader(stuck), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("the stuck reader: %v %v", resp, err)
		}
	})

	t.Run("is cut", func(t *testing.T) {
		cut := make(chan struct{})
		var once sync.Once
		// The stuck reader's cut, not the sender's: the POST that started the run left at once.
		log := slog.New(onMessage{"stream client gone or too slow", "/events", func() { once.Do(func() { close(cut) }) }})
		m := metrics.New()
		e, runID, stuck, release := start(t, httpapi.Options{WriteTimeout: 200 * time.Millisecond, Logger: log, Metrics: m})
		select {
		case <-cut:
		case <-time.After(time.Minute):
			t.Fatal("the stuck reader was not disconnected within a minute of a 200ms write timeout")
		}
		if n := testutil.ToFloat64(m.SlowReaders()); n != 1 {
			t.Errorf("chatd_sse_slow_disconnects_total = %v, want 1", n)
		}
		close(release)
		// What it got ends at some complete event or mid-event; it resumes from the last complete id.
		stuck.SetReadDeadline(time.Now().Add(time.Minute))
		resp2, err := http.ReadResponse(bufio.NewReader(stuck), nil)
		if err != nil {
			t.Fatal(err)
		}
		var got []event
		for ev, err := range sse.Scan(resp2.Body) {
			if err != nil {
				break
			}
			got = append(got, event{ID: ev.ID, Type: ev.Type})
		}
		if len(got) == 0 || got[len(got)-1].Type == "done" {
			t.Fatalf("the stuck reader got %d events, the last %v: it was not cut off", len(got), got[max(len(got)-1, 0):])
		}
		// The resumes have the same 200ms write timeout: on a loaded machine one may be cut too, and
		// resumes again from its last id, as a client does.
		all := got
		for range 100 {
			_, rest := e.getEvents(t, runID, "?after="+all[len(all)-1].ID)
			all = append(all, rest...)
			if all[len(all)-1].Type == "done" {
				break
			}
		}
		if all[len(all)-1].Type != "done" {
			t.Errorf("100 resumes after the cut did not reach done: %d events", len(all))
		} else {
			checkIDs(t, all)
		}
	})
}

// onMessage is a slog handler that calls f when a record with message msg, and a path attribute ending
// in path, is logged at any level.
type onMessage struct {
	msg, path string
	f         func()
}

func (h onMessage) Enabled(context.Context, slog.Level) bool { return true }
func (h onMessage) Handle(_ context.Context, r slog.Record) error {
	if r.Message != h.msg {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "path" && strings.HasSuffix(a.Value.String(), h.path) {
			h.f()
			return false
		}
		return true
	})
	return nil
}
func (h onMessage) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h onMessage) WithGroup(string) slog.Handler      { return h }
