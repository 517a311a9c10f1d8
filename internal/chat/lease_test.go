package chat_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"chatd/internal/chat"
	"chatd/internal/llm/llmtest"
	"chatd/internal/runevent"
	"chatd/internal/store"
	"chatd/internal/store/postgres"
	"chatd/internal/store/postgres/pgtest"
	"chatd/internal/tool"
)

// clock is a time that tests step; leases are measured on it.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) step(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// leaseTTL is the lease of these tests; the clock is stepped past it, never waited for.
const leaseTTL = time.Minute

// instance is one chatd instance on the shared database: its store, opened under its name, its service
// and its listener.
type instance struct {
	db  *postgres.DB
	svc *chat.Service
	up  *llmtest.Server
	reg *tool.Registry
}

// newInstance starts an instance named name on the database of dsn whose model answers with turns.
// Its loop neither renews nor sweeps on its own within a test (both run on the test's calls); its
// listener is up when listen is set.
func newInstance(t *testing.T, dsn, name string, clk *clock, listen bool, turns ...llmtest.Turn) *instance {
	t.Helper()
	db, err := postgres.Open(t.Context(), dsn, postgres.Options{Instance: name, LeaseTTL: leaseTTL, Now: clk.Now, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	up := llmtest.NewServer(t, turns...)
	client, err := newClient(up, "")
	if err != nil {
		t.Fatal(err)
	}
	reg := tool.NewRegistry(tool.Options{})
	t.Cleanup(reg.Close)
	svc := chat.New(chat.Options{TitleModel: chat.TitleNone, Store: db, Models: oneModel{client}, Tools: reg, DefaultModel: "x/m",
		FlushInterval: 5 * time.Millisecond, RetryBase: time.Millisecond, SweepInterval: time.Hour, Now: clk.Now})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		if err := svc.Close(ctx); err != nil {
			t.Errorf("close service %s: %v", name, err)
		}
	})
	if listen {
		l := db.Listen(dsn, svc.Wake, nil)
		t.Cleanup(l.Close)
	}
	return &instance{db: db, svc: svc, up: up, reg: reg}
}

// readUntil follows a run on svc from after, until an event pred accepts (or the log ends), and
// returns the events read.
func readUntil(t *testing.T, svc *chat.Service, runID string, after int64, pred func(chat.Event) bool) []chat.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	f, err := svc.Follow(ctx, user, runID, after)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []chat.Event
	for {
		events, end, err := f.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, events...)
		if slices.ContainsFunc(events, pred) || end {
			return got
		}
		select {
		case <-f.Wait():
		case <-ctx.Done():
			t.Fatalf("run %s: no awaited event after %d events", runID, len(got))
		}
	}
}

func isType(typ string) func(chat.Event) bool {
	return func(e chat.Event) bool { return e.Type == typ }
}

// checkRunLog checks that events are numbered from first without a gap (gapless) or at least in
// increasing order (recovery numbers its events after every Seq the dead instance reserved), and hold
// one done, last, with status.
func checkRunLog(t *testing.T, events []chat.Event, first int64, gapless bool, status string) {
	t.Helper()
	for i, e := range events {
		switch {
		case gapless && e.Seq != first+int64(i):
			t.Fatalf("event %d has seq %d, want %d (gap or repeat)", i, e.Seq, first+int64(i))
		case i > 0 && e.Seq <= events[i-1].Seq:
			t.Fatalf("event %d has seq %d after %d", i, e.Seq, events[i-1].Seq)
		}
	}
	dones := 0
	for _, e := range events {
		if e.Type == runevent.TypeDone {
			dones++
		}
	}
	last := events[len(events)-1]
	if dones != 1 || last.Type != runevent.TypeDone {
		t.Fatalf("%d done events, last %s; want one done, last", dones, last.Type)
	}
	d, err := runevent.Decode[runevent.Done](last.Data)
	if err != nil || d.Status != status {
		t.Fatalf("done %s (%v), want %s", last.Data, err, status)
	}
}

// TestLeaseRecovery: a running run whose instance died (it stopped renewing) is recovered by one of the
// instances that sweep, once its lease has ended and not before, as start-up recovery does it: the
// partial answer kept, done interrupted. A run whose instance renews is never touched.
func TestLeaseRecovery(t *testing.T) {
	dsn := pgtest.NewSchema(t)
	clk := newClock()
	dead := newInstance(t, dsn, "dead", clk, false, llmtest.Turn{Text: "a partial answer that never ends", Block: true})
	b := newInstance(t, dsn, "b", clk, false)
	c := newInstance(t, dsn, "c", clk, false)
	live := newInstance(t, dsn, "live", clk, false, llmtest.Turn{Text: "still going", Block: true})

	st, err := dead.svc.Start(t.Context(), user, chat.Request{Message: "hello"}, chat.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Read on b, from the store: the partial answer is stored once b sees it.
	readUntil(t, b.svc, st.RunID, 0, isType(runevent.TypeTextDelta))
	liveRun, err := live.svc.Start(t.Context(), user, chat.Request{Message: "hi"}, chat.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, live.svc, liveRun.RunID, 0, isType(runevent.TypeTextDelta))

	// Before the lease ends nobody recovers the run.
	if err := b.svc.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r, err := b.db.Run(t.Context(), user, st.RunID); err != nil || r.Status != store.RunRunning {
		t.Fatalf("run before its lease ended: %+v, %v; want running", r, err)
	}
	// "dead" stops renewing: its leases end; "live" renews.
	clk.step(leaseTTL + time.Second)
	live.svc.RenewLeases(t.Context())

	var wg sync.WaitGroup
	for _, in := range []*instance{b, c} {
		wg.Go(func() {
			if err := in.svc.Sweep(t.Context()); err != nil {
				t.Errorf("sweep: %v", err)
			}
		})
	}
	wg.Wait()

	events := readUntil(t, c.svc, st.RunID, 0, isType(runevent.TypeDone))
	checkRunLog(t, events, 1, false, store.RunInterrupted)
	recs, err := c.db.Records(t.Context(), user, st.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(recs); n != 2 || recs[1].Role != store.RoleAssistant || recs[1].FinishReason != chat.FinishInterrupted ||
		recs[1].Content == "" {
		t.Fatalf("records after recovery: %+v; want the user message and the partial answer", recs)
	}
	if r, err := c.db.Run(t.Context(), user, liveRun.RunID); err != nil || r.Status != store.RunRunning {
		t.Fatalf("the live instance's run after the sweeps: %+v, %v; want running", r, err)
	}
}

// TestCrossInstance: a run started on one instance is followed from another, which gets every event
// once, in order; a cancel asked there reaches the owner (a notification, with the renewal as the
// fallback), and a run queued there behind it starts once the session is free.
func TestCrossInstance(t *testing.T) {
	dsn := pgtest.NewSchema(t)
	clk := newClock()
	a := newInstance(t, dsn, "a", clk, true, llmtest.Turn{Text: "streaming on a", Block: true})
	b := newInstance(t, dsn, "b", clk, true, llmtest.Turn{Text: "the queued one answers"})

	st, err := a.svc.Start(t.Context(), user, chat.Request{Message: "hello"}, chat.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := readUntil(t, b.svc, st.RunID, 0, isType(runevent.TypeTextDelta))

	// Idempotency across instances: the same key on b returns a's run.
	key := chat.StartOptions{IdempotencyKey: "k1", OnActiveRun: chat.OnActiveEnqueue}
	q, err := b.svc.Start(t.Context(), user, chat.Request{SessionID: st.SessionID, Message: "next"}, key)
	if err != nil || q.Status != store.RunQueued {
		t.Fatalf("enqueue on b: %+v, %v", q, err)
	}
	again, err := a.svc.Start(t.Context(), user, chat.Request{SessionID: st.SessionID, Message: "next"}, key)
	if err != nil || again.RunID != q.RunID || !again.Replayed {
		t.Fatalf("the same key on a: %+v, %v; want run %s replayed", again, err, q.RunID)
	}

	res, err := b.svc.Cancel(t.Context(), user, st.RunID, "")
	if err != nil || res.Status != "cancelling" {
		t.Fatalf("cancel on b: %+v, %v", res, err)
	}
	rest := readUntil(t, b.svc, st.RunID, first[len(first)-1].Seq, isType(runevent.TypeDone))
	checkRunLog(t, append(first, rest...), 1, true, store.RunCancelled)

	// The queued run starts on b, which queued it, once a's run ended.
	out, err := b.svc.Wait(t.Context(), user, q.RunID)
	if err != nil || out.Status != store.RunCompleted {
		t.Fatalf("the queued run: %+v, %v; want completed", out, err)
	}
	var msg struct{ Content string }
	if out.Message != nil {
		b, _ := json.Marshal(out.Message)
		json.Unmarshal(b, &msg)
	}
	if msg.Content != "the queued one answers" {
		t.Errorf("the queued run answered %q", msg.Content)
	}
}
