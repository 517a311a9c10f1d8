package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"chatd/internal/store"
)

// testFinishRun: FinishRun closes the run's open calls with failed tool records in call order, ends the
// run, and refuses to end it twice.
func testFinishRun(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess := createSession(t, s, alice)
	run := createRun(t, s, alice, sess.ID)
	if run.ID == "" || run.Status != store.RunRunning || run.CreatedAt.IsZero() || run.EndedAt != nil ||
		run.StartedAt == nil || run.StartedAt.Before(run.CreatedAt) || run.LastEventSeq != 0 {
		t.Fatalf("CreateRun returned %+v", run)
	}
	if got, err := s.Run(ctx, alice, run.ID); err != nil || !cmp.Equal(run, got) {
		t.Fatalf("Run = %+v, %v; want %+v", got, err, run)
	}

	mustAppend(t, s, alice, store.Record{SessionID: sess.ID, RunID: run.ID, Role: store.RoleUser, Content: "go"})
	asst := mustAppend(t, s, alice, runAssistant(run, "call_1", "call_2", "call_3"))
	mustAppend(t, s, alice, toolResult(asst, "call_2"))

	end := store.RunEnd{Status: store.RunCancelled, FinishReason: "cancelled", Error: "stopped by the user",
		Usage: store.Usage{InputTokens: 100, OutputTokens: 20}, Reason: "the run was cancelled before this call finished"}
	added, err := s.FinishRun(ctx, alice, run.ID, end)
	if err != nil {
		t.Fatalf("FinishRun: %v", err)
	}
	want := closedCalls(asst, end.Reason, asst.Seq+2, "call_1", "call_3")
	if diff := cmp.Diff(want, added, cmpOpts, ignoreIDAndTime); diff != "" {
		t.Errorf("FinishRun appended (-want +got):\n%s", diff)
	}
	got := records(t, s, alice, sess.ID)
	if diff := cmp.Diff(added, got[len(got)-2:], cmpOpts); diff != "" {
		t.Errorf("FinishRun's records differ from the stored ones (-returned +stored):\n%s", diff)
	}
	checkEnded(t, s, alice, run, end)

	_, err = s.FinishRun(ctx, alice, run.ID, store.RunEnd{Status: store.RunCompleted})
	wantErr(t, "second FinishRun", err, store.ErrConflict)
	if n := len(records(t, s, alice, sess.ID)); n != len(got) {
		t.Errorf("second FinishRun left %d records, want %d", n, len(got))
	}
	mustAppend(t, s, alice, userRecord(sess.ID, "the conversation goes on"))

	testFinishRunPlain(t, s, alice, sess.ID)
}

// checkEnded checks the run's stored end state.
func checkEnded(t *testing.T, s store.Store, user string, run *store.Run, end store.RunEnd) {
	t.Helper()
	got, err := s.Run(t.Context(), user, run.ID)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got.Status != end.Status || got.FinishReason != end.FinishReason || got.Error != end.Error ||
		got.Usage != end.Usage || got.EndedAt == nil || got.EndedAt.Before(got.CreatedAt) ||
		got.EndedAt.Location() != time.UTC || !got.CreatedAt.Equal(run.CreatedAt) || got.RecoveredFrom != end.RecoveredFrom {
		t.Errorf("ended run = %+v (ended %v), want the end %+v", got, got.EndedAt, end)
	}
}

// testFinishRunPlain: a run without open calls ends without records; an empty Reason still gives a
// readable content; a non-terminal status is refused.
func testFinishRunPlain(t *testing.T, s store.Store, user, sessionID string) {
	ctx := t.Context()
	run := createRun(t, s, user, sessionID)
	_, err := s.FinishRun(ctx, user, run.ID, store.RunEnd{Status: store.RunRunning})
	wantErr(t, "FinishRun to running", err, store.ErrConflict)
	_, err = s.FinishRun(ctx, user, run.ID, store.RunEnd{Status: store.RunQueued})
	wantErr(t, "FinishRun to queued", err, store.ErrConflict)
	_, err = s.FinishRun(ctx, user, "no-such-run", store.RunEnd{Status: store.RunCompleted})
	wantErr(t, "FinishRun(unknown)", err, store.ErrNotFound)

	mustAppend(t, s, user, runAssistant(run, "call_1"))
	added, err := s.FinishRun(ctx, user, run.ID, store.RunEnd{Status: store.RunFailed})
	if err != nil || len(added) != 1 || added[0].Content == "" {
		t.Fatalf("FinishRun without a Reason = %+v, %v; want one record with some content", added, err)
	}

	run = createRun(t, s, user, sessionID)
	end := store.RunEnd{Status: store.RunCompleted, FinishReason: "stop"}
	if added, err := s.FinishRun(ctx, user, run.ID, end); err != nil || len(added) != 0 {
		t.Errorf("FinishRun of a run without open calls = %+v, %v; want nothing appended", added, err)
	}
	checkEnded(t, s, user, run, end)
}

// testFinishRunOwnCallsOnly: FinishRun closes the calls of its run, not another's: neither those of the
// run a queued run waits for, nor a call of no run in the session of the run that ends.
func testFinishRunOwnCallsOnly(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess, elsewhere := createSession(t, s, alice), createSession(t, s, alice)
	first, second := createRun(t, s, alice, sess.ID), queueRun(t, s, alice, sess.ID, `{}`)
	asst := mustAppend(t, s, alice, runAssistant(first, "call_1"))
	other := createRun(t, s, alice, elsewhere.ID)
	runless := mustAppend(t, s, alice, assistantCalls(elsewhere.ID, "call_1"))
	for _, run := range []*store.Run{second, other} {
		if added, err := s.FinishRun(ctx, alice, run.ID, store.RunEnd{Status: store.RunInterrupted}); err != nil ||
			len(added) != 0 {
			t.Fatalf("FinishRun(%s run) = %+v, %v; want nothing appended", run.Status, added, err)
		}
	}
	mustAppend(t, s, alice, toolResult(asst, "call_1")) // still open for its own run
	mustAppend(t, s, alice, toolResult(runless, "call_1"))
}

// testCloseCalls: CloseCalls closes the open calls of its run only, in call order, returns what it
// appended, and leaves the run running; a second call finds nothing to close.
func testCloseCalls(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess, elsewhere := createSession(t, s, alice), createSession(t, s, alice)
	run := createRun(t, s, alice, sess.ID)
	mustAppend(t, s, alice, store.Record{SessionID: sess.ID, RunID: run.ID, Role: store.RoleUser, Content: "go"})
	asst := mustAppend(t, s, alice, runAssistant(run, "call_1", "call_2", "call_3"))
	mustAppend(t, s, alice, toolResult(asst, "call_2"))
	other := createRun(t, s, alice, elsewhere.ID)
	otherAsst := mustAppend(t, s, alice, runAssistant(other, "call_1"))

	const reason = "the tool did not answer in time"
	added, err := s.CloseCalls(ctx, alice, run.ID, reason)
	if err != nil {
		t.Fatalf("CloseCalls: %v", err)
	}
	want := closedCalls(asst, reason, asst.Seq+2, "call_1", "call_3")
	if diff := cmp.Diff(want, added, cmpOpts, ignoreIDAndTime); diff != "" {
		t.Errorf("CloseCalls appended (-want +got):\n%s", diff)
	}
	got := records(t, s, alice, sess.ID)
	if diff := cmp.Diff(added, got[len(got)-2:], cmpOpts); diff != "" {
		t.Errorf("CloseCalls' records differ from the stored ones (-returned +stored):\n%s", diff)
	}
	if again, err := s.CloseCalls(ctx, alice, run.ID, reason); err != nil || len(again) != 0 {
		t.Errorf("second CloseCalls = %+v, %v; want nothing appended", again, err)
	}
	if r := getRun(t, s, alice, run.ID); r.Status != store.RunRunning || r.EndedAt != nil {
		t.Errorf("CloseCalls changed the run: %+v", r)
	}
	// The run goes on with its next turn; the other run's call is still open.
	mustAppend(t, s, alice, store.Record{SessionID: sess.ID, RunID: run.ID, Role: store.RoleAssistant,
		Content: "the tool timed out", FinishReason: "stop"})
	mustAppend(t, s, alice, toolResult(otherAsst, "call_1"))

	_, err = s.CloseCalls(ctx, newUser("bob"), run.ID, reason)
	wantErr(t, "CloseCalls of another user's run", err, store.ErrNotFound)
	_, err = s.CloseCalls(ctx, alice, "no-such-run", reason)
	wantErr(t, "CloseCalls(unknown)", err, store.ErrNotFound)
}

// testRunUsageSoFar: a run not ended yet reports the sum of its usage entries (the user's, for this run);
// an ended run reports the totals FinishRun stored, whatever is added afterwards.
func testRunUsageSoFar(t *testing.T, s store.Store) {
	ctx, alice, bob := t.Context(), newUser("alice"), newUser("bob")
	sess := createSession(t, s, alice)
	run, other := createRun(t, s, alice, sess.ID), queueRun(t, s, alice, sess.ID, `{}`)
	if u := getRun(t, s, alice, run.ID).Usage; u != (store.Usage{}) {
		t.Errorf("usage of a run without entries = %+v, want zero", u)
	}
	add := func(user, runID string, u store.Usage) {
		t.Helper()
		err := s.AddUsage(ctx, user, store.UsageEntry{RunID: runID, SessionID: sess.ID, Model: "m", Usage: u})
		if err != nil {
			t.Fatalf("AddUsage: %v", err)
		}
	}
	add(alice, run.ID, store.Usage{InputTokens: 100, OutputTokens: 10, CacheReadTokens: 50, CacheWriteTokens: 5,
		ReasoningTokens: 3})
	add(alice, run.ID, store.Usage{InputTokens: 20, OutputTokens: 2})
	add(alice, other.ID, store.Usage{InputTokens: 1000})
	add(bob, run.ID, store.Usage{InputTokens: 7000}) // a label, not bob's access to alice's run

	want := store.Usage{InputTokens: 120, OutputTokens: 12, CacheReadTokens: 50, CacheWriteTokens: 5,
		ReasoningTokens: 3}
	if u := getRun(t, s, alice, run.ID).Usage; u != want {
		t.Errorf("Run usage so far = %+v, want %+v", u, want)
	}
	if active, err := s.ActiveRun(ctx, alice, sess.ID); err != nil || active.Usage != want {
		t.Errorf("ActiveRun = %+v, %v; want usage %+v", active, err, want)
	}

	end := store.RunEnd{Status: store.RunCompleted, Usage: store.Usage{InputTokens: 1, OutputTokens: 2,
		CacheReadTokens: 3, CacheWriteTokens: 4, ReasoningTokens: 5}}
	mustFinish(t, s, alice, run.ID, end)
	add(alice, run.ID, store.Usage{InputTokens: 9})
	if u := getRun(t, s, alice, run.ID).Usage; u != end.Usage {
		t.Errorf("usage of the ended run = %+v, want the totals it ended with, %+v", u, end.Usage)
	}
}

// testDeleteCascades: deleting a session deletes its records, calls, runs and their events, and nothing
// else.
func testDeleteCascades(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess, kept := createSession(t, s, alice), createSession(t, s, alice)
	run, keptRun := createRun(t, s, alice, sess.ID), createRun(t, s, alice, kept.ID)
	asst := mustAppend(t, s, alice, runAssistant(run, "call_1", "call_2"))
	mustAppend(t, s, alice, toolResult(asst, "call_1"))
	mustAppend(t, s, alice, userRecord(kept.ID, "keep me"))
	events := []store.Event{event(run.ID, 1, "run_start", `{}`), event(keptRun.ID, 1, "run_start", `{}`)}
	if err := s.AppendEvents(ctx, events, nil); err != nil {
		t.Fatalf("AppendEvents: %v", err)
	}
	if err := s.AddUsage(ctx, alice, store.UsageEntry{RunID: run.ID, SessionID: sess.ID, Model: "m",
		Usage: store.Usage{InputTokens: 1}}); err != nil {
		t.Fatalf("AddUsage: %v", err)
	}

	mustFinish(t, s, alice, run.ID, store.RunEnd{Status: store.RunCompleted})
	if err := s.DeleteSession(ctx, alice, sess.ID); err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	_, err := s.Records(ctx, alice, sess.ID)
	wantErr(t, "Records of a deleted session", err, store.ErrNotFound)
	_, err = s.Run(ctx, alice, run.ID)
	wantErr(t, "Run of a deleted session", err, store.ErrNotFound)
	_, err = s.FinishRun(ctx, alice, run.ID, store.RunEnd{Status: store.RunCancelled})
	wantErr(t, "FinishRun of a deleted session", err, store.ErrNotFound)
	r := toolResult(asst, "call_2")
	wantErr(t, "AppendRecord to a deleted session", s.AppendRecord(ctx, alice, &r), store.ErrNotFound)
	_, err = s.Events(ctx, alice, run.ID, 0, 10)
	wantErr(t, "Events of a deleted session's run", err, store.ErrNotFound)
	_, err = s.ActiveRun(ctx, alice, sess.ID)
	wantErr(t, "ActiveRun of a deleted session", err, store.ErrNotFound)
	if got := records(t, s, alice, kept.ID); len(got) != 1 || got[0].Content != "keep me" {
		t.Errorf("the other session's records = %+v", got)
	}
	if diff := cmp.Diff(events[1:], mustEvents(t, s, alice, keptRun.ID, 0, 10)); diff != "" {
		t.Errorf("the other session's events (-want +got):\n%s", diff)
	}
	// Accounting outlives the session: usage of its run can still be recorded.
	if err := s.AddUsage(ctx, alice, store.UsageEntry{RunID: run.ID, SessionID: sess.ID}); err != nil {
		t.Errorf("AddUsage after the session was deleted: %v", err)
	}
}

// testUsage: AddUsage accepts entries with or without a time, and for runs it cannot see.
func testUsage(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess := createSession(t, s, alice)
	run := createRun(t, s, alice, sess.ID)
	for _, u := range []store.UsageEntry{
		{RunID: run.ID, SessionID: sess.ID, Agent: "default", Model: "openai/gpt-4o-mini",
			Usage: store.Usage{InputTokens: 1200, OutputTokens: 80, CacheReadTokens: 1000, ReasoningTokens: 30}},
		{RunID: run.ID, SessionID: sess.ID, Agent: "default", Model: "openai/gpt-4o-mini",
			CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.FixedZone("CET", 3600))},
		{Model: "gemini/gemini-2.5-flash"},
	} {
		if err := s.AddUsage(ctx, alice, u); err != nil {
			t.Errorf("AddUsage(%+v): %v", u, err)
		}
	}
}

// testUnfinishedRuns: at start-up UnfinishedRuns lists every user's running and queued runs, oldest
// first, with their owner and request. Ending the running ones as interrupted, with the usage of their
// entries, closes their calls and frees their sessions for the queued runs; the ended runs are no longer
// listed. Other subtests' runs may share the store: only this subtest's are checked.
func testUnfinishedRuns(t *testing.T, s store.Store) {
	var left []leftRun
	for _, name := range []string{"alice", "bob"} {
		left = append(left, leaveRuns(t, s, newUser(name))...)
	}
	owner := left[0].user
	done := createRun(t, s, owner, createSession(t, s, owner).ID)
	mustFinish(t, s, owner, done.ID, store.RunEnd{Status: store.RunCompleted})

	var want []store.Run
	for _, l := range left {
		r := getRun(t, s, l.user, l.run.ID)
		r.UserID = l.user
		want = append(want, *r)
	}
	got := unfinishedOf(t, s, left)
	byID := cmpopts.SortSlices(func(a, b store.Run) bool { return a.ID < b.ID })
	// Request is the queued runs' business, checked below.
	if diff := cmp.Diff(want, got, byID, cmpopts.IgnoreFields(store.Run{}, "Request")); diff != "" {
		t.Errorf("UnfinishedRuns (-want +got):\n%s", diff)
	}
	for _, r := range got {
		if r.Status == store.RunQueued && string(r.Request) != `{"message": "and then?"}` {
			t.Errorf("queued run %s has Request %q, want it byte for byte", r.ID, r.Request)
		}
	}

	interruptLeft(t, s, left)
	if got := unfinishedOf(t, s, left); len(got) != 2 || got[0].Status != store.RunQueued ||
		got[1].Status != store.RunQueued {
		t.Fatalf("UnfinishedRuns after the interrupts = %+v, want the two queued runs", got)
	}
	for _, l := range left {
		if l.run.Status != store.RunQueued {
			continue
		}
		first := userRecord(l.run.SessionID, "and then?")
		if err := s.StartRun(t.Context(), l.user, l.run.ID, &first, 0); err != nil {
			t.Fatalf("StartRun after the running run was interrupted: %v", err)
		}
		mustFinish(t, s, l.user, l.run.ID, store.RunEnd{Status: store.RunCompleted})
	}
	if got := unfinishedOf(t, s, left); len(got) != 0 {
		t.Errorf("UnfinishedRuns after every run ended = %+v", got)
	}
}

// leftRun is a run a dead process left behind.
type leftRun struct {
	user string
	run  *store.Run
	asst store.Record // of a running run: its assistant record, call_1 open
}

// leaveRuns leaves in a new session of user what a dead process leaves: a running run with a call open
// and two usage entries, and a run queued behind it.
func leaveRuns(t *testing.T, s store.Store, user string) []leftRun {
	t.Helper()
	sess := createSession(t, s, user)
	run := &store.Run{SessionID: sess.ID, Agent: "default", Model: "m"}
	first := userRecord(sess.ID, "go")
	if err := s.CreateRun(t.Context(), user, run, &first); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	asst := mustAppend(t, s, user, runAssistant(run, "call_1"))
	for range 2 {
		if err := s.AddUsage(t.Context(), user, store.UsageEntry{RunID: run.ID, SessionID: sess.ID, Model: "m",
			Usage: store.Usage{InputTokens: 10, OutputTokens: 3}}); err != nil {
			t.Fatalf("AddUsage: %v", err)
		}
	}
	queued := queueRun(t, s, user, sess.ID, `{"message": "and then?"}`)
	return []leftRun{{user: user, run: run, asst: asst}, {user: user, run: queued}}
}

// unfinishedOf returns the runs of left that UnfinishedRuns lists, in its order, having checked that
// the whole list is oldest first.
func unfinishedOf(t *testing.T, s store.Store, left []leftRun) []store.Run {
	t.Helper()
	all, err := s.UnfinishedRuns(t.Context())
	if err != nil {
		t.Fatalf("UnfinishedRuns: %v", err)
	}
	if !slices.IsSortedFunc(all, func(a, b store.Run) int { return a.CreatedAt.Compare(b.CreatedAt) }) {
		t.Errorf("UnfinishedRuns is not oldest first: %+v", all)
	}
	var mine []store.Run
	for _, r := range all {
		if slices.ContainsFunc(left, func(l leftRun) bool { return l.run.ID == r.ID }) {
			mine = append(mine, r)
		}
	}
	return mine
}

// interruptLeft ends the running runs of left as start-up does: interrupted, calls closed, usage summed
// from the entries (the Usage given is replaced).
func interruptLeft(t *testing.T, s store.Store, left []leftRun) {
	t.Helper()
	const reason = "chatd stopped before this call finished"
	for _, l := range left {
		if l.run.Status != store.RunRunning {
			continue
		}
		end := store.RunEnd{Status: store.RunInterrupted, Error: "chatd stopped before the run ended",
			Reason: reason, UsageFromEntries: true, Usage: store.Usage{InputTokens: 999}, RecoveredFrom: 7}
		added := mustFinish(t, s, l.user, l.run.ID, end)
		want := closedCalls(l.asst, reason, l.asst.Seq+1, "call_1")
		if diff := cmp.Diff(want, added, cmpOpts, ignoreIDAndTime); diff != "" {
			t.Errorf("%s's open call was not closed (-want +got):\n%s", l.user, diff)
		}
		end.Usage = store.Usage{InputTokens: 20, OutputTokens: 6}
		checkEnded(t, s, l.user, l.run, end)
	}
}

// testDeleteRefusedWhileBusy: a session with a running or queued run is not deleted; the refusal names
// the run, and nothing of the session goes.
func testDeleteRefusedWhileBusy(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess := createSession(t, s, alice)
	mustAppend(t, s, alice, userRecord(sess.ID, "hello"))
	running := createRun(t, s, alice, sess.ID)
	queued := queueRun(t, s, alice, sess.ID, `{"n":1}`)
	refused := func(what, runID string) {
		t.Helper()
		err := s.DeleteSession(ctx, alice, sess.ID)
		busy, ok := errors.AsType[*store.BusyError](err)
		if !ok || !errors.Is(err, store.ErrBusy) || busy.RunID != runID || busy.SessionID != sess.ID {
			t.Fatalf("DeleteSession %s: %v, want a BusyError naming %s", what, err, runID)
		}
		if recs := records(t, s, alice, sess.ID); len(recs) != 1 {
			t.Errorf("DeleteSession %s: %d records left, want 1", what, len(recs))
		}
	}
	refused("while a run runs", running.ID)
	mustFinish(t, s, alice, running.ID, store.RunEnd{Status: store.RunCompleted})
	refused("while a run is queued", queued.ID)
	mustFinish(t, s, alice, queued.ID, store.RunEnd{Status: store.RunCancelled})
	if err := s.DeleteSession(ctx, newUser("bob"), sess.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("bob's DeleteSession: %v, want ErrNotFound", err)
	}
	if err := s.DeleteSession(ctx, alice, sess.ID); err != nil {
		t.Fatalf("DeleteSession once idle: %v", err)
	}
}

// testTranscript: the session, its records and its running run, read together; another user's
// session is not found.
func testTranscript(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess := createSession(t, s, alice)
	first := mustAppend(t, s, alice, userRecord(sess.ID, "hello"))
	tr, err := s.Transcript(ctx, alice, sess.ID)
	if err != nil {
		t.Fatalf("Transcript: %v", err)
	}
	if tr.Session.ID != sess.ID || len(tr.Records) != 1 || tr.Records[0].ID != first.ID || tr.RunningRunID != "" {
		t.Errorf("Transcript of an idle session = %+v", tr)
	}
	run := createRun(t, s, alice, sess.ID)
	asst := mustAppend(t, s, alice, runAssistant(run, "call_1"))
	tr, err = s.Transcript(ctx, alice, sess.ID)
	if err != nil {
		t.Fatalf("Transcript: %v", err)
	}
	if tr.RunningRunID != run.ID || len(tr.Records) != 2 || len(tr.Records[1].ToolCalls) != 1 || tr.Records[1].ID != asst.ID {
		t.Errorf("Transcript while a run runs = %+v", tr)
	}
	_, err = s.Transcript(ctx, newUser("bob"), sess.ID)
	wantErr(t, "bob's Transcript", err, store.ErrNotFound)
	_, err = s.Transcript(ctx, alice, "no-such-session")
	wantErr(t, "Transcript(unknown)", err, store.ErrNotFound)
}
