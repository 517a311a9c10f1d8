package gemini

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/llm"
)

// requestJSON converts req with a client named "gemini" and returns the body as generic JSON.
func requestJSON(t *testing.T, req *llm.Request) map[string]any {
	t.Helper()
	c, err := New(Options{Name: "gemini"})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := c.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	return got
}

// parseJSON reads an expected body written as JSON text.
func parseJSON(t *testing.T, s string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad expected JSON: %v", err)
	}
	return v
}

func TestRequestShape(t *testing.T) {
	temp := 0.2
	req := &llm.Request{
		Model:  "gemini-2.5-flash",
		System: "You are terse.",
		Messages: []llm.Message{
			{Role: llm.RoleUser, Parts: []llm.Part{
				{Kind: llm.PartText, Text: "What is in this picture, and what time is it in Paris and Tokyo?"},
				{Kind: llm.PartImage, MediaType: "image/png", Data: []byte{0x89, 'P', 'N', 'G'}},
				{Kind: llm.PartText, Text: ""},
			}},
			{Role: llm.RoleAssistant, Origin: "gemini/gemini-2.5-flash", Parts: []llm.Part{
				{Kind: llm.PartReasoning, Text: "Two cities, two calls.", Signature: "EjQKMgE="},
				{Kind: llm.PartText, Text: "A cat. Checking the time.", Signature: "EiQKIgF="},
			}, ToolCalls: []llm.ToolCall{
				{ID: "call_1", Name: "current_time", Arguments: json.RawMessage(`{"timezone":"Europe/Paris"}`), Signature: "EnoKeAE="},
				{ID: "call_2", Name: "current_time", Arguments: json.RawMessage(`{"timezone":"Asia/Tokyo"}`)},
				{ID: "call_3", Name: "noargs"},
			}},
			// The results come back out of call order; Gemini pairs them by position.
			{Role: llm.RoleTool, ToolCallID: "call_2", ToolName: "current_time", Parts: []llm.Part{{Kind: llm.PartText, Text: `{"time":"19:00"}`}}},
			{Role: llm.RoleTool, ToolCallID: "call_1", ToolName: "current_time", Parts: []llm.Part{{Kind: llm.PartText, Text: `{"time":"12:00"}`}}},
			{Role: llm.RoleTool, ToolCallID: "call_3", IsError: true, Parts: []llm.Part{{Kind: llm.PartText, Text: "failed"}}},
			llm.TextMessage(llm.RoleAssistant, "It is noon in Paris."),
			{Role: llm.RoleAssistant, Origin: "gemini/gemini-2.5-flash"}, // an empty answer: nothing to send
			llm.TextMessage(llm.RoleUser, "Thanks."),
		},
		Tools: []llm.ToolSpec{
			{Name: "current_time", Description: "Time.", InputSchema: json.RawMessage(`{"type":"object","properties":{"timezone":{"type":"string"}},"additionalProperties":false}`)},
			{Name: "noargs"},
		},
		ToolChoice:  llm.ToolChoiceRequired,
		Temperature: &temp,
		MaxTokens:   100,
		Reasoning:   &llm.Reasoning{BudgetTokens: 2048},
		CacheSystem: true, // ignored: Gemini caches on its own
	}
	got := requestJSON(t, req)
	want := parseJSON(t, `{
  "contents": [
    {"role": "user", "parts": [
      {"text": "What is in this picture, and what time is it in Paris and Tokyo?"},
      {"inlineData": {"mimeType": "image/png", "data": "iVBORw=="}}
    ]},
    {"role": "model", "parts": [
      {"text": "Two cities, two calls.", "thought": true, "thoughtSignature": "EjQKMgE="},
      {"text": "A cat. Checking the time.", "thoughtSignature": "EiQKIgF="},
      {"functionCall": {"name": "current_time", "args": {"timezone": "Europe/Paris"}}, "thoughtSignature": "EnoKeAE="},
      {"functionCall": {"name": "current_time", "args": {"timezone": "Asia/Tokyo"}}},
      {"functionCall": {"name": "noargs", "args": {}}}
    ]},
    {"role": "user", "parts": [
      {"functionResponse": {"name": "current_time", "response": {"result": "{\"time\":\"12:00\"}"}}},
      {"functionResponse": {"name": "current_time", "response": {"result": "{\"time\":\"19:00\"}"}}},
      {"functionResponse": {"name": "noargs", "response": {"error": "failed"}}}
    ]},
    {"role": "model", "parts": [{"text": "It is noon in Paris."}]},
    {"role": "user", "parts": [{"text": "Thanks."}]}
  ],
  "systemInstruction": {"parts": [{"text": "You are terse."}]},
  "tools": [{"functionDeclarations": [
    {"name": "current_time", "description": "Time.", "parametersJsonSchema": {"type": "object", "properties": {"timezone": {"type": "string"}}, "additionalProperties": false}},
    {"name": "noargs"}
  ]}],
  "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
  "generationConfig": {"maxOutputTokens": 100, "temperature": 0.2, "thinkingConfig": {"includeThoughts": true, "thinkingBudget": 2048}}
}`)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
}

// TestForeignHistory: another provider's answer loses its reasoning and signatures; the first call of
// each model turn carries Google's documented skip value instead, whatever the model: an alias may name
// a Gemini 3 model, and older models ignore the value.
func TestForeignHistory(t *testing.T) {
	history := []llm.Message{
		llm.TextMessage(llm.RoleUser, "Weather in Paris and Tokyo?"),
		{Role: llm.RoleAssistant, Origin: "anthropic/claude-sonnet-4-5", Parts: []llm.Part{
			{Kind: llm.PartReasoning, Text: "Two lookups.", Signature: "anthropic-signature"},
			{Kind: llm.PartRedactedReasoning, Signature: "redacted-data"},
			{Kind: llm.PartText, Text: "Checking."},
		}, ToolCalls: []llm.ToolCall{
			{ID: "toolu_1", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`), Signature: "not-gemini"},
			{ID: "toolu_2", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Tokyo"}`)},
		}},
		{Role: llm.RoleTool, ToolCallID: "toolu_1", ToolName: "get_weather", Parts: []llm.Part{{Kind: llm.PartText, Text: "18°C"}}},
		{Role: llm.RoleTool, ToolCallID: "toolu_2", ToolName: "get_weather", Parts: []llm.Part{{Kind: llm.PartText, Text: "25°C"}}},
	}
	modelTurn := func(model string) []any {
		got := requestJSON(t, &llm.Request{Model: model, Messages: history})
		return got["contents"].([]any)[1].(map[string]any)["parts"].([]any)
	}
	want := []any{
		map[string]any{"text": "Checking."},
		map[string]any{"functionCall": map[string]any{"name": "get_weather", "args": map[string]any{"city": "Paris"}}, "thoughtSignature": skipSignature},
		map[string]any{"functionCall": map[string]any{"name": "get_weather", "args": map[string]any{"city": "Tokyo"}}},
	}
	for _, model := range []string{"gemini-3-pro-preview", "gemini-flash-latest", "gemini-2.5-flash"} {
		if diff := cmp.Diff(want, modelTurn(model)); diff != "" {
			t.Errorf("%s model turn (-want +got):\n%s", model, diff)
		}
	}
}

// TestSignedFirstCallKeepsItsSignature: only an unsigned first call gets the skip value; the calls
// after a signed one go unsigned, as Gemini sends them.
func TestSignedFirstCallKeepsItsSignature(t *testing.T) {
	got := requestJSON(t, &llm.Request{Model: "gemini-flash-latest", Messages: []llm.Message{
		llm.TextMessage(llm.RoleUser, "Weather in Paris and Tokyo?"),
		{Role: llm.RoleAssistant, Origin: "gemini/gemini-flash-latest", ToolCalls: []llm.ToolCall{
			{ID: "c1", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`), Signature: "EnoKeAE="},
			{ID: "c2", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Tokyo"}`)},
		}},
	}})
	want := []any{
		map[string]any{"functionCall": map[string]any{"name": "get_weather", "args": map[string]any{"city": "Paris"}}, "thoughtSignature": "EnoKeAE="},
		map[string]any{"functionCall": map[string]any{"name": "get_weather", "args": map[string]any{"city": "Tokyo"}}},
	}
	if diff := cmp.Diff(want, got["contents"].([]any)[1].(map[string]any)["parts"]); diff != "" {
		t.Errorf("model turn (-want +got):\n%s", diff)
	}
}

func TestToolChoice(t *testing.T) {
	tools := []llm.ToolSpec{{Name: "f", InputSchema: json.RawMessage(`{"type":"object"}`)}}
	for choice, want := range map[llm.ToolChoice]any{
		"":                     nil,
		llm.ToolChoiceAuto:     map[string]any{"functionCallingConfig": map[string]any{"mode": "AUTO"}},
		llm.ToolChoiceNone:     map[string]any{"functionCallingConfig": map[string]any{"mode": "NONE"}},
		llm.ToolChoiceRequired: map[string]any{"functionCallingConfig": map[string]any{"mode": "ANY"}},
	} {
		got := requestJSON(t, &llm.Request{Model: "gemini-2.5-flash", Tools: tools, ToolChoice: choice})
		if diff := cmp.Diff(want, got["toolConfig"]); diff != "" {
			t.Errorf("tool choice %q (-want +got):\n%s", choice, diff)
		}
	}
	// Without tools there is nothing to choose from.
	if got := requestJSON(t, &llm.Request{Model: "m", ToolChoice: llm.ToolChoiceNone}); got["toolConfig"] != nil || got["tools"] != nil {
		t.Errorf("tool config without tools: %v", got)
	}
}

func TestThinkingConfig(t *testing.T) {
	tests := []struct {
		model     string
		reasoning *llm.Reasoning
		want      any
	}{
		{"gemini-2.5-flash", nil, nil},
		{"gemini-2.5-flash", &llm.Reasoning{BudgetTokens: 4096}, map[string]any{"includeThoughts": true, "thinkingBudget": 4096.0}},
		{"gemini-2.5-pro", &llm.Reasoning{Effort: "high"}, map[string]any{"includeThoughts": true, "thinkingBudget": 24576.0}},
		{"gemini-2.5-pro", &llm.Reasoning{Effort: "low", BudgetTokens: 3000}, map[string]any{"includeThoughts": true, "thinkingBudget": 3000.0}},
		{"gemini-2.5-pro", &llm.Reasoning{}, map[string]any{"includeThoughts": true}},
		{"gemini-3-pro-preview", &llm.Reasoning{Effort: "low", BudgetTokens: 20000}, map[string]any{"includeThoughts": true, "thinkingLevel": "LOW"}},
		{"gemini-3-flash-preview", &llm.Reasoning{Effort: "High"}, map[string]any{"includeThoughts": true, "thinkingLevel": "HIGH"}},
		{"gemini-3-flash-preview", &llm.Reasoning{BudgetTokens: 512}, map[string]any{"includeThoughts": true, "thinkingLevel": "LOW"}},
		{"gemini-3.1-pro-preview", &llm.Reasoning{BudgetTokens: 16000}, map[string]any{"includeThoughts": true, "thinkingLevel": "HIGH"}},
		// Pro takes LOW and HIGH only: the other efforts round to the nearer one it knows.
		{"gemini-3-pro-preview", &llm.Reasoning{Effort: "minimal"}, map[string]any{"includeThoughts": true, "thinkingLevel": "LOW"}},
		{"gemini-3-pro-preview", &llm.Reasoning{Effort: "Medium"}, map[string]any{"includeThoughts": true, "thinkingLevel": "HIGH"}},
		{"gemini-3-pro-preview", &llm.Reasoning{Effort: "high"}, map[string]any{"includeThoughts": true, "thinkingLevel": "HIGH"}},
		{"gemini-3.1-pro-preview", &llm.Reasoning{Effort: "medium"}, map[string]any{"includeThoughts": true, "thinkingLevel": "HIGH"}},
		{"gemini-3.1-pro-preview", &llm.Reasoning{Effort: "low"}, map[string]any{"includeThoughts": true, "thinkingLevel": "LOW"}},
		// Flash takes all four.
		{"gemini-3-flash-preview", &llm.Reasoning{Effort: "minimal"}, map[string]any{"includeThoughts": true, "thinkingLevel": "MINIMAL"}},
		{"gemini-3-flash-preview", &llm.Reasoning{Effort: "medium"}, map[string]any{"includeThoughts": true, "thinkingLevel": "MEDIUM"}},
		{"gemini-3-flash-preview", &llm.Reasoning{Effort: "low"}, map[string]any{"includeThoughts": true, "thinkingLevel": "LOW"}},
	}
	for _, tt := range tests {
		got := requestJSON(t, &llm.Request{Model: tt.model, Reasoning: tt.reasoning})
		var thinking any
		if g, ok := got["generationConfig"].(map[string]any); ok {
			thinking = g["thinkingConfig"]
		}
		if diff := cmp.Diff(tt.want, thinking); diff != "" {
			t.Errorf("%s %+v (-want +got):\n%s", tt.model, tt.reasoning, diff)
		}
	}
}

func TestConvertErrorsNameTheMessage(t *testing.T) {
	tests := []struct {
		msgs []llm.Message
		want string
	}{
		{[]llm.Message{llm.TextMessage(llm.RoleUser, "hi"), {Role: "narrator"}}, "message 1: unknown role"},
		{[]llm.Message{llm.TextMessage(llm.RoleUser, "hi"), {Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{Name: "f", Arguments: json.RawMessage(`{"a":`)}}}},
			"message 1: tool call 0 (f): the arguments are not a JSON object"},
		{[]llm.Message{{Role: llm.RoleTool, ToolCallID: "x", Parts: []llm.Part{{Kind: llm.PartText, Text: "r"}}}}, "message 0: a tool result names no tool"},
		{[]llm.Message{{Role: llm.RoleUser, Parts: []llm.Part{{Kind: llm.PartImage}}}}, "message 0: an image part has no media type"},
	}
	c, _ := New(Options{})
	for _, tt := range tests {
		_, err := c.newRequest(&llm.Request{Model: "m", Messages: tt.msgs})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("error %v, want one containing %q", err, tt.want)
		}
	}
}

func TestToolNameFromTheCall(t *testing.T) {
	got := requestJSON(t, &llm.Request{Model: "m", Messages: []llm.Message{
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: "lookup", Arguments: json.RawMessage(`{}`)}}},
		{Role: llm.RoleTool, ToolCallID: "c1", Parts: []llm.Part{{Kind: llm.PartText, Text: "found"}}},
	}})
	want := map[string]any{"role": "user", "parts": []any{
		map[string]any{"functionResponse": map[string]any{"name": "lookup", "response": map[string]any{"result": "found"}}},
	}}
	if diff := cmp.Diff(want, got["contents"].([]any)[1]); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
