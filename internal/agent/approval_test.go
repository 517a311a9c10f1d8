package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
)

// askingTools are fakeTools whose calls named in ask wait for a person.
type askingTools struct {
	fakeTools
	ask map[string]bool
}

func (a askingTools) NeedsApproval(c llm.ToolCall) (string, bool) {
	if a.ask[c.Name] {
		return "ask about " + c.Name, true
	}
	return "", false
}

// TestApprovalWaitsAfterTheOtherCalls: of a turn's three calls one needs approval. The other two run
// (the read-only one while the model streams) and their results are stored; the run then ends awaiting
// approval with the one call, which never ran and has no result, and no second model call is made.
func TestApprovalWaitsAfterTheOtherCalls(t *testing.T) {
	srv := llmtest.NewServer(t, llmtest.Turn{ToolCalls: []llmtest.ToolCall{
		{ID: "call_1", Name: "read_time", Arguments: `{}`},
		{ID: "call_2", Name: "send_mail", Arguments: `{"to":"a@example.com"}`},
		{ID: "call_3", Name: "write_note", Arguments: `{"n":1}`},
	}})
	var mu sync.Mutex
	ran := map[string]int{}
	count := func(name string) func(context.Context, json.RawMessage) agent.ToolResult {
		return func(ctx context.Context, a json.RawMessage) agent.ToolResult {
			mu.Lock()
			ran[name]++
			mu.Unlock()
			return echo(ctx, a)
		}
	}
	tools := askingTools{
		fakeTools: fakeTools{"read_time": count("read_time"), "write_note": count("write_note"), "send_mail": count("send_mail")},
		ask:       map[string]bool{"send_mail": true, "read_time": false},
	}
	rec := &recorder{}
	res := run(t.Context(), config(t, srv, tools), rec)
	if res.Status != agent.StatusAwaitingApproval || res.Err != nil {
		t.Fatalf("result = %+v", res)
	}
	if len(res.Waiting) != 1 || res.Waiting[0].Call.ID != "call_2" || res.Waiting[0].Reason != "ask about send_mail" ||
		string(res.Waiting[0].Call.Arguments) != `{"to":"a@example.com"}` {
		t.Fatalf("waiting = %+v", res.Waiting)
	}
	if ran["send_mail"] != 0 {
		t.Errorf("send_mail ran %d times", ran["send_mail"])
	}
	if len(rec.results) != 2 || !rec.results["call_1"].Success || !rec.results["call_3"].Success {
		t.Errorf("results = %+v, want call_1 and call_3 only", rec.results)
	}
	if _, ok := rec.results["call_2"]; ok {
		t.Error("the waiting call has a result")
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d model calls, want 1", n)
	}
	if rec.has("approval_required call_2") != 1 {
		t.Errorf("no approval_required event in %s", strings.Join(rec.log, "\n"))
	}
}

// TestApprovalNotAskedWhenCancelled: a run cancelled while the other calls run does not wait: the call
// that would have waited gets a failed result too.
func TestApprovalNotAskedWhenCancelled(t *testing.T) {
	srv := llmtest.NewServer(t, llmtest.Turn{ToolCalls: []llmtest.ToolCall{
		{ID: "call_1", Name: "write_note", Arguments: `{}`},
		{ID: "call_2", Name: "send_mail", Arguments: `{}`},
	}})
	ctx, cancel := context.WithCancel(t.Context())
	tools := askingTools{
		fakeTools: fakeTools{"write_note": func(ctx context.Context, a json.RawMessage) agent.ToolResult {
			cancel()
			<-ctx.Done()
			return agent.ToolResult{Content: "cancelled"}
		}},
		ask: map[string]bool{"send_mail": true},
	}
	rec := &recorder{}
	res := run(ctx, config(t, srv, tools), rec)
	if res.Status != agent.StatusCancelled || len(res.Waiting) != 0 {
		t.Fatalf("result = %+v", res)
	}
	if r, ok := rec.results["call_2"]; !ok || r.Success || r.Content != "The run was cancelled before this call ran." {
		t.Errorf("call_2 result = %+v (stored %v)", r, ok)
	}
}
