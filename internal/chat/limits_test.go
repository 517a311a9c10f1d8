package chat_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"chatd/internal/agent"
	"chatd/internal/chat"
	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
	"chatd/internal/llm/openai"
	"chatd/internal/runevent"
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
		if e.Type == runevent.TypeToolCallDelta {
			d, err := runevent.Decode[runevent.ToolCallDelta](e.Data)
			if err != nil {
				t.Fatal(err)
			}
			shown += len(d.ArgumentsDelta)
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
// The limit is the service's, so the next run has it too: 3 s, which a loaded machine's echo run does
// not reach (300 ms did, 3 times in 8 loaded suites).
func TestModelStreamHasADeadline(t *testing.T) {
	f := newFixture(t, setup{Respond: func(n int, req llmtest.Request) llmtest.Turn {
		if lastUserMessage(req) == "tell me" {
			return llmtest.Turn{Text: "drip drip drip drip", ChunkRunes: 1, Delay: 5 * time.Millisecond, Block: true}
		}
		return echo(n, req)
	}, Limits: chat.Limits{RunTime: 3 * time.Second}})
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
	checkEnds(t, log, runevent.TypeError, "", store.RunFailed)
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
	svc := chat.New(chat.Options{TitleModel: chat.TitleNone, Store: openStore(t, ""), Models: oneModel{client}, DefaultModel: "x/m",
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
	eventually(t, "the queue to drain", func() bool { return f.svc.LiveRun(user, first.SessionID) == "" })
	if got := transcript(records(t, f.db, first.SessionID)); len(got) != 6 {
		t.Errorf("records: %v; want the three messages answered, not the refused one", got)
	}
}

// TestSummaryCallHasLimits: the summary a compaction asks the model for is held to its own limit: an
// upstream that answers "context too long" once, then streams a 1 MB summary, leaves a summary record
// of at most 64 KiB (it once stored the whole megabyte, sent with every later request).
func TestSummaryCallHasLimits(t *testing.T) {
	tooLong := llmtest.Turn{Status: 400, ErrorMessage: "This model's maximum context length is 4096 tokens. However, your messages resulted in 5000 tokens. Please reduce the length of the messages."}
	huge := strings.Repeat("blah ", 200_000) // 1 MB
	var mu sync.Mutex
	refused := false
	f := newFixture(t, setup{Respond: func(_ int, req llmtest.Request) llmtest.Turn {
		mu.Lock()
		defer mu.Unlock()
		if isSummaryCall(req) {
			return llmtest.Turn{Text: huge, ChunkRunes: 8192}
		}
		if strings.Contains(lastUserMessage(req), "now") && !refused {
			refused = true
			return tooLong
		}
		return llmtest.Turn{Text: "re: " + lastUserMessage(req)}
	}})
	first := f.send(t, chat.Request{Message: "first"}, chat.StartOptions{})
	f.wait(t, first.RunID)
	second := f.send(t, chat.Request{SessionID: first.SessionID, Message: "second"}, chat.StartOptions{})
	f.wait(t, second.RunID)
	st := f.send(t, chat.Request{SessionID: first.SessionID, Message: "and now"}, chat.StartOptions{})
	f.wait(t, st.RunID)
	summaries := 0
	for _, r := range records(t, f.db, st.SessionID) {
		if r.SummaryThrough != "" {
			summaries++
			if len(r.Content) > 64<<10 {
				t.Errorf("a summary of %d bytes was stored; a summary keeps at most 64 KiB", len(r.Content))
			}
		}
	}
	if summaries == 0 {
		t.Errorf("no summary was stored: the test did not compact")
	}
}

// TestContextHasALimit: a request's context is bounded (it goes into every system prompt); one within
// the limit reaches the model and the run's stored diagnostics.
func TestContextHasALimit(t *testing.T) {
	f := newFixture(t, setup{Respond: echo})
	_, err := f.svc.Start(t.Context(), user, chat.Request{Message: "hi", Context: map[string]any{"blob": strings.Repeat("x", 65<<10)}}, chat.StartOptions{})
	var e *chat.Error
	if !errors.As(err, &e) || e.Code != "context_too_large" {
		t.Fatalf("a 65 KiB context: %v; want context_too_large", err)
	}
	big := map[string]any{"blob": strings.Repeat("x", 60<<10)}
	st := f.send(t, chat.Request{Message: "hi", Context: big}, chat.StartOptions{})
	f.wait(t, st.RunID)
	d, err := f.svc.Diagnostics(t.Context(), user, st.RunID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := d.Context["blob"].(string); len(s) != 60<<10 || !strings.Contains(d.SystemPrompt, big["blob"].(string)) {
		t.Errorf("diagnostics: a context of %d bytes, a system prompt of %d", len(s), len(d.SystemPrompt))
	}
}

// TestQueueLimitHoldsUnderConcurrency: concurrent enqueues to one session cannot all pass the check of
// the queue's limit (40 at once once queued 4 to 38 runs behind a limit of 2).
func TestQueueLimitHoldsUnderConcurrency(t *testing.T) {
	g := newGate(t)
	f := newFixture(t, setup{Respond: func(n int, req llmtest.Request) llmtest.Turn {
		turn := echo(n, req)
		turn.BeforeFinish = g.hold
		return turn
	}, Path: dbPath(t), Limits: chat.Limits{QueuedRuns: 2}})
	first := f.send(t, chat.Request{Message: "first"}, chat.StartOptions{})
	g.wait(t)
	var accepted atomic.Int32
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			_, err := f.svc.Start(t.Context(), user, chat.Request{SessionID: first.SessionID, Message: fmt.Sprint("queued ", i)},
				chat.StartOptions{OnActiveRun: chat.OnActiveEnqueue})
			var e *chat.Error
			switch {
			case err == nil:
				accepted.Add(1)
			case !errors.As(err, &e) || e.Code != "queue_full":
				t.Errorf("enqueue %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if n := accepted.Load(); n != 2 {
		t.Errorf("%d of 40 concurrent enqueues accepted; the limit is 2", n)
	}
	g.open()
}

// TestLongThinkingWithinTheEventLimit: a run streamed token by token — 110,000 deltas of thinking and
// text, about a thinking model's budget over a few rounds — stays within the default event limit (the
// first default, 100,000, failed it).
func TestLongThinkingWithinTheEventLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 110,000 events")
	}
	tok := "word"
	f := newFixture(t, setup{Turns: []llmtest.Turn{{Reasoning: strings.Repeat(tok, 70_000), Text: strings.Repeat(tok, 40_000), ChunkRunes: 4}}})
	st := f.send(t, chat.Request{Message: "think hard"}, chat.StartOptions{})
	// 110,000 events take a while under the race detector on a loaded machine: a long safety net.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	o, err := f.svc.Wait(ctx, user, st.RunID)
	if err != nil || o.Status != store.RunCompleted {
		t.Errorf("outcome %s %+v, %v; want completed", o.Status, o.Error, err)
	}
}

// failFinish is a store whose FinishRun fails while fails is above zero, counting down.
type failFinish struct {
	store.Store
	fails   atomic.Int32
	creates atomic.Int32
}

func (f *failFinish) FinishRun(ctx context.Context, user, runID string, end store.RunEnd) ([]store.Record, error) {
	if f.fails.Add(-1) >= 0 {
		return nil, errors.New("disk I/O error")
	}
	return f.Store.FinishRun(ctx, user, runID, end)
}

func (f *failFinish) CreateRun(ctx context.Context, user string, r *store.Run, first *store.Record) error {
	f.creates.Add(1)
	return f.Store.CreateRun(ctx, user, r, first)
}

// TestUnstoredEndIsRetried: a run whose end the store refuses a few times is stored when the store
// takes it again, as it ended; its session takes the next message — one failed write once left the
// session busy until a restart. An interrupting send meanwhile waits for the run's end instead of
// retrying in a busy loop.
func TestUnstoredEndIsRetried(t *testing.T) {
	up := llmtest.NewServer(t)
	up.Respond = echo
	client, err := newClient(up, "")
	if err != nil {
		t.Fatal(err)
	}
	st := &failFinish{Store: openStore(t, dbPath(t))}
	svc := chat.New(chat.Options{TitleModel: chat.TitleNone, Store: st, Models: oneModel{client}, DefaultModel: "x/m",
		FlushInterval: 5 * time.Millisecond, RetryBase: time.Millisecond})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		svc.Close(ctx)
	})
	st.fails.Store(3)
	first, err := svc.Start(t.Context(), user, chat.Request{Message: "hi"}, chat.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	o, err := svc.Wait(ctx, user, first.RunID)
	if err != nil || o.Status != store.RunCompleted || o.Error != nil {
		t.Fatalf("the run whose end was refused 3 times: %+v, %v; want completed", o, err)
	}
	if r, err := st.Run(t.Context(), user, first.RunID); err != nil || r.Status != store.RunCompleted {
		t.Errorf("the stored run: %+v, %v", r, err)
	}
	next, err := svc.Start(t.Context(), user, chat.Request{SessionID: first.SessionID, Message: "again"}, chat.StartOptions{})
	if err != nil {
		t.Fatalf("the next message: %v", err)
	}
	if o, err := svc.Wait(ctx, user, next.RunID); err != nil || o.Status != store.RunCompleted {
		t.Errorf("the next run: %+v, %v", o, err)
	}

	// An interrupting send while the end is refused waits for it.
	st.fails.Store(5)
	third, err := svc.Start(t.Context(), user, chat.Request{SessionID: first.SessionID, Message: "third"}, chat.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := st.creates.Load()
	fourth, err := svc.Start(t.Context(), user, chat.Request{SessionID: first.SessionID, Message: "fourth"},
		chat.StartOptions{OnActiveRun: chat.OnActiveInterrupt})
	if err != nil {
		t.Fatalf("the interrupting send: %v", err)
	}
	if n := st.creates.Load() - before; n > 5 {
		t.Errorf("the interrupting send tried to start its run %d times: a busy loop", n)
	}
	for _, id := range []string{third.RunID, fourth.RunID} {
		if _, err := svc.Wait(ctx, user, id); err != nil {
			t.Errorf("wait for %s: %v", id, err)
		}
	}
}

// TestUnknownAgentNamesOnlyAllowedAgents: a key limited to some agents, asking for one that does not
// exist, is told the agents it may use and never the others (GET /v1/agents hides them too).
func TestUnknownAgentNamesOnlyAllowedAgents(t *testing.T) {
	f := newFixture(t, setup{Respond: echo, Agents: map[string]chat.Agent{"default": {}, "secret-internal": {}, "support": {}}})
	_, err := f.svc.Start(t.Context(), user, chat.Request{Message: "hi", Agent: "nope"},
		chat.StartOptions{Account: chat.Account{Agent: func(n string) bool { return n == "support" }}})
	var e *chat.Error
	if !errors.As(err, &e) || e.Code != "unknown_agent" {
		t.Fatalf("error %v, want unknown_agent", err)
	}
	if strings.Contains(e.Message, "secret-internal") || strings.Contains(e.Message, "default") || !strings.Contains(e.Message, "support") {
		t.Errorf("message %q names agents the key may not use, or not the one it may", e.Message)
	}
}
