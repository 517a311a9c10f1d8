package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/llm"
)

// requestJSON converts req with a client named "anthropic" and decodes the body it would send.
func requestJSON(t *testing.T, req *llm.Request) map[string]any {
	t.Helper()
	c, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	body, err := c.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if err := checkBody(got); err != nil {
		t.Errorf("the API would refuse the request: %v\n%s", err, body)
	}
	return got
}

func text(s string) map[string]any { return map[string]any{"type": "text", "text": s} }

func TestRequestShape(t *testing.T) {
	temp := 0.2
	req := &llm.Request{
		Model:  "claude-sonnet-4-5",
		System: "You are terse.",
		Messages: []llm.Message{
			{Role: llm.RoleUser, Parts: []llm.Part{
				{Kind: llm.PartText, Text: "What is in this picture, and what time is it in Paris?"},
				{Kind: llm.PartText, Text: ""},
				{Kind: llm.PartImage, MediaType: "image/png", Data: []byte{0x89, 'P', 'N', 'G'}},
			}},
			{Role: llm.RoleAssistant, Origin: "anthropic/claude-sonnet-4-5", Parts: []llm.Part{
				{Kind: llm.PartReasoning, Text: "Two tools at once.", Signature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"},
				{Kind: llm.PartText, Text: "Let me look."},
			}, ToolCalls: []llm.ToolCall{
				{ID: "toolu_01A", Name: "current_time", Arguments: json.RawMessage(`{"timezone": "Europe/Paris"}`)},
				{ID: "toolu_01B", Name: "noargs"},
			}},
			{Role: llm.RoleTool, ToolCallID: "toolu_01A", ToolName: "current_time", Parts: []llm.Part{{Kind: llm.PartText, Text: `{"time":"12:00"}`}}},
			{Role: llm.RoleTool, ToolCallID: "toolu_01B", ToolName: "noargs", IsError: true, Parts: []llm.Part{{Kind: llm.PartText, Text: "failed"}}},
			llm.TextMessage(llm.RoleUser, "Also: which one failed?"),
			{Role: llm.RoleAssistant, Origin: "anthropic/claude-sonnet-4-5"}, // an empty answer: no message at all
			llm.TextMessage(llm.RoleAssistant, "A cat. It is noon; noargs failed."),
		},
		Tools: []llm.ToolSpec{
			{Name: "current_time", Description: "Time.", InputSchema: json.RawMessage(`{"type":"object","properties":{"timezone":{"type":"string"}}}`)},
			{Name: "noargs"},
		},
		ToolChoice:  llm.ToolChoiceNone,
		Temperature: &temp,
		MaxTokens:   100,
	}
	want := map[string]any{
		"model":      "claude-sonnet-4-5",
		"max_tokens": float64(100),
		"system":     []any{text("You are terse.")},
		"messages": []any{
			map[string]any{"role": "user", "content": []any{
				text("What is in this picture, and what time is it in Paris?"),
				map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": "iVBORw=="}},
			}},
			map[string]any{"role": "assistant", "content": []any{
				map[string]any{"type": "thinking", "thinking": "Two tools at once.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"},
				text("Let me look."),
				map[string]any{"type": "tool_use", "id": "toolu_01A", "name": "current_time", "input": map[string]any{"timezone": "Europe/Paris"}},
				map[string]any{"type": "tool_use", "id": "toolu_01B", "name": "noargs", "input": map[string]any{}},
			}},
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "tool_result", "tool_use_id": "toolu_01A", "content": `{"time":"12:00"}`},
				map[string]any{"type": "tool_result", "tool_use_id": "toolu_01B", "content": "failed", "is_error": true},
				text("Also: which one failed?"),
			}},
			map[string]any{"role": "assistant", "content": []any{text("A cat. It is noon; noargs failed.")}},
		},
		"tools": []any{
			map[string]any{"name": "current_time", "description": "Time.", "input_schema": map[string]any{"type": "object", "properties": map[string]any{"timezone": map[string]any{"type": "string"}}}},
			map[string]any{"name": "noargs", "input_schema": map[string]any{"type": "object", "properties": map[string]any{}}},
		},
		"tool_choice": map[string]any{"type": "none"},
		"temperature": 0.2,
		"stream":      true,
	}
	if diff := cmp.Diff(want, requestJSON(t, req)); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
}

// TestReasoningReplay: thinking and redacted thinking go back verbatim to the provider that wrote
// them, and only signed; another provider's reasoning is dropped with its signatures.
func TestReasoningReplay(t *testing.T) {
	parts := []llm.Part{
		{Kind: llm.PartReasoning, Text: "First thought.", Signature: "sig-one"},
		{Kind: llm.PartRedactedReasoning, Signature: "EmwKAhgBEgy3va3pzix"},
		{Kind: llm.PartReasoning, Text: "", Signature: "sig-omitted-display"},
		{Kind: llm.PartReasoning, Text: "Cut before its signature."},
		{Kind: llm.PartText, Text: "Answer."},
	}
	tests := []struct {
		origin string
		want   []any
	}{
		{"anthropic/m", []any{
			map[string]any{"type": "thinking", "thinking": "First thought.", "signature": "sig-one"},
			map[string]any{"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
			map[string]any{"type": "thinking", "thinking": "", "signature": "sig-omitted-display"},
			text("Answer."),
		}},
		{"anthropic/another-model", []any{text("Answer.")}}, // a signature is bound to its model
		{"anthropic", []any{text("Answer.")}},
		{"gemini/m", []any{text("Answer.")}},
		{"", []any{text("Answer.")}},
	}
	for _, tt := range tests {
		t.Run("origin "+tt.origin, func(t *testing.T) {
			req := &llm.Request{Model: "m", Messages: []llm.Message{
				llm.TextMessage(llm.RoleUser, "Q?"),
				{Role: llm.RoleAssistant, Origin: tt.origin, Parts: parts},
				llm.TextMessage(llm.RoleUser, "And then?"),
			}}
			got := requestJSON(t, req)["messages"].([]any)[1].(map[string]any)["content"]
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("assistant content (-want +got):\n%s", diff)
			}
		})
	}
}

// TestToolChoice: with thinking on, a required tool call goes as auto, the API refusing forced tool
// use then; when the request goes without thinking (a foreign tool turn), it is forced again.
func TestToolChoice(t *testing.T) {
	tools := []llm.ToolSpec{{Name: "f"}}
	think := &llm.Reasoning{Effort: "medium"}
	hi := []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}
	foreignTurn := []llm.Message{
		llm.TextMessage(llm.RoleUser, "go"),
		{Role: llm.RoleAssistant, Origin: "openai/gpt-5", ToolCalls: []llm.ToolCall{{ID: "call_1", Name: "f"}}},
		{Role: llm.RoleTool, ToolCallID: "call_1", Parts: []llm.Part{{Kind: llm.PartText, Text: "ok"}}},
	}
	tests := []struct {
		name      string
		choice    llm.ToolChoice
		tools     []llm.ToolSpec
		reasoning *llm.Reasoning
		msgs      []llm.Message
		want      any
	}{
		{"auto", llm.ToolChoiceAuto, tools, nil, hi, map[string]any{"type": "auto"}},
		{"required", llm.ToolChoiceRequired, tools, nil, hi, map[string]any{"type": "any"}},
		{"none", llm.ToolChoiceNone, tools, nil, hi, map[string]any{"type": "none"}},
		{"default", "", tools, nil, hi, nil},
		{"required without tools", llm.ToolChoiceRequired, nil, nil, hi, nil},
		{"required with thinking", llm.ToolChoiceRequired, tools, think, hi, map[string]any{"type": "auto"}},
		{"none with thinking", llm.ToolChoiceNone, tools, think, hi, map[string]any{"type": "none"}},
		{"required with thinking held back", llm.ToolChoiceRequired, tools, think, foreignTurn, map[string]any{"type": "any"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := requestJSON(t, &llm.Request{Model: "m", Messages: tt.msgs, Tools: tt.tools, ToolChoice: tt.choice, Reasoning: tt.reasoning})
			if diff := cmp.Diff(tt.want, got["tool_choice"]); diff != "" {
				t.Errorf("tool_choice (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReasoningConfig: MaxTokens bounds the whole output, thinking included; the budget shrinks to
// leave the answer room, and max_tokens only grows past MaxTokens to fit the API's minimum budget.
func TestReasoningConfig(t *testing.T) {
	temp := 0.7
	thinking := func(budget float64) any { return map[string]any{"type": "enabled", "budget_tokens": budget} }
	tests := []struct {
		name      string
		reasoning *llm.Reasoning
		maxTokens int
		thinking  any
		max       float64
		temp      any
	}{
		{"off", nil, 0, nil, 8192, 0.7},
		{"off with max_tokens", nil, 100, nil, 100, 0.7},
		{"effort none", &llm.Reasoning{Effort: "none"}, 0, nil, 8192, 0.7},
		{"budget", &llm.Reasoning{BudgetTokens: 10000}, 0, thinking(10000), 18192, nil},
		{"low", &llm.Reasoning{Effort: "low"}, 0, thinking(1024), 9216, nil},
		{"medium", &llm.Reasoning{Effort: "medium"}, 0, thinking(4096), 12288, nil},
		{"default max_tokens capped", &llm.Reasoning{BudgetTokens: 60000}, 0, thinking(60000), 64000, nil},
		{"budget shrunk to fit the capped default", &llm.Reasoning{BudgetTokens: 100000}, 0, thinking(62976), 64000, nil},
		{"budget within max_tokens", &llm.Reasoning{BudgetTokens: 10000}, 32000, thinking(10000), 32000, nil},
		{"budget shrunk to fit max_tokens", &llm.Reasoning{Effort: "high"}, 4000, thinking(2976), 4000, nil},
		{"budget kept at the minimum", &llm.Reasoning{BudgetTokens: 200}, 2000, thinking(1024), 2000, nil},
		{"max_tokens grown past the minimum budget", &llm.Reasoning{BudgetTokens: 2048}, 1024, thinking(1024), 2048, nil},
		{"max_tokens under the minimum budget", &llm.Reasoning{Effort: "low"}, 500, thinking(1024), 2048, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := requestJSON(t, &llm.Request{Model: "m", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")},
				Reasoning: tt.reasoning, MaxTokens: tt.maxTokens, Temperature: &temp})
			if diff := cmp.Diff(tt.thinking, got["thinking"]); diff != "" {
				t.Errorf("thinking (-want +got):\n%s", diff)
			}
			if got["max_tokens"] != tt.max {
				t.Errorf("max_tokens = %v, want %v", got["max_tokens"], tt.max)
			}
			if diff := cmp.Diff(tt.temp, got["temperature"]); diff != "" {
				t.Errorf("temperature (-want +got):\n%s", diff)
			}
		})
	}
}

// cachedBlocks lists, in request order, what carries a cache_control breakpoint.
func cachedBlocks(t *testing.T, body map[string]any) []string {
	t.Helper()
	var out []string
	tag := func(where string, b map[string]any) {
		if b["cache_control"] == nil {
			return
		}
		if diff := cmp.Diff(map[string]any{"type": "ephemeral"}, b["cache_control"]); diff != "" {
			t.Errorf("%s: cache_control (-want +got):\n%s", where, diff)
		}
		out = append(out, fmt.Sprintf("%s %v", where, b["type"]))
	}
	for i, b := range list(body["tools"]) {
		tag(fmt.Sprintf("tools.%d", i), b)
	}
	for i, b := range list(body["system"]) {
		tag(fmt.Sprintf("system.%d", i), b)
	}
	for i, m := range list(body["messages"]) {
		for j, b := range list(m["content"]) {
			tag(fmt.Sprintf("messages.%d.%d", i, j), b)
		}
	}
	return out
}

func list(v any) []map[string]any {
	var out []map[string]any
	if l, ok := v.([]any); ok {
		for _, x := range l {
			m, _ := x.(map[string]any)
			out = append(out, m)
		}
	}
	return out
}

func TestCacheBreakpoints(t *testing.T) {
	call := []llm.ToolCall{{ID: "toolu_1", Name: "f", Arguments: json.RawMessage(`{}`)}}
	thinkingOnly := llm.Message{Role: llm.RoleAssistant, Origin: "anthropic/m", Cache: true,
		Parts: []llm.Part{{Kind: llm.PartReasoning, Text: "hm", Signature: "sig"}, {Kind: llm.PartText}}}
	tests := []struct {
		name string
		req  llm.Request
		want []string
	}{
		{
			name: "system, tools and a message",
			req: llm.Request{System: "S", CacheSystem: true, CacheTools: true, Tools: []llm.ToolSpec{{Name: "a"}, {Name: "f"}},
				Messages: []llm.Message{{Role: llm.RoleUser, Cache: true, Parts: []llm.Part{{Kind: llm.PartText, Text: "one"}, {Kind: llm.PartText, Text: "two"}}}}},
			want: []string{"tools.1 <nil>", "system.0 text", "messages.0.1 text"},
		},
		{
			name: "the last block of the message, past the tool calls and empty text",
			req: llm.Request{Messages: []llm.Message{
				llm.TextMessage(llm.RoleUser, "go"),
				{Role: llm.RoleAssistant, Origin: "anthropic/m", Cache: true, ToolCalls: call,
					Parts: []llm.Part{{Kind: llm.PartReasoning, Text: "hm", Signature: "sig"}, {Kind: llm.PartText, Text: "Calling."}}},
				{Role: llm.RoleTool, ToolCallID: "toolu_1", Cache: true, Parts: []llm.Part{{Kind: llm.PartText, Text: "done"}}},
				{Role: llm.RoleUser, Cache: true, Parts: []llm.Part{{Kind: llm.PartText, Text: ""}}},
			}},
			want: []string{"messages.1.2 tool_use", "messages.2.0 tool_result"},
		},
		{
			name: "never on thinking",
			req:  llm.Request{Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "go"), thinkingOnly, llm.TextMessage(llm.RoleUser, "next")}},
			want: nil,
		},
		{
			name: "at most four: the earliest go",
			req: llm.Request{System: "S", CacheSystem: true, CacheTools: true, Tools: []llm.ToolSpec{{Name: "f"}}, Messages: []llm.Message{
				{Role: llm.RoleUser, Cache: true, Parts: []llm.Part{{Kind: llm.PartText, Text: "1"}}},
				{Role: llm.RoleAssistant, Cache: true, Parts: []llm.Part{{Kind: llm.PartText, Text: "2"}}},
				{Role: llm.RoleUser, Cache: true, Parts: []llm.Part{{Kind: llm.PartText, Text: "3"}}},
				{Role: llm.RoleAssistant, Cache: true, Parts: []llm.Part{{Kind: llm.PartText, Text: "4"}}},
				{Role: llm.RoleUser, Cache: true, Parts: []llm.Part{{Kind: llm.PartText, Text: "5"}}},
			}},
			want: []string{"messages.1.0 text", "messages.2.0 text", "messages.3.0 text", "messages.4.0 text"},
		},
		{
			name: "tools and system kept before older messages",
			req: llm.Request{System: "S", CacheSystem: true, CacheTools: true, Tools: []llm.ToolSpec{{Name: "f"}}, Messages: []llm.Message{
				{Role: llm.RoleUser, Cache: true, Parts: []llm.Part{{Kind: llm.PartText, Text: "1"}}},
				{Role: llm.RoleAssistant, Parts: []llm.Part{{Kind: llm.PartText, Text: "2"}}},
				{Role: llm.RoleUser, Cache: true, Parts: []llm.Part{{Kind: llm.PartText, Text: "3"}}},
				{Role: llm.RoleAssistant, Cache: true, Parts: []llm.Part{{Kind: llm.PartText, Text: "4"}}},
			}},
			want: []string{"tools.0 <nil>", "messages.0.0 text", "messages.2.0 text", "messages.3.0 text"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.Model = "m"
			got := cachedBlocks(t, requestJSON(t, &tt.req))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("breakpoints (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSystemMessagesJoinTheSystemPrompt(t *testing.T) {
	got := requestJSON(t, &llm.Request{Model: "m", System: "Be brief.", Messages: []llm.Message{
		llm.TextMessage(llm.RoleUser, "hi"),
		llm.TextMessage(llm.RoleSystem, "The user is in Paris."),
	}})
	want := []any{text("Be brief."), text("The user is in Paris.")}
	if diff := cmp.Diff(want, got["system"]); diff != "" {
		t.Errorf("system (-want +got):\n%s", diff)
	}
}

func TestToolResultWithImage(t *testing.T) {
	got := requestJSON(t, &llm.Request{Model: "m", Messages: []llm.Message{
		llm.TextMessage(llm.RoleUser, "Screenshot please."),
		{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "call_9f/2:x", Name: "screenshot"}}},
		{Role: llm.RoleTool, ToolCallID: "call_9f/2:x", ToolName: "screenshot", Parts: []llm.Part{
			{Kind: llm.PartText, Text: "Here it is."},
			{Kind: llm.PartImage, MediaType: "image/jpeg", Data: []byte("jpg")},
		}},
	}})
	msgs := list(got["messages"])
	want := []any{map[string]any{"type": "tool_result", "tool_use_id": "call_9f_2_x", "content": []any{
		text("Here it is."),
		map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/jpeg", "data": "anBn"}},
	}}}
	if diff := cmp.Diff(want, msgs[2]["content"]); diff != "" {
		t.Errorf("tool result (-want +got):\n%s", diff)
	}
	if id := list(msgs[1]["content"])[0]["id"]; id != "call_9f_2_x" {
		t.Errorf("tool_use id = %v, want the same id as its result", id)
	}
}

func TestConvertErrorsNameTheMessage(t *testing.T) {
	c, _ := New(Options{})
	tests := []struct {
		msg  llm.Message
		want string
	}{
		{llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "toolu_1", Name: "f", Arguments: json.RawMessage(`{"a":`)}}}, "message 1: tool call 0 (f): the arguments are not a JSON object"},
		{llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "toolu_1", Name: "f", Arguments: json.RawMessage(`[1]`)}}}, "message 1: tool call 0 (f): the arguments are not a JSON object"},
		{llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{Name: "f"}}}, "message 1: tool call 0 (f) has no id"},
		{llm.Message{Role: llm.RoleTool, ToolName: "f"}, "message 1: the tool result (f) has no call id"},
		{llm.Message{Role: "narrator"}, `message 1: unknown role "narrator"`},
	}
	for _, tt := range tests {
		_, err := c.newRequest(&llm.Request{Model: "m", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi"), tt.msg}})
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("error = %v, want %q", err, tt.want)
		}
	}
}

// TestRoundTrip decodes a recorded answer with signed and redacted thinking, folds it as a consumer
// does, and sends it back: every block reaches the API byte for byte as it came.
func TestRoundTrip(t *testing.T) {
	for _, file := range []string{"thinking_redacted.sse", "thinking_signature.sse", "tool_use_split.sse"} {
		t.Run(file, func(t *testing.T) {
			answer := collect(t, "testdata/"+file)
			answer.Origin = "anthropic/m"
			req := &llm.Request{Model: "m", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "Q?"), answer}}
			for _, tc := range answer.ToolCalls {
				req.Messages = append(req.Messages, llm.Message{Role: llm.RoleTool, ToolCallID: tc.ID, Parts: []llm.Part{{Kind: llm.PartText, Text: "ok"}}})
			}
			req.Messages = append(req.Messages, llm.TextMessage(llm.RoleUser, "More?"))
			c, _ := New(Options{})
			body, err := c.Encode(req)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range recordedBlocks(t, "testdata/"+file) {
				if !bytes.Contains(body, want) {
					t.Errorf("the request lacks the block\n%s\nbody:\n%s", want, body)
				}
			}
		})
	}
}

// recordedBlocks rebuilds, from a recording's own bytes, the blocks the API wants back: each thinking
// block with its signature, each redacted block's data, each tool_use with its id.
func recordedBlocks(t *testing.T, file string) [][]byte {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var thinking strings.Builder
	var out [][]byte
	for line := range strings.Lines(string(raw)) {
		data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			ContentBlock struct{ Type, Data, ID string } `json:"content_block"`
			Delta        struct{ Type, Thinking, Signature string }
		}
		json.Unmarshal([]byte(data), &ev)
		switch {
		case ev.ContentBlock.Type == "redacted_thinking":
			out = append(out, fmt.Appendf(nil, `{"type":"redacted_thinking","data":"%s"}`, ev.ContentBlock.Data))
		case ev.ContentBlock.Type == "tool_use":
			out = append(out, fmt.Appendf(nil, `{"type":"tool_use","id":"%s"`, ev.ContentBlock.ID))
		case ev.Delta.Type == "thinking_delta":
			thinking.WriteString(ev.Delta.Thinking)
		case ev.Delta.Type == "signature_delta":
			th, _ := json.Marshal(thinking.String())
			out = append(out, fmt.Appendf(nil, `{"type":"thinking","thinking":%s,"signature":"%s"}`, th, ev.Delta.Signature))
			thinking.Reset()
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no block to send back", file)
	}
	return out
}

// TestThinkingWaitsForTheToolTurnToEnd: the API refuses thinking while a tool-use turn goes on whose
// assistant message does not start with thinking (another provider wrote it); the next turn thinks.
func TestThinkingWaitsForTheToolTurnToEnd(t *testing.T) {
	call := []llm.ToolCall{{ID: "call_1", Name: "f", Arguments: json.RawMessage(`{}`)}}
	result := llm.Message{Role: llm.RoleTool, ToolCallID: "call_1", Parts: []llm.Part{{Kind: llm.PartText, Text: "ok"}}}
	signed := []llm.Part{{Kind: llm.PartReasoning, Text: "hm", Signature: "sig"}}
	tests := []struct {
		name     string
		msgs     []llm.Message
		thinking bool
	}{
		{"foreign tool turn", []llm.Message{llm.TextMessage(llm.RoleUser, "go"), {Role: llm.RoleAssistant, Origin: "openai/m", Parts: signed, ToolCalls: call}, result}, false},
		{"own signed tool turn", []llm.Message{llm.TextMessage(llm.RoleUser, "go"), {Role: llm.RoleAssistant, Origin: "anthropic/m", Parts: signed, ToolCalls: call}, result}, true},
		{"after the turn", []llm.Message{llm.TextMessage(llm.RoleUser, "go"), {Role: llm.RoleAssistant, Origin: "openai/m", ToolCalls: call}, result,
			llm.TextMessage(llm.RoleAssistant, "Done."), llm.TextMessage(llm.RoleUser, "Thanks")}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := requestJSON(t, &llm.Request{Model: "m", Messages: tt.msgs, Reasoning: &llm.Reasoning{BudgetTokens: 2048}})
			if (got["thinking"] != nil) != tt.thinking {
				t.Errorf("thinking = %v, want on: %v", got["thinking"], tt.thinking)
			}
		})
	}
}

// TestCacheSystemMarksTheLastSystemBlock: system messages join the system prompt, and the breakpoint
// goes after all of it, once.
func TestCacheSystemMarksTheLastSystemBlock(t *testing.T) {
	sys := llm.TextMessage(llm.RoleSystem, "Today is Tuesday.")
	sys.Cache = true
	got := requestJSON(t, &llm.Request{Model: "m", System: "Be brief.", CacheSystem: true,
		Messages: []llm.Message{sys, llm.TextMessage(llm.RoleUser, "hi")}})
	if diff := cmp.Diff([]string{"system.1 text"}, cachedBlocks(t, got)); diff != "" {
		t.Errorf("breakpoints (-want +got):\n%s", diff)
	}
}
