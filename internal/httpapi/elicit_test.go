package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"chatd/internal/chat"
	"chatd/internal/httpapi"
	"chatd/internal/llm/llmtest"
	"chatd/internal/store/sqlite"
	"chatd/internal/tool"
)

// signupTool asks the person behind its call for a name and an age, as an MCP tool's elicitation
// does, and returns the answer.
type signupTool struct{}

func (signupTool) Info() tool.Info {
	return tool.Info{Name: "crm__signup", Description: "Signs the user up.", Asks: true}
}

func (signupTool) Call(ctx context.Context, _ json.RawMessage) (tool.Result, error) {
	asker, ok := tool.AskerFrom(ctx)
	if !ok {
		return tool.Result{Content: "no asker"}, nil
	}
	ans, err := asker.Ask(ctx, tool.Question{Message: "Who are you?", Schema: json.RawMessage(
		`{"type":"object","required":["name"],"properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0}}}`)})
	if err != nil {
		return tool.Result{}, err
	}
	b, _ := json.Marshal(map[string]any{"action": ans.Action, "content": ans.Content})
	return tool.Result{Content: string(b)}, nil
}

// TestElicitationEndpoint: a running call's question reaches the SSE stream as approval_required with
// source mcp and its fields, GET /v1/runs/{id} says the running run waits on it, an answer that does
// not fit is a 400 naming the field, and the answer reaches the tool.
func TestElicitationEndpoint(t *testing.T) {
	up := llmtest.NewServer(t,
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "crm__signup", Arguments: `{}`}}},
		llmtest.Turn{Text: "Signed up."})
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "chatd.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc, tools := newChat(t, db, up, fixedNow, chat.Options{})
	if err := tools.Register(signupTool{}); err != nil {
		t.Fatal(err)
	}
	e := &env{upstream: up, db: db, chat: svc}
	e.srv = httptest.NewServer(httpapi.New(httpapi.Options{Chat: svc, Store: db, Tools: tools}))
	t.Cleanup(func() {
		e.srv.Close()
		closeChat(t, svc, tools)
		db.Close()
	})

	resp := e.openStream(t, t.Context(), "POST", "/v1/chat/stream", `{"message":"sign me up"}`, nil)
	defer resp.Body.Close()
	runID := resp.Header.Get("X-Run-Id")
	events := readEvents(t, resp.Body, func(ev event) bool { return ev.Type == "approval_required" })
	q := events[len(events)-1]
	fields, _ := json.Marshal(q.Data["fields"])
	if q.Type != "approval_required" || q.Data["source"] != "mcp" || q.Data["kind"] != "question" || q.Data["message"] != "Who are you?" ||
		string(fields) != `[{"name":"name","required":true,"type":"string"},{"minimum":0,"name":"age","type":"integer"}]` {
		t.Fatalf("approval_required: %+v (fields %s)", q, fields)
	}

	r, raw := e.do(t, "GET", "/v1/runs/"+runID, "")
	var run struct {
		Status   string
		Awaiting struct {
			Calls []struct {
				ToolCallID string `json:"tool_call_id"`
				Source     string
				Fields     []map[string]any
			}
		}
	}
	if err := json.Unmarshal(raw, &run); err != nil || r.StatusCode != 200 || run.Status != "running" || len(run.Awaiting.Calls) != 1 ||
		run.Awaiting.Calls[0].Source != "mcp" || len(run.Awaiting.Calls[0].Fields) != 2 {
		t.Fatalf("GET /v1/runs/%s while a question waits: %d %s", runID, r.StatusCode, raw)
	}
	for body, want := range map[string]string{
		`{"tool_call_id":"call_1","decision":"answer","content":{"age":3}}`:               `invalid_answer`,
		`{"tool_call_id":"call_1","decision":"answer","content":{"name":"Ada","age":-1}}`: `field \"age\"`,
		`{"tool_call_id":"call_1","decision":"answer","content":[1]}`:                     `invalid_answer`,
		`{"tool_call_id":"call_1","decision":"approve"}`:                                  `invalid_decision`,
	} {
		if r, raw := e.do(t, "POST", "/v1/runs/"+runID+"/approvals", body); r.StatusCode != 400 || !strings.Contains(string(raw), want) {
			t.Errorf("%s: %d %s, want 400 %s", body, r.StatusCode, raw, want)
		}
	}
	r, raw = e.do(t, "POST", "/v1/runs/"+runID+"/approvals", `{"tool_call_id":"call_1","decision":"answer","content":{"name":"Ada","age":36}}`)
	if r.StatusCode != 200 || !strings.Contains(string(raw), `"status":"running"`) {
		t.Fatalf("answer: %d %s", r.StatusCode, raw)
	}
	events = readEvents(t, resp.Body, nil)
	var decided, complete map[string]any
	for _, ev := range events {
		switch ev.Type {
		case "approval_decided":
			decided = ev.Data
		case "tool_complete":
			complete = ev.Data
		}
	}
	if content, _ := json.Marshal(decided["content"]); decided["decision"] != "answer" || decided["source"] != "mcp" || string(content) != `{"age":36,"name":"Ada"}` {
		t.Errorf("approval_decided: %v", decided)
	}
	if complete["content"] != `{"action":"accept","content":{"age":36,"name":"Ada"}}` {
		t.Errorf("tool_complete: %v", complete)
	}
	if last := events[len(events)-1]; last.Type != "done" || last.Data["status"] != "completed" {
		t.Errorf("the stream ends with %+v", last)
	}
}
