package storetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/store"
)

func createRun(t *testing.T, s store.Store, user, sessionID string) *store.Run {
	t.Helper()
	run := &store.Run{SessionID: sessionID, Agent: "default", Model: "openai/gpt-4o-mini"}
	if err := s.CreateRun(t.Context(), user, run); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	return run
}

// testFinishRun: FinishRun closes the run's open calls with failed tool records in call order, ends the
// run, and refuses to end it twice.
func testFinishRun(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess := createSession(t, s, alice)
	run := createRun(t, s, alice, sess.ID)
	if run.ID == "" || run.Status != store.RunRunning || run.CreatedAt.IsZero() || run.EndedAt != nil {
		t.Fatalf("CreateRun returned %+v", run)
	}
	if got, err := s.Run(ctx, alice, run.ID); err != nil || !cmp.Equal(run, got) {
		t.Fatalf("Run = %+v, %v; want %+v", got, err, run)
	}

	mustAppend(t, s, alice, store.Record{SessionID: sess.ID, RunID: run.ID, Role: store.RoleUser, Content: "go"})
	asst := assistantCalls(sess.ID, "call_1", "call_2", "call_3")
	asst.RunID = run.ID
	asst = mustAppend(t, s, alice, asst)
	mustAppend(t, s, alice, toolResult(asst, "call_2"))

	end := store.RunEnd{Status: store.RunCancelled, FinishReason: "cancelled", Error: "stopped by the user",
		Usage: store.Usage{InputTokens: 100, OutputTokens: 20}, Reason: "the run was cancelled before this call finished"}
	added, err := s.FinishRun(ctx, alice, run.ID, end)
	if err != nil {
		t.Fatalf("FinishRun: %v", err)
	}
	var want []store.Record
	for i, id := range []string{"call_1", "call_3"} {
		want = append(want, store.Record{SessionID: sess.ID, RunID: run.ID, Role: store.RoleTool,
			Content: end.Reason, ToolCallID: id, Name: "get_weather", Success: ptr(false),
			DurationMS: ptr(int64(0)), ParentID: asst.ID, Seq: asst.Seq + 2 + int64(i)})
	}
	ignore := cmp.FilterPath(func(p cmp.Path) bool {
		return p.Last().String() == ".ID" || p.Last().String() == ".CreatedAt"
	}, cmp.Ignore())
	if diff := cmp.Diff(want, added, cmpOpts, ignore); diff != "" {
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
		got.EndedAt.Location() != time.UTC || !got.CreatedAt.Equal(run.CreatedAt) {
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
	_, err = s.FinishRun(ctx, user, "no-such-run", store.RunEnd{Status: store.RunCompleted})
	wantErr(t, "FinishRun(unknown)", err, store.ErrNotFound)

	asst := assistantCalls(sessionID, "call_1")
	asst.RunID = run.ID
	mustAppend(t, s, user, asst)
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

// testFinishRunOwnCallsOnly: FinishRun closes the calls of its run, not another run's.
func testFinishRunOwnCallsOnly(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess := createSession(t, s, alice)
	first, second := createRun(t, s, alice, sess.ID), createRun(t, s, alice, sess.ID)
	asst := assistantCalls(sess.ID, "call_1")
	asst.RunID = first.ID
	asst = mustAppend(t, s, alice, asst)
	if added, err := s.FinishRun(ctx, alice, second.ID, store.RunEnd{Status: store.RunInterrupted}); err != nil ||
		len(added) != 0 {
		t.Fatalf("FinishRun(second) = %+v, %v; want nothing appended", added, err)
	}
	mustAppend(t, s, alice, toolResult(asst, "call_1")) // still open for its own run
}

// testDeleteCascades: deleting a session deletes its records, calls and runs, and nothing else.
func testDeleteCascades(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess, kept := createSession(t, s, alice), createSession(t, s, alice)
	run := createRun(t, s, alice, sess.ID)
	asst := assistantCalls(sess.ID, "call_1", "call_2")
	asst.RunID = run.ID
	asst = mustAppend(t, s, alice, asst)
	mustAppend(t, s, alice, toolResult(asst, "call_1"))
	mustAppend(t, s, alice, userRecord(kept.ID, "keep me"))
	if err := s.AddUsage(ctx, alice, store.UsageEntry{RunID: run.ID, SessionID: sess.ID, Model: "m",
		Usage: store.Usage{InputTokens: 1}}); err != nil {
		t.Fatalf("AddUsage: %v", err)
	}

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
	if got := records(t, s, alice, kept.ID); len(got) != 1 || got[0].Content != "keep me" {
		t.Errorf("the other session's records = %+v", got)
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

// testInterruptRunning: at start-up the runs a dead process left running end as interrupted, for every
// user, with their open calls closed and their usage summed; ended runs are untouched; the sessions
// accept the next message. Other subtests' runs may share the store: only this subtest's are checked.
func testInterruptRunning(t *testing.T, s store.Store) {
	ctx := t.Context()
	type left struct {
		user string
		run  *store.Run
		sess string
	}
	var runs []left
	for _, name := range []string{"alice", "bob"} {
		user := newUser(name)
		sess := createSession(t, s, user)
		run := createRun(t, s, user, sess.ID)
		mustAppend(t, s, user, store.Record{SessionID: sess.ID, RunID: run.ID, Role: store.RoleUser, Content: "go"})
		asst := assistantCalls(sess.ID, "call_1")
		asst.RunID = run.ID
		mustAppend(t, s, user, asst)
		for range 2 {
			if err := s.AddUsage(ctx, user, store.UsageEntry{RunID: run.ID, SessionID: sess.ID, Model: "m",
				Usage: store.Usage{InputTokens: 10, OutputTokens: 3}}); err != nil {
				t.Fatal(err)
			}
		}
		runs = append(runs, left{user, run, sess.ID})
	}
	done := runs[0]
	finished := createRun(t, s, done.user, done.sess)
	if _, err := s.FinishRun(ctx, done.user, finished.ID, store.RunEnd{Status: store.RunCompleted}); err != nil {
		t.Fatal(err)
	}

	ended, err := s.InterruptRunning(ctx, "chatd stopped before this call finished")
	if err != nil {
		t.Fatalf("InterruptRunning: %v", err)
	}
	byID := map[string]store.Run{}
	for _, r := range ended {
		byID[r.ID] = r
	}
	if _, again := byID[finished.ID]; again {
		t.Error("InterruptRunning ended a run that had already ended")
	}
	for _, l := range runs {
		r, ok := byID[l.run.ID]
		if !ok || r.Status != store.RunInterrupted || r.EndedAt == nil || r.Usage.InputTokens != 20 || r.Usage.OutputTokens != 6 {
			t.Errorf("%s's run after InterruptRunning: %+v (found %v)", l.user, r, ok)
		}
		recs := records(t, s, l.user, l.sess)
		last := recs[len(recs)-1]
		if last.Role != store.RoleTool || last.ToolCallID != "call_1" || last.Success == nil || *last.Success ||
			last.Content != "chatd stopped before this call finished" {
			t.Errorf("%s's open call was not closed: %+v", l.user, last)
		}
		mustAppend(t, s, l.user, userRecord(l.sess, "the conversation goes on"))
	}
	if again, err := s.InterruptRunning(ctx, "x"); err != nil {
		t.Fatal(err)
	} else {
		for _, r := range again {
			if _, mine := byID[r.ID]; mine {
				t.Errorf("run %s interrupted twice", r.ID)
			}
		}
	}
}
