package llmtest_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"chatd/internal/llm"
	"chatd/internal/llm/anthropic"
	"chatd/internal/llm/llmtest"
)

// refusal is what a strict test expects of a body: nil, accepted; else the status, the error type and
// a distinctive piece of the message.
type refusal struct {
	status int
	typ    string
	text   string
}

// checkRefusal compares a validator's answer with want.
func checkRefusal(t *testing.T, body string, got *llmtest.APIError, want *refusal) {
	t.Helper()
	switch {
	case got == nil && want == nil:
	case want == nil:
		t.Fatalf("refused: %v\nbody: %s", got, body)
	case got == nil:
		t.Fatalf("accepted, want %d %s %q\nbody: %s", want.status, want.typ, want.text, body)
	case got.Status != want.status || got.Type != want.typ || !strings.Contains(got.Message, want.text):
		t.Errorf("got %d %s %q\nwant %d %s, a message with %q", got.Status, got.Type, got.Message, want.status, want.typ, want.text)
	}
}

// decodeBody decodes a test body as the validators receive it.
func decodeBody(t *testing.T, body string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("test body: %v\n%s", err, body)
	}
	return m
}

// Messages API bodies are written as the JSON chatd sends, from these pieces.
const (
	antUser    = `{"role":"user","content":"What time is it?"}`
	antAgain   = `{"role":"user","content":[{"type":"text","text":"And now?"}]}`
	antAnswer  = `{"role":"assistant","content":[{"type":"text","text":"Noon."}]}`
	antUseA    = `{"type":"tool_use","id":"toolu_a","name":"read_time","input":{}}`
	antUseB    = `{"type":"tool_use","id":"toolu_b","name":"read_time","input":{"tz":"UTC"}}`
	antResA    = `{"type":"tool_result","tool_use_id":"toolu_a","content":"12:00"}`
	antResB    = `{"type":"tool_result","tool_use_id":"toolu_b","content":[{"type":"text","text":"11:00"}]}`
	antCallA   = `{"role":"assistant","content":[{"type":"text","text":"Let me look."},` + antUseA + `]}`
	antCallsAB = `{"role":"assistant","content":[` + antUseA + `,` + antUseB + `]}`
	antResultA = `{"role":"user","content":[` + antResA + `]}`
	antTools   = `"tools":[{"name":"read_time","description":"Time.","input_schema":{"type":"object","properties":{}}}]`
	antThink   = `{"type":"thinking","thinking":"A tool.","signature":"EqQBCgIYAh"}`
	antCached  = `{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}`
)

// antBody is a request body with the members in extra (JSON members, or "" for none) and these messages.
func antBody(extra string, msgs ...string) string {
	if extra != "" {
		extra += ","
	}
	return `{"model":"claude-test","max_tokens":2048,"stream":true,` + extra + `"messages":[` + strings.Join(msgs, ",") + `]}`
}

func antRefused(text string) *refusal {
	return &refusal{http.StatusBadRequest, "invalid_request_error", text}
}

func TestValidateAnthropic(t *testing.T) {
	const (
		unanswered = "`tool_use` ids were found without `tool_result` blocks immediately after: "
		unexpected = "unexpected `tool_use_id` found in `tool_result` blocks: "
		nonEmpty   = "all messages must have non-empty content except for the optional final assistant message"
		thinkingOn = `"thinking":{"type":"enabled","budget_tokens":1024}`
	)
	tests := []struct {
		name string
		body string
		want *refusal // nil: the API accepts the body
	}{
		// Required members and the messages.
		{"one user message", antBody("", antUser), nil},
		{"a system prompt as text blocks", antBody(`"system":[{"type":"text","text":"Be brief."}]`, antUser), nil},
		{"a system prompt as a string", antBody(`"system":"Be brief."`, antUser), nil},
		{"no model", `{"max_tokens":10,"messages":[` + antUser + `]}`, antRefused("model: Field required")},
		{"no max_tokens", `{"model":"claude-test","messages":[` + antUser + `]}`, antRefused("max_tokens: Field required")},
		{"no messages", `{"model":"claude-test","max_tokens":10}`, antRefused("messages: Field required")},
		{"no message", antBody(""), antRefused("messages: at least one message is required")},
		{"a system role", antBody("", `{"role":"system","content":"Be brief."}`, antUser),
			antRefused("messages.0.role: Input should be 'user' or 'assistant'")},
		{"no content", antBody("", `{"role":"user"}`), antRefused("messages.0.content: Field required")},

		// Turns: the API combines consecutive messages of one role, and takes an assistant message first.
		{"two user messages in a row", antBody("", antUser, antAgain), nil},
		{"two assistant messages in a row", antBody("", antUser, antAnswer, antAnswer, antAgain), nil},
		{"an assistant message first", antBody("", antAnswer, antUser), nil},

		// Content.
		{"an empty final assistant message", antBody("", antUser, `{"role":"assistant","content":""}`), nil},
		{"an empty user message", antBody("", `{"role":"user","content":""}`), antRefused("messages.0: " + nonEmpty)},
		{"an empty assistant message before the last", antBody("", antUser, `{"role":"assistant","content":[]}`, antAgain),
			antRefused("messages.1: " + nonEmpty)},
		{"an empty text block", antBody("", `{"role":"user","content":[{"type":"text","text":""},{"type":"text","text":"hi"}]}`),
			antRefused("messages: text content blocks must be non-empty")},
		{"a blank text block", antBody("", `{"role":"user","content":[{"type":"text","text":" \n"}]}`),
			antRefused("messages: text content blocks must contain non-whitespace text")},
		{"a prefill ending in whitespace", antBody("", antUser, `{"role":"assistant","content":"It is "}`),
			antRefused("final assistant content cannot end with trailing whitespace")},
		{"an image", antBody("", `{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw=="}}]}`), nil},
		{"an image without a source", antBody("", `{"role":"user","content":[{"type":"image"}]}`),
			antRefused("messages.0.content.0.image.source: Field required")},
		{"an unknown block type", antBody("", `{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}`),
			antRefused("messages.0.content.0: Input tag 'image_url' found using 'type' does not match any of the expected tags")},

		// Tool use: every call answered at the start of the next message, every result answering one.
		{"a call answered", antBody(antTools, antUser, antCallA, antResultA, antAnswer), nil},
		{"parallel calls answered, text after the results", antBody(antTools, antUser, antCallsAB,
			`{"role":"user","content":[`+antResB+`,`+antResA+`,{"type":"text","text":"Hurry."}]}`), nil},
		{"a call unanswered", antBody(antTools, antUser, antCallA, antAgain), antRefused("messages.1: " + unanswered + "toolu_a. Each `tool_use` block must have a corresponding `tool_result` block in the next message.")},
		{"a call unanswered at the end", antBody(antTools, antUser, antCallA), antRefused("messages.1: " + unanswered + "toolu_a.")},
		{"a result after text", antBody(antTools, antUser, antCallA, `{"role":"user","content":[{"type":"text","text":"Here:"},`+antResA+`]}`),
			antRefused("messages.1: " + unanswered + "toolu_a.")},
		{"results split over two messages", antBody(antTools, antUser, antCallsAB, antResultA, `{"role":"user","content":[`+antResB+`]}`),
			antRefused("messages.1: " + unanswered + "toolu_b.")},
		{"both calls unanswered", antBody(antTools, antUser, antCallsAB, antAgain), antRefused(unanswered + "toolu_a, toolu_b.")},
		{"a result with no call before it", antBody(antTools, antUser, antAnswer, antResultA),
			antRefused("messages.2.content.0: " + unexpected + "toolu_a. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.")},
		{"a result answering another call", antBody(antTools, antUser, antCallA, `{"role":"user","content":[`+antResA+`,`+antResB+`]}`),
			antRefused("messages.2.content.1: " + unexpected + "toolu_b.")},
		{"a call id used twice", antBody(antTools, antUser, antCallA, antResultA, antCallA, antResultA),
			antRefused("messages.3.content.1: `tool_use` ids must be unique")},
		{"a call id of another provider", antBody(antTools, antUser, `{"role":"assistant","content":[{"type":"tool_use","id":"call_1|fc_1","name":"read_time","input":{}}]}`),
			antRefused("messages.1.content.0.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'")},
		{"a result id of another provider", antBody(antTools, antUser, `{"role":"user","content":[{"type":"tool_result","tool_use_id":"functions.read:0"}]}`),
			antRefused("messages.1.content.0.tool_result.tool_use_id: String should match pattern '^[a-zA-Z0-9_-]+$'")},
		{"arguments that are not an object", antBody(antTools, antUser, `{"role":"assistant","content":[{"type":"tool_use","id":"toolu_a","name":"read_time","input":"{}"}]}`),
			antRefused("messages.1.content.0.tool_use.input")},
		{"tool blocks without tools", antBody("", antUser, antCallA, antResultA, antAgain), nil},

		// Tools and tool_choice.
		{"every tool choice", antBody(antTools+`,"tool_choice":{"type":"tool","name":"read_time"}`, antUser), nil},
		{"a tool named like an MCP tool", antBody(`"tools":[{"name":"files.read","input_schema":{"type":"object"}}]`, antUser),
			antRefused("tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'")},
		{"a tool without a schema", antBody(`"tools":[{"name":"read_time"}]`, antUser), antRefused("tools.0.custom.input_schema: Field required")},
		{"a schema that is not an object", antBody(`"tools":[{"name":"read_time","input_schema":{"type":"string"}}]`, antUser),
			antRefused("tools.0.custom.input_schema.type: Input should be 'object'")},
		{"a server tool", antBody(`"tools":[{"type":"web_search_20250305","name":"web_search"}]`, antUser), nil},
		{"a tool choice without tools", antBody(`"tool_choice":{"type":"auto"}`, antUser),
			antRefused("tool_choice may only be specified while providing tools.")},
		{"an unknown tool choice", antBody(antTools+`,"tool_choice":{"type":"required"}`, antUser), antRefused("tool_choice: Input tag 'required'")},

		// Cache breakpoints.
		{"four breakpoints", antBody(`"system":[`+antCached+`]`, `{"role":"user","content":[`+antCached+`,`+antCached+`,`+antCached+`]}`), nil},
		{"five breakpoints", antBody(`"system":[`+antCached+`,`+antCached+`]`, `{"role":"user","content":[`+antCached+`,`+antCached+`,`+antCached+`]}`),
			antRefused("A maximum of 4 blocks with cache_control may be provided. Found 5.")},
		{"a breakpoint on an empty system block", antBody(`"system":[{"type":"text","text":"","cache_control":{"type":"ephemeral"}}]`, antUser),
			antRefused("system.0: cache_control cannot be set for empty text blocks")},
		{"a breakpoint on an empty text block", antBody("", `{"role":"user","content":[{"type":"text","text":"","cache_control":{"type":"ephemeral"}}]}`),
			antRefused("messages.0.content.0.text: cache_control cannot be set for empty text blocks")},

		// Thinking.
		{"thinking through a tool turn", antBody(antTools+","+thinkingOn, antUser,
			`{"role":"assistant","content":[`+antThink+`,`+antUseA+`]}`, antResultA), nil},
		{"redacted thinking through a tool turn", antBody(antTools+","+thinkingOn, antUser,
			`{"role":"assistant","content":[{"type":"redacted_thinking","data":"EmwKAhgB"},`+antUseA+`]}`, antResultA), nil},
		{"thinking with temperature 1", antBody(thinkingOn+`,"temperature":1`, antUser), nil},
		{"a budget under 1024", antBody(`"thinking":{"type":"enabled","budget_tokens":512}`, antUser),
			antRefused("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")},
		{"a budget of max_tokens", antBody(`"thinking":{"type":"enabled","budget_tokens":2048}`, antUser),
			antRefused("`max_tokens` must be greater than `thinking.budget_tokens`.")},
		{"thinking with a temperature", antBody(thinkingOn+`,"temperature":0.2`, antUser),
			antRefused("`temperature` may only be set to 1 when thinking is enabled")},
		{"thinking with top_k", antBody(thinkingOn+`,"top_k":5`, antUser), antRefused("`top_k` must be unset when thinking is enabled.")},
		{"thinking with a forced tool", antBody(antTools+","+thinkingOn+`,"tool_choice":{"type":"any"}`, antUser),
			antRefused("Thinking may not be enabled when tool_choice forces tool use.")},
		{"a tool turn without its thinking", antBody(antTools+","+thinkingOn, antUser, antCallA, antResultA),
			antRefused("messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`. When `thinking` is enabled, a final `assistant` message must start with a thinking block")},
		{"a prefill without thinking", antBody(thinkingOn, antUser, `{"role":"assistant","content":"It is"}`),
			antRefused("messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`.")},
		{"an empty prefill with thinking", antBody(thinkingOn, antUser, `{"role":"assistant","content":""}`), nil},
		{"an earlier tool turn without thinking", antBody(antTools+","+thinkingOn, antUser, antCallA, antResultA, antAnswer, antAgain), nil},
		{"thinking without a signature", antBody("", antUser, `{"role":"assistant","content":[{"type":"thinking","thinking":"Hmm."},{"type":"text","text":"Hi."}]}`, antAgain),
			antRefused("messages.1.content.0.thinking.signature: Field required")},
		{"thinking with an empty signature", antBody("", antUser, `{"role":"assistant","content":[{"type":"thinking","thinking":"Hmm.","signature":""},{"type":"text","text":"Hi."}]}`, antAgain),
			antRefused("messages.1.content.0: Invalid `signature` in `thinking` block")},
		{"a breakpoint on thinking", antBody("", antUser, `{"role":"assistant","content":[{"type":"thinking","thinking":"Hmm.","signature":"Eq","cache_control":{"type":"ephemeral"}},{"type":"text","text":"Hi."}]}`, antAgain),
			antRefused("messages.1.content.0.thinking.cache_control")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkRefusal(t, tt.body, llmtest.ValidateAnthropic(decodeBody(t, tt.body)), tt.want)
		})
	}
}

// TestAnthropicAdapterBodies holds the bodies chatd's adapter sends for representative conversations to
// the API's rules.
func TestAnthropicAdapterBodies(t *testing.T) {
	c, err := anthropic.New(anthropic.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, req := range adapterRequests("anthropic/claude-sonnet-4-5", "claude-sonnet-4-5") {
		t.Run(name, func(t *testing.T) {
			body, err := c.Encode(req)
			if err != nil {
				t.Fatal(err)
			}
			checkRefusal(t, string(body), llmtest.ValidateAnthropic(decodeBody(t, string(body))), nil)
		})
	}
}

// adapterRequests are representative conversations, the assistant's written by origin, for model.
func adapterRequests(origin, model string) map[string]*llm.Request {
	readTime := llm.ToolSpec{Name: "read_time", Description: "Reads the time.", InputSchema: json.RawMessage(`{"type":"object","properties":{"tz":{"type":"string"}}}`)}
	user := llm.TextMessage(llm.RoleUser, "What time is it in Paris and in Tokyo?")
	call := func(id, tz string) llm.ToolCall {
		return llm.ToolCall{ID: id, Name: "read_time", Arguments: json.RawMessage(`{"tz":"` + tz + `"}`), Signature: "c2lnbmF0dXJl"}
	}
	result := func(id, text string) llm.Message {
		return llm.Message{Role: llm.RoleTool, ToolCallID: id, ToolName: "read_time", Parts: []llm.Part{{Kind: llm.PartText, Text: text}}}
	}
	thought := llm.Part{Kind: llm.PartReasoning, Text: "Two time zones: two calls.", Signature: "c2lnbmF0dXJl", ID: "rs_1"}
	return map[string]*llm.Request{
		"text": {Model: model, System: "Be brief.", Messages: []llm.Message{
			llm.TextMessage(llm.RoleUser, "Hello"),
			{Role: llm.RoleAssistant, Origin: origin, Parts: []llm.Part{{Kind: llm.PartText, Text: "Hi. What can I do?"}}},
			llm.TextMessage(llm.RoleUser, "Tell me a joke."),
		}},
		"tool call and result": {Model: model, Tools: []llm.ToolSpec{readTime}, ToolChoice: llm.ToolChoiceAuto, Messages: []llm.Message{
			user,
			{Role: llm.RoleAssistant, Origin: origin, Parts: []llm.Part{{Kind: llm.PartText, Text: "Let me look."}}, ToolCalls: []llm.ToolCall{call("toolu_01", "Europe/Paris")}},
			result("toolu_01", "12:00"),
			{Role: llm.RoleAssistant, Origin: origin, Parts: []llm.Part{{Kind: llm.PartText, Text: "Noon in Paris."}}},
			llm.TextMessage(llm.RoleUser, "Thanks."),
		}},
		"parallel calls": {Model: model, Tools: []llm.ToolSpec{readTime}, Messages: []llm.Message{
			user,
			{Role: llm.RoleAssistant, Origin: origin, ToolCalls: []llm.ToolCall{call("toolu_01", "Europe/Paris"), call("toolu_02", "Asia/Tokyo")}},
			result("toolu_02", "20:00"),
			result("toolu_01", "12:00"),
		}},
		"reasoning with a signature": {Model: model, Tools: []llm.ToolSpec{readTime}, Reasoning: &llm.Reasoning{Effort: "low"}, Messages: []llm.Message{
			user,
			{Role: llm.RoleAssistant, Origin: origin, Parts: []llm.Part{thought, {Kind: llm.PartText, Text: "Checking both."}},
				ToolCalls: []llm.ToolCall{call("toolu_01", "Europe/Paris"), call("toolu_02", "Asia/Tokyo")}},
			result("toolu_01", "12:00"),
			result("toolu_02", "20:00"),
		}},
		"another model's calls": {Model: model, Tools: []llm.ToolSpec{readTime}, Reasoning: &llm.Reasoning{Effort: "low"}, Messages: []llm.Message{
			user,
			{Role: llm.RoleAssistant, Origin: "other/model", Parts: []llm.Part{thought},
				ToolCalls: []llm.ToolCall{{ID: "call_1|fc_1", Name: "read_time", Arguments: json.RawMessage(`{}`)}}},
			result("call_1|fc_1", "12:00"),
		}},
		"an image": {Model: model, CacheSystem: true, System: "Describe images.", Messages: []llm.Message{
			{Role: llm.RoleUser, Cache: true, Parts: []llm.Part{
				{Kind: llm.PartText, Text: "What is this?"},
				{Kind: llm.PartImage, MediaType: "image/png", Data: []byte{0x89, 'P', 'N', 'G'}},
			}},
		}},
	}
}
