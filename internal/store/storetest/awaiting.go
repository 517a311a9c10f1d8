package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/store"
)

// testAwaitingRun: a running run that waits for a person keeps its session busy, is no unfinished
// work for recovery, keeps what it waits for and its request, changes what it waits for only from
// what the caller last read, and resumes or ends once; another user sees none of it.
func testAwaitingRun(t *testing.T, s store.Store) {
	ctx, alice, bob := t.Context(), newUser("alice"), newUser("bob")
	sess := createSession(t, s, alice)
	run := createRun(t, s, alice, sess.ID)
	mustAppend(t, s, alice, store.Record{SessionID: sess.ID, RunID: run.ID, Role: store.RoleUser, Content: "pay"})
	asst := mustAppend(t, s, alice, runAssistant(run, "call_1", "call_2"))
	mustAppend(t, s, alice, toolResult(asst, "call_1"))

	waits := json.RawMessage(`{"calls":[{"id":"call_2"}]}`)
	a := store.Await{Awaiting: waits,
		Events: []store.Event{{RunID: run.ID, Seq: 1, Type: "approval_required", Data: []byte(`{}`)}}}
	wantErr(t, "AwaitRun of another user", s.AwaitRun(ctx, bob, run.ID, a), store.ErrNotFound)
	wantErr(t, "AwaitRun waiting for nothing", s.AwaitRun(ctx, alice, run.ID, store.Await{}), store.ErrConflict)
	if err := s.AwaitRun(ctx, alice, run.ID, a); err != nil {
		t.Fatalf("AwaitRun: %v", err)
	}
	wantErr(t, "second AwaitRun", s.AwaitRun(ctx, alice, run.ID, a), store.ErrConflict)
	got, err := s.Run(ctx, alice, run.ID)
	if err != nil || got.Status != store.RunAwaiting || string(got.Awaiting) != string(waits) || got.LastEventSeq != 1 {
		t.Fatalf("Run = %+v, %v; want awaiting with what it waits for and its event", got, err)
	}
	if active, err := s.ActiveRun(ctx, alice, sess.ID); err != nil || active.ID != run.ID {
		t.Errorf("ActiveRun = %+v, %v; want the awaiting run", active, err)
	}
	wantErr(t, "a second running run", s.CreateRun(ctx, alice, &store.Run{SessionID: sess.ID}, nil), store.ErrBusy)
	unfinished, err := s.UnfinishedRuns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range unfinished {
		if r.ID == run.ID {
			t.Error("UnfinishedRuns lists the awaiting run: recovery would end it")
		}
	}
	awaiting, err := s.AwaitingRuns(ctx, "")
	if err != nil || len(awaiting) != 1 || awaiting[0].ID != run.ID || awaiting[0].UserID != alice ||
		string(awaiting[0].Awaiting) != string(waits) {
		t.Fatalf("AwaitingRuns = %+v, %v", awaiting, err)
	}

	decided := json.RawMessage(`{"calls":[{"id":"call_2","decision":"approve"}]}`)
	wantErr(t, "UpdateAwaiting of another user", s.UpdateAwaiting(ctx, bob, run.ID, waits, decided), store.ErrNotFound)
	wantErr(t, "UpdateAwaiting from a stale read", s.UpdateAwaiting(ctx, alice, run.ID, decided, waits), store.ErrConflict)
	if err := s.UpdateAwaiting(ctx, alice, run.ID, waits, decided); err != nil {
		t.Fatalf("UpdateAwaiting: %v", err)
	}
	wantErr(t, "ResumeRun from a stale read", s.ResumeRun(ctx, alice, run.ID, waits, 10, nil), store.ErrConflict)
	wantErr(t, "ResumeRun of another user", s.ResumeRun(ctx, bob, run.ID, decided, 10, nil), store.ErrNotFound)
	if err := s.ResumeRun(ctx, alice, run.ID, decided, 10, nil); err != nil {
		t.Fatalf("ResumeRun: %v", err)
	}
	wantErr(t, "second ResumeRun", s.ResumeRun(ctx, alice, run.ID, decided, 10, nil), store.ErrConflict)
	got, err = s.Run(ctx, alice, run.ID)
	if err != nil || got.Status != store.RunRunning || got.Awaiting != nil || got.ReservedSeq != 10 {
		t.Fatalf("resumed Run = %+v, %v; want running, waiting for nothing, reserved to 10", got, err)
	}

	// Waiting again, a cancel ends it: the open call is closed with a failed record.
	a.Events = nil
	if err := s.AwaitRun(ctx, alice, run.ID, a); err != nil {
		t.Fatalf("AwaitRun again: %v", err)
	}
	end := store.RunEnd{Status: store.RunCancelled, FinishReason: "cancelled", Reason: "cancelled while it waited"}
	added, err := s.FinishRun(ctx, alice, run.ID, end)
	if err != nil || len(added) != 1 || added[0].ToolCallID != "call_2" || added[0].Content != end.Reason {
		t.Fatalf("FinishRun of an awaiting run = %+v, %v", added, err)
	}
	if got, err := s.Run(ctx, alice, run.ID); err != nil || got.Status != store.RunCancelled || got.Awaiting != nil {
		t.Errorf("ended Run = %+v, %v", got, err)
	}
	if awaiting, err := s.AwaitingRuns(ctx, ""); err != nil || len(awaiting) != 0 {
		t.Errorf("AwaitingRuns after the end = %+v, %v", awaiting, err)
	}
	wantErr(t, "UpdateAwaiting of an ended run", s.UpdateAwaiting(ctx, alice, run.ID, waits, decided), store.ErrConflict)
}

// testStaleCancel: an end asked only while the run awaits approval (a cancel that read it waiting) is
// refused once a decision has resumed it, so that the call the run now runs is not closed as not run.
func testStaleCancel(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess := createSession(t, s, alice)
	run := createRun(t, s, alice, sess.ID)
	mustAppend(t, s, alice, store.Record{SessionID: sess.ID, RunID: run.ID, Role: store.RoleUser, Content: "pay"})
	mustAppend(t, s, alice, runAssistant(run, "call_2"))
	waits := json.RawMessage(`{"calls":[{"id":"call_2","decision":"approve"}]}`)
	if err := s.AwaitRun(ctx, alice, run.ID, store.Await{Awaiting: waits}); err != nil {
		t.Fatal(err)
	}
	if err := s.ResumeRun(ctx, alice, run.ID, waits, 10, nil); err != nil { // a decision, after the cancel's read
		t.Fatal(err)
	}
	end := store.RunEnd{Status: store.RunCancelled, FinishReason: "cancelled", Reason: "Not run: cancelled while waiting.", WhileAwaiting: true}
	if added, err := s.FinishRun(ctx, alice, run.ID, end); !errors.Is(err, store.ErrConflict) {
		t.Errorf("FinishRun of a resumed run while awaiting = %d records, %v; want ErrConflict", len(added), err)
	}
	if got, err := s.Run(ctx, alice, run.ID); err != nil || got.Status != store.RunRunning {
		t.Errorf("the resumed run after the stale cancel: %+v, %v; want running", got, err)
	}
}

// PairingWhileAwaiting checks that check, a store's check of the pairing invariant (as chatd migrate
// runs it), accepts a run awaiting approval: its waiting call has no tool record by design.
func PairingWhileAwaiting(t *testing.T, s store.Store, check func(context.Context) error) {
	ctx, alice := t.Context(), newUser("alice")
	sess := createSession(t, s, alice)
	run := createRun(t, s, alice, sess.ID)
	mustAppend(t, s, alice, store.Record{SessionID: sess.ID, RunID: run.ID, Role: store.RoleUser, Content: "pay"})
	mustAppend(t, s, alice, runAssistant(run, "call_2"))
	if err := s.AwaitRun(ctx, alice, run.ID, store.Await{Awaiting: json.RawMessage(`{"calls":[]}`)}); err != nil {
		t.Fatal(err)
	}
	if err := check(ctx); err != nil {
		t.Errorf("the pairing check with a run awaiting approval: %v", err)
	}
}

// testResumeRunQuota: a resume is admitted as a new run is: refused with a *LimitError while the user
// has as many runs running as the quota allows (the awaiting run itself not counted), leaving the run
// waiting as it was; admitted once one has ended.
func testResumeRunQuota(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	waiting := createRun(t, s, alice, createSession(t, s, alice).ID)
	waits := json.RawMessage(`{"calls":[{"id":"call_2","decision":"approve"}]}`)
	if err := s.AwaitRun(ctx, alice, waiting.ID, store.Await{Awaiting: waits}); err != nil {
		t.Fatal(err)
	}
	other := createRun(t, s, alice, createSession(t, s, alice).ID)
	quota := []store.Limit{{Name: store.LimitConcurrentRuns, Max: 1}}
	err := s.ResumeRun(ctx, alice, waiting.ID, waits, 10, quota)
	if le, ok := errors.AsType[*store.LimitError](err); !ok || le.Name != store.LimitConcurrentRuns || le.Used != 1 {
		t.Fatalf("ResumeRun with another run running under a limit of 1: %v, want a concurrent_runs *LimitError of 1 used", err)
	}
	if got, err := s.Run(ctx, alice, waiting.ID); err != nil || got.Status != store.RunAwaiting || string(got.Awaiting) != string(waits) {
		t.Fatalf("the refused run: %+v, %v; want still awaiting as it was", got, err)
	}
	if _, err := s.FinishRun(ctx, alice, other.ID, store.RunEnd{Status: store.RunCompleted, FinishReason: "stop"}); err != nil {
		t.Fatal(err)
	}
	if err := s.ResumeRun(ctx, alice, waiting.ID, waits, 10, quota); err != nil {
		t.Fatalf("ResumeRun once the other run ended: %v", err)
	}
}

// testResumeRunQueuedBehind: the runs queued in a resumed run's own session, which wait for it, do not
// count against the resume (a run queued behind a run awaiting approval would otherwise refuse every
// decision under a concurrent_runs limit of 1, until the wait expired); runs queued in another session
// still count, as they do for a new run.
func testResumeRunQueuedBehind(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	k := createKey(t, s, alice, "laptop").ID
	quota := []store.Limit{{Name: store.LimitConcurrentRuns, Max: 1}, {Name: store.LimitConcurrentRuns, KeyID: k, Max: 1}}
	waits := json.RawMessage(`{"calls":[{"id":"call_2","decision":"approve"}]}`)
	// await starts a run of the key in a new session and makes it wait, then queues a message behind
	// it, both under quota.
	await := func(quota ...store.Limit) (waiting, queued *store.Run) {
		t.Helper()
		sess := createSession(t, s, alice)
		waiting = mustCreateLimited(t, s, alice, sess.ID, k, store.RunRunning, quota...)
		if err := s.AwaitRun(ctx, alice, waiting.ID, store.Await{Awaiting: waits}); err != nil {
			t.Fatal(err)
		}
		return waiting, mustCreateLimited(t, s, alice, sess.ID, k, store.RunQueued, quota...)
	}
	// Another session's run waits with a message queued behind it (sent before the limit was set), then
	// this one's: its queued message admitted once the other's has ended, the waiting run not counted.
	other, otherQueued := await()
	if _, err := createLimited(t, s, alice, createSession(t, s, alice).ID, k, store.RunQueued, quota...); err == nil {
		t.Fatal("a new run was created under a limit of 1 with a run queued")
	}
	mustFinish(t, s, alice, otherQueued.ID, store.RunEnd{Status: store.RunCancelled, FinishReason: "cancelled"})
	waiting, _ := await(quota...)
	otherQueued = mustCreateLimited(t, s, alice, other.SessionID, k, store.RunQueued)

	err := s.ResumeRun(ctx, alice, waiting.ID, waits, 10, quota)
	wantLimit(t, "ResumeRun with a run queued in another session", err, quota[0], 1)
	if got := getRun(t, s, alice, waiting.ID); got.Status != store.RunAwaiting {
		t.Fatalf("the refused run is %s, want still awaiting approval", got.Status)
	}
	mustFinish(t, s, alice, otherQueued.ID, store.RunEnd{Status: store.RunCancelled, FinishReason: "cancelled"})
	if err := s.ResumeRun(ctx, alice, waiting.ID, waits, 10, quota); err != nil {
		t.Fatalf("ResumeRun with only its own session's run queued behind it: %v", err)
	}
	// Now the resumed run and the run queued behind it count against the other session's resume.
	err = s.ResumeRun(ctx, alice, other.ID, waits, 10, quota)
	wantLimit(t, "ResumeRun with another session's run resumed and one queued behind it", err, quota[0], 2)
}

// testResumeRunKeyRevoked: a run whose API key was revoked, has expired or is gone does not resume
// (ErrKeyRevoked) and still waits as it was; a run of a key that works, or of no key, resumes.
func testResumeRunKeyRevoked(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	revoked := createKey(t, s, alice, "revoked").ID
	if _, err := s.RevokeKey(ctx, alice, revoked); err != nil {
		t.Fatal(err)
	}
	expired := &store.APIKey{User: alice, Name: "expired", Prefix: "chd_expired", Hash: newHash(),
		ExpiresAt: ptr(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))} // before any store's clock
	if err := s.CreateKey(ctx, expired); err != nil {
		t.Fatal(err)
	}
	live := createKey(t, s, alice, "live").ID
	waits := json.RawMessage(`{"calls":[{"id":"call_2","decision":"approve"}]}`)
	for _, tc := range []struct {
		name, key string
		want      error
	}{
		{"revoked", revoked, store.ErrKeyRevoked},
		{"expired", expired.ID, store.ErrKeyRevoked},
		{"unknown", "no-such-key", store.ErrKeyRevoked},
		{"live", live, nil},
		{"none", "", nil},
	} {
		run := mustCreateLimited(t, s, alice, createSession(t, s, alice).ID, tc.key, store.RunRunning)
		if err := s.AwaitRun(ctx, alice, run.ID, store.Await{Awaiting: waits}); err != nil {
			t.Fatal(err)
		}
		err := s.ResumeRun(ctx, alice, run.ID, waits, 10, nil)
		if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("ResumeRun of a run whose key is %s: %v, want %v", tc.name, err, tc.want)
		}
		want := store.RunRunning
		if tc.want != nil {
			want = store.RunAwaiting
		}
		if got := getRun(t, s, alice, run.ID); got.Status != want {
			t.Errorf("the run whose key is %s is %s after ResumeRun, want %s", tc.name, got.Status, want)
		}
	}
}

// testAwaitingRunsOfKey: AwaitingRuns with a key id lists the runs awaiting approval started with that
// key alone, of every user; without one, every run awaiting approval.
func testAwaitingRunsOfKey(t *testing.T, s store.Store) {
	ctx, alice, bob := t.Context(), newUser("alice"), newUser("bob")
	k1, k2 := createKey(t, s, alice, "one").ID, createKey(t, s, bob, "two").ID
	waits := json.RawMessage(`{"calls":[{"id":"call_2"}]}`)
	await := func(user, key string) string {
		t.Helper()
		run := mustCreateLimited(t, s, user, createSession(t, s, user).ID, key, store.RunRunning)
		if err := s.AwaitRun(ctx, user, run.ID, store.Await{Awaiting: waits}); err != nil {
			t.Fatal(err)
		}
		return run.ID
	}
	a1, b1, a2, none := await(alice, k1), await(bob, k1), await(alice, k2), await(alice, "")
	mustCreateLimited(t, s, alice, createSession(t, s, alice).ID, k1, store.RunRunning) // running, not awaiting
	for _, tc := range []struct {
		key  string
		want []string
	}{{k1, []string{a1, b1}}, {k2, []string{a2}}, {"no-such-key", nil}, {"", []string{a1, b1, a2, none}}} {
		runs, err := s.AwaitingRuns(ctx, tc.key)
		if err != nil {
			t.Fatalf("AwaitingRuns(%q): %v", tc.key, err)
		}
		var got []string
		for _, r := range runs {
			if r.KeyID != tc.key && tc.key != "" {
				t.Errorf("AwaitingRuns(%q) lists run %s of key %q", tc.key, r.ID, r.KeyID)
			}
			got = append(got, r.ID)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("AwaitingRuns(%q) (-want +got):\n%s", tc.key, diff)
		}
	}
}

// testActiveRunsOfKey: ActiveRunsOfKey lists the user's queued and running runs started with one key —
// the queued ones first — and no run of another key, of no key, of another user (with their own key or
// the same one), nor one awaiting approval or ended; read by pages of one, it gives the same runs once
// each.
func testActiveRunsOfKey(t *testing.T, s store.Store) {
	ctx, alice, bob := t.Context(), newUser("alice"), newUser("bob")
	k1, k2, kb := createKey(t, s, alice, "one").ID, createKey(t, s, alice, "two").ID, createKey(t, s, bob, "bob").ID
	s1, s2 := createSession(t, s, alice).ID, createSession(t, s, alice).ID
	running := mustCreateLimited(t, s, alice, s1, k1, store.RunRunning).ID
	queued := []string{
		mustCreateLimited(t, s, alice, s1, k1, store.RunQueued).ID,
		mustCreateLimited(t, s, alice, s1, k1, store.RunQueued).ID,
	}
	slices.Sort(queued)
	running2 := mustCreateLimited(t, s, alice, s2, k1, store.RunRunning).ID
	ended := mustCreateLimited(t, s, alice, createSession(t, s, alice).ID, k1, store.RunRunning).ID
	mustFinish(t, s, alice, ended, store.RunEnd{Status: store.RunCompleted})
	waiting := mustCreateLimited(t, s, alice, createSession(t, s, alice).ID, k1, store.RunRunning).ID
	if err := s.AwaitRun(ctx, alice, waiting, store.Await{Awaiting: json.RawMessage(`{"calls":[{"id":"call_1"}]}`)}); err != nil {
		t.Fatal(err)
	}
	other := mustCreateLimited(t, s, alice, createSession(t, s, alice).ID, k2, store.RunRunning).ID
	mustCreateLimited(t, s, alice, createSession(t, s, alice).ID, "", store.RunRunning)
	bobs := createSession(t, s, bob).ID
	mustCreateLimited(t, s, bob, bobs, kb, store.RunRunning)
	mustCreateLimited(t, s, bob, bobs, k1, store.RunQueued) // not bob's key; alice's revoke is about alice's runs

	runningOnes := []string{running, running2}
	slices.Sort(runningOnes)
	pages := func(user, key string, limit int) []string {
		t.Helper()
		var got []string
		var after *store.Run
		for range 10 {
			runs, err := s.ActiveRunsOfKey(ctx, user, key, after, limit)
			if err != nil {
				t.Fatalf("ActiveRunsOfKey(%q, %d): %v", key, limit, err)
			}
			if len(runs) > limit {
				t.Fatalf("ActiveRunsOfKey(%q, %d) returned %d runs", key, limit, len(runs))
			}
			for _, r := range runs {
				if r.KeyID != key || r.UserID != user {
					t.Errorf("ActiveRunsOfKey(%q) lists run %s of user %q, key %q", key, r.ID, r.UserID, r.KeyID)
				}
				if want := slices.Contains(runningOnes, r.ID) || r.ID == other; (r.Status == store.RunRunning) != want || r.SessionID == "" {
					t.Errorf("ActiveRunsOfKey(%q) lists run %s as %q of session %q", key, r.ID, r.Status, r.SessionID)
				}
				if r.Request != nil {
					t.Errorf("ActiveRunsOfKey(%q) read run %s's request: what a cancel does not need", key, r.ID)
				}
				got = append(got, r.ID)
			}
			if len(runs) < limit {
				return got
			}
			after = &runs[len(runs)-1]
		}
		t.Fatalf("ActiveRunsOfKey(%q, %d): no last page after 10", key, limit)
		return nil
	}
	for _, tc := range []struct {
		user, key string
		want      []string
	}{
		{alice, k1, append(slices.Clone(queued), runningOnes...)},
		{alice, k2, []string{other}},
		{alice, kb, nil},
		{alice, "no-such-key", nil},
	} {
		for _, limit := range []int{100, 1} {
			if diff := cmp.Diff(tc.want, pages(tc.user, tc.key, limit)); diff != "" {
				t.Errorf("ActiveRunsOfKey(%q) by pages of %d (-want +got):\n%s", tc.key, limit, diff)
			}
		}
	}
}
