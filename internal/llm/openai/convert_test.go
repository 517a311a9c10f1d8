package openai

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/llm"
)

func TestRequestShape(t *testing.T) {
	temp := 0.2
	req := &llm.Request{
		Model:  "gpt-4o-mini",
		System: "You are terse.",
		Messages: []llm.Message{
			{Role: llm.RoleUser, Parts: []llm.Part{
				{Kind: llm.PartText, Text: "What is in this picture, and what time is it in Paris?"},
				{Kind: llm.PartImage, MediaType: "image/png", Data: []byte{0x89, 'P', 'N', 'G'}},
			}},
			{Role: llm.RoleAssistant, Parts: []llm.Part{{Kind: llm.PartReasoning, Text: "not sent"}},
				ToolCalls: []llm.ToolCall{{ID: "call_1", Name: "current_time", Arguments: json.RawMessage(`{"timezone":"Europe/Paris"}`)}, {ID: "call_2", Name: "noargs"}}},
			{Role: llm.RoleTool, ToolCallID: "call_1", ToolName: "current_time", Parts: []llm.Part{{Kind: llm.PartText, Text: `{"time":"12:00"}`}}},
			{Role: llm.RoleTool, ToolCallID: "call_2", ToolName: "noargs", IsError: true, Parts: []llm.Part{{Kind: llm.PartText, Text: "failed"}}},
			llm.TextMessage(llm.RoleAssistant, "A cat. It is noon."),
		},
		Tools:       []llm.ToolSpec{{Name: "current_time", Description: "Time.", InputSchema: json.RawMessage(`{"type":"object"}`)}, {Name: "noargs"}},
		ToolChoice:  llm.ToolChoiceNone,
		Temperature: &temp,
		MaxTokens:   100,
	}
	for _, tt := range []struct {
		base, maxField string
	}{
		{"https://api.openai.com/v1", "max_completion_tokens"},
		{"http://127.0.0.1:11434/v1", "max_tokens"},
	} {
		c, err := New(Options{BaseURL: tt.base})
		if err != nil {
			t.Fatal(err)
		}
		wire, err := c.newChatRequest(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(wire)
		var got map[string]any
		json.Unmarshal(raw, &got)
		want := map[string]any{
			"model": "gpt-4o-mini",
			"messages": []any{
				map[string]any{"role": "system", "content": "You are terse."},
				map[string]any{"role": "user", "content": []any{
					map[string]any{"type": "text", "text": "What is in this picture, and what time is it in Paris?"},
					map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,iVBORw=="}},
				}},
				map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{
					map[string]any{"id": "call_1", "type": "function", "function": map[string]any{"name": "current_time", "arguments": `{"timezone":"Europe/Paris"}`}},
					map[string]any{"id": "call_2", "type": "function", "function": map[string]any{"name": "noargs", "arguments": `{}`}},
				}},
				map[string]any{"role": "tool", "tool_call_id": "call_1", "content": `{"time":"12:00"}`},
				map[string]any{"role": "tool", "tool_call_id": "call_2", "content": "failed"},
				map[string]any{"role": "assistant", "content": "A cat. It is noon."},
			},
			"tools": []any{
				map[string]any{"type": "function", "function": map[string]any{"name": "current_time", "description": "Time.", "parameters": map[string]any{"type": "object"}}},
				map[string]any{"type": "function", "function": map[string]any{"name": "noargs", "parameters": map[string]any{"type": "object", "properties": map[string]any{}}}},
			},
			"tool_choice":    "none",
			"temperature":    0.2,
			tt.maxField:      float64(100),
			"stream":         true,
			"stream_options": map[string]any{"include_usage": true},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: request (-want +got):\n%s", tt.base, diff)
		}
	}
}

func TestReasoningEffort(t *testing.T) {
	c, _ := New(Options{})
	for r, want := range map[llm.Reasoning]string{
		{Effort: "high"}:                     "high",
		{BudgetTokens: 1024}:                 "low",
		{BudgetTokens: 4096}:                 "medium",
		{BudgetTokens: 32000}:                "high",
		{Effort: "minimal"}:                  "minimal",
		{}:                                   "",
		{Effort: "low", BudgetTokens: 32000}: "low",
	} {
		wire, err := c.newChatRequest(&llm.Request{Model: "o4-mini", Reasoning: &r, Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}})
		if err != nil || wire.ReasoningEffort != want {
			t.Errorf("%+v: reasoning_effort %q, %v; want %q", r, wire.ReasoningEffort, err, want)
		}
	}
}
