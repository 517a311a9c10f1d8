package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestDiagnosticsAfterRestart: the diagnostics of a run with a tool round, read from a chatd started
// again on the same database, show each model call's request exactly as aimock received it, and the
// model's raw answers.
func TestDiagnosticsAfterRestart(t *testing.T) {
	t.Parallel()
	mockPort := startAimock(t, "testdata/aimock-fixtures.json", "--strict")
	mock := fmt.Sprintf("http://127.0.0.1:%d", mockPort)
	db := filepath.Join(t.TempDir(), "chatd.db")
	env := []string{"OPENAI_API_KEY=" + apiKey, "OPENAI_BASE_URL=" + mock + "/v1",
		"ANTHROPIC_API_KEY=", "ANTHROPIC_BASE_URL=", "GEMINI_API_KEY=", "GEMINI_BASE_URL=", "OLLAMA_HOST=",
		"CHATD_CONFIG=", "CHATD_MODEL=openai/gpt-4o-mini", "CHATD_MCP_CONFIG="}
	bin := buildChatd(t)
	p := startChatd(t, "chatd", bin, db, env...)
	r := p.chat(t, map[string]any{"message": "What time is it in Paris and in Tokyo?", "context": map[string]any{"page": "clocks"}}, "")
	if r.last().Type != "done" || r.last().Data["status"] != "completed" {
		t.Fatalf("run: %d %v", r.status, r.last())
	}
	runID := r.events[0].Data["run_id"].(string)
	p.terminate(t)
	if _, ok := p.waitExit(30 * time.Second); !ok {
		t.Fatal("chatd did not stop within 30s of SIGTERM")
	}
	p = startChatd(t, "chatd (restarted)", bin, db, env...)

	var journal []struct{ Body json.RawMessage }
	getJSON(t, mock+"/__aimock/journal", &journal)
	if len(journal) != 2 {
		t.Fatalf("aimock saw %d requests, want 2", len(journal))
	}
	type diag struct {
		Model         string
		Call          int
		ModelCalls    int    `json:"model_calls"`
		SystemPrompt  string `json:"system_prompt"`
		Tools         []string
		Context       map[string]any
		MaxIterations int `json:"max_iterations"`
		Request       json.RawMessage
		Output        struct {
			Text      string
			ToolCalls []struct{ ID, Name string } `json:"tool_calls"`
		}
		Calls []struct{ Call int }
	}
	for n := 1; n <= 2; n++ {
		var d diag
		getJSON(t, fmt.Sprintf("%s/v1/runs/%s/diagnostics?call=%d", p.base, runID, n), &d)
		if d.Call != n || d.ModelCalls != 2 || len(d.Calls) != 2 || d.Model != "openai/gpt-4o-mini" ||
			!cmp.Equal(d.Tools, []string{"current_time"}) || d.Context["page"] != "clocks" || d.SystemPrompt == "" {
			t.Errorf("call %d: %+v", n, d)
		}
		var sent map[string]any
		var got any
		if err := json.Unmarshal(journal[n-1].Body, &sent); err != nil {
			t.Fatal(err)
		}
		delete(sent, "_endpointType") // aimock's note in its journal, not part of the request
		if err := json.Unmarshal(d.Request, &got); err != nil {
			t.Fatalf("call %d: request %s: %v", n, d.Request, err)
		}
		if diff := cmp.Diff(any(sent), got); diff != "" {
			t.Errorf("call %d: the request in the diagnostics differs from what aimock received (-aimock +chatd):\n%s", n, diff)
		}
		switch n {
		case 1:
			if len(d.Output.ToolCalls) != 2 || d.Output.ToolCalls[0].ID != "call_paris" {
				t.Errorf("call 1's answer: %+v", d.Output)
			}
		case 2:
			if d.Output.Text != "In Paris it is 10:00; in Tokyo it is 18:00." {
				t.Errorf("call 2's answer: %+v", d.Output)
			}
		}
	}
}
