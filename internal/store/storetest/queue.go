package storetest

import (
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/store"
)

// testCreateRunFirstRecord: CreateRun stores the run and its first record together; the record gets the
// run's id and the session's next Seq, and comes back through the pointer as Records returns it.
func testCreateRunFirstRecord(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess := createSession(t, s, alice)
	earlier := mustAppend(t, s, alice, userRecord(sess.ID, "earlier"))
	run := &store.Run{SessionID: sess.ID, Status: store.RunRunning, Agent: "default", Model: "m"}
	first := userRecord(sess.ID, "go")
	if err := s.CreateRun(ctx, alice, run, &first); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	if first.ID == "" || first.RunID != run.ID || first.Seq != earlier.Seq+1 || first.CreatedAt.IsZero() {
		t.Errorf("CreateRun completed the first record as %+v; want an ID, RunID %s, Seq %d", first, run.ID,
			earlier.Seq+1)
	}
	if diff := cmp.Diff([]store.Record{earlier, first}, records(t, s, alice, sess.ID), cmpOpts); diff != "" {
		t.Errorf("Records after CreateRun (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(run, getRun(t, s, alice, run.ID)); diff != "" {
		t.Errorf("Run differs from what CreateRun returned (-want +got):\n%s", diff)
	}
	if run.Status != store.RunRunning || run.StartedAt == nil {
		t.Errorf("CreateRun(running) returned %+v", run)
	}
}

// testCreateRunRefused: a CreateRun that fails stores neither the run nor its first record, and leaves
// the caller's record as it was.
func testCreateRunRefused(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	busy, idle, open := createSession(t, s, alice), createSession(t, s, alice), createSession(t, s, alice)
	createRun(t, s, alice, busy.ID)
	taken := &store.Run{SessionID: idle.ID, Status: store.RunQueued, IdempotencyKey: "taken"}
	if err := s.CreateRun(ctx, alice, taken, nil); err != nil {
		t.Fatalf("CreateRun with a key: %v", err)
	}
	mustAppend(t, s, alice, userRecord(open.ID, "hi"))
	mustAppend(t, s, alice, assistantCalls(open.ID, "call_1")) // a call open outside any run

	for i, tc := range []struct {
		name    string
		run     store.Run
		session string // of the first record
		want    error  // nil: any error but ErrNotFound
	}{
		{"busy session", store.Run{SessionID: busy.ID}, busy.ID, store.ErrBusy},
		{"unknown session", store.Run{SessionID: "no-such-session"}, "no-such-session", store.ErrNotFound},
		{"taken key", store.Run{SessionID: idle.ID, IdempotencyKey: "taken"}, idle.ID, store.ErrDuplicate},
		{"first record refused", store.Run{SessionID: open.ID}, open.ID, store.ErrConflict},
		{"first record of another session", store.Run{SessionID: idle.ID}, busy.ID, store.ErrConflict},
		{"queued with a first record", store.Run{SessionID: idle.ID, Status: store.RunQueued}, idle.ID, nil},
		{"created ended", store.Run{SessionID: idle.ID, Status: store.RunCompleted}, idle.ID, nil},
	} {
		run := tc.run
		run.ID = "refused-" + string(rune('a'+i)) + "-" + alice
		first := userRecord(tc.session, tc.name)
		err := s.CreateRun(ctx, alice, &run, &first)
		switch {
		case tc.want != nil:
			wantErr(t, "CreateRun, "+tc.name, err, tc.want)
		case err == nil || errors.Is(err, store.ErrNotFound):
			t.Errorf("CreateRun, %s: got error %v, want it refused", tc.name, err)
		}
		if first.ID != "" || first.RunID != "" || first.Seq != 0 {
			t.Errorf("CreateRun, %s: the caller's record became %+v", tc.name, first)
		}
		wantNoRun(t, s, alice, run.ID)
	}
	for _, sess := range []string{busy.ID, idle.ID, open.ID} {
		for _, r := range records(t, s, alice, sess) {
			if r.RunID != "" {
				t.Errorf("a refused CreateRun stored %+v", r)
			}
		}
	}
}

// testCreateRunAfterSeq: a CreateRun given the Seq the session's last record has (Run.AfterSeq) stores the
// run and its message, the session's LastSeq read after it; once a record came since, it stores nothing
// and fails with ErrStale.
func testCreateRunAfterSeq(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess := createSession(t, s, alice)
	earlier := mustAppend(t, s, alice, userRecord(sess.ID, "earlier"))
	if got := getSession(t, s, alice, sess.ID).LastSeq; got != earlier.Seq {
		t.Fatalf("Session.LastSeq = %d, want the last record's Seq %d", got, earlier.Seq)
	}
	after := earlier.Seq
	run := &store.Run{SessionID: sess.ID, Agent: "default", Model: "m", AfterSeq: &after}
	first := userRecord(sess.ID, "in time")
	if err := s.CreateRun(ctx, alice, run, &first); err != nil {
		t.Fatalf("CreateRun after the last Seq: %v", err)
	}
	if first.Seq != after+1 {
		t.Errorf("CreateRun stored its message at Seq %d, want %d", first.Seq, after+1)
	}
	mustFinish(t, s, alice, run.ID, store.RunEnd{Status: store.RunCompleted})

	after = getSession(t, s, alice, sess.ID).LastSeq
	meanwhile := mustAppend(t, s, alice, userRecord(sess.ID, "meanwhile"))
	stale := &store.Run{ID: "stale-" + alice, SessionID: sess.ID, Agent: "default", Model: "m", AfterSeq: &after}
	late := userRecord(sess.ID, "too late")
	wantErr(t, "CreateRun after a Seq no longer last", s.CreateRun(ctx, alice, stale, &late), store.ErrStale)
	wantNoRun(t, s, alice, stale.ID)
	if late.ID != "" || late.Seq != 0 {
		t.Errorf("a stale CreateRun changed the caller's record to %+v", late)
	}
	recs := records(t, s, alice, sess.ID)
	if last := recs[len(recs)-1]; last.ID != meanwhile.ID {
		t.Errorf("after a stale CreateRun the last record is %+v, want the one appended meanwhile", last)
	}
	if got := getSession(t, s, alice, sess.ID).LastSeq; got != meanwhile.Seq {
		t.Errorf("after a stale CreateRun Session.LastSeq = %d, want %d", got, meanwhile.Seq)
	}
	if _, err := s.ActiveRun(ctx, alice, sess.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after a stale CreateRun ActiveRun: %v, want ErrNotFound", err)
	}
}

// testOneRunningPerSession: a session has at most one running run; runs queue behind it in any number,
// and other sessions are not affected.
func testOneRunningPerSession(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess, other := createSession(t, s, alice), createSession(t, s, alice)
	_, err := s.ActiveRun(ctx, alice, sess.ID)
	wantErr(t, "ActiveRun of an idle session", err, store.ErrNotFound)

	running := createRun(t, s, alice, sess.ID)
	err = s.CreateRun(ctx, alice, &store.Run{SessionID: sess.ID, Status: store.RunRunning}, nil)
	wantErr(t, "second running CreateRun", err, store.ErrBusy)
	err = s.CreateRun(ctx, alice, &store.Run{SessionID: sess.ID}, nil)
	wantErr(t, "second CreateRun without a status", err, store.ErrBusy)
	queued := []*store.Run{queueRun(t, s, alice, sess.ID, `{"n":1}`), queueRun(t, s, alice, sess.ID, `{"n":2}`)}
	if queued[0].ID == queued[1].ID {
		t.Fatalf("two queued runs share id %s", queued[0].ID)
	}
	if diff := cmp.Diff(running, activeRun(t, s, alice, sess.ID)); diff != "" {
		t.Errorf("ActiveRun (-want +got):\n%s", diff)
	}
	_, err = s.ActiveRun(ctx, newUser("bob"), sess.ID)
	wantErr(t, "ActiveRun of another user's session", err, store.ErrNotFound)
	_, err = s.ActiveRun(ctx, alice, "no-such-session")
	wantErr(t, "ActiveRun(unknown)", err, store.ErrNotFound)
	_, err = s.ActiveRun(ctx, alice, other.ID)
	wantErr(t, "ActiveRun of the other session", err, store.ErrNotFound)

	elsewhere := createRun(t, s, alice, other.ID)
	if got := activeRun(t, s, alice, other.ID); got.ID != elsewhere.ID {
		t.Errorf("ActiveRun of the other session = %s, want %s", got.ID, elsewhere.ID)
	}
	if got := activeRun(t, s, alice, sess.ID); got.ID != running.ID {
		t.Errorf("ActiveRun = %s after a run started elsewhere, want %s", got.ID, running.ID)
	}

	mustFinish(t, s, alice, running.ID, store.RunEnd{Status: store.RunCompleted})
	_, err = s.ActiveRun(ctx, alice, sess.ID)
	wantErr(t, "ActiveRun after the run ended", err, store.ErrNotFound)
	next := createRun(t, s, alice, sess.ID)
	if got := activeRun(t, s, alice, sess.ID); got.ID != next.ID {
		t.Errorf("ActiveRun = %s, want the new run %s", got.ID, next.ID)
	}
}

func activeRun(t *testing.T, s store.Store, user, sessionID string) *store.Run {
	t.Helper()
	r, err := s.ActiveRun(t.Context(), user, sessionID)
	if err != nil {
		t.Fatalf("ActiveRun: %v", err)
	}
	return r
}

// testStartRun: StartRun makes a queued run running with its first record, only while the session is
// idle, and only once.
func testStartRun(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess, other := createSession(t, s, alice), createSession(t, s, alice)
	running := createRun(t, s, alice, sess.ID)
	queued, plain := queueRun(t, s, alice, sess.ID, `{"message":"next"}`), queueRun(t, s, alice, sess.ID, `{}`)
	before := records(t, s, alice, sess.ID)

	first := userRecord(sess.ID, "next")
	wantErr(t, "StartRun while another runs", s.StartRun(ctx, alice, queued.ID, &first, 0), store.ErrBusy)
	wantErr(t, "StartRun of another user's run", s.StartRun(ctx, newUser("bob"), queued.ID, nil, 0), store.ErrNotFound)
	wantErr(t, "StartRun(unknown)", s.StartRun(ctx, alice, "no-such-run", nil, 0), store.ErrNotFound)
	wantErr(t, "StartRun of a running run", s.StartRun(ctx, alice, running.ID, nil, 0), store.ErrConflict)
	if diff := cmp.Diff(before, records(t, s, alice, sess.ID), cmpOpts); diff != "" {
		t.Errorf("refused StartRuns changed the records (-before +after):\n%s", diff)
	}
	if r := getRun(t, s, alice, queued.ID); r.Status != store.RunQueued || r.StartedAt != nil {
		t.Errorf("refused StartRuns changed the run: %+v", r)
	}

	mustFinish(t, s, alice, running.ID, store.RunEnd{Status: store.RunCompleted})
	elsewhere := userRecord(other.ID, "wrong session")
	wantErr(t, "StartRun with a first record of another session", s.StartRun(ctx, alice, queued.ID, &elsewhere, 0),
		store.ErrConflict)
	if err := s.StartRun(ctx, alice, queued.ID, &first, 0); err != nil {
		t.Fatalf("StartRun: %v", err)
	}
	if first.ID == "" || first.RunID != queued.ID || first.Seq != int64(len(before)+1) {
		t.Errorf("StartRun completed the first record as %+v", first)
	}
	got := records(t, s, alice, sess.ID)
	if diff := cmp.Diff(first, got[len(got)-1], cmpOpts); diff != "" {
		t.Errorf("the stored first record differs (-returned +stored):\n%s", diff)
	}
	r := getRun(t, s, alice, queued.ID)
	if r.Status != store.RunRunning || r.StartedAt == nil || r.StartedAt.Before(r.CreatedAt) || r.EndedAt != nil {
		t.Errorf("started run = %+v", r)
	}
	if active := activeRun(t, s, alice, sess.ID); active.ID != queued.ID {
		t.Errorf("ActiveRun = %s, want the started run %s", active.ID, queued.ID)
	}
	wantErr(t, "StartRun twice", s.StartRun(ctx, alice, queued.ID, nil, 0), store.ErrConflict)
	wantErr(t, "StartRun of the next while it runs", s.StartRun(ctx, alice, plain.ID, nil, 0), store.ErrBusy)

	mustFinish(t, s, alice, queued.ID, store.RunEnd{Status: store.RunCompleted})
	wantErr(t, "StartRun of an ended run", s.StartRun(ctx, alice, queued.ID, nil, 0), store.ErrConflict)
	if err := s.StartRun(ctx, alice, plain.ID, nil, 0); err != nil {
		t.Fatalf("StartRun without a first record: %v", err)
	}
	if n := len(records(t, s, alice, sess.ID)); n != len(got) {
		t.Errorf("StartRun without a first record left %d records, want %d", n, len(got))
	}
}

// testFinishQueuedRun: a queued run can be cancelled before it starts; that ends it and nothing else.
func testFinishQueuedRun(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess := createSession(t, s, alice)
	running := createRun(t, s, alice, sess.ID)
	mustAppend(t, s, alice, runAssistant(running, "call_1"))
	queued, kept := queueRun(t, s, alice, sess.ID, `{}`), queueRun(t, s, alice, sess.ID, `{}`)
	before := records(t, s, alice, sess.ID)

	end := store.RunEnd{Status: store.RunCancelled, FinishReason: "cancelled", Error: "cancelled before it started"}
	if added := mustFinish(t, s, alice, queued.ID, end); len(added) != 0 {
		t.Errorf("FinishRun of a queued run appended %+v", added)
	}
	checkEnded(t, s, alice, queued, end)
	if r := getRun(t, s, alice, queued.ID); r.StartedAt != nil {
		t.Errorf("a run cancelled before it started has StartedAt %v", r.StartedAt)
	}
	if diff := cmp.Diff(before, records(t, s, alice, sess.ID), cmpOpts); diff != "" {
		t.Errorf("FinishRun of a queued run changed the records (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(running, activeRun(t, s, alice, sess.ID)); diff != "" {
		t.Errorf("FinishRun of a queued run changed the running run (-before +after):\n%s", diff)
	}
	if r := getRun(t, s, alice, kept.ID); r.Status != store.RunQueued {
		t.Errorf("FinishRun of a queued run changed another queued run: %+v", r)
	}

	_, err := s.FinishRun(ctx, alice, queued.ID, store.RunEnd{Status: store.RunCancelled})
	wantErr(t, "FinishRun of a cancelled run", err, store.ErrConflict)
	wantErr(t, "StartRun of a cancelled run", s.StartRun(ctx, alice, queued.ID, nil, 0), store.ErrConflict)
}

// testIdempotencyKey: a key names at most one run of a user, whatever became of it; other users' keys
// are theirs; runs without a key never conflict.
func testIdempotencyKey(t *testing.T, s store.Store) {
	ctx, alice, bob := t.Context(), newUser("alice"), newUser("bob")
	sess, other, bobs := createSession(t, s, alice), createSession(t, s, alice), createSession(t, s, bob)
	run := &store.Run{SessionID: sess.ID, Agent: "default", Model: "m", IdempotencyKey: "key-1",
		RequestHash: "sha256:1f2e"}
	if err := s.CreateRun(ctx, alice, run, nil); err != nil {
		t.Fatalf("CreateRun with a key: %v", err)
	}
	byKey, err := s.RunByKey(ctx, alice, "key-1")
	if err != nil {
		t.Fatalf("RunByKey: %v", err)
	}
	if diff := cmp.Diff(run, byKey); diff != "" {
		t.Errorf("RunByKey differs from what CreateRun returned (-want +got):\n%s", diff)
	}
	_, err = s.RunByKey(ctx, bob, "key-1")
	wantErr(t, "RunByKey of another user's key", err, store.ErrNotFound)
	_, err = s.RunByKey(ctx, alice, "key-2")
	wantErr(t, "RunByKey(unknown)", err, store.ErrNotFound)

	bobRun := &store.Run{SessionID: bobs.ID, IdempotencyKey: "key-1", RequestHash: "sha256:b0b"}
	if err := s.CreateRun(ctx, bob, bobRun, nil); err != nil {
		t.Fatalf("CreateRun of another user with the same key: %v", err)
	}
	if got, err := s.RunByKey(ctx, bob, "key-1"); err != nil || got.ID != bobRun.ID {
		t.Errorf("RunByKey(bob) = %+v, %v; want bob's run %s", got, err, bobRun.ID)
	}

	// A retry is told it is one even while its first attempt still runs, so it can find that run.
	for _, tc := range []struct {
		name string
		run  store.Run
	}{
		{"running, in the busy session", store.Run{SessionID: sess.ID, IdempotencyKey: "key-1",
			RequestHash: "sha256:other"}},
		{"queued", store.Run{SessionID: sess.ID, Status: store.RunQueued, IdempotencyKey: "key-1"}},
		{"in another session", store.Run{SessionID: other.ID, IdempotencyKey: "key-1"}},
	} {
		err := s.CreateRun(ctx, alice, &tc.run, nil)
		wantErr(t, "CreateRun with a taken key, "+tc.name, err, store.ErrDuplicate)
	}
	mustFinish(t, s, alice, run.ID, store.RunEnd{Status: store.RunCompleted})
	err = s.CreateRun(ctx, alice, &store.Run{SessionID: sess.ID, IdempotencyKey: "key-1"}, nil)
	wantErr(t, "CreateRun with the key of an ended run", err, store.ErrDuplicate)
	if got, err := s.RunByKey(ctx, alice, "key-1"); err != nil || got.ID != run.ID ||
		got.RequestHash != run.RequestHash {
		t.Errorf("RunByKey after the refused duplicates = %+v, %v; want run %s as created", got, err, run.ID)
	}

	for range 2 {
		createRun(t, s, alice, other.ID)
		queueRun(t, s, alice, other.ID, `{}`)
		mustFinish(t, s, alice, activeRun(t, s, alice, other.ID).ID, store.RunEnd{Status: store.RunCompleted})
	}
	_, err = s.RunByKey(ctx, alice, "")
	wantErr(t, "RunByKey of the empty key", err, store.ErrNotFound)
}

// testConcurrentCreateRun: of 8 CreateRuns racing for one idle session, exactly one wins; the others
// are ErrBusy and leave no trace.
func testConcurrentCreateRun(t *testing.T, s store.Store) {
	const racers = 8
	alice := newUser("alice")
	sess := createSession(t, s, alice)
	runs, firsts := make([]store.Run, racers), make([]store.Record, racers)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		runs[i] = store.Run{SessionID: sess.ID, Agent: "default"}
		firsts[i] = userRecord(sess.ID, string(rune('a'+i)))
		wg.Go(func() { errs[i] = s.CreateRun(t.Context(), alice, &runs[i], &firsts[i]) })
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("racers %d and %d both created a running run", winner, i)
		case err == nil:
			winner = i
		default:
			wantErr(t, "a losing CreateRun", err, store.ErrBusy)
		}
	}
	if winner < 0 {
		t.Fatal("no CreateRun won")
	}
	if got := activeRun(t, s, alice, sess.ID); got.ID != runs[winner].ID {
		t.Errorf("ActiveRun = %s, want the winner's %s", got.ID, runs[winner].ID)
	}
	if diff := cmp.Diff([]store.Record{firsts[winner]}, records(t, s, alice, sess.ID), cmpOpts); diff != "" {
		t.Errorf("Records after the race (-want +got):\n%s", diff)
	}
}
