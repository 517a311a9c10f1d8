package chat_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"chatd/internal/chat"
	"chatd/internal/llm/llmtest"
	"chatd/internal/store"
)

// readsAfter records the Seq after which each run's history was read.
type readsAfter struct {
	store.Store
	mu    sync.Mutex
	after []int64
	full  int // Records calls
}

func (r *readsAfter) RecordsAfter(ctx context.Context, user, sessionID string, after int64) ([]store.Record, error) {
	r.mu.Lock()
	r.after = append(r.after, after)
	r.mu.Unlock()
	return r.Store.RecordsAfter(ctx, user, sessionID, after)
}

func (r *readsAfter) Records(ctx context.Context, user, sessionID string) ([]store.Record, error) {
	r.mu.Lock()
	r.full++
	r.mu.Unlock()
	return r.Store.Records(ctx, user, sessionID)
}

func (r *readsAfter) reads() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.after)
}

// TestHistoryReadsOnlyNewRecords: a session's next run reads from the store only the records stored
// since its last run here — none when that run's records are the session's last (it starts early on
// them) — and the model still gets the whole conversation (the strict fake checks it is valid; echo
// answers the last message). A session deleted and created again under its id starts afresh, with none
// of the records of the one before.
func TestHistoryReadsOnlyNewRecords(t *testing.T) {
	up := llmtest.NewServer(t)
	up.Strict = true
	var mu sync.Mutex
	var sizes []int
	up.Respond = func(n int, req llmtest.Request) llmtest.Turn {
		mu.Lock()
		sizes = append(sizes, len(req.Messages()))
		mu.Unlock()
		return echo(n, req)
	}
	client, err := newClient(up, "")
	if err != nil {
		t.Fatal(err)
	}
	db := &readsAfter{Store: openStore(t, "")}
	svc := chat.New(chat.Options{TitleModel: chat.TitleNone, Store: db, Models: oneModel{client}, DefaultModel: "x/m",
		FlushInterval: 5 * time.Millisecond, RetryBase: time.Millisecond})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		if err := svc.Close(ctx); err != nil {
			t.Errorf("close service: %v", err)
		}
	})
	send := func(sessionID, msg string) *chat.Started {
		t.Helper()
		st, err := svc.Start(t.Context(), user, chat.Request{SessionID: sessionID, Message: msg, CreateSession: true}, chat.StartOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if o := waitOutcome(t, svc, st.RunID); o.Status != store.RunCompleted {
			t.Fatalf("run %s: %+v", st.RunID, o)
		}
		return st
	}
	send("s1", "one") // a new session: the run reads its one record
	send("s1", "two") // the records the first run kept are the session's: nothing is read
	// Another writer adds two records, which the next run reads, after those kept.
	for _, r := range []store.Record{{SessionID: "s1", Role: store.RoleUser, Content: "aside"},
		{SessionID: "s1", Role: store.RoleAssistant, Content: "noted"}} {
		if err := db.Store.AppendRecord(t.Context(), user, &r); err != nil {
			t.Fatal(err)
		}
	}
	send("s1", "three")
	if got, want := db.reads(), []int64{0, 4}; !slices.Equal(got, want) {
		t.Errorf("the runs read the records after %v, want %v", got, want)
	}
	mu.Lock()
	if want := []int{2, 4, 8}; !slices.Equal(sizes, want) { // the system prompt and the conversation
		t.Errorf("the model got %v messages, want %v", sizes, want)
	}
	mu.Unlock()

	// Deleted by another instance, which this one does not hear of.
	if err := db.Store.DeleteSession(t.Context(), user, "s1"); err != nil {
		t.Fatal(err)
	}
	send("s1", "again")
	send("s1", "and again")
	if got, want := db.reads(), []int64{0, 4, 0}; !slices.Equal(got, want) {
		t.Errorf("the runs read the records after %v, want %v", got, want)
	}
	if db.full != 0 {
		t.Errorf("%d runs read the history with Records", db.full)
	}
	mu.Lock()
	if want := []int{2, 4, 8, 2, 4}; !slices.Equal(sizes, want) {
		t.Errorf("the model got %v messages, want %v", sizes, want)
	}
	mu.Unlock()
	want := []string{"user:again", "assistant:re: again", "user:and again", "assistant:re: and again"}
	if got := transcript(records(t, db, "s1")); !slices.Equal(got, want) {
		t.Errorf("records %q, want %q", got, want)
	}
}

// waitOutcome waits for a run's end.
func waitOutcome(t *testing.T, svc *chat.Service, runID string) chat.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	o, err := svc.Wait(ctx, user, runID)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// missesFirstPage answers the first read of a run as running and the first read of its log with
// nothing: reads made just before the run's end, with its last events, committed.
type missesFirstPage struct {
	store.Store
	missed, early atomic.Bool
}

// Run answers the first read of a run as it was while it ran.
func (m *missesFirstPage) Run(ctx context.Context, user, id string) (*store.Run, error) {
	r, err := m.Store.Run(ctx, user, id)
	if err == nil && m.early.CompareAndSwap(false, true) {
		r.Status, r.EndedAt, r.LastEventSeq = store.RunRunning, nil, 0
	}
	return r, err
}

func (m *missesFirstPage) Events(ctx context.Context, user, runID string, after int64, limit int) ([]store.Event, error) {
	if m.missed.CompareAndSwap(false, true) {
		return nil, nil
	}
	return m.Store.Events(ctx, user, runID, after, limit)
}

// TestFollowRunThatEndsBetweenReads: a reader of a run that is not live here (another instance's)
// whose last events and end are committed between its read of the log and its read of the run still
// gets every event up to done.
func TestFollowRunThatEndsBetweenReads(t *testing.T) {
	svc, db := newService(t, llmtest.Turn{Text: "hello there"})
	st, err := svc.Start(t.Context(), user, chat.Request{Message: "hi"}, chat.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := collect(t, svc, user, st.RunID)
	other := chat.New(chat.Options{TitleModel: chat.TitleNone, Store: &missesFirstPage{Store: db}, FlushInterval: -1})
	t.Cleanup(func() { other.Close(context.Background()) })
	got := collect(t, other, user, st.RunID)
	if types(got) != types(want) {
		t.Errorf("the reader got %s, want %s", types(got), types(want))
	}
}
