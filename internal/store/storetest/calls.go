package storetest

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"chatd/internal/store"
)

// testModelCalls: the diagnostics of model calls are stored with the turn they made (AppendTurn) or
// with the run's end (FinishRun), read back whole and in order by the run's owner only, not stored with
// a turn the store refuses, and deleted with the session.
func testModelCalls(t *testing.T, s store.Store) {
	ctx, alice, bob := t.Context(), newUser("alice"), newUser("bob")
	sess := createSession(t, s, alice)
	run := createRun(t, s, alice, sess.ID)
	mustAppend(t, s, alice, userRecord(sess.ID, "hi"))
	call := func(n int, system string, same bool, output string) store.ModelCall {
		c := store.ModelCall{RunID: run.ID, SessionID: sess.ID, N: n, Model: "x/m", System: system, SameSystem: same,
			Tools: []string{"current_time"}, Settings: json.RawMessage(`{"max_tokens":100}`),
			Request: []byte{0x1f, 0x8b, 0, byte(n)}}
		if output != "" {
			c.Output = json.RawMessage(output)
		}
		return c
	}
	first := []store.ModelCall{call(1, "You help.", false, ""), call(2, "", true, `{"text":"Let me look."}`)}
	first[0].RequestOmitted, first[0].Request, first[0].Tools = "too large", nil, nil
	turn := runAssistant(run, "call_1")
	if err := s.AppendTurn(ctx, alice, &turn, nil, first); err != nil {
		t.Fatalf("AppendTurn with calls: %v", err)
	}
	refused := userRecord(sess.ID, "too soon") // a call is open
	wantErr(t, "AppendTurn while a call is open", s.AppendTurn(ctx, alice, &refused, nil,
		[]store.ModelCall{call(9, "x", false, "")}), store.ErrConflict)
	mustAppend(t, s, alice, toolResult(turn, "call_1"))
	last := []store.ModelCall{call(3, "You help, again.", false, "")}
	mustFinish(t, s, alice, run.ID, store.RunEnd{Status: store.RunFailed, Calls: last})

	got, err := s.ModelCalls(ctx, alice, run.ID)
	if err != nil {
		t.Fatalf("ModelCalls: %v", err)
	}
	want := append(append([]store.ModelCall{}, first...), last...)
	want[0].Tools = []string{} // none stored reads back as an empty list
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(store.ModelCall{}, "CreatedAt"), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("ModelCalls (-want +got):\n%s", diff)
	}
	for _, c := range got {
		if c.CreatedAt.IsZero() {
			t.Errorf("call %d has no CreatedAt", c.N)
		}
	}
	if got[0].Request != nil {
		t.Errorf("an omitted request reads back as %v", got[0].Request)
	}
	_, err = s.ModelCalls(ctx, bob, run.ID)
	wantErr(t, "ModelCalls of another user's run", err, store.ErrNotFound)
	_, err = s.ModelCalls(ctx, alice, "no-such-run")
	wantErr(t, "ModelCalls of no run", err, store.ErrNotFound)

	// Another user's turn cannot file calls under alice's run.
	bobSess := createSession(t, s, bob)
	bobRec := userRecord(bobSess.ID, "mine")
	if err := s.AppendTurn(ctx, bob, &bobRec, nil, []store.ModelCall{call(7, "x", false, "")}); err != nil {
		t.Fatalf("bob's AppendTurn: %v", err)
	}
	if got, _ := s.ModelCalls(ctx, alice, run.ID); len(got) != 3 {
		t.Errorf("alice's run has %d calls after bob's turn named it, want 3", len(got))
	}

	if err := s.DeleteSession(ctx, alice, sess.ID); err != nil {
		t.Fatal(err)
	}
	_, err = s.ModelCalls(ctx, alice, run.ID)
	wantErr(t, "ModelCalls of a deleted session's run", err, store.ErrNotFound)
}

// testTitleSession: a generated title replaces a title the user did not set — none, or the one a run
// cut from the first message — and never one the user set, by creating the session with it or by
// UpdateSession, whenever that happened.
func testTitleSession(t *testing.T, s store.Store) {
	ctx, alice, bob := t.Context(), newUser("alice"), newUser("bob")
	title := func(id string) string {
		t.Helper()
		sess, err := s.Session(ctx, alice, id)
		if err != nil {
			t.Fatal(err)
		}
		return sess.Title
	}
	generate := func(id, title string, want bool) {
		t.Helper()
		set, err := s.TitleSession(ctx, alice, id, title)
		if err != nil || set != want {
			t.Errorf("TitleSession(%q) = %v, %v; want %v", title, set, err, want)
		}
	}

	// A session a run made, titled with the cut of its message.
	run := &store.Run{NewSession: &store.Session{Agent: "default"}, Title: "What is the weather in…"}
	first := store.Record{Role: store.RoleUser, Content: "What is the weather in Paris today and tomorrow?"}
	if err := s.CreateRun(ctx, alice, run, &first); err != nil {
		t.Fatal(err)
	}
	before, _ := s.Session(ctx, alice, run.SessionID)
	generate(run.SessionID, "Paris weather", true)
	if got := title(run.SessionID); got != "Paris weather" {
		t.Errorf("title %q, want the generated one", got)
	}
	if after, _ := s.Session(ctx, alice, run.SessionID); !after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Errorf("TitleSession moved UpdatedAt from %v to %v", before.UpdatedAt, after.UpdatedAt)
	}
	generate(run.SessionID, "Weather", true) // a title chatd made may be made again

	// Renamed by the user: kept.
	renamed := "My trip"
	if _, err := s.UpdateSession(ctx, alice, run.SessionID, store.SessionPatch{Title: &renamed}); err != nil {
		t.Fatal(err)
	}
	generate(run.SessionID, "Paris weather", false)
	if got := title(run.SessionID); got != renamed {
		t.Errorf("title %q after a rename, want %q kept", got, renamed)
	}
	// A metadata change is not a rename.
	other := &store.Run{NewSession: &store.Session{Agent: "default"}, Title: "cut"}
	if err := s.CreateRun(ctx, alice, other, &store.Record{Role: store.RoleUser, Content: "cut"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateSession(ctx, alice, other.SessionID, store.SessionPatch{Metadata: json.RawMessage(`{"a":1}`)}); err != nil {
		t.Fatal(err)
	}
	generate(other.SessionID, "Generated", true)

	// Created with a title: kept; created without one: titled.
	named := &store.Session{Agent: "default", Title: "Named"}
	unnamed := &store.Session{Agent: "default"}
	for _, sess := range []*store.Session{named, unnamed} {
		if err := s.CreateSession(ctx, alice, sess); err != nil {
			t.Fatal(err)
		}
	}
	generate(named.ID, "Generated", false)
	generate(unnamed.ID, "Generated", true)
	if got := title(named.ID); got != "Named" {
		t.Errorf("title %q, want the one it was created with", got)
	}

	_, err := s.TitleSession(ctx, bob, unnamed.ID, "Bob's")
	wantErr(t, "TitleSession of another user's session", err, store.ErrNotFound)
	_, err = s.TitleSession(ctx, alice, "no-such-session", "x")
	wantErr(t, "TitleSession of no session", err, store.ErrNotFound)
	if got := title(unnamed.ID); got != "Generated" {
		t.Errorf("title %q after another user's TitleSession", got)
	}
}

// testModelCallsSafe: diagnostics never make a write fail: a NUL character in a call's text (a payload
// summary in the system prompt, an MCP tool's description) is stored as U+FFFD, in both stores alike,
// and a call stored already — carried again by the run's end after a write whose acknowledgement was
// lost — is skipped, not refused.
func testModelCallsSafe(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess := createSession(t, s, alice)
	run := createRun(t, s, alice, sess.ID)
	mustAppend(t, s, alice, userRecord(sess.ID, "hi"))
	calls := []store.ModelCall{{RunID: run.ID, SessionID: sess.ID, N: 1, Model: "x/m",
		System: "Earlier payloads:\n- pl_1 (card): a\x00b", RequestOmitted: "why\x00not"}}
	turn := runAssistant(run)
	if err := s.AppendTurn(ctx, alice, &turn, nil, calls); err != nil {
		t.Fatalf("AppendTurn with a NUL in a call's system prompt: %v", err)
	}
	again := append(calls, store.ModelCall{RunID: run.ID, SessionID: sess.ID, N: 2, Model: "x/m", SameSystem: true})
	mustFinish(t, s, alice, run.ID, store.RunEnd{Status: store.RunCompleted, Calls: again})
	got, err := s.ModelCalls(ctx, alice, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].System != "Earlier payloads:\n- pl_1 (card): a\uFFFDb" || got[0].RequestOmitted != "why\uFFFDnot" {
		t.Errorf("calls %+v", got)
	}
}

// testModelCallsKeepRequests: the end of a run with KeepRequests drops the request bodies of the
// calls of its session's older runs, and keeps the rest of each call; other sessions keep theirs.
func testModelCallsKeepRequests(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess, other := createSession(t, s, alice), createSession(t, s, alice)
	body := []byte{0x1f, 0x8b, 1}
	runWithCall := func(sessionID string, keep int) *store.Run {
		t.Helper()
		run := createRun(t, s, alice, sessionID)
		mustFinish(t, s, alice, run.ID, store.RunEnd{Status: store.RunCompleted, KeepRequests: keep, RequestsDropped: "dropped",
			Calls: []store.ModelCall{{RunID: run.ID, SessionID: sessionID, N: 1, Model: "x/m", System: "s", Request: body,
				Output: json.RawMessage(`{"text":"hi"}`)}}})
		return run
	}
	otherRun := runWithCall(other.ID, 0)
	var runs []*store.Run
	for range 4 {
		runs = append(runs, runWithCall(sess.ID, 2))
	}
	for i, run := range runs {
		got, err := s.ModelCalls(ctx, alice, run.ID)
		if err != nil || len(got) != 1 {
			t.Fatalf("run %d: %+v, %v", i, got, err)
		}
		kept := i >= 2
		if c := got[0]; (c.Request != nil) != kept || (c.RequestOmitted == "dropped") == kept || c.System != "s" || c.Output == nil {
			t.Errorf("run %d of 4 (latest 2 keep their requests): request %v, omitted %q, system %q, output %s", i+1, c.Request, c.RequestOmitted, c.System, c.Output)
		}
	}
	if got, _ := s.ModelCalls(ctx, alice, otherRun.ID); len(got) != 1 || got[0].Request == nil {
		t.Errorf("another session's call lost its request: %+v", got)
	}
}
