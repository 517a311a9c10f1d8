package chat_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"chatd/internal/agent"
	"chatd/internal/chat"
	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
	"chatd/internal/llm/openai"
	"chatd/internal/store"
	"chatd/internal/tool"
)

// TestToolCallArgumentsHaveALimit: a tool call whose arguments pass the limit is not run and is stored
// with empty arguments; its result says why; the client is not sent more of the arguments than the
// limit; and the next model call does not carry them. (A 100 MB argument took chatd to 3 GB of memory
// and sent 105 MB upstream on every later turn.)
func TestToolCallArgumentsHaveALimit(t *testing.T) {
	huge := `{"timezone":"` + strings.Repeat("Europe/Paris", 2000) + `"}` // 24 KB
	f := newFixture(t, setup{Turns: []llmtest.Turn{
		{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "current_time", Arguments: huge}}},
		{Text: "That zone was too long."},
	}, Tools: []tool.Tool{tool.CurrentTime(nil)}, Limits: chat.Limits{Model: agent.Limits{ArgumentBytes: 8 << 10}}})
	st := f.send(t, chat.Request{Message: "What time is it?"}, chat.StartOptions{})
	events := f.follow(t, st.RunID, 0).all()
	if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
		t.Fatalf("outcome %+v", o)
	}
	shown := 0
	for _, e := range events {
		if e.Type == chat.EventToolCallDelta {
			var d struct {
				Arguments string `json:"arguments_delta"`
			}
			json.Unmarshal(e.Data, &d)
			shown += len(d.Arguments)
		}
	}
	if shown > 8<<10 {
		t.Errorf("clients were sent %d bytes of the call's arguments; the limit is 8 KiB", shown)
	}
	recs := records(t, f.db, st.SessionID)
	if len(recs) != 4 || string(recs[1].ToolCalls[0].Arguments) != "{}" || *recs[2].Success ||
		!strings.Contains(recs[2].Content, "8 KiB") {
		t.Fatalf("records:\n%v\nwant the call stored with {} and a failed result naming the limit", transcript(recs))
	}
	reqs := f.up.Requests()
	if n := len(reqs[len(reqs)-1].Raw); n > 8<<10 {
		t.Errorf("the next model request is %d bytes: it carries the arguments", n)
	}
}

// TestModelStreamHasADeadline: a model that drips tokens forever keeps a run no longer than its time
// limit: the run fails with run_timeout, keeps what was said, and the session takes the next message.
func TestModelStreamHasADeadline(t *testing.T) {
	f := newFixture(t, setup{Respond: func(n int, req llmtest.Request) llmtest.Turn {
		if lastUserMessage(req) == "tell me" {
			return llmtest.Turn{Text: "drip drip drip drip", ChunkRunes: 1, Delay: 5 * time.Millisecond, Block: true}
		}
		return echo(n, req)
	}, Limits: chat.Limits{RunTime: 300 * time.Millisecond}})
	st := f.send(t, chat.Request{Message: "tell me"}, chat.StartOptions{})
	o := f.wait(t, st.RunID)
	if o.Status != store.RunFailed || o.Error == nil || o.Error.Code != "run_timeout" {
		t.Fatalf("outcome %+v; want failed with run_timeout", o)
	}
	if o.Message == nil || !strings.HasPrefix("drip drip drip drip", o.Message.Content) || o.Message.Content == "" {
		t.Errorf("the stored answer: %+v; want what dripped", o.Message)
	}
	next := f.send(t, chat.Request{SessionID: st.SessionID, Message: "again"}, chat.StartOptions{})
	if o := f.wait(t, next.RunID); o.Status != store.RunCompleted {
		t.Errorf("the next message: %+v", o)
	}
}

// TestRunEventsHaveALimit: a run that emits more events than its limit fails with event_limit; its log
// stays bounded, and its records stay paired.
func TestRunEventsHaveALimit(t *testing.T) {
	f := newFixture(t, setup{Turns: []llmtest.Turn{{Text: strings.Repeat("x", 3000), ChunkRunes: 1}},
		Limits: chat.Limits{RunEvents: 100}})
	st := f.send(t, chat.Request{Message: "talk a lot"}, chat.StartOptions{})
	o := f.wait(t, st.RunID)
	if o.Status != store.RunFailed || o.Error == nil || o.Error.Code != "event_limit" {
		t.Fatalf("outcome %+v; want failed with event_limit", o)
	}
	log := stored(t, f.db, st.RunID)
	if len(log) > 110 {
		t.Errorf("the log holds %d events; the limit is 100 (and the run's closing events)", len(log))
	}
	checkLog(t, "log", log)
	checkEnds(t, log, chat.EventError, "", store.RunFailed)
	checkPaired(t, records(t, f.db, st.SessionID))
}

// TestRequestsCheckedBeforeAnythingIsStored: a refused send stores nothing — no session, no record —
// also when it names a new session's id (as the AI SDK's useChat does).
func TestRequestsCheckedBeforeAnythingIsStored(t *testing.T) {
	f := newFixture(t, setup{Respond: echo})
	png := []byte("\x89PNG\r\n\x1a\n....")
	html := []byte("<html><script>alert(1)</script></html>")
	for _, tc := range []struct {
		name string
		req  chat.Request
		code string
	}{
		{"unknown agent", chat.Request{Message: "hi", Agent: "nobody"}, "unknown_agent"},
		{"bad max_iterations", chat.Request{Message: "hi", MaxIterations: 99}, "invalid_max_iterations"},
		{"too many attachments", chat.Request{Message: "hi", Attachments: make([]store.Attachment, 9)}, "too_many_attachments"},
		{"SVG", chat.Request{Message: "hi", Attachments: []store.Attachment{{MediaType: "image/svg+xml", Data: []byte("<svg/>")}}}, "invalid_attachment"},
		{"HTML declared as PNG", chat.Request{Message: "hi", Attachments: []store.Attachment{{MediaType: "image/png", Data: html}}}, "invalid_attachment"},
		{"attachment too large", chat.Request{Message: "hi", Attachments: []store.Attachment{{MediaType: "image/png",
			Data: append(png, make([]byte, chat.DefaultAttachmentBytes)...)}}}, "attachment_too_large"},
		{"unknown tool", chat.Request{Message: "hi", SelectedTools: []string{"nothing"}}, "unknown_tool"},
	} {
		for _, id := range []string{"", "client-chat-" + strings.ReplaceAll(tc.name, " ", "-")} {
			req := tc.req
			req.SessionID, req.CreateSession = id, id != ""
			_, err := f.svc.Start(t.Context(), user, req, chat.StartOptions{})
			var e *chat.Error
			if !errors.As(err, &e) || e.Code != tc.code {
				t.Errorf("%s (session id %q): error %v, want code %s", tc.name, id, err, tc.code)
			}
		}
	}
	if list, _, err := f.db.Sessions(t.Context(), user, store.Page{}); err != nil || len(list) != 0 {
		t.Errorf("refused sends stored %d sessions (%v)", len(list), err)
	}
	// A valid PNG passes.
	st := f.send(t, chat.Request{Message: "look", SessionID: "client-chat", CreateSession: true,
		Attachments: []store.Attachment{{MediaType: "image/png", Data: png}}}, chat.StartOptions{})
	if st.SessionID != "client-chat" {
		t.Errorf("the session is %q, want the client's id", st.SessionID)
	}
	if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
		t.Errorf("outcome %+v", o)
	}
}

// TestConcurrentInterrupts: sends to one session that all interrupt its run each start in turn, every
// one cancelling the run before it; none is refused as busy. (Under contention 23 of 30 got 409.)
func TestConcurrentInterrupts(t *testing.T) {
	f := newFixture(t, setup{Respond: func(n int, req llmtest.Request) llmtest.Turn {
		return llmtest.Turn{Text: "a long answer " + lastUserMessage(req), ChunkRunes: 2, Delay: 2 * time.Millisecond}
	}})
	first := f.send(t, chat.Request{Message: "start"}, chat.StartOptions{})
	const n = 30
	var wg sync.WaitGroup
	started := make([]*chat.Started, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			started[i], errs[i] = f.svc.Start(t.Context(), user, chat.Request{SessionID: first.SessionID,
				Message: fmt.Sprintf("interrupt %d", i)}, chat.StartOptions{OnActiveRun: chat.OnActiveInterrupt})
		})
	}
	wg.Wait()
	completed := 0
	for i, err := range errs {
		if err != nil {
			t.Errorf("send %d: %v", i, err)
			continue
		}
		switch o := f.wait(t, started[i].RunID); o.Status {
		case store.RunCompleted:
			completed++
		case store.RunCancelled:
		default:
			t.Errorf("send %d's run ended %s", i, o.Status)
		}
	}
	if completed < 1 {
		t.Errorf("no run completed; the last one to start should")
	}
	checkPaired(t, records(t, f.db, first.SessionID))
}

// TestStreamOfOnlyDoneFails: a model stream that is only "data: [DONE]" is an upstream failure, not a
// completed run with an empty answer.
func TestStreamOfOnlyDoneFails(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer srv.Close()
	client, err := openai.New(openai.Options{Name: "x", BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	svc := chat.New(chat.Options{Store: openStore(t, ""), Models: oneModel{client}, DefaultModel: "x/m",
		FlushInterval: 5 * time.Millisecond, RetryBase: time.Millisecond})
	t.Cleanup(func() { svc.Close(t.Context()) })
	st, err := svc.Start(t.Context(), user, chat.Request{Message: "hi"}, chat.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o, err := svc.Wait(t.Context(), user, st.RunID)
	if err != nil || o.Status != store.RunFailed || o.Error == nil || !strings.HasPrefix(o.Error.Code, "upstream_") {
		t.Errorf("outcome %+v, %v; want failed with an upstream error", o, err)
	}
}

var _ llm.Provider = (*openai.Client)(nil)

// TestQueueHasALimit: a session queues at most Limits.QueuedRuns runs behind its running one; one more
// is refused with queue_full, and nothing is stored for it.
func TestQueueHasALimit(t *testing.T) {
	g := newGate(t)
	f := newFixture(t, setup{Respond: func(n int, req llmtest.Request) llmtest.Turn {
		turn := echo(n, req)
		turn.BeforeFinish = g.hold
		return turn
	}, Limits: chat.Limits{QueuedRuns: 2}})
	first := f.send(t, chat.Request{Message: "first"}, chat.StartOptions{})
	g.wait(t)
	for i := range 2 {
		f.send(t, chat.Request{SessionID: first.SessionID, Message: fmt.Sprint("queued ", i)}, chat.StartOptions{OnActiveRun: chat.OnActiveEnqueue})
	}
	_, err := f.svc.Start(t.Context(), user, chat.Request{SessionID: first.SessionID, Message: "one too many"},
		chat.StartOptions{OnActiveRun: chat.OnActiveEnqueue})
	var e *chat.Error
	if !errors.As(err, &e) || e.Code != "queue_full" || !errors.Is(err, chat.ErrBusy) {
		t.Fatalf("a third queued send: %v; want queue_full", err)
	}
	g.open()
	f.wait(t, first.RunID)
	eventually(t, "the queue to drain", func() bool { return f.svc.ActiveRun(user, first.SessionID) == "" })
	if got := transcript(records(t, f.db, first.SessionID)); len(got) != 6 {
		t.Errorf("records: %v; want the three messages answered, not the refused one", got)
	}
}
