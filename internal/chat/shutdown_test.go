package chat_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"chatd/internal/chat"
	"chatd/internal/llm/llmtest"
	"chatd/internal/store"
	"chatd/internal/tool"
)

// closedStore counts the calls a store gets once it is closed: chatd's main closes the store as soon
// as the service's Close returns, so any later call would write to a closed database.
type closedStore struct {
	store.Store
	closed atomic.Bool
	late   atomic.Int64
}

func (c *closedStore) use() {
	if c.closed.Load() {
		c.late.Add(1)
	}
}

func (c *closedStore) Records(ctx context.Context, user, sessionID string) ([]store.Record, error) {
	c.use()
	return c.Store.Records(ctx, user, sessionID)
}

func (c *closedStore) AppendRecord(ctx context.Context, user string, r *store.Record) error {
	c.use()
	return c.Store.AppendRecord(ctx, user, r)
}

func (c *closedStore) StartRun(ctx context.Context, user, runID string, first *store.Record, reserve int64) error {
	c.use()
	return c.Store.StartRun(ctx, user, runID, first, reserve)
}

func (c *closedStore) CloseCalls(ctx context.Context, user, runID, reason string) ([]store.Record, error) {
	c.use()
	return c.Store.CloseCalls(ctx, user, runID, reason)
}

func (c *closedStore) FinishRun(ctx context.Context, user, runID string, end store.RunEnd) ([]store.Record, error) {
	c.use()
	return c.Store.FinishRun(ctx, user, runID, end)
}

func (c *closedStore) AddUsage(ctx context.Context, user string, u store.UsageEntry) error {
	c.use()
	return c.Store.AddUsage(ctx, user, u)
}

func (c *closedStore) AppendEvents(ctx context.Context, events []store.Event, reserved []store.Reservation) error {
	c.use()
	return c.Store.AppendEvents(ctx, events, reserved)
}

// TestCloseLeavesNothingRunning: a service that ran, queued, started queued and cancelled runs, in every
// way a run ends, leaves no goroutine behind once Close returns, and never uses the store after: every
// run, every flush of the event log and every start of a queued run has an owner that Close waits for.
func TestCloseLeavesNothingRunning(t *testing.T) {
	first, later := newGate(t), newGate(t)
	up := llmtest.NewServer(t)
	up.Strict = true
	up.Respond = func(n int, req llmtest.Request) llmtest.Turn {
		turn := echo(n, req)
		switch lastUserMessage(req) {
		case "first":
			turn.BeforeFinish = first.hold
		case "hold":
			turn.BeforeFinish = later.hold
		}
		return turn
	}
	client, err := newClient(up, "")
	if err != nil {
		t.Fatal(err)
	}
	db := openStore(t, "")
	reg := tool.NewRegistry(tool.Options{})
	t.Cleanup(reg.Close)
	st := &closedStore{Store: db}
	// What runs now is the test's; what the service starts must be gone when Close returns, but for the
	// connections of the model's HTTP client and server, which outlive a run by design.
	leaks := []goleak.Option{goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve")}
	svc := chat.New(chat.Options{TitleModel: chat.TitleNone, Store: st, Models: oneModel{client}, Tools: reg, DefaultModel: "x/m", RetryBase: time.Millisecond})
	f := &fixture{svc: svc, db: db, up: up}
	enqueue := chat.StartOptions{OnActiveRun: chat.OnActiveEnqueue}

	// A run that completes; one that is cancelled while it streams; one cancelled while queued.
	done := f.send(t, chat.Request{Message: "done"}, chat.StartOptions{})
	f.wait(t, done.RunID)
	cancelled := f.send(t, chat.Request{Message: "hold"}, chat.StartOptions{})
	later.wait(t)
	if _, err := svc.Cancel(t.Context(), user, cancelled.RunID, ""); err != nil {
		t.Fatal(err)
	}
	f.wait(t, cancelled.RunID)
	a := f.send(t, chat.Request{Message: "first"}, chat.StartOptions{})
	first.wait(t)
	next := f.send(t, chat.Request{SessionID: a.SessionID, Message: "hold"}, enqueue)
	dropped := f.send(t, chat.Request{SessionID: a.SessionID, Message: "dropped"}, enqueue)
	if _, err := svc.Cancel(t.Context(), user, dropped.RunID, ""); err != nil {
		t.Fatal(err)
	}
	// The first run's end starts the queued one, which Close then cancels while it streams, with the
	// one queued behind it.
	first.open()
	f.wait(t, a.RunID)
	later.wait(t)
	behind := f.send(t, chat.Request{SessionID: a.SessionID, Message: "behind"}, enqueue)

	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	if err := svc.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	st.closed.Store(true)
	later.open() // the model's server still holds the cancelled streams: its handlers end now
	goleak.VerifyNone(t, leaks...)
	if n := st.late.Load(); n > 0 {
		t.Errorf("the store was called %d times after Close returned", n)
	}
	for id, want := range map[string]string{done.RunID: store.RunCompleted, cancelled.RunID: store.RunCancelled,
		a.RunID: store.RunCompleted, next.RunID: store.RunCancelled, dropped.RunID: store.RunCancelled,
		behind.RunID: store.RunCancelled} {
		if r := storedRun(t, db, id); r.Status != want {
			t.Errorf("run %s is %s in the store, want %s", id, r.Status, want)
		}
	}
}
