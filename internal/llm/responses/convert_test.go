package responses

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/llm"
)

// requestJSON encodes req as c sends it and decodes it generically.
func requestJSON(t *testing.T, c *Client, req *llm.Request) map[string]any {
	t.Helper()
	body, err := c.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestRequestShape(t *testing.T) {
	c, err := New(Options{Name: "gpt"})
	if err != nil {
		t.Fatal(err)
	}
	temp := 0.2
	req := &llm.Request{
		Model:  "gpt-5",
		System: "You are terse.",
		Messages: []llm.Message{
			{Role: llm.RoleUser, Parts: []llm.Part{
				{Kind: llm.PartText, Text: "What is in this picture, and what time is it in Paris?"},
				{Kind: llm.PartImage, MediaType: "image/png", Data: []byte{0x89, 'P', 'N', 'G'}},
			}, Cache: true},
			{Role: llm.RoleAssistant, Origin: "gpt/gpt-5", Parts: []llm.Part{
				{Kind: llm.PartReasoning, Text: "**Looking**\n\nA cat.", ID: "rs_1"},
				{Kind: llm.PartReasoning, Text: "**Time**\n\nAsk the clock.", ID: "rs_1", Signature: "gAAAAenc1"},
				{Kind: llm.PartText, Text: "A cat. Let me check the time."},
			}, ToolCalls: []llm.ToolCall{
				{ID: "call_1", Name: "current_time", Arguments: json.RawMessage(`{"timezone":"Europe/Paris"}`)},
				{ID: "call_2", Name: "noargs"},
			}},
			{Role: llm.RoleTool, ToolCallID: "call_1", ToolName: "current_time", Parts: []llm.Part{{Kind: llm.PartText, Text: `{"time":"12:00"}`}}},
			{Role: llm.RoleTool, ToolCallID: "call_2", ToolName: "noargs", IsError: true, Parts: []llm.Part{{Kind: llm.PartText, Text: "failed"}}},
			// Written by another provider: its reasoning and signatures mean nothing here.
			{Role: llm.RoleAssistant, Origin: "anthropic/claude-sonnet-4-5", Parts: []llm.Part{
				{Kind: llm.PartReasoning, Text: "Noon.", Signature: "EqQBCkYIBxgC"},
				{Kind: llm.PartRedactedReasoning, Signature: "opaque"},
				{Kind: llm.PartText, Text: "It is noon <12:00> & sunny."},
			}},
			llm.TextMessage(llm.RoleUser, "Thanks"),
		},
		Tools: []llm.ToolSpec{
			{Name: "current_time", Description: "Time.", InputSchema: json.RawMessage(`{"type":"object"}`)},
			{Name: "noargs"},
		},
		ToolChoice:  llm.ToolChoiceRequired,
		Temperature: &temp,
		MaxTokens:   4000,
		Reasoning:   &llm.Reasoning{BudgetTokens: 4096},
		CacheSystem: true,
		CacheTools:  true,
	}
	got := requestJSON(t, c, req)
	want := map[string]any{
		"model":        "gpt-5",
		"instructions": "You are terse.",
		"input": []any{
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "input_text", "text": "What is in this picture, and what time is it in Paris?"},
				map[string]any{"type": "input_image", "image_url": "data:image/png;base64,iVBORw=="},
			}},
			map[string]any{"id": "rs_1", "type": "reasoning", "encrypted_content": "gAAAAenc1", "summary": []any{
				map[string]any{"type": "summary_text", "text": "**Looking**\n\nA cat."},
				map[string]any{"type": "summary_text", "text": "**Time**\n\nAsk the clock."},
			}},
			map[string]any{"type": "message", "role": "assistant", "content": []any{
				map[string]any{"type": "output_text", "text": "A cat. Let me check the time."},
			}},
			map[string]any{"type": "function_call", "call_id": "call_1", "name": "current_time", "arguments": `{"timezone":"Europe/Paris"}`},
			map[string]any{"type": "function_call", "call_id": "call_2", "name": "noargs", "arguments": `{}`},
			map[string]any{"type": "function_call_output", "call_id": "call_1", "output": `{"time":"12:00"}`},
			map[string]any{"type": "function_call_output", "call_id": "call_2", "output": "failed"},
			map[string]any{"type": "message", "role": "assistant", "content": []any{
				map[string]any{"type": "output_text", "text": "It is noon <12:00> & sunny."},
			}},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_text", "text": "Thanks"}}},
		},
		"tools": []any{
			map[string]any{"type": "function", "name": "current_time", "description": "Time.", "parameters": map[string]any{"type": "object"}, "strict": false},
			map[string]any{"type": "function", "name": "noargs", "parameters": map[string]any{"type": "object", "properties": map[string]any{}}, "strict": false},
		},
		"tool_choice":       "required",
		"max_output_tokens": float64(4000),
		"reasoning":         map[string]any{"effort": "medium", "summary": "auto"},
		"store":             false,
		"include":           []any{"reasoning.encrypted_content"},
		"stream":            true,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
	body, _ := c.Encode(req)
	if !strings.Contains(string(body), `"It is noon <12:00> & sunny."`) {
		t.Errorf("text is HTML-escaped: %s", body)
	}
}

// TestRequestWithoutReasoning: to a model that does not reason, no reasoning config and no include (it
// refuses the request), but a temperature; no tool_choice without tools.
func TestRequestWithoutReasoning(t *testing.T) {
	c, _ := New(Options{})
	temp := 0.7
	got := requestJSON(t, c, &llm.Request{Model: "gpt-4.1", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "Hi")},
		Temperature: &temp, ToolChoice: llm.ToolChoiceNone})
	want := map[string]any{
		"model":       "gpt-4.1",
		"input":       []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_text", "text": "Hi"}}}},
		"temperature": 0.7,
		"store":       false,
		"stream":      true,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
}

func TestReasoningEffort(t *testing.T) {
	for _, tt := range []struct {
		r    llm.Reasoning
		want any
	}{
		{llm.Reasoning{Effort: "high", BudgetTokens: 100}, map[string]any{"effort": "high", "summary": "auto"}},
		{llm.Reasoning{Effort: "minimal"}, map[string]any{"effort": "minimal", "summary": "auto"}},
		{llm.Reasoning{BudgetTokens: 1024}, map[string]any{"effort": "low", "summary": "auto"}},
		{llm.Reasoning{BudgetTokens: 2048}, map[string]any{"effort": "medium", "summary": "auto"}},
		{llm.Reasoning{BudgetTokens: 8191}, map[string]any{"effort": "medium", "summary": "auto"}},
		{llm.Reasoning{BudgetTokens: 8192}, map[string]any{"effort": "high", "summary": "auto"}},
		{llm.Reasoning{}, map[string]any{"summary": "auto"}},
	} {
		c, _ := New(Options{})
		got := requestJSON(t, c, &llm.Request{Model: "o4-mini", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "Hi")}, Reasoning: &tt.r})
		if diff := cmp.Diff(tt.want, got["reasoning"]); diff != "" {
			t.Errorf("%+v: reasoning (-want +got):\n%s", tt.r, diff)
		}
	}
}

// TestReasoningReplay: reasoning items go back in the order they came, each before the item that
// followed it, and only when the API can take them.
func TestReasoningReplay(t *testing.T) {
	c, _ := New(Options{Name: "gpt"})
	r := func(id, text, sig string) llm.Part {
		return llm.Part{Kind: llm.PartReasoning, ID: id, Text: text, Signature: sig}
	}
	text := func(s string) llm.Part { return llm.Part{Kind: llm.PartText, Text: s} }
	call := []llm.ToolCall{{ID: "call_1", Name: "f", Arguments: json.RawMessage(`{}`)}}
	for _, tt := range []struct {
		name  string
		parts []llm.Part
		calls []llm.ToolCall
		want  []string // item types, reasoning items by id
	}{
		{"interleaved", []llm.Part{r("rs_1", "a", "e1"), text("Hi."), r("rs_2", "", "e2")}, call,
			[]string{"rs_1", "message", "rs_2", "function_call"}},
		{"signature on a later part of the item", []llm.Part{r("rs_1", "a", ""), r("rs_1", "b", ""), r("rs_1", "", "e1"), text("Hi.")}, nil,
			[]string{"rs_1", "message"}},
		{"without encrypted content", []llm.Part{r("rs_1", "a", ""), text("Hi.")}, nil, []string{"message"}},
		{"nothing after it", []llm.Part{text("Once upon"), r("rs_1", "", "e1")}, nil, []string{"message"}},
		{"only reasoning", []llm.Part{r("rs_1", "a", "e1")}, nil, nil},
		{"two in a row", []llm.Part{r("rs_1", "", "e1"), r("rs_2", "", "e2"), text("Hi.")}, nil, []string{"rs_2", "message"}},
		{"no id", []llm.Part{r("", "a", "e1"), text("Hi.")}, nil, []string{"message"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := llm.Message{Role: llm.RoleAssistant, Origin: "gpt/m", Parts: tt.parts, ToolCalls: tt.calls}
			var got []string
			for _, it := range c.assistantItems(&m, "gpt/m") {
				switch it := it.(type) {
				case *reasoningItem:
					got = append(got, it.ID)
				case inputMessage:
					got = append(got, it.Type)
				case functionCall:
					got = append(got, it.Type)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("items (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRequestErrorsNameTheMessage(t *testing.T) {
	c, _ := New(Options{})
	for _, tt := range []struct {
		m    llm.Message
		want string
	}{
		{llm.Message{Role: "narrator"}, `openai-responses: build request: message 1: unknown role "narrator"`},
		{llm.Message{Role: llm.RoleTool, Parts: []llm.Part{{Kind: llm.PartText, Text: "x"}}}, "openai-responses: build request: message 1: a tool result without the id of its call"},
	} {
		_, err := c.Encode(&llm.Request{Model: "m", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "Hi"), tt.m}})
		if err == nil || err.Error() != tt.want {
			t.Errorf("error %v, want %s", err, tt.want)
		}
	}
}

// TestCheckInput makes sure the conformance checker refuses what the API refuses.
func TestCheckInput(t *testing.T) {
	for _, input := range []string{
		`[{"role":"user","content":[{"type":"input_text","text":"Hi"}]},{"id":"rs_1","type":"reasoning","encrypted_content":"e","summary":[]}]`,
		`[{"id":"rs_1","type":"reasoning","encrypted_content":"e","summary":[]},{"role":"user","content":[{"type":"input_text","text":"Hi"}]}]`,
		`[{"id":"rs_1","type":"reasoning","summary":[]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hi"}]}]`,
		`[{"type":"message","role":"assistant","content":[{"type":"input_text","text":"Hi"}]}]`,
		`[{"type":"function_call_output","call_id":"call_1","output":"x"}]`,
		`[{"role":"user","content":[{"type":"input_text"}]}]`,
		`[{"role":"user","content":[]}]`,
	} {
		var items []json.RawMessage
		json.Unmarshal([]byte(input), &items)
		if checkInput(items) == "" {
			t.Errorf("checkInput accepts %s", input)
		}
	}
}

func TestIsReasoningModel(t *testing.T) {
	for model, want := range map[string]bool{
		"o1": true, "o1-2024-12-17": true, "o3-mini": true, "o3": true, "o4-mini": true,
		"gpt-5": true, "gpt-5-mini": true, "gpt-5-nano-2025-08-07": true, "gpt-5.1": true, "gpt-5.1-codex": true,
		"codex-mini-latest": true, "GPT-5": true,
		"gpt-5-chat-latest": false, "gpt-5.1-chat-latest": false, "gpt-4o": false, "gpt-4o-mini": false,
		"gpt-4.1": false, "gpt-4.1-nano": false, "chatgpt-4o-latest": false, "omni-moderation-latest": false,
		"conformance-model": false, "": false,
	} {
		if got := isReasoningModel(model); got != want {
			t.Errorf("isReasoningModel(%q) = %v, want %v", model, got, want)
		}
	}
}

// TestIncludeOnlyForReasoning: include (and reasoning) go only to a model that reasons, by its name or
// because the request asks it to; a model that does not reason refuses the whole request with include
// ("Encrypted content is not supported with this model"), and keeps its temperature.
func TestIncludeOnlyForReasoning(t *testing.T) {
	temp := 0.3
	include := []any{"reasoning.encrypted_content"}
	for _, tt := range []struct {
		model     string
		reasoning *llm.Reasoning
		include   any
		reason    any
		temp      any
	}{
		{"gpt-4o", nil, nil, nil, 0.3},
		{"gpt-4.1", nil, nil, nil, 0.3},
		{"gpt-5-chat-latest", nil, nil, nil, 0.3},
		{"gpt-5", nil, include, nil, nil},
		{"o4-mini", nil, include, nil, nil},
		{"codex-mini-latest", nil, include, nil, nil},
		{"o3", &llm.Reasoning{Effort: "high"}, include, map[string]any{"effort": "high", "summary": "auto"}, nil},
		// A model chatd does not know, which the configuration says reasons.
		{"my-reasoner", &llm.Reasoning{Effort: "low"}, include, map[string]any{"effort": "low", "summary": "auto"}, nil},
	} {
		c, _ := New(Options{})
		got := requestJSON(t, c, &llm.Request{Model: tt.model, Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "Hi")},
			Temperature: &temp, Reasoning: tt.reasoning})
		if diff := cmp.Diff([]any{tt.include, tt.reason, tt.temp}, []any{got["include"], got["reasoning"], got["temperature"]}); diff != "" {
			t.Errorf("%s: [include reasoning temperature] (-want +got):\n%s", tt.model, diff)
		}
	}
}

// TestEmptyTextParts: the API requires the text of an input_text and content in a message, so empty text
// parts are left out and a message left empty is not sent.
func TestEmptyTextParts(t *testing.T) {
	c, _ := New(Options{Name: "gpt"})
	empty := llm.Part{Kind: llm.PartText}
	req := &llm.Request{Model: "gpt-5", Messages: []llm.Message{
		{Role: llm.RoleSystem, Parts: []llm.Part{empty}},
		{Role: llm.RoleUser, Parts: []llm.Part{empty, {Kind: llm.PartImage, MediaType: "image/png", Data: []byte("PNG")}, empty}},
		{Role: llm.RoleUser, Parts: []llm.Part{empty, {Kind: llm.PartText, Text: "Hi"}}},
		{Role: llm.RoleUser},
		{Role: llm.RoleAssistant, Origin: "gpt/gpt-5", Parts: []llm.Part{empty}},
		{Role: llm.RoleUser, Parts: []llm.Part{empty, empty}},
	}}
	got := requestJSON(t, c, req)["input"]
	want := []any{
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_image", "image_url": "data:image/png;base64,UE5H"}}},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_text", "text": "Hi"}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("input (-want +got):\n%s", diff)
	}
	body, _ := c.Encode(req)
	var sent struct{ Input []json.RawMessage }
	if err := json.Unmarshal(body, &sent); err != nil {
		t.Fatal(err)
	}
	if msg := checkInput(sent.Input); msg != "" {
		t.Errorf("the API would refuse the input: %s", msg)
	}
}
