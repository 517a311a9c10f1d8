package chat_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"chatd/internal/chat"
	"chatd/internal/llm/llmtest"
	"chatd/internal/store"
	"chatd/internal/tool"
)

// policyTool is a tool with the annotations a policy reads, counting its calls.
type policyTool struct {
	info  tool.Info
	calls *atomic.Int32
}

func (p policyTool) Info() tool.Info { return p.info }

func (p policyTool) Call(context.Context, json.RawMessage) (tool.Result, error) {
	p.calls.Add(1)
	return tool.Result{Content: p.info.Name + " done"}, nil
}

// toolRecord is the content of the stored tool record answering call id.
func toolRecord(t *testing.T, db store.Store, sessionID, id string) store.Record {
	t.Helper()
	for _, r := range records(t, db, sessionID) {
		if r.Role == store.RoleTool && r.ToolCallID == id {
			return r
		}
	}
	t.Fatalf("no tool record for %s", id)
	return store.Record{}
}

// TestApprovalPolicyDeny: a denied call gets a failed result saying it is not permitted, without
// running, and the model goes on; a call the policy allows runs in the same turn.
func TestApprovalPolicyDeny(t *testing.T) {
	var del, read atomic.Int32
	f := newFixture(t, setup{
		Tools: []tool.Tool{
			policyTool{info: tool.Info{Name: "fs__delete", Description: "Deletes."}, calls: &del},
			policyTool{info: tool.Info{Name: "fs__read", Description: "Reads.", ReadOnly: true}, calls: &read},
		},
		Agents: map[string]chat.Agent{"careful": {Approvals: []tool.ApprovalRule{
			{Tools: []string{"fs__delete"}, Decision: tool.Deny, Reason: "Deleting files is not allowed here."},
		}}},
		Turns: []llmtest.Turn{
			{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "fs__delete", Arguments: `{}`}, {ID: "call_2", Name: "fs__read", Arguments: `{}`}}},
			{Text: "I could not delete it."},
		}})
	st := f.send(t, chat.Request{Agent: "careful", Message: "delete it"}, chat.StartOptions{})
	if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
		t.Fatalf("run: %+v %+v", o, o.Error)
	}
	if del.Load() != 0 || read.Load() != 1 {
		t.Errorf("fs__delete ran %d times (want 0), fs__read %d (want 1)", del.Load(), read.Load())
	}
	rec := toolRecord(t, f.db, st.SessionID, "call_1")
	if rec.Success == nil || *rec.Success || !strings.Contains(rec.Content, "Not permitted: Deleting files is not allowed here.") {
		t.Errorf("denied call's record: success %v, %q", rec.Success, rec.Content)
	}
	if rec := toolRecord(t, f.db, st.SessionID, "call_2"); rec.Success == nil || !*rec.Success {
		t.Errorf("allowed call's record: %+v", rec)
	}
	if reqs := f.up.Requests(); len(reqs) != 2 || !strings.Contains(string(reqs[1].Raw), "Not permitted") {
		t.Errorf("the model was not told the call is not permitted")
	}
}
