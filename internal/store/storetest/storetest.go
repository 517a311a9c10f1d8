// Package storetest is the contract suite every store.Store implementation runs (store/sqlite, and
// store/postgres later): sessions, records and the pairing invariant, runs and their queue, idempotency
// keys, event logs, usage, user scoping and concurrent writes. It imports store and test helpers only,
// never an implementation.
//
// Where store.go leaves the error of a bad input open, the suite pins the answer both stores give, so the
// HTTP layer maps them one way: a record or patch that breaks a rule of the records' shape is
// store.ErrConflict, a page cursor the store did not issue is store.ErrNotFound, a first record of
// another session than its run's is store.ErrConflict, and a taken idempotency key is
// store.ErrDuplicate even while the session is busy.
package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/uuid"

	"chatd/internal/store"
)

// Run runs the contract suite. open returns an empty store for one subtest and arranges (t.Cleanup) to
// close it. Subtests name their users uniquely, so a store shared between subtests also works.
//
// Timestamps are compared as the store reports them, so a store whose clock returns the same instant
// for every call passes too; running the suite that way is how a store proves pagination under ties.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"SessionCRUD", testSessionCRUD},
		{"SessionsPagination", testSessionsPagination},
		{"SessionsPageLimits", testSessionsPageLimits},
		{"OtherUser", testOtherUser},
		{"AppendOrder", testAppendOrder},
		{"RoundTrip", testRoundTrip},
		{"RecordsAfter", testRecordsAfter},
		{"AppendTurn", testAppendTurn},
		{"ModelCalls", testModelCalls},
		{"ModelCallsSafe", testModelCallsSafe},
		{"ModelCallsKeepRequests", testModelCallsKeepRequests},
		{"TitleSession", testTitleSession},
		{"Pairing", testPairing},
		{"ToolCallIDReusedAcrossTurns", testToolCallIDReuse},
		{"ToolCallValidation", testToolCallValidation},
		{"FinishRun", testFinishRun},
		{"AwaitingRun", testAwaitingRun},
		{"StaleCancelOfAResumedRun", testStaleCancel},
		{"ResumeRunQuota", testResumeRunQuota},
		{"ResumeRunQueuedBehind", testResumeRunQueuedBehind},
		{"ResumeRunKeyRevoked", testResumeRunKeyRevoked},
		{"AwaitingRunsOfKey", testAwaitingRunsOfKey},
		{"ActiveRunsOfKey", testActiveRunsOfKey},
		{"FinishRunOwnCallsOnly", testFinishRunOwnCallsOnly},
		{"CloseCalls", testCloseCalls},
		{"RunUsageSoFar", testRunUsageSoFar},
		{"UnfinishedRuns", testUnfinishedRuns},
		{"CreateRunWithFirstRecord", testCreateRunFirstRecord},
		{"CreateRunRefused", testCreateRunRefused},
		{"CreateRunAfterSeq", testCreateRunAfterSeq},
		{"CreateRunNewSession", testCreateRunNewSession},
		{"CreateRunTitle", testCreateRunTitle},
		{"ReservedSeq", testReservedSeq},
		{"OneRunningRunPerSession", testOneRunningPerSession},
		{"StartRun", testStartRun},
		{"FinishQueuedRun", testFinishQueuedRun},
		{"IdempotencyKey", testIdempotencyKey},
		{"ConcurrentCreateRun", testConcurrentCreateRun},
		{"EventLog", testEventLog},
		{"AppendEventsAtomic", testAppendEventsAtomic},
		{"FinishRunEvents", testFinishRunEvents},
		{"DeleteCascades", testDeleteCascades},
		{"DeleteRefusedWhileBusy", testDeleteRefusedWhileBusy},
		{"Transcript", testTranscript},
		{"Usage", testUsage},
		{"ConcurrentAppend", testConcurrentAppend},
		{"Retracts", testRetracts},
		{"Parsed", testParsed},
		{"Keys", testKeys},
		{"CreateKeyRefused", testCreateKeyRefused},
		{"RevokeKey", testRevokeKey},
		{"SignIns", testSignIns},
		{"SignInsBounded", testSignInsBounded},
		{"SignInsSwept", testSignInsSwept},
		{"QuotaConcurrentRuns", testQuotaConcurrentRuns},
		{"QuotaKeyRuns", testQuotaKeyRuns},
		{"QuotaRace", testQuotaRace},
		{"QuotaUsage", testQuotaUsage},
		{"UsageTotals", testUsageTotals},
		{"RunKeyID", testRunKeyID},
		{"Ready", testReady},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

// testReady: a store that is open and migrated is ready; asked with a context that has ended, it is not
// (the check does go to the database).
func testReady(t *testing.T, s store.Store) {
	if err := s.Ready(t.Context()); err != nil {
		t.Fatalf("Ready = %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Ready(ctx); err == nil {
		t.Error("Ready with an ended context = nil, want an error")
	}
}

// cmpOpts compares records and sessions: an empty slice and nil mean the same (no attachments).
var cmpOpts = cmp.Options{cmpopts.EquateEmpty()}

// newUser returns a user name no other subtest uses.
func newUser(name string) string {
	return name + "-" + uuid.NewString()
}

func ptr[T any](v T) *T { return &v }

func createSession(t *testing.T, s store.Store, user string) *store.Session {
	t.Helper()
	sess := &store.Session{Title: "a chat", Agent: "default"}
	if err := s.CreateSession(t.Context(), user, sess); err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	return sess
}

// mustAppend appends r and returns it as the store completed it.
func mustAppend(t *testing.T, s store.Store, user string, r store.Record) store.Record {
	t.Helper()
	if err := s.AppendRecord(t.Context(), user, &r); err != nil {
		t.Fatalf("AppendRecord(%s %q): %v", r.Role, r.Content, err)
	}
	return r
}

func userRecord(sessionID, text string) store.Record {
	return store.Record{SessionID: sessionID, Role: store.RoleUser, Content: text}
}

// assistantCalls is an assistant record holding calls with the given ids.
func assistantCalls(sessionID string, ids ...string) store.Record {
	r := store.Record{SessionID: sessionID, Role: store.RoleAssistant, FinishReason: "tool_calls"}
	for _, id := range ids {
		r.ToolCalls = append(r.ToolCalls, store.ToolCall{ID: id, Name: "get_weather",
			Arguments: []byte(`{"city":"Paris"}`)})
	}
	return r
}

// toolResult answers call id of parent.
func toolResult(parent store.Record, id string) store.Record {
	return store.Record{SessionID: parent.SessionID, RunID: parent.RunID, Role: store.RoleTool,
		ParentID: parent.ID, ToolCallID: id, Name: "get_weather", Content: "sunny",
		Success: ptr(true), DurationMS: ptr(int64(3))}
}

func createRun(t *testing.T, s store.Store, user, sessionID string) *store.Run {
	t.Helper()
	run := &store.Run{SessionID: sessionID, Agent: "default", Model: "openai/gpt-4o-mini"}
	if err := s.CreateRun(t.Context(), user, run, nil); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	return run
}

// queueRun creates a queued run carrying request.
func queueRun(t *testing.T, s store.Store, user, sessionID, request string) *store.Run {
	t.Helper()
	run := &store.Run{SessionID: sessionID, Status: store.RunQueued, Agent: "default", Model: "openai/gpt-4o-mini",
		Request: []byte(request)}
	if err := s.CreateRun(t.Context(), user, run, nil); err != nil {
		t.Fatalf("CreateRun(queued): %v", err)
	}
	if run.Status != store.RunQueued || run.StartedAt != nil {
		t.Fatalf("CreateRun(queued) returned %+v", run)
	}
	return run
}

func getRun(t *testing.T, s store.Store, user, id string) *store.Run {
	t.Helper()
	run, err := s.Run(t.Context(), user, id)
	if err != nil {
		t.Fatalf("Run(%s): %v", id, err)
	}
	return run
}

func mustFinish(t *testing.T, s store.Store, user, runID string, end store.RunEnd) []store.Record {
	t.Helper()
	added, err := s.FinishRun(t.Context(), user, runID, end)
	if err != nil {
		t.Fatalf("FinishRun(%s): %v", runID, err)
	}
	return added
}

// wantNoRun fails unless the user has no run with this id.
func wantNoRun(t *testing.T, s store.Store, user, id string) {
	t.Helper()
	if r, err := s.Run(t.Context(), user, id); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Run(%s) = %+v, %v; want no such run", id, r, err)
	}
}

// runAssistant is an assistant record of run holding calls with the given ids.
func runAssistant(run *store.Run, ids ...string) store.Record {
	r := assistantCalls(run.SessionID, ids...)
	r.RunID = run.ID
	return r
}

// ignoreIDAndTime ignores the fields a store assigns that a test cannot predict.
var ignoreIDAndTime = cmp.FilterPath(func(p cmp.Path) bool {
	return p.Last().String() == ".ID" || p.Last().String() == ".CreatedAt"
}, cmp.Ignore())

// closedCalls is what FinishRun or CloseCalls appends for the open calls ids of parent, from Seq on.
func closedCalls(parent store.Record, reason string, seq int64, ids ...string) []store.Record {
	var want []store.Record
	for i, id := range ids {
		want = append(want, store.Record{SessionID: parent.SessionID, RunID: parent.RunID, Role: store.RoleTool,
			Content: reason, ToolCallID: id, Name: "get_weather", Success: ptr(false),
			DurationMS: ptr(int64(0)), ParentID: parent.ID, Seq: seq + int64(i)})
	}
	return want
}

func getSession(t *testing.T, s store.Store, user, id string) *store.Session {
	t.Helper()
	sess, err := s.Session(t.Context(), user, id)
	if err != nil {
		t.Fatalf("Session(%s): %v", id, err)
	}
	return sess
}

func records(t *testing.T, s store.Store, user, sessionID string) []store.Record {
	t.Helper()
	recs, err := s.Records(t.Context(), user, sessionID)
	if err != nil {
		t.Fatalf("Records: %v", err)
	}
	return recs
}

// wantErr fails unless err is target.
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want %v", what, err, target)
	}
}

// wantSeqs fails unless recs carry Seq 1..len(recs).
func wantSeqs(t *testing.T, recs []store.Record) {
	t.Helper()
	for i, r := range recs {
		if r.Seq != int64(i+1) {
			t.Fatalf("record %d (%s %q) has Seq %d, want %d", i, r.Role, r.Content, r.Seq, i+1)
		}
	}
}
