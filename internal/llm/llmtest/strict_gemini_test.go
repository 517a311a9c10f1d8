package llmtest_test

import (
	"net/http"
	"strings"
	"testing"

	"chatd/internal/llm/gemini"
	"chatd/internal/llm/llmtest"
)

// GenerateContentRequest bodies are written as the JSON chatd sends, from these pieces.
const (
	gemUser    = `{"role":"user","parts":[{"text":"What time is it?"}]}`
	gemAgain   = `{"role":"user","parts":[{"text":"And now?"}]}`
	gemAnswer  = `{"role":"model","parts":[{"text":"Noon."}]}`
	gemCallA   = `{"functionCall":{"name":"read_time","args":{}},"thoughtSignature":"c2ln"}`
	gemCallB   = `{"functionCall":{"name":"read_time","args":{"tz":"UTC"}}}`
	gemRespA   = `{"functionResponse":{"name":"read_time","response":{"result":"12:00"}}}`
	gemCallsA  = `{"role":"model","parts":[{"text":"Let me look."},` + gemCallA + `]}`
	gemCallsAB = `{"role":"model","parts":[` + gemCallA + `,` + gemCallB + `]}`
	gemRespsA  = `{"role":"user","parts":[` + gemRespA + `]}`
	gemRespsAA = `{"role":"user","parts":[` + gemRespA + `,` + gemRespA + `]}`
	gemTools   = `"tools":[{"functionDeclarations":[{"name":"read_time","parametersJsonSchema":{"type":"object"}}]}]`
)

// gemBody is a request body with these contents and the members in extra (JSON members, or "").
func gemBody(extra string, contents ...string) string {
	if extra != "" {
		extra = "," + extra
	}
	return `{"contents":[` + strings.Join(contents, ",") + `]` + extra + `}`
}

func gemRefused(text string) *refusal {
	return &refusal{http.StatusBadRequest, "INVALID_ARGUMENT", text}
}

func TestValidateGemini(t *testing.T) {
	const (
		callTurn     = "Please ensure that function call turn comes immediately after a user turn or after a function response turn."
		responseTurn = "Please ensure that function response turn comes immediately after a function call turn."
		count        = "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn."
		badName      = "Invalid function name. Must start with a letter or an underscore. Must be alphameric (a-z, A-Z, 0-9), underscores (_), dots (.) or dashes (-), with a maximum length of 64."
	)
	tests := []struct {
		name string
		body string
		want *refusal // nil: the API accepts the body
	}{
		// Contents, roles and parts.
		{"one user content", gemBody("", gemUser), nil},
		{"a system instruction", gemBody(`"systemInstruction":{"parts":[{"text":"Be brief."}]}`, gemUser), nil},
		{"no contents", `{"systemInstruction":{"parts":[{"text":"Be brief."}]}}`, gemRefused("* GenerateContentRequest.contents: contents is not specified\n")},
		{"empty contents", gemBody(""), gemRefused("* GenerateContentRequest.contents: contents is not specified")},
		{"an assistant role", gemBody("", gemUser, `{"role":"assistant","parts":[{"text":"Noon."}]}`), gemRefused("Please use a valid role: user, model.")},
		{"no role", gemBody("", `{"parts":[{"text":"hi"}]}`), nil},
		{"two user contents in a row", gemBody("", gemUser, gemAgain), nil},
		{"empty parts", gemBody("", gemUser, `{"role":"model","parts":[]}`, gemAgain),
			gemRefused("* GenerateContentRequest.contents[1].parts: contents.parts must not be empty.\n")},
		{"no parts", gemBody("", `{"role":"user"}`), gemRefused("* GenerateContentRequest.contents[0].parts: contents.parts must not be empty.")},
		{"an empty part", gemBody("", `{"role":"user","parts":[{"text":"hi"},{}]}`),
			gemRefused("* GenerateContentRequest.contents[0].parts[1].data: required oneof field 'data' must have one initialized field\n")},
		{"an empty text", gemBody("", `{"role":"user","parts":[{"text":""}]}`),
			gemRefused("* GenerateContentRequest.contents[0].parts[0].data: required oneof field 'data' must have one initialized field")},
		{"only a signature", gemBody("", gemUser, `{"role":"model","parts":[{"text":"Noon."},{"text":"","thoughtSignature":"c2ln"}]}`),
			gemRefused("* GenerateContentRequest.contents[1].parts[1].data: required oneof field 'data' must have one initialized field")},
		{"a thought and a signature beside the text", gemBody("", gemUser, `{"role":"model","parts":[{"text":"Hmm.","thought":true,"thoughtSignature":"c2ln"},{"text":"Noon."}]}`), nil},
		{"text and a call in one part", gemBody(gemTools, gemUser, `{"role":"model","parts":[{"text":"Let me look.","functionCall":{"name":"read_time","args":{}}}]}`),
			gemRefused("Invalid value at 'contents[1].parts[0]' (oneof), oneof field 'data' is already set. Cannot set 'functionCall'")},
		{"an image", gemBody("", `{"role":"user","parts":[{"text":"What is this?"},{"inlineData":{"mimeType":"image/png","data":"iVBORw=="}}]}`), nil},
		{"an empty system instruction", gemBody(`"systemInstruction":{"parts":[{"text":""}]}`, gemUser),
			gemRefused("* GenerateContentRequest.system_instruction.parts[0].data: required oneof field 'data' must have one initialized field")},
		{"a call without a name", gemBody(gemTools, gemUser, `{"role":"model","parts":[{"functionCall":{"args":{}}}]}`),
			gemRefused("contents[1].parts[0].function_call.name")},

		// Function-calling turns.
		{"a call answered", gemBody(gemTools, gemUser, gemCallsA, gemRespsA, gemAnswer, gemAgain), nil},
		{"parallel calls answered", gemBody(gemTools, gemUser, gemCallsAB, gemRespsAA), nil},
		{"responses with a tool's image", gemBody(gemTools, gemUser, gemCallsA, `{"role":"user","parts":[`+gemRespA+`,{"inlineData":{"mimeType":"image/png","data":"iVBORw=="}}]}`), nil},
		{"calls ending the contents", gemBody(gemTools, gemUser, gemCallsA), nil},
		{"a call first", gemBody(gemTools, gemCallsA, gemRespsA), gemRefused(callTurn)},
		{"a call after an answer", gemBody(gemTools, gemUser, gemAnswer, gemCallsA, gemRespsA), gemRefused(callTurn)},
		{"calls after calls", gemBody(gemTools, gemUser, gemCallsA, gemRespsA, gemCallsAB, gemRespsAA), nil},
		{"a response after a prompt", gemBody(gemTools, gemUser, gemRespsA), gemRefused(responseTurn)},
		{"a response after an answer", gemBody(gemTools, gemUser, gemAnswer, gemRespsA), gemRefused(responseTurn)},
		{"one response to two calls", gemBody(gemTools, gemUser, gemCallsAB, gemRespsA), gemRefused(count)},
		{"responses split over two contents", gemBody(gemTools, gemUser, gemCallsAB, gemRespsA, gemRespsA), gemRefused(count)},
		{"a prompt after calls", gemBody(gemTools, gemUser, gemCallsA, gemAgain), gemRefused(count)},
		{"two responses to one call", gemBody(gemTools, gemUser, gemCallsA, gemRespsAA), gemRefused(count)},

		// Declarations and the tool config.
		{"a tool config", gemBody(gemTools+`,"toolConfig":{"functionCallingConfig":{"mode":"ANY"}}`, gemUser), nil},
		{"a dotted name", gemBody(`"tools":[{"functionDeclarations":[{"name":"files.read"}]}]`, gemUser), nil},
		{"a name starting with a digit", gemBody(`"tools":[{"functionDeclarations":[{"name":"read_time"},{"name":"2fa_code"}]}]`, gemUser),
			gemRefused("* GenerateContentRequest.tools[0].function_declarations[1].name: " + badName + "\n")},
		{"a name with a slash", gemBody(`"tools":[{"functionDeclarations":[{"name":"files/read"}]}]`, gemUser),
			gemRefused("tools[0].function_declarations[0].name: Invalid function name.")},
		{"a name of 65 characters", gemBody(`"tools":[{"functionDeclarations":[{"name":"`+strings.Repeat("x", 65)+`"}]}]`, gemUser),
			gemRefused("with a maximum length of 64.")},
		{"a tool config without declarations", gemBody(`"toolConfig":{"functionCallingConfig":{"mode":"AUTO"}}`, gemUser),
			gemRefused("Function calling config is set without function_declarations.")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkRefusal(t, tt.body, llmtest.ValidateGemini(decodeBody(t, tt.body)), tt.want)
		})
	}
}

func TestValidateGeminiModel(t *testing.T) {
	const missing = "Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:read_time` , position "
	unsigned := `{"role":"model","parts":[` + gemCallB + `]}`
	skipped := `{"role":"model","parts":[{"functionCall":{"name":"read_time","args":{}},"thoughtSignature":"skip_thought_signature_validator"}]}`
	tests := []struct {
		name, model, body string
		want              *refusal
	}{
		{"a signed call", "gemini-3-pro-preview", gemBody(gemTools, gemUser, gemCallsA, gemRespsA), nil},
		{"a parallel call signed on the first", "gemini-3-flash-preview", gemBody(gemTools, gemUser, gemCallsAB, gemRespsAA), nil},
		{"an unsigned call", "gemini-3-pro-preview", gemBody(gemTools, gemUser, unsigned, gemRespsA), gemRefused(missing + "2. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.")},
		{"the models/ prefix", "models/gemini-3-pro-preview", gemBody(gemTools, gemUser, unsigned, gemRespsA), gemRefused(missing + "2.")},
		{"an unsigned second step", "gemini-3-pro-preview", gemBody(gemTools, gemUser, gemCallsA, gemRespsA, unsigned, gemRespsA), gemRefused(missing + "4.")},
		{"the validator skipped", "gemini-3-pro-preview", gemBody(gemTools, gemUser, skipped, gemRespsA), nil},
		{"an unsigned call of an earlier turn", "gemini-3-pro-preview", gemBody(gemTools, gemUser, unsigned, gemRespsA, gemAnswer, gemAgain), nil},
		{"an unsigned call on Gemini 2.5", "gemini-2.5-flash", gemBody(gemTools, gemUser, unsigned, gemRespsA), nil},
		{"an unsigned call ending the contents", "gemini-3-pro-preview", gemBody(gemTools, gemUser, unsigned), gemRefused(missing + "2.")},
		{"a bad body", "gemini-3-pro-preview", gemBody(""), gemRefused("contents is not specified")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkRefusal(t, tt.body, llmtest.ValidateGeminiModel(tt.model, decodeBody(t, tt.body)), tt.want)
		})
	}
}

// TestGeminiAdapterBodies holds the bodies chatd's adapter sends for representative conversations to the
// API's rules, for a Gemini 3 model (its own signatures, and the skip value for another model's calls)
// and for Gemini 2.5.
func TestGeminiAdapterBodies(t *testing.T) {
	c, err := gemini.New(gemini.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{"gemini-3-pro-preview", "gemini-2.5-flash"} {
		for name, req := range adapterRequests("gemini/"+model, model) {
			t.Run(model+"/"+name, func(t *testing.T) {
				body, err := c.Encode(req)
				if err != nil {
					t.Fatal(err)
				}
				checkRefusal(t, string(body), llmtest.ValidateGeminiModel(model, decodeBody(t, string(body))), nil)
			})
		}
	}
}
