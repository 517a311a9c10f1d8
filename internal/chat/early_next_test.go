package chat_test

import (
	"context"
	"errors"
	"iter"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/chat"
	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
	"chatd/internal/runevent"
	"chatd/internal/store"
)

// armedCommit is a store whose next CreateRun, once armed, runs a test's hook before it commits, and
// that counts the history reads of the runs.
type armedCommit struct {
	store.Store
	mu     sync.Mutex
	before func(r *store.Run) // run by the next CreateRun, then dropped
	reads  int                // Records and RecordsAfter calls
}

func (a *armedCommit) arm(f func(r *store.Run)) {
	a.mu.Lock()
	a.before = f
	a.mu.Unlock()
}

func (a *armedCommit) CreateRun(ctx context.Context, user string, r *store.Run, first *store.Record) error {
	a.mu.Lock()
	f := a.before
	a.before = nil
	a.mu.Unlock()
	if f != nil {
		f(r)
	}
	return a.Store.CreateRun(ctx, user, r, first)
}

func (a *armedCommit) Records(ctx context.Context, user, sessionID string) ([]store.Record, error) {
	a.counted()
	return a.Store.Records(ctx, user, sessionID)
}

func (a *armedCommit) RecordsAfter(ctx context.Context, user, sessionID string, after int64) ([]store.Record, error) {
	a.counted()
	return a.Store.RecordsAfter(ctx, user, sessionID, after)
}

func (a *armedCommit) counted() {
	a.mu.Lock()
	a.reads++
	a.mu.Unlock()
}

func (a *armedCommit) historyReads() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reads
}

// watchedModel is a provider that hands over each call's context, so that a test sees a call
// cancelled.
type watchedModel struct {
	llm.Provider
	calls chan context.Context
}

func (m watchedModel) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.Event, error] {
	m.calls <- ctx
	return m.Provider.Stream(ctx, req)
}

// nextFixture is a service whose sessions' next messages may start early: its store is armed by the
// test, and its model hands each request to asked and each call's context to calls.
type nextFixture struct {
	svc   *chat.Service
	db    *armedCommit
	asked chan llmtest.Request
	calls chan context.Context
}

// newNextFixture answers each request as respond says (echo when nil).
func newNextFixture(t *testing.T, respond func(req llmtest.Request) llmtest.Turn) *nextFixture {
	t.Helper()
	if respond == nil {
		respond = func(req llmtest.Request) llmtest.Turn { return echo(0, req) }
	}
	f := &nextFixture{db: &armedCommit{Store: openStore(t, "")}, asked: make(chan llmtest.Request, 16),
		calls: make(chan context.Context, 16)}
	up := llmtest.NewServer(t)
	up.Strict = true
	up.Respond = func(_ int, req llmtest.Request) llmtest.Turn {
		f.asked <- req
		return respond(req)
	}
	client, err := newClient(up, "")
	if err != nil {
		t.Fatal(err)
	}
	f.svc = chat.New(chat.Options{TitleModel: chat.TitleNone, Store: f.db, Models: oneModel{watchedModel{client, f.calls}},
		DefaultModel: "x/m", FlushInterval: 5 * time.Millisecond, RetryBase: time.Millisecond})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		if err := f.svc.Close(ctx); err != nil {
			t.Errorf("close service: %v", err)
		}
	})
	return f
}

// send starts a message to the session ("" a new one) and waits for its run to complete; it returns the
// session's id.
func (f *nextFixture) send(t *testing.T, sessionID, msg string) string {
	t.Helper()
	st, err := f.svc.Start(t.Context(), user, chat.Request{SessionID: sessionID, Message: msg}, chat.StartOptions{})
	if err != nil {
		t.Fatalf("send %q: %v", msg, err)
	}
	if o := waitOutcome(t, f.svc, st.RunID); o.Status != store.RunCompleted {
		t.Fatalf("run of %q: %+v", msg, o)
	}
	return st.SessionID
}

// request waits for the model's next request.
func (f *nextFixture) request(t *testing.T, what string) llmtest.Request {
	t.Helper()
	select {
	case req := <-f.asked:
		return req
	case <-time.After(patience):
		t.Fatalf("waited %s for %s", patience, what)
		return llmtest.Request{}
	}
}

// call waits for the model's next call.
func (f *nextFixture) call(t *testing.T) context.Context {
	t.Helper()
	select {
	case ctx := <-f.calls:
		return ctx
	case <-time.After(patience):
		t.Fatalf("waited %s for a model call", patience)
		return nil
	}
}

// checkKept fails unless the records the service keeps of the session are the store's.
func (f *nextFixture) checkKept(t *testing.T, sessionID string) {
	t.Helper()
	sess, err := f.db.Session(t.Context(), user, sessionID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(records(t, f.db.Store, sessionID), f.svc.Kept(user, sessionID, sess.CreatedAt)); diff != "" {
		t.Errorf("the records kept for the next run differ from the store's (-store +kept):\n%s", diff)
	}
}

// contents lists the contents of a model request's messages after the system prompt.
func contents(req llmtest.Request) []string {
	var out []string
	for _, m := range req.Messages() {
		if m["role"] != "system" {
			s, _ := m["content"].(string)
			out = append(out, s)
		}
	}
	return out
}

// TestNextMessageAsksTheModelWhileItCommits: a session's next message, its records kept here from its
// last run, goes to the model with the whole conversation while the transaction that stores it has not
// committed; a follower sees nothing of the run before the commit, and everything, in order, after it.
// The records kept for the run after are the store's.
func TestNextMessageAsksTheModelWhileItCommits(t *testing.T) {
	f := newNextFixture(t, nil)
	sid := f.send(t, "", "one")
	f.request(t, "the first message's request")
	reads := f.db.historyReads()

	creating, release := make(chan string, 1), make(chan struct{})
	open := sync.OnceFunc(func() { close(release) })
	t.Cleanup(open) // a failed test lets the commit go, so that the service closes
	f.db.arm(func(r *store.Run) {
		if r.AfterSeq == nil || *r.AfterSeq != 2 {
			t.Errorf("the commit checks the session's last Seq is %v, want 2", r.AfterSeq)
		}
		creating <- r.ID
		<-release
	})
	started := make(chan *chat.Started, 1)
	go func() {
		st, err := f.svc.Start(context.Background(), user, chat.Request{SessionID: sid, Message: "two"}, chat.StartOptions{})
		if err != nil {
			t.Error(err)
		}
		started <- st
	}()
	var runID string
	select {
	case runID = <-creating:
	case <-time.After(patience):
		t.Fatal("no CreateRun")
	}
	req := f.request(t, "the model's request while the commit waits")
	if got, want := contents(req), []string{"one", "re: one", "two"}; !slices.Equal(got, want) {
		t.Errorf("the model got %q, want %q", got, want)
	}
	eventually(t, "the first token held in the run", func() bool { return f.svc.HeldText(user) })
	fl, err := f.svc.Follow(t.Context(), user, runID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if events, end, err := fl.Read(t.Context()); len(events) != 0 || end || err != nil {
		t.Errorf("before the commit a follower read %s (end %v, %v), want nothing", types(events), end, err)
	}
	fl.Close()
	if _, err := f.db.Run(t.Context(), user, runID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the run is in the store before its commit: %v", err)
	}
	open()
	st := <-started
	if st == nil {
		t.FailNow()
	}
	events := collect(t, f.svc, user, st.RunID)
	checkLog(t, "live", events)
	want := "run_start record status text_delta"
	if got := types(events); len(got) < len(want) || got[:len(want)] != want {
		t.Errorf("events %s, want them to begin with %s", got, want)
	}
	if text(t, events) != "re: two" || events[len(events)-1].Type != runevent.TypeDone {
		t.Errorf("text %q, events %s", text(t, events), types(events))
	}
	if n := f.db.historyReads(); n != reads {
		t.Errorf("the run read its history from the store (%d reads); it was kept here", n-reads)
	}
	recs := records(t, f.db.Store, sid)
	if got, want := transcript(recs), []string{"user:one", "assistant:re: one", "user:two", "assistant:re: two"}; !slices.Equal(got, want) {
		t.Errorf("stored %q, want %q", got, want)
	}
	f.checkKept(t, sid)
}

// TestNextMessageOnStaleHistory: when another writer adds records to the session between the plan and
// the commit of a message that started early, the commit stores nothing, the early model call is
// cancelled, and the message is sent again on the history as stored: its sender sees one run, which
// completes, and the model's request holds the records added meanwhile.
func TestNextMessageOnStaleHistory(t *testing.T) {
	earlyAsked := make(chan struct{}, 1)
	f := newNextFixture(t, func(req llmtest.Request) llmtest.Turn {
		if lastUserMessage(req) == "three" && !slices.Contains(contents(req), "aside") {
			earlyAsked <- struct{}{}
			return llmtest.Turn{Text: "on a stale history", Block: true} // until the call is cancelled
		}
		return echo(0, req)
	})
	sid := f.send(t, "", "one")
	f.send(t, sid, "two")
	f.request(t, "one's request")
	f.request(t, "two's request")
	f.call(t)
	f.call(t)

	f.db.arm(func(*store.Run) {
		select {
		case <-earlyAsked:
		case <-time.After(patience):
			t.Error("the model was not asked before the commit")
		}
		for _, r := range []store.Record{{SessionID: sid, Role: store.RoleUser, Content: "aside"},
			{SessionID: sid, Role: store.RoleAssistant, Content: "noted"}} {
			if err := f.db.Store.AppendRecord(context.Background(), user, &r); err != nil {
				t.Error(err)
			}
		}
	})
	st, err := f.svc.Start(t.Context(), user, chat.Request{SessionID: sid, Message: "three"}, chat.StartOptions{})
	if err != nil {
		t.Fatalf("a send whose early history went stale: %v", err)
	}
	if o := waitOutcome(t, f.svc, st.RunID); o.Status != store.RunCompleted {
		t.Fatalf("run: %+v", o)
	}
	early := f.call(t)
	select {
	case <-early.Done():
		if !errors.Is(context.Cause(early), chat.ErrAbandoned) {
			t.Errorf("the early call ended with %v, want it abandoned", context.Cause(early))
		}
	case <-time.After(patience):
		t.Fatal("the early model call was not cancelled")
	}
	f.request(t, "the early request")
	req := f.request(t, "the request sent again")
	if got, want := contents(req), []string{"one", "re: one", "two", "re: two", "aside", "noted", "three"}; !slices.Equal(got, want) {
		t.Errorf("the request sent again holds %q, want %q", got, want)
	}
	want := []string{"user:one", "assistant:re: one", "user:two", "assistant:re: two", "user:aside", "assistant:noted",
		"user:three", "assistant:re: three"}
	if got := transcript(records(t, f.db.Store, sid)); !slices.Equal(got, want) {
		t.Errorf("stored %q, want %q", got, want)
	}
	f.checkKept(t, sid)
}

// TestNextMessageToABusySession: a session whose run another instance stored (it added no record, so
// the history kept here still looks whole) refuses a next message as before, or queues it: the run that
// started early is abandoned, and nothing of it is stored.
func TestNextMessageToABusySession(t *testing.T) {
	f := newNextFixture(t, nil)
	sid := f.send(t, "", "one")
	elsewhere := &store.Run{SessionID: sid, Agent: "default", Model: "x/m"}
	if err := f.db.Store.CreateRun(t.Context(), user, elsewhere, nil); err != nil {
		t.Fatal(err)
	}
	early := make(chan bool, 1)
	f.db.arm(func(r *store.Run) { early <- r.AfterSeq != nil })
	_, err := f.svc.Start(t.Context(), user, chat.Request{SessionID: sid, Message: "two"}, chat.StartOptions{})
	if !<-early {
		t.Error("the send did not start early: the test does not test what it says")
	}
	if e, ok := errors.AsType[*chat.Error](err); !ok || e.Code != "session_busy" || e.RunID != elsewhere.ID {
		t.Errorf("a send to a busy session: %v, want session_busy naming %s", err, elsewhere.ID)
	}
	st, err := f.svc.Start(t.Context(), user, chat.Request{SessionID: sid, Message: "two"}, chat.StartOptions{OnActiveRun: chat.OnActiveEnqueue})
	if err != nil || st.Status != store.RunQueued {
		t.Errorf("a send to a busy session that may wait: %+v, %v; want it queued", st, err)
	}
	if got, want := transcript(records(t, f.db.Store, sid)), []string{"user:one", "assistant:re: one"}; !slices.Equal(got, want) {
		t.Errorf("stored %q, want %q", got, want)
	}
}

// TestNextMessageToAColdSession: a session whose records are not kept here (another instance wrote
// them) is sent to as before: stored first, its history read from the store, then the model asked. Its
// records are kept after, and the message after that starts early.
func TestNextMessageToAColdSession(t *testing.T) {
	f := newNextFixture(t, nil)
	sess := &store.Session{Agent: "default"}
	if err := f.db.Store.CreateSession(t.Context(), user, sess); err != nil {
		t.Fatal(err)
	}
	for _, r := range []store.Record{{SessionID: sess.ID, Role: store.RoleUser, Content: "elsewhere"},
		{SessionID: sess.ID, Role: store.RoleAssistant, Content: "answered elsewhere"}} {
		if err := f.db.Store.AppendRecord(t.Context(), user, &r); err != nil {
			t.Fatal(err)
		}
	}
	asked, checked := make(chan int, 1), make(chan bool, 1)
	f.db.arm(func(r *store.Run) {
		asked <- len(f.asked)
		checked <- r.AfterSeq != nil
	})
	f.send(t, sess.ID, "here")
	if n := <-asked; n != 0 {
		t.Errorf("the model was asked %d times before the run was stored", n)
	}
	if <-checked {
		t.Error("the run's commit checks a history it did not have")
	}
	if n := f.db.historyReads(); n != 1 {
		t.Errorf("the run read its history %d times, want once", n)
	}
	if got, want := contents(f.request(t, "the request")), []string{"elsewhere", "answered elsewhere", "here"}; !slices.Equal(got, want) {
		t.Errorf("the model got %q, want %q", got, want)
	}
	f.checkKept(t, sess.ID)
	f.send(t, sess.ID, "and here")
	if n := f.db.historyReads(); n != 1 {
		t.Errorf("the next run read its history too (%d reads in all); it was kept", n)
	}
}
