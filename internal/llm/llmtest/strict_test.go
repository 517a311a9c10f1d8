package llmtest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"chatd/internal/llm/llmtest"
)

// Histories are written as the JSON chatd sends; calls and answers are spelled out with these helpers.
const (
	user       = `{"role":"user","content":"What time is it?"}`
	system     = `{"role":"system","content":"Be brief."}`
	answer     = `{"role":"assistant","content":"Noon."}`
	callA      = `{"id":"call_a","type":"function","function":{"name":"read_time","arguments":"{}"}}`
	callB      = `{"id":"call_b","type":"function","function":{"name":"write_note","arguments":"{\"text\":\"x\"}"}}`
	callsAB    = `{"role":"assistant","content":null,"tool_calls":[` + callA + `,` + callB + `]}`
	callsA     = `{"role":"assistant","content":null,"tool_calls":[` + callA + `]}`
	callsB     = `{"role":"assistant","content":null,"tool_calls":[` + callB + `]}`
	resultA    = `{"role":"tool","tool_call_id":"call_a","content":"12:00"}`
	resultB    = `{"role":"tool","tool_call_id":"call_b","content":"saved"}`
	readTime   = `{"type":"function","function":{"name":"read_time","parameters":{"type":"object","properties":{}}}}`
	unanswered = "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
	orphan     = "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
	nullText   = "Invalid value for 'content': expected a string, got null."
)

// history is a request body with these messages.
func history(msgs ...string) string {
	return `{"model":"gpt-test","stream":true,"messages":[` + strings.Join(msgs, ",") + `]}`
}

// withTools is a request body with these messages and the request fields in extra (JSON members).
func withTools(extra string, msgs ...string) string {
	return `{"model":"gpt-test",` + extra + `,"messages":[` + strings.Join(msgs, ",") + `]}`
}

func rejected(param, code, msg string) *llmtest.APIError {
	return &llmtest.APIError{Status: http.StatusBadRequest, Message: msg, Type: "invalid_request_error", Param: param, Code: code}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		body string
		want *llmtest.APIError // nil: the API accepts the body
	}{
		// 1. messages is a non-empty array of objects.
		{"one user message", history(user), nil},
		{"no messages", `{"model":"gpt-test"}`,
			rejected("messages", "missing_required_parameter", "Missing required parameter: 'messages'.")},
		{"empty messages", history(),
			rejected("messages", "empty_array", "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.")},
		{"messages not an array", `{"messages":"hi"}`,
			rejected("messages", "invalid_type", "Invalid type for 'messages': expected an array of objects, but got a string instead.")},
		{"a message not an object", history(`"hi"`),
			rejected("messages[0]", "invalid_type", "Invalid type for 'messages[0]': expected an object, but got a string instead.")},

		// 2. Roles.
		{"every role", history(system, `{"role":"developer","content":"Use tools."}`, user, answer), nil},
		{"unknown role", history(user, `{"role":"model","content":"Noon."}`),
			rejected("messages[1].role", "invalid_value", "Invalid value: 'model'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.")},
		{"no role", history(`{"content":"hi"}`),
			rejected("messages[0].role", "missing_required_parameter", "Missing required parameter: 'messages[0].role'.")},
		{"a later bad role is reported before an earlier missing content", history(`{"role":"user"}`, `{"role":"bogus","content":"a"}`),
			rejected("messages[1].role", "invalid_value", "Invalid value: 'bogus'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.")},

		// 3. Every call is answered by the tool messages right after it.
		{"calls answered", history(system, user, callsAB, resultA, resultB, answer), nil},
		{"calls answered out of order", history(user, callsAB, resultB, resultA), nil},
		{"calls answered over several turns", history(user, callsA, resultA, `{"role":"user","content":"Again."}`, callsB, resultB, answer), nil},
		{"a call unanswered before the next message", history(user, callsAB, resultA, `{"role":"user","content":"Hurry."}`),
			rejected("messages.[3].role", "", unanswered+"call_b")},
		{"calls unanswered at the end", history(user, callsAB),
			rejected("messages", "", unanswered+"call_a, call_b")},
		{"the answer comes after a user message", history(user, callsA, `{"role":"user","content":"Hurry."}`, resultA),
			rejected("messages.[2].role", "", unanswered+"call_a")},

		// 4. A tool message answers a call of the assistant message before its run of tool messages.
		{"a tool message after a user message", history(user, resultA),
			rejected("messages.[1].role", "", orphan)},
		{"a tool message after an answer without calls", history(user, callsA, resultA, answer, resultA),
			rejected("messages.[4].role", "", orphan)},
		{"a tool message answering a call not made", history(user, callsA, resultB),
			rejected("messages.[2].role", "", orphan)},
		{"a call answered twice", history(user, callsA, resultA, resultA),
			rejected("messages.[3].tool_call_id", "", "Invalid parameter: Duplicate value for 'tool_call_id' of 'call_a', in messages[2] and messages[3].")},

		// 5. A tool message has a tool_call_id and text content.
		{"tool content as text parts", history(user, callsA, `{"role":"tool","tool_call_id":"call_a","content":[{"type":"text","text":"12:00"}]}`), nil},
		{"tool content empty", history(user, callsA, `{"role":"tool","tool_call_id":"call_a","content":""}`), nil},
		{"tool message without tool_call_id", history(user, callsA, `{"role":"tool","content":"12:00"}`),
			rejected("messages.[2].tool_call_id", "", "Missing parameter 'tool_call_id': messages with role 'tool' must have a 'tool_call_id'.")},
		{"tool message with an empty tool_call_id", history(user, callsA, `{"role":"tool","tool_call_id":"","content":"12:00"}`),
			rejected("messages.[2].tool_call_id", "", "Missing parameter 'tool_call_id': messages with role 'tool' must have a 'tool_call_id'.")},
		{"tool_call_id not a string", history(user, callsA, `{"role":"tool","tool_call_id":7,"content":"12:00"}`),
			rejected("messages[2].tool_call_id", "invalid_type", "Invalid type for 'messages[2].tool_call_id': expected a string, but got an integer instead.")},
		{"tool content null", history(user, callsA, `{"role":"tool","tool_call_id":"call_a","content":null}`),
			rejected("messages.[2].content", "", nullText)},
		{"tool content an object", history(user, callsA, `{"role":"tool","tool_call_id":"call_a","content":{"time":"12:00"}}`),
			rejected("messages[2].content", "invalid_type", "Invalid type for 'messages[2].content': expected one of a string or array of objects, but got an object instead.")},
		{"tool content with an image", history(user, callsA, `{"role":"tool","tool_call_id":"call_a","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}]}`),
			rejected("messages[2]", "invalid_value", "Invalid 'messages[2]'. Image URLs are only allowed for messages with role 'user', but this message with role 'tool' contains an image URL.")},
		{"tool content with audio", history(user, callsA, `{"role":"tool","tool_call_id":"call_a","content":[{"type":"input_audio","input_audio":{"data":"AA==","format":"wav"}}]}`),
			rejected("messages[2].content[0].type", "invalid_value", "Invalid value: 'input_audio'. Supported values are: 'text'.")},

		// 6. An assistant message has content or something standing in for it.
		{"assistant with empty content", history(user, `{"role":"assistant","content":""}`), nil},
		{"assistant refusing", history(user, `{"role":"assistant","refusal":"I can't."}`), nil},
		{"assistant content null", history(user, `{"role":"assistant","content":null}`),
			rejected("messages.[1].content", "", nullText)},
		{"assistant without content", history(user, `{"role":"assistant"}`),
			rejected("messages.[1].content", "", nullText)},
		{"a null tool_calls stands in for nothing", history(user, `{"role":"assistant","content":null,"tool_calls":null}`),
			rejected("messages.[1].content", "", nullText)},

		// 7. Tool calls are well formed, with distinct ids.
		{"a call with text beside it", history(user, `{"role":"assistant","content":"Let me look.","tool_calls":[`+callA+`]}`, resultA), nil},
		{"empty tool_calls", history(user, `{"role":"assistant","content":"x","tool_calls":[]}`),
			rejected("messages[1].tool_calls", "empty_array", "Invalid 'messages[1].tool_calls': empty array. Expected an array with minimum length 1, but got an empty array instead.")},
		{"a call without id", history(user, `{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"read_time","arguments":"{}"}}]}`),
			rejected("messages[1].tool_calls[0].id", "missing_required_parameter", "Missing required parameter: 'messages[1].tool_calls[0].id'.")},
		{"a call with an empty id", history(user, `{"role":"assistant","tool_calls":[{"id":"","type":"function","function":{"name":"read_time","arguments":"{}"}}]}`),
			rejected("messages[1].tool_calls[0].id", "empty_string", "Invalid 'messages[1].tool_calls[0].id': empty string. Expected a string with minimum length 1, but got an empty string instead.")},
		{"a call of an unknown type", history(user, `{"role":"assistant","tool_calls":[{"id":"call_a","type":"tool","function":{"name":"read_time","arguments":"{}"}}]}`),
			rejected("messages[1].tool_calls[0].type", "invalid_value", "Invalid value: 'tool'. Supported values are: 'function' and 'custom'.")},
		{"a call without a name", history(user, `{"role":"assistant","tool_calls":[{"id":"call_a","type":"function","function":{"arguments":"{}"}}]}`),
			rejected("messages[1].tool_calls[0].function.name", "missing_required_parameter", "Missing required parameter: 'messages[1].tool_calls[0].function.name'.")},
		{"arguments as an object", history(user, `{"role":"assistant","tool_calls":[{"id":"call_a","type":"function","function":{"name":"read_time","arguments":{}}}]}`),
			rejected("messages[1].tool_calls[0].function.arguments", "invalid_type", "Invalid type for 'messages[1].tool_calls[0].function.arguments': expected a string, but got an object instead.")},
		{"two calls with one id", history(user, `{"role":"assistant","tool_calls":[`+callA+`,`+callA+`]}`, resultA),
			rejected("messages.[1].tool_calls.[1].id", "", "Invalid parameter: Duplicate value for 'id' of 'call_a', in messages[1].tool_calls[0] and messages[1].tool_calls[1].")},

		// 8. User and system content is a string or an array of parts the role may carry.
		{"user text and image", history(`{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}]}`), nil},
		{"user content empty string", history(`{"role":"user","content":""}`), nil},
		{"user content empty array", history(`{"role":"user","content":[]}`), nil},
		{"user content a number", history(`{"role":"user","content":7}`),
			rejected("messages[0].content", "invalid_type", "Invalid type for 'messages[0].content': expected one of a string or array of objects, but got an integer instead.")},
		{"user content null", history(`{"role":"user","content":null}`),
			rejected("messages.[0].content", "", nullText)},
		{"system without content", history(`{"role":"system"}`, user),
			rejected("messages.[0].content", "", nullText)},
		{"developer without content", history(`{"role":"developer"}`, user),
			rejected("messages[0].content", "missing_required_parameter", "Missing required parameter: 'messages[0].content'.")},
		{"an unknown part type", history(`{"role":"user","content":[{"type":"image","data":"AA=="}]}`),
			rejected("messages[0].content[0].type", "invalid_value", "Invalid value: 'image'. Supported values are: 'text', 'image_url', 'input_audio', 'refusal', 'audio', and 'file'.")},
		{"a text part without text", history(`{"role":"user","content":[{"type":"text"}]}`),
			rejected("messages[0].content[0].text", "missing_required_parameter", "Missing required parameter: 'messages[0].content[0].text'.")},
		{"an image in a system message", history(`{"role":"system","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}`, user),
			rejected("messages[0]", "invalid_value", "Invalid 'messages[0]'. Image URLs are only allowed for messages with role 'user', but this message with role 'system' contains an image URL.")},

		// 9. Tools and tool_choice.
		{"tools with a choice", withTools(`"tools":[`+readTime+`],"tool_choice":"auto"`, user, callsA, resultA), nil},
		{"a named choice", withTools(`"tools":[`+readTime+`],"tool_choice":{"type":"function","function":{"name":"read_time"}}`, user), nil},
		{"empty tools", withTools(`"tools":[]`, user),
			rejected("tools", "empty_array", "Invalid 'tools': empty array. Expected an array with minimum length 1, but got an empty array instead.")},
		{"tools not an array", withTools(`"tools":"none"`, user),
			rejected("tools", "invalid_type", "Invalid type for 'tools': expected an array of objects, but got a string instead.")},
		{"a tool of an unknown type", withTools(`"tools":[{"type":"web_search"}]`, user),
			rejected("tools[0].type", "invalid_value", "Invalid value: 'web_search'. Supported values are: 'function' and 'custom'.")},
		{"a tool without function", withTools(`"tools":[{"type":"function"}]`, user),
			rejected("tools[0].function", "missing_required_parameter", "Missing required parameter: 'tools[0].function'.")},
		{"a tool with an empty name", withTools(`"tools":[{"type":"function","function":{"name":""}}]`, user),
			rejected("tools[0].function.name", "empty_string", "Invalid 'tools[0].function.name': empty string. Expected a string with minimum length 1, but got an empty string instead.")},
		{"a tool named like an MCP tool", withTools(`"tools":[`+readTime+`,{"type":"function","function":{"name":"files.read"}}]`, user),
			rejected("tools[1].function.name", "invalid_value", "Invalid 'tools[1].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.")},
		{"a tool with a long name", withTools(`"tools":[{"type":"function","function":{"name":"`+strings.Repeat("x", 65)+`"}}]`, user),
			rejected("tools[0].function.name", "string_above_max_length", "Invalid 'tools[0].function.name': string too long. Expected a string with maximum length 64, but got a string with length 65 instead.")},
		{"parameters not an object", withTools(`"tools":[{"type":"function","function":{"name":"f","parameters":"{}"}}]`, user),
			rejected("tools[0].function.parameters", "invalid_type", "Invalid type for 'tools[0].function.parameters': expected an object, but got a string instead.")},
		{"a choice without tools", withTools(`"tool_choice":"auto"`, user),
			rejected("tool_choice", "", "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.")},
		{"an unknown choice", withTools(`"tools":[`+readTime+`],"tool_choice":"sometimes"`, user),
			rejected("tool_choice", "invalid_value", "Invalid value: 'sometimes'. Supported values are: 'none', 'auto', and 'required'.")},
		{"a choice naming an undeclared tool", withTools(`"tools":[`+readTime+`],"tool_choice":{"type":"function","function":{"name":"write_note"}}`, user),
			rejected("function_call", "", "Invalid value for 'function_call': no function named 'write_note' was specified in the 'functions' parameter.")},
		{"a choice of the wrong type", withTools(`"tools":[`+readTime+`],"tool_choice":7`, user),
			rejected("tool_choice", "invalid_type", "Invalid type for 'tool_choice': expected one of one of 'none', 'auto', or 'required' or object, but got an integer instead.")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body map[string]any
			if err := json.Unmarshal([]byte(tt.body), &body); err != nil {
				t.Fatalf("test body: %v", err)
			}
			got := llmtest.Validate(body)
			switch {
			case got == nil && tt.want == nil:
			case got == nil || tt.want == nil:
				t.Fatalf("Validate = %v, want %v", got, tt.want)
			case *got != *tt.want:
				t.Errorf("Validate:\n got %+v\nwant %+v", *got, *tt.want)
			}
		})
	}
}

func TestStrictServerRejectsWithoutTakingATurn(t *testing.T) {
	srv := llmtest.NewServer(t, llmtest.Turn{Text: "Hello"})
	srv.Strict = true

	// A history a crash could leave behind: the calls were stored, their results were not.
	status, header, body := post(t, srv, history(user, callsA, `{"role":"user","content":"Still there?"}`))
	if status != http.StatusBadRequest {
		t.Fatalf("status = %d, want 400", status)
	}
	if ct := header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	want := `{"error":{"message":"` + unanswered + `call_a","type":"invalid_request_error","param":"messages.[2].role","code":null}}`
	if body != want {
		t.Errorf("body:\n got %s\nwant %s", body, want)
	}

	status, _, body = post(t, srv, history(user, callsA, resultA))
	if status != http.StatusOK {
		t.Fatalf("valid request: status = %d, body %s", status, body)
	}
	for _, piece := range []string{`"content":"Hel"`, `"content":"lo"`, "data: [DONE]"} {
		if !strings.Contains(body, piece) {
			t.Errorf("stream lacks %s; the first scripted turn was not served:\n%s", piece, body)
		}
	}

	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("Requests() has %d requests, want the rejected one and the served one", len(reqs))
	}
	if got := reqs[0].Messages()[2]["content"]; got != "Still there?" {
		t.Errorf("first recorded request's last message = %v, want the rejected history", got)
	}
}

func TestStrictServerKeepsRejectedRequestsFromRespond(t *testing.T) {
	srv := llmtest.NewServer(t)
	srv.Strict = true
	var calls []int
	srv.Respond = func(n int, _ llmtest.Request) llmtest.Turn {
		calls = append(calls, n) // under the server's lock
		return llmtest.Turn{Text: "ok"}
	}
	if status, _, _ := post(t, srv, history(user, resultA)); status != http.StatusBadRequest {
		t.Fatalf("orphan tool message: status = %d, want 400", status)
	}
	if status, _, _ := post(t, srv, history(user)); status != http.StatusOK {
		t.Fatalf("valid request: status = %d, want 200", status)
	}
	if len(calls) != 1 || calls[0] != 0 {
		t.Errorf("Respond called with %v, want [0]: once, for the first accepted request", calls)
	}
}

func TestServerWithoutStrictServesAnyHistory(t *testing.T) {
	srv := llmtest.NewServer(t, llmtest.Turn{Text: "Hello"})
	if status, _, body := post(t, srv, history(user, resultA)); status != http.StatusOK {
		t.Fatalf("status = %d, body %s; only Strict validates", status, body)
	}
}

// post sends body to the server's chat completions endpoint and returns the whole answer.
func post(t *testing.T, srv *llmtest.Server, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.BaseURL()+"/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}
