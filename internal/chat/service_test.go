package chat_test

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"chatd/internal/chat"
	"chatd/internal/llm"
	"chatd/internal/llm/anthropic"
	"chatd/internal/llm/gemini"
	"chatd/internal/llm/llmtest"
	"chatd/internal/llm/openai"
	"chatd/internal/llm/responses"
	"chatd/internal/runevent"
	"chatd/internal/store"
	"chatd/internal/store/sqlite"
	"chatd/internal/tool"
)

// TestMain checks that every run, flusher and tool goroutine is gone once its service is closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// user owns every session of these tests.
const user = "local"

// patience bounds every wait of these tests. It is a safety net, not a timing: a wait that needs it has
// failed.
const patience = 2 * time.Minute

type oneModel struct{ p llm.Provider }

func (m oneModel) Resolve(string) (llm.Provider, string, error) { return m.p, "m", nil }

// setup says how to build a fixture; the zero value is a service on an in-memory store whose model
// answers with an error.
type setup struct {
	Turns   []llmtest.Turn                                // the model's answers, in order
	Respond func(n int, req llmtest.Request) llmtest.Turn // picks each answer instead of Turns
	// Lenient lets the model take requests the real API refuses; by default every request is checked
	// as OpenAI checks it, so that each test also proves the history it sends is valid.
	Lenient bool
	Path    string // the SQLite file; "" is an in-memory database
	Tools   []tool.Tool
	// FlushInterval is the service's; 0 is 5ms, so that the event log writes several batches per run.
	FlushInterval time.Duration
	// Protocol is the API the model speaks (llmtest.ProtocolOpenAI when empty), through chatd's
	// adapter for it.
	Protocol string
	Agents   map[string]chat.Agent
	Context  chat.ContextOptions
	Logger   *slog.Logger
	Limits   chat.Limits
	Now      func() time.Time // the service's clock for pacing progress; nil is time.Now
	// TitleModel titles sessions after their first answer; "" is chat.TitleNone, so that the scripted
	// model's answers go to the runs.
	TitleModel string
	// ApprovalTimeout is how long a run waits for a decision; 0 is the default.
	ApprovalTimeout time.Duration
	// Wrap, when set, is the store the service uses, wrapping the fixture's.
	Wrap func(store.Store) store.Store
	// WrapModel, when set, is the provider the service uses, wrapping the fixture's adapter.
	WrapModel func(llm.Provider) llm.Provider
	// Quota is the service's Options.Quota.
	Quota func(ctx context.Context, user, keyID string) ([]store.Limit, error)
}

// fixture is a service wired as chatd wires it: a real SQLite store, the openai adapter talking to a
// scripted llmtest server over HTTP, and a tool registry.
type fixture struct {
	svc *chat.Service
	db  *sqlite.DB
	up  *llmtest.Server
}

func newFixture(t *testing.T, s setup) *fixture {
	t.Helper()
	up := llmtest.NewServer(t, s.Turns...)
	up.Respond, up.Strict = s.Respond, !s.Lenient
	client, err := newClient(up, s.Protocol)
	if err != nil {
		t.Fatal(err)
	}
	if s.WrapModel != nil {
		client = s.WrapModel(client)
	}
	db := openStore(t, s.Path)
	reg := tool.NewRegistry(tool.Options{})
	t.Cleanup(reg.Close) // after the service's Close: cleanups run last first
	for _, tl := range s.Tools {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	if s.FlushInterval == 0 {
		s.FlushInterval = 5 * time.Millisecond
	}
	var st store.Store = db
	if s.Wrap != nil {
		st = s.Wrap(db)
	}
	svc := chat.New(chat.Options{Store: st, Models: oneModel{client}, Tools: reg, DefaultModel: "x/m",
		FlushInterval: s.FlushInterval, RetryBase: time.Millisecond, Agents: s.Agents, Context: s.Context, Logger: s.Logger,
		Limits: s.Limits, Now: s.Now, TitleModel: titleModel(s.TitleModel), ApprovalTimeout: s.ApprovalTimeout, Quota: s.Quota})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		if err := svc.Close(ctx); err != nil {
			t.Errorf("close service: %v", err)
		}
	})
	return &fixture{svc: svc, db: db, up: up}
}

// titleModel is a fixture's title model: none unless the test names one.
func titleModel(m string) string {
	if m == "" {
		return chat.TitleNone
	}
	return m
}

// newClient is chatd's adapter for protocol, talking to up, as the provider named "x" (the fixture's
// models are "x/m").
func newClient(up *llmtest.Server, protocol string) (llm.Provider, error) {
	switch protocol {
	case "", llmtest.ProtocolOpenAI:
		return openai.New(openai.Options{Name: "x", BaseURL: up.BaseURL()})
	case llmtest.ProtocolAnthropic:
		return anthropic.New(anthropic.Options{Name: "x", BaseURL: up.AnthropicBaseURL(), APIKey: "k"})
	case llmtest.ProtocolGemini:
		return gemini.New(gemini.Options{Name: "x", BaseURL: up.GeminiBaseURL(), APIKey: "k"})
	case llmtest.ProtocolResponses:
		return responses.New(responses.Options{Name: "x", BaseURL: up.ResponsesBaseURL(), APIKey: "k"})
	}
	return nil, errors.New("no protocol " + protocol)
}

// openStore opens the SQLite database at path ("" for one in memory) until the test ends.
func openStore(t *testing.T, path string) *sqlite.DB {
	t.Helper()
	if path == "" {
		path = ":memory:"
	}
	db, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// dbPath is a database file that outlives a fixture, as chatd's survives a restart.
func dbPath(t *testing.T) string { return filepath.Join(t.TempDir(), "chatd.db") }

// newService is a fixture whose model gives every request the same answer.
func newService(t *testing.T, turn llmtest.Turn) (*chat.Service, store.Store) {
	t.Helper()
	f := newFixture(t, setup{Respond: func(int, llmtest.Request) llmtest.Turn { return turn }})
	return f.svc, f.db
}

// send starts a run and fails the test when it cannot.
func (f *fixture) send(t *testing.T, req chat.Request, opt chat.StartOptions) *chat.Started {
	t.Helper()
	st, err := f.svc.Start(t.Context(), user, req, opt)
	if err != nil {
		t.Fatalf("start %q: %v", req.Message, err)
	}
	return st
}

// gate holds a model stream open before its finish chunk (llmtest.Turn.BeforeFinish) until released, so
// that a test acts on a run at a known point without sleeping.
type gate struct {
	reached chan struct{} // receives each time a stream arrives at the gate
	release chan struct{} // closed to let every stream go on
	once    sync.Once
}

func newGate(t *testing.T) *gate {
	g := &gate{reached: make(chan struct{}, 16), release: make(chan struct{})}
	t.Cleanup(g.open) // a failed test must not leave a stream waiting
	return g
}

func (g *gate) hold() {
	g.reached <- struct{}{}
	<-g.release
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// wait waits until a stream is held at the gate.
func (g *gate) wait(t *testing.T) {
	t.Helper()
	select {
	case <-g.reached:
	case <-time.After(patience):
		t.Fatal("no model stream reached the gate")
	}
}

// follower reads one run's events for a test.
type follower struct {
	t    *testing.T
	f    *chat.Follower
	id   string
	seen []chat.Event
	end  bool
}

func (f *fixture) follow(t *testing.T, runID string, after int64) *follower {
	t.Helper()
	fl, err := f.svc.Follow(t.Context(), user, runID, after)
	if err != nil {
		t.Fatalf("follow %s: %v", runID, err)
	}
	t.Cleanup(fl.Close)
	return &follower{t: t, f: fl, id: runID}
}

// until reads until cond holds for the events read so far, or the log ends, and returns them.
func (fl *follower) until(cond func([]chat.Event) bool) []chat.Event {
	fl.t.Helper()
	ctx, cancel := context.WithTimeout(fl.t.Context(), patience)
	defer cancel()
	for !cond(fl.seen) && !fl.end {
		events, end, err := fl.f.Read(ctx)
		if err != nil {
			fl.t.Fatalf("read %s: %v", fl.id, err)
		}
		fl.seen, fl.end = append(fl.seen, events...), end
		if len(events) > 0 || end {
			continue
		}
		select {
		case <-fl.f.Wait():
		case <-ctx.Done():
			fl.t.Fatalf("run %s: waited %s; events so far: %s", fl.id, patience, types(fl.seen))
		}
	}
	return fl.seen
}

// all reads to the end of the log.
func (fl *follower) all() []chat.Event {
	fl.t.Helper()
	return fl.until(func([]chat.Event) bool { return false })
}

// collect follows a run from its first event to its end.
func collect(t *testing.T, svc *chat.Service, user, runID string) []chat.Event {
	t.Helper()
	return (&fixture{svc: svc}).follow(t, runID, 0).all()
}

// wait waits until the run has ended and returns its outcome.
func (f *fixture) wait(t *testing.T, runID string) chat.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	o, err := f.svc.Wait(ctx, user, runID)
	if err != nil {
		t.Fatalf("wait for %s: %v", runID, err)
	}
	return o
}

// stored is the run's event log as the store holds it.
func stored(t *testing.T, db store.Store, runID string) []chat.Event {
	t.Helper()
	var out []chat.Event
	for {
		after := int64(0)
		if len(out) > 0 {
			after = out[len(out)-1].Seq
		}
		evs, err := db.Events(t.Context(), user, runID, after, 100)
		if err != nil {
			t.Fatalf("stored events of %s: %v", runID, err)
		}
		if len(evs) == 0 {
			return out
		}
		for _, e := range evs {
			out = append(out, chat.Event{Seq: e.Seq, Type: e.Type, Data: e.Data})
		}
	}
}

// checkLog fails unless events are numbered 1, 2, 3 … without a gap.
func checkLog(t *testing.T, what string, events []chat.Event) {
	t.Helper()
	for i, e := range events {
		if e.Seq != int64(i)+1 {
			t.Fatalf("%s: event %d has seq %d; log: %s", what, i+1, e.Seq, types(events))
		}
	}
}

// checkEnds fails unless the log ends with a run's closing events: the outcome, then done.
func checkEnds(t *testing.T, events []chat.Event, outcome, outcomeData, done string) {
	t.Helper()
	n := len(events)
	if n < 2 {
		t.Fatalf("log too short: %s", types(events))
	}
	got := []string{events[n-2].Type, string(events[n-2].Data), events[n-1].Type, string(events[n-1].Data)}
	want := []string{outcome, outcomeData, runevent.TypeDone, `{"status":"` + done + `"}`}
	if outcomeData == "" { // only the type matters
		got[1] = ""
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("last events (-want +got):\n%s", diff)
	}
}

func types(events []chat.Event) string {
	var b strings.Builder
	for _, e := range events {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(e.Type)
	}
	return b.String()
}

// text is what the run's text_delta events say.
func text(t *testing.T, events []chat.Event) string {
	t.Helper()
	var b strings.Builder
	for _, e := range events {
		if e.Type != runevent.TypeTextDelta {
			continue
		}
		d, err := runevent.Decode[runevent.Text](e.Data)
		if err != nil {
			t.Fatalf("text_delta %d: %v", e.Seq, err)
		}
		b.WriteString(d.Text)
	}
	return b.String()
}

// hasText reports a log whose text so far is want.
func hasText(t *testing.T, want string) func([]chat.Event) bool {
	return func(events []chat.Event) bool { return text(t, events) == want }
}

// records is a session's stored records.
func records(t *testing.T, db store.Store, sessionID string) []store.Record {
	t.Helper()
	recs, err := db.Records(t.Context(), user, sessionID)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// transcript summarizes records as role:content, a tool record as tool:call_id:ok|failed.
func transcript(recs []store.Record) []string {
	var out []string
	for _, r := range recs {
		switch {
		case r.Role == store.RoleTool:
			ok := "failed"
			if r.Success != nil && *r.Success {
				ok = "ok"
			}
			out = append(out, "tool:"+r.ToolCallID+":"+ok)
		case len(r.ToolCalls) > 0:
			var ids []string
			for _, c := range r.ToolCalls {
				ids = append(ids, c.ID)
			}
			out = append(out, r.Role+":"+r.Content+"→"+strings.Join(ids, ","))
		default:
			out = append(out, r.Role+":"+r.Content)
		}
	}
	return out
}

// storedRun is the run as the store holds it.
func storedRun(t *testing.T, db store.Store, runID string) *store.Run {
	t.Helper()
	r, err := db.Run(t.Context(), user, runID)
	if err != nil {
		t.Fatalf("stored run %s: %v", runID, err)
	}
	return r
}

// eventually polls cond — a state of the store the service reaches on its own, such as a batch written
// by the event log — until it holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(patience)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("waited %s for %s", patience, what)
		}
	}
}

// lastUserMessage is the text of the request's last user message.
func lastUserMessage(req llmtest.Request) string {
	msgs := req.Messages()
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i]["role"] == "user" {
			s, _ := msgs[i]["content"].(string)
			if j := strings.LastIndex(s, "\n\n"); j >= 0 {
				s = s[j+2:]
			}
			return s
		}
	}
	return ""
}

// echo answers each request with "re: " and the user's last message. Messages the model never answered
// (their run was interrupted) come merged with the next, a paragraph apart: the last paragraph is the
// latest message.

func echo(_ int, req llmtest.Request) llmtest.Turn {
	return llmtest.Turn{Text: "re: " + lastUserMessage(req)}
}

// TestCloseWhileStarting: runs start while the service closes. Every run that started ends with its
// events and a terminal status in the store; every later start is refused; nothing panics or leaks.
func TestCloseWhileStarting(t *testing.T) {
	svc, db := newService(t, llmtest.Turn{Text: "a slow answer", Delay: 5 * time.Millisecond})
	var mu sync.Mutex
	var runs []*chat.Started
	var wg sync.WaitGroup
	started := make(chan struct{}, 16)
	for range 16 {
		wg.Go(func() {
			run, err := svc.Start(t.Context(), "local", chat.Request{Message: "hi"}, chat.StartOptions{})
			if err != nil {
				var ce *chat.Error
				if !errors.As(err, &ce) || ce.Code != "shutting_down" {
					t.Errorf("start: %v", err)
				}
				return
			}
			mu.Lock()
			runs = append(runs, run)
			mu.Unlock()
			started <- struct{}{}
		})
	}
	<-started // close while runs run, and others may still be starting
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	if err := svc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(runs) == 0 {
		t.Fatal("no run started")
	}
	for _, run := range runs {
		stored, err := db.Run(t.Context(), "local", run.RunID)
		if err != nil || stored.EndedAt == nil {
			t.Errorf("run %s: %+v %v", run.RunID, stored, err)
			continue
		}
		events := collect(t, svc, "local", run.RunID)
		if events[len(events)-1].Type != runevent.TypeDone || int64(len(events)) != stored.LastEventSeq {
			t.Errorf("run %s does not end with done, or its log is not all stored", run.RunID)
		}
	}
	if _, err := svc.Start(t.Context(), "local", chat.Request{Message: "late"}, chat.StartOptions{}); err == nil {
		t.Error("a run started after Close")
	}
}

// TestRecoverAfterCrash: a process died after storing a turn with a tool call and before its result. At
// the next start the run is interrupted, the call closed, and the session takes the next message with a
// history the model accepts (every call answered).
func TestRecoverAfterCrash(t *testing.T) {
	svc, db := newService(t, llmtest.Turn{Text: "back again"})
	ctx, user := t.Context(), "local"
	sess := &store.Session{Agent: "default"}
	if err := db.CreateSession(ctx, user, sess); err != nil {
		t.Fatal(err)
	}
	dead := &store.Run{SessionID: sess.ID, Agent: "default", Model: "x/m"}
	if err := db.CreateRun(ctx, user, dead, nil); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*store.Record{
		{SessionID: sess.ID, RunID: dead.ID, Role: store.RoleUser, Content: "what time is it?"},
		{SessionID: sess.ID, RunID: dead.ID, Role: store.RoleAssistant, ToolCalls: []store.ToolCall{{ID: "call_1", Name: "current_time", Arguments: []byte(`{}`)}}},
	} {
		if err := db.AppendRecord(ctx, user, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.Start(ctx, user, chat.Request{SessionID: sess.ID, Message: "hello?"}, chat.StartOptions{}); err == nil {
		t.Fatal("the session took a message while a run was running")
	}
	if err := svc.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := db.Run(ctx, user, dead.ID); r.Status != store.RunInterrupted {
		t.Fatalf("dead run after Recover: %+v", r)
	}
	run, err := svc.Start(ctx, user, chat.Request{SessionID: sess.ID, Message: "hello?"}, chat.StartOptions{})
	if err != nil {
		t.Fatalf("after Recover: %v", err)
	}
	if o, err := svc.Wait(ctx, user, run.RunID); err != nil || o.Status != "completed" || o.Message.Content != "back again" {
		t.Fatalf("outcome = %+v", o)
	}
}

// panicky is a provider with a bug.
type panicky struct{}

func (panicky) Stream(context.Context, *llm.Request) iter.Seq2[llm.Event, error] {
	return func(func(llm.Event, error) bool) { panic("bug in an adapter") }
}

// TestPanicEndsOnlyTheRun: a panic inside a run fails that run — stored as failed, with error and done
// events — and the process and the service go on.
func TestPanicEndsOnlyTheRun(t *testing.T) {
	db := openStore(t, "")
	svc := chat.New(chat.Options{TitleModel: chat.TitleNone, Store: db, Models: oneModel{panicky{}}, DefaultModel: "x/m"})
	defer svc.Close(t.Context())
	run, err := svc.Start(t.Context(), "local", chat.Request{Message: "hi"}, chat.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	events := collect(t, svc, "local", run.RunID)
	n := len(events)
	if events[n-2].Type != runevent.TypeError || string(events[n-1].Data) != `{"status":"failed"}` {
		t.Fatalf("last events: %s %s", events[n-2].Type, events[n-1].Data)
	}
	if r, err := db.Run(t.Context(), "local", run.RunID); err != nil || r.Status != store.RunFailed {
		t.Fatalf("stored run: %+v %v", r, err)
	}
	if _, err := svc.Start(t.Context(), "local", chat.Request{Message: "still here?"}, chat.StartOptions{}); err != nil {
		t.Fatalf("the service stopped taking runs: %v", err)
	}
}
