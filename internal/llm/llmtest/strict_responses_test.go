package llmtest_test

import (
	"net/http"
	"strings"
	"testing"

	"chatd/internal/llm/llmtest"
	"chatd/internal/llm/responses"
)

// Responses API bodies are written as the JSON chatd sends, from these pieces.
const (
	resUser      = `{"role":"user","content":[{"type":"input_text","text":"What time is it?"}]}`
	resAgain     = `{"role":"user","content":"And now?"}`
	resAnswer    = `{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Noon."}]}`
	resCallA     = `{"type":"function_call","call_id":"call_a","name":"read_time","arguments":"{}"}`
	resCallB     = `{"type":"function_call","call_id":"call_b","name":"read_time","arguments":"{\"tz\":\"UTC\"}"}`
	resOutA      = `{"type":"function_call_output","call_id":"call_a","output":"12:00"}`
	resOutB      = `{"type":"function_call_output","call_id":"call_b","output":""}`
	resReasoning = `{"id":"rs_1","type":"reasoning","encrypted_content":"gAAAA","summary":[{"type":"summary_text","text":"Two calls."}]}`
	resTools     = `"tools":[{"type":"function","name":"read_time","parameters":{"type":"object","properties":{}},"strict":false}]`
)

// resBody is a request body with the members in extra (JSON members, or "") and these input items.
func resBody(extra string, items ...string) string {
	if extra != "" {
		extra += ","
	}
	return `{"model":"gpt-5","store":false,"stream":true,` + extra + `"input":[` + strings.Join(items, ",") + `]}`
}

func TestValidateResponses(t *testing.T) {
	tests := []struct {
		name string
		body string
		want *llmtest.APIError // nil: the API accepts the body; Message is a distinctive piece
	}{
		// The input and its items.
		{"one user message", resBody("", resUser), nil},
		{"a string input", `{"model":"gpt-5","input":"What time is it?"}`, nil},
		{"every role", resBody("", `{"role":"system","content":"Be brief."}`, `{"role":"developer","content":"Use tools."}`, resUser, resAnswer, resAgain), nil},
		{"no input", `{"model":"gpt-5"}`, rejected("input", "missing_required_parameter", "Missing required parameter: 'input'.")},
		{"a tool role", resBody("", resUser, `{"role":"tool","content":"12:00"}`),
			rejected("input[1].role", "invalid_value", "Invalid value: 'tool'. Supported values are: 'assistant', 'system', 'developer', and 'user'.")},
		{"an unknown item type", resBody("", resUser, `{"type":"tool_result","call_id":"call_a"}`), rejected("input[1].type", "invalid_value", "Invalid value: 'tool_result'.")},
		{"a message without content", resBody("", `{"role":"user"}`), rejected("input[0].content", "missing_required_parameter", "Missing required parameter: 'input[0].content'.")},
		{"input_text in an assistant message", resBody("", resUser, `{"type":"message","role":"assistant","content":[{"type":"input_text","text":"Noon."}]}`),
			rejected("input[1].content[0]", "invalid_value", "Invalid value: 'input_text'. Supported values are: 'output_text' and 'refusal'.")},
		{"output_text in a user message", resBody("", `{"role":"user","content":[{"type":"output_text","text":"hi"}]}`),
			rejected("input[0].content[0]", "invalid_value", "Invalid value: 'output_text'. Supported values are: 'input_text', 'input_image', and 'input_file'.")},
		{"a chat completions part", resBody("", `{"role":"user","content":[{"type":"text","text":"hi"}]}`),
			rejected("input[0].content[0].type", "invalid_value", "Invalid value: 'text'. Supported values are: 'input_text', 'input_image', 'output_text', 'refusal', 'input_file', 'computer_screenshot', and 'summary_text'.")},
		{"an image", resBody("", `{"role":"user","content":[{"type":"input_text","text":"What is this?"},{"type":"input_image","image_url":"data:image/png;base64,iVBORw=="}]}`), nil},
		{"a text part without text", resBody("", `{"role":"user","content":[{"type":"input_text"}]}`),
			rejected("input[0].content[0].text", "missing_required_parameter", "Missing required parameter: 'input[0].content[0].text'.")},
		{"a call without a name", resBody(resTools, resUser, `{"type":"function_call","call_id":"call_a","arguments":"{}"}`, resOutA),
			rejected("input[1].name", "missing_required_parameter", "Missing required parameter: 'input[1].name'.")},
		{"an output without output", resBody(resTools, resUser, resCallA, `{"type":"function_call_output","call_id":"call_a"}`),
			rejected("input[2].output", "missing_required_parameter", "Missing required parameter: 'input[2].output'.")},
		{"a reasoning item without summary", resBody("", resUser, `{"id":"rs_1","type":"reasoning","encrypted_content":"gAAAA"}`, resAnswer),
			rejected("input[1].summary", "missing_required_parameter", "Missing required parameter: 'input[1].summary'.")},

		// Calls and their outputs.
		{"a call answered", resBody(resTools, resUser, resCallA, resOutA, resAnswer, resAgain), nil},
		{"parallel calls answered out of order", resBody(resTools, resUser, resCallA, resCallB, resOutB, resOutA), nil},
		{"an output with no call", resBody(resTools, resUser, resOutA),
			rejected("input", "", "No tool call found for function call output with call_id call_a.")},
		{"an output before its call", resBody(resTools, resUser, resOutA, resCallA),
			rejected("input", "", "No tool call found for function call output with call_id call_a.")},
		{"a call answered twice", resBody(resTools, resUser, resCallA, resOutA, resOutA),
			rejected("input", "", "No tool call found for function call output with call_id call_a.")},
		{"a call unanswered", resBody(resTools, resUser, resCallA, resCallB, resOutA),
			rejected("input", "", "No tool output found for function call call_b.")},
		{"a call unanswered before the next prompt", resBody(resTools, resUser, resCallA, resAgain),
			rejected("input", "", "No tool output found for function call call_a.")},

		// Reasoning items.
		{"reasoning before a call", resBody(resTools, resUser, resReasoning, resCallA, resOutA), nil},
		{"reasoning before an answer", resBody("", resUser, resReasoning, resAnswer), nil},
		{"reasoning at the end", resBody("", resUser, resAnswer, resReasoning),
			rejected("input", "", "Item 'rs_1' of type 'reasoning' was provided without its required following item.")},
		{"reasoning before a prompt", resBody("", resUser, resReasoning, resAgain),
			rejected("input", "", "Item 'rs_1' of type 'reasoning' was provided without its required following item.")},
		{"reasoning before reasoning", resBody("", resUser, resReasoning, resReasoning, resAnswer),
			rejected("input", "", "Item 'rs_1' of type 'reasoning' was provided without its required following item.")},
		{"unstored reasoning without its content", resBody("", resUser, `{"id":"rs_2","type":"reasoning","summary":[]}`, resAnswer),
			&llmtest.APIError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "input",
				Message: "Item with id 'rs_2' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input."}},
		{"stored reasoning by id", `{"model":"gpt-5","input":[` + resUser + `,{"id":"rs_2","type":"reasoning","summary":[]},` + resAnswer + `]}`, nil},

		// Tools and tool_choice.
		{"a named choice", resBody(resTools+`,"tool_choice":{"type":"function","name":"read_time"}`, resUser), nil},
		{"a choice of a built-in tool", resBody(`"tools":[{"type":"web_search"}],"tool_choice":{"type":"web_search"}`, resUser), nil},
		{"a choice naming an undeclared tool", resBody(resTools+`,"tool_choice":{"type":"function","name":"write_note"}`, resUser),
			rejected("tool_choice", "", "Tool choice 'write_note' not found in 'tools' parameter.")},
		{"a choice of an undeclared built-in tool", resBody(resTools+`,"tool_choice":{"type":"image_generation"}`, resUser),
			rejected("tool_choice", "", "Tool choice 'image_generation' not found in 'tools' parameter.")},
		{"an unknown choice", resBody(resTools+`,"tool_choice":"any"`, resUser),
			rejected("tool_choice", "invalid_value", "Invalid value: 'any'. Supported values are: 'none', 'auto', and 'required'.")},
		{"a tool named like an MCP tool", resBody(`"tools":[{"type":"function","name":"files.read","parameters":{}}]`, resUser),
			rejected("tools[0].name", "invalid_value", "Invalid 'tools[0].name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.")},
		{"a tool with a long name", resBody(`"tools":[{"type":"function","name":"`+strings.Repeat("x", 65)+`","parameters":{}}]`, resUser),
			rejected("tools[0].name", "string_above_max_length", "string too long")},
		{"a tool without a name", resBody(`"tools":[{"type":"function","parameters":{}}]`, resUser),
			rejected("tools[0].name", "missing_required_parameter", "Missing required parameter: 'tools[0].name'.")},
		{"a tool in the chat completions shape", resBody(`"tools":[{"type":"function","function":{"name":"read_time"}}]`, resUser),
			rejected("tools[0].name", "missing_required_parameter", "Missing required parameter: 'tools[0].name'.")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := llmtest.ValidateResponses(decodeBody(t, tt.body))
			switch {
			case got == nil && tt.want == nil:
			case got == nil || tt.want == nil:
				t.Fatalf("ValidateResponses = %v, want %v\nbody: %s", got, tt.want, tt.body)
			case got.Status != tt.want.Status || got.Type != tt.want.Type || got.Param != tt.want.Param || got.Code != tt.want.Code ||
				!strings.Contains(got.Message, tt.want.Message):
				t.Errorf("ValidateResponses:\n got %+v\nwant %+v (Message a piece)", *got, *tt.want)
			}
		})
	}
}

// TestResponsesAdapterBodies holds the bodies chatd's adapter sends for representative conversations to
// the API's rules, for a reasoning model (encrypted reasoning items sent back) and a plain one.
func TestResponsesAdapterBodies(t *testing.T) {
	c, err := responses.New(responses.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{"gpt-5", "gpt-4.1"} {
		for name, req := range adapterRequests("openai-responses/"+model, model) {
			t.Run(model+"/"+name, func(t *testing.T) {
				body, err := c.Encode(req)
				if err != nil {
					t.Fatal(err)
				}
				checkRefusal(t, string(body), llmtest.ValidateResponses(decodeBody(t, string(body))), nil)
			})
		}
	}
}
