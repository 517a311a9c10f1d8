package storetest

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/store"
)

func event(runID string, seq int64, typ, data string) store.Event {
	return store.Event{RunID: runID, Seq: seq, Type: typ, Data: []byte(data)}
}

func mustEvents(t *testing.T, s store.Store, user, runID string, after int64, limit int) []store.Event {
	t.Helper()
	events, err := s.Events(t.Context(), user, runID, after, limit)
	if err != nil {
		t.Fatalf("Events(%s, after %d, limit %d): %v", runID, after, limit, err)
	}
	return events
}

// wantLastEvent fails unless the run reports seq as its last event.
func wantLastEvent(t *testing.T, s store.Store, user, runID string, seq int64) {
	t.Helper()
	if got := getRun(t, s, user, runID).LastEventSeq; got != seq {
		t.Errorf("run %s has LastEventSeq %d, want %d", runID, got, seq)
	}
}

// testEventLog: a batch may span runs; each run's log reads back in order, page by page, with RunID set
// and Data byte for byte; a log is the run owner's alone.
func testEventLog(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess := createSession(t, s, alice)
	run, queued := createRun(t, s, alice, sess.ID), queueRun(t, s, alice, sess.ID, `{}`)
	if got := mustEvents(t, s, alice, run.ID, 0, 10); len(got) != 0 {
		t.Errorf("Events of a run without events = %+v, want none", got)
	}
	wantLastEvent(t, s, alice, run.ID, 0)

	batch := []store.Event{
		event(run.ID, 1, "run_start", `{"run_id": "r", "model":"m"}`),
		event(run.ID, 2, "delta", `{"text":"Hel"}`),
		event(queued.ID, 1, "run_queued", `{}`),
		event(run.ID, 3, "delta", `{"text":"lo \u00e9 <b>&amp;</b> \"quoted\""}`),
		event(run.ID, 4, "delta", `{ "text" : "é, 中文, 🙂" ,"n":1.50}`),
	}
	if err := s.AppendEvents(ctx, batch, nil); err != nil {
		t.Fatalf("AppendEvents: %v", err)
	}
	want := []store.Event{batch[0], batch[1], batch[3], batch[4]}
	if diff := cmp.Diff(want, mustEvents(t, s, alice, run.ID, 0, 100)); diff != "" {
		t.Errorf("Events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(batch[2:3], mustEvents(t, s, alice, queued.ID, 0, 100)); diff != "" {
		t.Errorf("Events of the queued run (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		after int64
		limit int
		want  []store.Event
	}{
		{0, 2, want[:2]}, {2, 2, want[2:]}, {1, 1, want[1:2]}, {3, 5, want[3:]}, {4, 5, nil}, {9, 5, nil},
	} {
		got := mustEvents(t, s, alice, run.ID, tc.after, tc.limit)
		if diff := cmp.Diff(tc.want, got, cmpOpts); diff != "" {
			t.Errorf("Events(after %d, limit %d) (-want +got):\n%s", tc.after, tc.limit, diff)
		}
	}
	wantLastEvent(t, s, alice, run.ID, 4)
	wantLastEvent(t, s, alice, queued.ID, 1)
	if got := activeRun(t, s, alice, sess.ID); got.LastEventSeq != 4 {
		t.Errorf("ActiveRun has LastEventSeq %d, want 4", got.LastEventSeq)
	}
	if err := s.AppendEvents(ctx, nil, nil); err != nil {
		t.Errorf("AppendEvents of no events: %v", err)
	}

	_, err := s.Events(ctx, newUser("bob"), run.ID, 0, 10)
	wantErr(t, "Events of another user's run", err, store.ErrNotFound)
	_, err = s.Events(ctx, alice, "no-such-run", 0, 10)
	wantErr(t, "Events(unknown)", err, store.ErrNotFound)

	testEventPages(t, s, alice, run.ID, 4)
}

// testEventPages appends a long log after seq last and reads it back in small pages, as a client
// catching up does.
func testEventPages(t *testing.T, s store.Store, user, runID string, last int64) {
	const n = 25
	var batch []store.Event
	for i := range int64(n) {
		batch = append(batch, event(runID, last+1+i, "delta", fmt.Sprintf(`{"i":%d}`, i)))
	}
	if err := s.AppendEvents(t.Context(), batch, nil); err != nil {
		t.Fatalf("AppendEvents: %v", err)
	}
	var got []store.Event
	for after, pages := last, 0; ; pages++ {
		page := mustEvents(t, s, user, runID, after, 7)
		if len(page) == 0 {
			break
		}
		if len(page) > 7 || pages > n {
			t.Fatalf("Events(after %d, limit 7) returned %d events", after, len(page))
		}
		got = append(got, page...)
		after = page[len(page)-1].Seq
	}
	if diff := cmp.Diff(batch, got); diff != "" {
		t.Errorf("the log read in pages of 7 (-want +got):\n%s", diff)
	}
	wantLastEvent(t, s, user, runID, last+n)
}

// testAppendEventsAtomic: a batch holding a Seq already stored, or twice, is ErrConflict and stores
// nothing; so is a batch with an event of a run that does not exist (refused, of whatever kind).
func testAppendEventsAtomic(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess := createSession(t, s, alice)
	run, other := createRun(t, s, alice, sess.ID), queueRun(t, s, alice, sess.ID, `{}`)
	stored := []store.Event{event(run.ID, 1, "run_start", `{}`), event(run.ID, 2, "delta", `{"text":"a"}`)}
	if err := s.AppendEvents(ctx, stored, nil); err != nil {
		t.Fatalf("AppendEvents: %v", err)
	}
	for _, tc := range []struct {
		name  string
		batch []store.Event
	}{
		{"a Seq twice", []store.Event{event(other.ID, 1, "run_queued", `{}`), event(run.ID, 3, "delta", `{}`),
			event(run.ID, 3, "delta", `{}`)}},
		{"a Seq already stored", []store.Event{event(other.ID, 1, "run_queued", `{}`), event(run.ID, 3, "delta", `{}`),
			event(run.ID, 2, "delta", `{}`)}},
	} {
		wantErr(t, "AppendEvents with "+tc.name, s.AppendEvents(ctx, tc.batch, nil), store.ErrConflict)
	}
	err := s.AppendEvents(ctx, []store.Event{event(run.ID, 3, "delta", `{}`), event("no-such-run", 1, "delta", `{}`)}, nil)
	if err == nil {
		t.Error("AppendEvents with an event of no run: stored")
	}
	if diff := cmp.Diff(stored, mustEvents(t, s, alice, run.ID, 0, 10)); diff != "" {
		t.Errorf("refused batches changed the log (-want +got):\n%s", diff)
	}
	if got := mustEvents(t, s, alice, other.ID, 0, 10); len(got) != 0 {
		t.Errorf("refused batches stored %+v", got)
	}
	wantLastEvent(t, s, alice, run.ID, 2)
	wantLastEvent(t, s, alice, other.ID, 0)
}

// testFinishRunEvents: FinishRun appends the run's last events with its end, all or nothing: a run is
// ended if and only if its log holds its last events.
func testFinishRunEvents(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess := createSession(t, s, alice)
	run := createRun(t, s, alice, sess.ID)
	if err := s.AppendEvents(ctx, []store.Event{event(run.ID, 1, "run_start", `{}`)}, nil); err != nil {
		t.Fatalf("AppendEvents: %v", err)
	}
	mustAppend(t, s, alice, runAssistant(run, "call_1"))
	before := records(t, s, alice, sess.ID)

	// A Seq already stored fails the whole FinishRun: no records, no events, the run goes on.
	_, err := s.FinishRun(ctx, alice, run.ID, store.RunEnd{Status: store.RunFailed,
		Events: []store.Event{event(run.ID, 2, "tool_complete", `{}`), event(run.ID, 1, "run_end", `{}`)}})
	wantErr(t, "FinishRun with a Seq already stored", err, store.ErrConflict)
	if diff := cmp.Diff(before, records(t, s, alice, sess.ID), cmpOpts); diff != "" {
		t.Errorf("a failed FinishRun changed the records (-before +after):\n%s", diff)
	}
	if r := getRun(t, s, alice, run.ID); r.Status != store.RunRunning || r.EndedAt != nil || r.LastEventSeq != 1 {
		t.Errorf("a failed FinishRun changed the run: %+v", r)
	}

	end := store.RunEnd{Status: store.RunCompleted, FinishReason: "stop", Events: []store.Event{
		event(run.ID, 2, "tool_complete", `{"call_id":"call_1","success":false}`),
		event(run.ID, 3, "run_end", `{"status":"completed"}`),
	}}
	if added := mustFinish(t, s, alice, run.ID, end); len(added) != 1 {
		t.Errorf("FinishRun appended %d records, want 1", len(added))
	}
	checkEnded(t, s, alice, run, end)
	want := append([]store.Event{event(run.ID, 1, "run_start", `{}`)}, end.Events...)
	if diff := cmp.Diff(want, mustEvents(t, s, alice, run.ID, 0, 10)); diff != "" {
		t.Errorf("Events after FinishRun (-want +got):\n%s", diff)
	}
	wantLastEvent(t, s, alice, run.ID, 3)

	_, err = s.FinishRun(ctx, alice, run.ID, store.RunEnd{Status: store.RunFailed,
		Events: []store.Event{event(run.ID, 4, "run_end", `{"status":"failed"}`)}})
	wantErr(t, "FinishRun of an ended run", err, store.ErrConflict)
	if got := mustEvents(t, s, alice, run.ID, 3, 10); len(got) != 0 {
		t.Errorf("a refused FinishRun stored %+v", got)
	}
	wantLastEvent(t, s, alice, run.ID, 3)

	// A queued run cancelled before it starts gets its last event too.
	queued := queueRun(t, s, alice, sess.ID, `{}`)
	cancel := store.RunEnd{Status: store.RunCancelled, Events: []store.Event{event(queued.ID, 1, "run_end", `{}`)}}
	mustFinish(t, s, alice, queued.ID, cancel)
	if diff := cmp.Diff(cancel.Events, mustEvents(t, s, alice, queued.ID, 0, 10)); diff != "" {
		t.Errorf("Events of the cancelled queued run (-want +got):\n%s", diff)
	}
}
