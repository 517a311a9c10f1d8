package chat_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/chat"
	"chatd/internal/llm/llmtest"
	"chatd/internal/runevent"
	"chatd/internal/store"
)

// heldFirst answers as echo, holding the first stream at g before its finish.
func heldFirst(g *gate) func(int, llmtest.Request) llmtest.Turn {
	return func(n int, req llmtest.Request) llmtest.Turn {
		turn := echo(n, req)
		if n == 0 {
			turn.BeforeFinish = g.hold
		}
		return turn
	}
}

var (
	enqueue   = chat.StartOptions{OnActiveRun: chat.OnActiveEnqueue}
	interrupt = chat.StartOptions{OnActiveRun: chat.OnActiveInterrupt}
)

// TestRejectWhileBusy: by default a send to a session with a running run is refused with the active
// run's id — also when many arrive at once — and stores nothing.
func TestRejectWhileBusy(t *testing.T) {
	g := newGate(t)
	f := newFixture(t, setup{Respond: heldFirst(g)})
	a := f.send(t, chat.Request{Message: "first"}, chat.StartOptions{})
	g.wait(t)

	errs := make([]error, 16)
	var wg sync.WaitGroup
	for i := range errs {
		opt := chat.StartOptions{}
		if i%2 == 1 {
			opt.OnActiveRun = chat.OnActiveReject
		}
		wg.Go(func() {
			_, errs[i] = f.svc.Start(t.Context(), user, chat.Request{SessionID: a.SessionID, Message: fmt.Sprint("second ", i)}, opt)
		})
	}
	wg.Wait()
	for i, err := range errs {
		e, ok := errors.AsType[*chat.Error](err)
		if !ok || !errors.Is(err, chat.ErrBusy) || e.Code != "session_busy" || e.RunID != a.RunID {
			t.Errorf("send %d: %v, want session_busy naming %s", i, err, a.RunID)
		}
	}
	if diff := cmp.Diff([]string{"user:first"}, transcript(records(t, f.db, a.SessionID))); diff != "" {
		t.Errorf("records while busy (-want +got):\n%s", diff)
	}
	g.open()
	f.wait(t, a.RunID)
	eventually(t, "the run to leave memory", func() bool { return f.svc.LiveRun(user, a.SessionID) == "" })
	b := f.send(t, chat.Request{SessionID: a.SessionID, Message: "second"}, chat.StartOptions{})
	if o := f.wait(t, b.RunID); o.Status != store.RunCompleted {
		t.Errorf("send after the run ended: %+v", o)
	}
}

// TestInterrupt: on_active_run=interrupt cancels the running run — its partial answer kept — and starts
// the new one once it has ended.
func TestInterrupt(t *testing.T) {
	f := newFixture(t, setup{Path: dbPath(t), Respond: func(n int, req llmtest.Request) llmtest.Turn {
		if n == 0 {
			return llmtest.Turn{Text: "a long first answer", Block: true}
		}
		return echo(n, req)
	}})
	a := f.send(t, chat.Request{Message: "first"}, chat.StartOptions{})
	fl := f.follow(t, a.RunID, 0)
	fl.until(hasText(t, "a long first answer"))

	b := f.send(t, chat.Request{SessionID: a.SessionID, Message: "second"}, interrupt)
	if b.Status != store.RunRunning || b.RunID == a.RunID || b.SessionID != a.SessionID {
		t.Errorf("interrupting send: %+v", b)
	}
	if r := storedRun(t, f.db, a.RunID); r.Status != store.RunCancelled {
		t.Errorf("the interrupted run when the new one started: %+v", r)
	}
	checkEnds(t, fl.all(), runevent.TypeCancelled, `{"reason":"interrupted by a new message"}`, store.RunCancelled)
	if o := f.wait(t, b.RunID); o.Status != store.RunCompleted || o.Message.Content != "re: second" {
		t.Errorf("the new run: %+v", o)
	}
	want := []string{"user:first", "assistant:a long first answer", "user:second", "assistant:re: second"}
	if diff := cmp.Diff(want, transcript(records(t, f.db, a.SessionID))); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

// TestEnqueue: on_active_run=enqueue queues the send; it starts only after the running run has ended,
// and its model call sees the whole answer before it.
func TestEnqueue(t *testing.T) {
	g := newGate(t)
	f := newFixture(t, setup{Path: dbPath(t), Respond: heldFirst(g)})
	a := f.send(t, chat.Request{Message: "first"}, chat.StartOptions{})
	g.wait(t)
	b := f.send(t, chat.Request{SessionID: a.SessionID, Message: "second"}, enqueue)
	if b.Status != store.RunQueued || b.RunID == a.RunID || b.SessionID != a.SessionID {
		t.Fatalf("enqueued send: %+v", b)
	}
	fl := f.follow(t, b.RunID, 0)
	if info, err := f.svc.RunInfo(t.Context(), user, b.RunID); err != nil || info.Status != store.RunQueued {
		t.Errorf("run info of the queued run: %+v %v", info, err)
	}
	if diff := cmp.Diff([]string{"user:first"}, transcript(records(t, f.db, a.SessionID))); diff != "" {
		t.Errorf("records while queued (-want +got):\n%s", diff)
	}
	g.open()

	live := fl.all()
	checkLog(t, "queued run", live)
	checkEnds(t, live, runevent.TypeComplete, "", store.RunCompleted)
	if live[0].Type != runevent.TypeRunStart || live[1].Type != runevent.TypeStatus {
		t.Errorf("a queued run's log starts with %s", types(live))
	}
	if diff := cmp.Diff(live, stored(t, f.db, b.RunID)); diff != "" {
		t.Errorf("stored log (-live +stored):\n%s", diff)
	}
	ra, rb := storedRun(t, f.db, a.RunID), storedRun(t, f.db, b.RunID)
	if ra.Status != store.RunCompleted || rb.StartedAt == nil || rb.StartedAt.Before(*ra.EndedAt) {
		t.Errorf("the queued run started at %v, the first ended at %v", rb.StartedAt, ra.EndedAt)
	}
	want := []string{"user:first", "assistant:re: first", "user:second", "assistant:re: second"}
	if diff := cmp.Diff(want, transcript(records(t, f.db, a.SessionID))); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	reqs := f.up.Requests()
	if n := len(reqs[1].Messages()); n != 4 { // system, first, its answer, second
		t.Errorf("the queued run's model call has %d messages, want 4", n)
	}
}

// TestEnqueueOrder: runs queued one after another start one at a time, in the order they were sent.
func TestEnqueueOrder(t *testing.T) {
	g := newGate(t)
	f := newFixture(t, setup{Respond: heldFirst(g)})
	a := f.send(t, chat.Request{Message: "first"}, chat.StartOptions{})
	g.wait(t)
	var queued []*chat.Started
	want := []string{"user:first", "assistant:re: first"}
	for i := range 4 {
		msg := fmt.Sprint("message ", i)
		st := f.send(t, chat.Request{SessionID: a.SessionID, Message: msg}, enqueue)
		if st.Status != store.RunQueued {
			t.Fatalf("send %d: %+v", i, st)
		}
		queued = append(queued, st)
		want = append(want, "user:"+msg, "assistant:re: "+msg)
	}
	g.open()
	f.wait(t, a.RunID)
	prev := storedRun(t, f.db, a.RunID)
	for i, st := range queued {
		if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
			t.Fatalf("queued run %d: %+v", i, o)
		}
		r := storedRun(t, f.db, st.RunID)
		if prev.EndedAt == nil || r.StartedAt.Before(*prev.EndedAt) {
			t.Errorf("queued run %d started at %v, before the run ahead of it ended (%v)", i, r.StartedAt, prev.EndedAt)
		}
		prev = r
	}
	if diff := cmp.Diff(want, transcript(records(t, f.db, a.SessionID))); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

// TestEnqueueConcurrently: sends queued at the same moment each run once, one at a time, each answer
// right after its message.
func TestEnqueueConcurrently(t *testing.T) {
	g := newGate(t)
	f := newFixture(t, setup{Respond: heldFirst(g)})
	a := f.send(t, chat.Request{Message: "first"}, chat.StartOptions{})
	g.wait(t)
	started := make([]*chat.Started, 8)
	var wg sync.WaitGroup
	for i := range started {
		wg.Go(func() {
			st, err := f.svc.Start(t.Context(), user, chat.Request{SessionID: a.SessionID, Message: fmt.Sprint("message ", i)}, enqueue)
			if err != nil || st.Status != store.RunQueued {
				t.Errorf("send %d: %+v %v", i, st, err)
			}
			started[i] = st
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	g.open()
	for _, st := range started {
		if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
			t.Errorf("run %s: %+v", st.RunID, o)
		}
	}
	got := transcript(records(t, f.db, a.SessionID))
	if len(got) != 2+2*len(started) {
		t.Fatalf("records: %q", got)
	}
	var sent []string
	for i := 2; i < len(got); i += 2 {
		msg, ok := strings.CutPrefix(got[i], "user:")
		if !ok || got[i+1] != "assistant:re: "+msg {
			t.Errorf("records %d and %d: %q, %q", i, i+1, got[i], got[i+1])
		}
		sent = append(sent, msg)
	}
	slices.Sort(sent)
	for i, msg := range sent {
		if want := fmt.Sprint("message ", i); msg != want {
			t.Errorf("message %d stored as %q", i, msg)
		}
	}
}

// TestCancelQueued: cancelling a queued run ends it at once, cancelled, without storing its message; the
// runs queued behind it go on.
func TestCancelQueued(t *testing.T) {
	g := newGate(t)
	f := newFixture(t, setup{Path: dbPath(t), Respond: heldFirst(g)})
	a := f.send(t, chat.Request{Message: "first"}, chat.StartOptions{})
	g.wait(t)
	b := f.send(t, chat.Request{SessionID: a.SessionID, Message: "second"}, enqueue)
	c := f.send(t, chat.Request{SessionID: a.SessionID, Message: "third"}, enqueue)

	res, err := f.svc.Cancel(t.Context(), user, b.RunID, "")
	if err != nil || res.Status != store.RunCancelled || res.AlreadyEnded {
		t.Fatalf("cancel the queued run: %+v %v", res, err)
	}
	live := f.follow(t, b.RunID, 0).all()
	checkLog(t, "cancelled queued run", live)
	checkEnds(t, live, runevent.TypeCancelled, `{"reason":"cancelled by the user"}`, store.RunCancelled)
	if diff := cmp.Diff(live, stored(t, f.db, b.RunID)); diff != "" {
		t.Errorf("stored log (-live +stored):\n%s", diff)
	}
	if r := storedRun(t, f.db, b.RunID); r.Status != store.RunCancelled || r.StartedAt != nil {
		t.Errorf("stored run: %+v", r)
	}
	if again, err := f.svc.Cancel(t.Context(), user, b.RunID, ""); err != nil || !again.AlreadyEnded {
		t.Errorf("second cancel: %+v %v", again, err)
	}

	g.open()
	if o := f.wait(t, c.RunID); o.Status != store.RunCompleted {
		t.Errorf("the run queued behind: %+v", o)
	}
	want := []string{"user:first", "assistant:re: first", "user:third", "assistant:re: third"}
	if diff := cmp.Diff(want, transcript(records(t, f.db, a.SessionID))); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if n := len(f.up.Requests()); n != 2 {
		t.Errorf("the model got %d requests, want 2", n)
	}
}

// TestIdempotencyKey: a send retried with its key returns the run the first one started, running or
// ended, and stores nothing more; the key with another request is refused; keys are the user's own.
func TestIdempotencyKey(t *testing.T) {
	g := newGate(t)
	f := newFixture(t, setup{Respond: heldFirst(g)})
	key := chat.StartOptions{IdempotencyKey: "key-1"}
	req := chat.Request{Message: "hello"}
	first := f.send(t, req, key)
	if first.Replayed || first.Status != store.RunRunning {
		t.Fatalf("first send: %+v", first)
	}
	g.wait(t)
	running := f.send(t, req, key)
	want := chat.Started{RunID: first.RunID, SessionID: first.SessionID, Status: store.RunRunning, Replayed: true}
	if diff := cmp.Diff(want, *running); diff != "" {
		t.Errorf("retry while running (-want +got):\n%s", diff)
	}
	g.open()
	f.wait(t, first.RunID)
	eventually(t, "the run to leave memory", func() bool { return f.svc.LiveRun(user, first.SessionID) == "" })
	ended := f.send(t, req, key)
	want.Status = store.RunCompleted
	if diff := cmp.Diff(want, *ended); diff != "" {
		t.Errorf("retry after the end (-want +got):\n%s", diff)
	}

	_, err := f.svc.Start(t.Context(), user, chat.Request{Message: "hello again"}, key)
	if e, ok := errors.AsType[*chat.Error](err); !ok || !errors.Is(err, chat.ErrKeyReused) || e.Code != "idempotency_key_reused" || e.RunID != first.RunID {
		t.Errorf("key with another message: %v, want idempotency_key_reused", err)
	}
	other, err := f.svc.Start(t.Context(), "someone-else", req, key)
	if err != nil || other.Replayed || other.RunID == first.RunID {
		t.Errorf("another user's send with the same key: %+v %v", other, err)
	}

	if diff := cmp.Diff([]string{"user:hello", "assistant:re: hello"}, transcript(records(t, f.db, first.SessionID))); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if sessions, _, err := f.db.Sessions(t.Context(), user, store.Page{}); err != nil || len(sessions) != 1 {
		t.Errorf("sessions: %d %v, want 1", len(sessions), err)
	}
}

// TestIdempotencyKeyConcurrent: the same send arriving several times at once starts one run, stores one
// message and leaves no empty session behind — for a new session, and for a busy one with enqueue.
func TestIdempotencyKeyConcurrent(t *testing.T) {
	g := newGate(t)
	f := newFixture(t, setup{Respond: heldFirst(g)})
	sendAll := func(req chat.Request, opt chat.StartOptions) *chat.Started {
		t.Helper()
		started := make([]*chat.Started, 8)
		var wg sync.WaitGroup
		for i := range started {
			wg.Go(func() {
				st, err := f.svc.Start(t.Context(), user, req, opt)
				if err != nil {
					t.Errorf("send %d: %v", i, err)
				}
				started[i] = st
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		fresh := 0
		for _, st := range started {
			if st.RunID != started[0].RunID || st.SessionID != started[0].SessionID {
				t.Errorf("sends with one key started different runs: %+v, %+v", started[0], st)
			}
			if !st.Replayed {
				fresh++
			}
		}
		if fresh != 1 {
			t.Errorf("%d sends report a new run, want 1", fresh)
		}
		return started[0]
	}

	first := sendAll(chat.Request{Message: "hi"}, chat.StartOptions{IdempotencyKey: "new-session"})
	g.wait(t)
	if sessions, _, err := f.db.Sessions(t.Context(), user, store.Page{}); err != nil || len(sessions) != 1 {
		t.Errorf("sessions: %d %v, want 1", len(sessions), err)
	}
	queued := sendAll(chat.Request{SessionID: first.SessionID, Message: "then"},
		chat.StartOptions{IdempotencyKey: "busy-session", OnActiveRun: chat.OnActiveEnqueue})
	g.open()
	for _, st := range []*chat.Started{first, queued} {
		if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
			t.Errorf("run %s: %+v", st.RunID, o)
		}
	}
	want := []string{"user:hi", "assistant:re: hi", "user:then", "assistant:re: then"}
	if diff := cmp.Diff(want, transcript(records(t, f.db, first.SessionID))); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if n := len(f.up.Requests()); n != 2 {
		t.Errorf("the model got %d requests, want 2", n)
	}
}

// TestInterruptConcurrently: interrupting sends racing for one busy session each start a run or are
// refused as busy; every run but the last one started ends cancelled as interrupted, one at a time; the
// history stays valid.
func TestInterruptConcurrently(t *testing.T) {
	f := newFixture(t, setup{Respond: func(n int, req llmtest.Request) llmtest.Turn {
		msg := lastUserMessage(req)
		if msg == "final" {
			return echo(n, req)
		}
		return llmtest.Turn{Text: "answer to " + msg, Block: true}
	}})
	first := f.send(t, chat.Request{Message: "first"}, chat.StartOptions{})
	f.follow(t, first.RunID, 0).until(hasText(t, "answer to first"))

	started := make([]*chat.Started, 6)
	var wg sync.WaitGroup
	for i := range started {
		wg.Go(func() {
			st, err := f.svc.Start(t.Context(), user, chat.Request{SessionID: first.SessionID, Message: fmt.Sprint("message ", i)}, interrupt)
			if err != nil && !errors.Is(err, chat.ErrBusy) {
				t.Errorf("send %d: %v", i, err)
			}
			started[i] = st
		})
	}
	wg.Wait()
	runs := []string{first.RunID}
	for _, st := range started {
		if st != nil {
			runs = append(runs, st.RunID)
		}
	}
	// The store's running run: the service's ActiveRun may name a run that has ended but not yet left
	// memory.
	running, err := f.db.ActiveRun(t.Context(), user, first.SessionID)
	if err != nil {
		t.Fatalf("no running run after the sends: %v", err)
	}
	active := running.ID
	if !slices.Contains(runs[1:], active) {
		t.Fatalf("active run %q is none of the runs the sends started", active)
	}
	if _, err := f.svc.Cancel(t.Context(), user, active, ""); err != nil {
		t.Fatal(err)
	}
	for _, id := range runs {
		want := `{"reason":"interrupted by a new message"}`
		if id == active {
			want = `{"reason":"cancelled by the user"}`
		}
		checkEnds(t, f.follow(t, id, 0).all(), runevent.TypeCancelled, want, store.RunCancelled)
	}
	if unfinished, err := f.db.UnfinishedRuns(t.Context()); err != nil || len(unfinished) != 0 {
		t.Errorf("unfinished runs: %+v %v", unfinished, err)
	}
	final := f.send(t, chat.Request{SessionID: first.SessionID, Message: "final"}, chat.StartOptions{})
	if o := f.wait(t, final.RunID); o.Status != store.RunCompleted {
		t.Errorf("the next message after the interruptions: %+v", o)
	}
	checkPaired(t, records(t, f.db, first.SessionID))
}
