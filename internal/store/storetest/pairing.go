package storetest

import (
	"encoding/json"
	"testing"

	"chatd/internal/store"
)

// testPairing checks every way to break the pairing invariant while an assistant record's calls are
// open, then that answering them all lets the conversation go on.
func testPairing(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess, elsewhere := createSession(t, s, alice), createSession(t, s, alice)
	question := mustAppend(t, s, alice, userRecord(sess.ID, "weather in Paris and Rome?"))
	asst := mustAppend(t, s, alice, assistantCalls(sess.ID, "call_1", "call_2"))
	// An open call in another session of the same user.
	mustAppend(t, s, alice, userRecord(elsewhere.ID, "hi"))
	foreign := mustAppend(t, s, alice, assistantCalls(elsewhere.ID, "call_1"))

	answer := func(parent, call string) store.Record {
		return store.Record{SessionID: sess.ID, Role: store.RoleTool, ParentID: parent, ToolCallID: call}
	}
	refused := []struct {
		name string
		r    store.Record
	}{
		{"tool record without parent", answer("", "call_1")},
		{"tool record without call id", answer(asst.ID, "")},
		{"tool record for a call the parent does not hold", answer(asst.ID, "call_9")},
		{"tool record whose parent is a user record", answer(question.ID, "call_1")},
		{"tool record whose parent does not exist", answer("no-such-record", "call_1")},
		{"tool record whose parent is in another session", answer(foreign.ID, "call_1")},
		{"user record while calls are open", userRecord(sess.ID, "hello?")},
		{"assistant record while calls are open", store.Record{SessionID: sess.ID, Role: store.RoleAssistant}},
		{"system record while calls are open", store.Record{SessionID: sess.ID, Role: store.RoleSystem}},
		{"user record naming a tool call", store.Record{SessionID: sess.ID, Role: store.RoleUser,
			ToolCallID: "call_1"}},
		{"record with an unknown role", store.Record{SessionID: sess.ID, Role: "robot"}},
	}
	for _, tc := range refused {
		r := tc.r
		wantErr(t, tc.name, s.AppendRecord(ctx, alice, &r), store.ErrConflict)
	}

	first := mustAppend(t, s, alice, toolResult(asst, "call_2")) // any order within the record
	second := toolResult(asst, "call_2")
	wantErr(t, "second answer to the same call", s.AppendRecord(ctx, alice, &second), store.ErrConflict)
	last := mustAppend(t, s, alice, toolResult(asst, "call_1"))
	if first.Seq != asst.Seq+1 || last.Seq != asst.Seq+2 {
		t.Errorf("tool records at Seq %d and %d, want right after the assistant record (%d)",
			first.Seq, last.Seq, asst.Seq)
	}
	again := toolResult(asst, "call_1")
	wantErr(t, "answer to a call answered before", s.AppendRecord(ctx, alice, &again), store.ErrConflict)
	mustAppend(t, s, alice, userRecord(sess.ID, "thanks"))
	wantSeqs(t, records(t, s, alice, sess.ID))
}

// testToolCallIDReuse: providers repeat call ids across turns, so pairing is per assistant record.
func testToolCallIDReuse(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess := createSession(t, s, alice)
	mustAppend(t, s, alice, userRecord(sess.ID, "time?"))
	turn1 := mustAppend(t, s, alice, assistantCalls(sess.ID, "call_0"))
	mustAppend(t, s, alice, toolResult(turn1, "call_0"))
	mustAppend(t, s, alice, store.Record{SessionID: sess.ID, Role: store.RoleAssistant, Content: "noon"})
	mustAppend(t, s, alice, userRecord(sess.ID, "and now?"))
	turn2 := mustAppend(t, s, alice, assistantCalls(sess.ID, "call_0"))

	stale := toolResult(turn1, "call_0")
	wantErr(t, "answer to the first turn's call_0 again", s.AppendRecord(ctx, alice, &stale), store.ErrConflict)
	mustAppend(t, s, alice, toolResult(turn2, "call_0"))
	mustAppend(t, s, alice, store.Record{SessionID: sess.ID, Role: store.RoleAssistant, Content: "12:01"})

	got := records(t, s, alice, sess.ID)
	wantSeqs(t, got)
	for _, i := range []int{2, 6} {
		if got[i].ParentID != got[i-1].ID || got[i].ToolCallID != "call_0" {
			t.Errorf("record %d answers %s/%s, want %s/call_0", i, got[i].ParentID, got[i].ToolCallID, got[i-1].ID)
		}
	}
}

// testToolCallValidation: an assistant record's calls need distinct, non-empty ids and object arguments.
// A refused record leaves nothing behind: no Seq taken, no call left open.
func testToolCallValidation(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess := createSession(t, s, alice)
	mustAppend(t, s, alice, userRecord(sess.ID, "go"))
	call := func(id, args string) store.ToolCall {
		return store.ToolCall{ID: id, Name: "f", Arguments: json.RawMessage(args)}
	}
	for _, tc := range []struct {
		name  string
		calls []store.ToolCall
	}{
		{"duplicate call ids", []store.ToolCall{call("call_1", `{}`), call("call_1", `{}`)}},
		{"empty call id", []store.ToolCall{call("", `{}`)}},
		{"array arguments", []store.ToolCall{call("call_1", `[1]`)}},
		{"string arguments", []store.ToolCall{call("call_1", `"{}"`)}},
		{"invalid JSON arguments", []store.ToolCall{call("call_1", `{"a":`)}},
	} {
		r := store.Record{SessionID: sess.ID, Role: store.RoleAssistant, ToolCalls: tc.calls}
		wantErr(t, tc.name, s.AppendRecord(ctx, alice, &r), store.ErrConflict)
	}
	r := store.Record{SessionID: sess.ID, Role: store.RoleUser,
		ToolCalls: []store.ToolCall{call("call_1", `{}`)}}
	wantErr(t, "tool calls on a user record", s.AppendRecord(ctx, alice, &r), store.ErrConflict)
	mustAppend(t, s, alice, userRecord(sess.ID, "still open for business"))
	wantSeqs(t, records(t, s, alice, sess.ID))
}
