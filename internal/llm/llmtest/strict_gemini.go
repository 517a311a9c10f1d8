package llmtest

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// ValidateGemini checks a decoded GenerateContentRequest body, as POST …/models/{model}:streamGenerateContent
// (v1beta) receives it, as the Gemini API does whatever the model, and returns the error it answers with —
// status 400, Type "INVALID_ARGUMENT", the API's message — or nil when it accepts the body. It covers what
// chatd sends: the contents and their parts, the system instruction, the function declarations and the
// tool config. The model is in the URL, not the body: ValidateGeminiModel adds the rules of a model.
//
// The API parses the body first (a part with two data members fails there), validates fields next
// ("* GenerateContentRequest.<path>: …\n", the first of the list it reports) and the function-calling
// turns last; ValidateGemini keeps that order. Consecutive contents of one role are accepted, except where
// the function-calling rules say otherwise. A function response goes back in a "user" content, as chatd's
// adapter sends it.
//
// Each message is the API's own as users reported it, except those marked "text not confirmed" here.
func ValidateGemini(body map[string]any) *APIError {
	for _, check := range []func(map[string]any) *APIError{
		geminiParse,
		geminiContentsShape,
		geminiSystemShape,
		geminiToolsShape,
		geminiFunctionTurns,
	} {
		if err := check(body); err != nil {
			return err
		}
	}
	return nil
}

// ValidateGeminiModel is ValidateGemini for a request to model (the name in the URL, with or without
// "models/"), with the rules of that model on top: a Gemini 3 model wants the thought signature of the
// first function call of each step of the current turn. chatd's adapter signs the calls of another model
// with skip_thought_signature_validator, which the API accepts as a signature. A model alias
// ("gemini-flash-latest") is not resolved: only names starting "gemini-3" get the Gemini 3 rules.
func ValidateGeminiModel(model string, body map[string]any) *APIError {
	if err := ValidateGemini(body); err != nil {
		return err
	}
	if strings.HasPrefix(strings.TrimPrefix(model, "models/"), "gemini-3") {
		return geminiSignatures(body)
	}
	return nil
}

func geminiInvalid(format string, args ...any) *APIError {
	return &APIError{Status: http.StatusBadRequest, Type: "INVALID_ARGUMENT", Message: fmt.Sprintf(format, args...)}
}

// geminiField is the API's sentence for a field that fails validation: "* GenerateContentRequest.<path>: <msg>\n".
func geminiField(path, msg string) *APIError {
	return geminiInvalid("* GenerateContentRequest.%s: %s\n", path, msg)
}

// geminiDataFields are the members of a Part's data oneof, in the order chatd's adapter writes them.
// thought and thoughtSignature are metadata beside them.
var geminiDataFields = []string{"text", "inlineData", "functionCall", "functionResponse", "fileData", "executableCode", "codeExecutionResult"}

// geminiContents returns the contents, each an object (or nil).
func geminiContents(body map[string]any) []map[string]any {
	return objects(body["contents"])
}

// geminiParts returns the parts of a content, each an object (or nil).
func geminiParts(c map[string]any) []map[string]any {
	return objects(c["parts"])
}

// geminiSet returns the data members a part sets. An empty text is no text: the API reads it as unset.
func geminiSet(p map[string]any) []string {
	var set []string
	for _, f := range geminiDataFields {
		if v, ok := p[f]; ok && v != nil && v != "" {
			set = append(set, f)
		}
	}
	return set
}

// geminiParse fails a part that sets two data members, as the API's JSON parser does.
func geminiParse(body map[string]any) *APIError {
	for i, c := range geminiContents(body) {
		for j, p := range geminiParts(c) {
			if set := geminiSet(p); len(set) > 1 {
				return geminiInvalid("Invalid value at 'contents[%d].parts[%d]' (oneof), oneof field 'data' is already set. Cannot set '%s'", i, j, set[1])
			}
		}
	}
	return nil
}

// geminiContentsShape checks the contents: at least one, each with a known role and parts, each part with
// its data.
func geminiContentsShape(body map[string]any) *APIError {
	contents := geminiContents(body)
	if len(contents) == 0 {
		return geminiField("contents", "contents is not specified")
	}
	for i, c := range contents {
		// A missing role is the user's; Vertex AI refuses it, the Gemini API does not.
		if role, ok := c["role"]; ok && role != "user" && role != "model" {
			return geminiInvalid("Please use a valid role: user, model.")
		}
		if err := geminiPartsShape(fmt.Sprintf("contents[%d]", i), c); err != nil {
			return err
		}
	}
	return nil
}

// geminiPartsShape checks the parts of the content at path: some, each with one data member, each call and
// response with a name.
func geminiPartsShape(path string, c map[string]any) *APIError {
	parts := geminiParts(c)
	if len(parts) == 0 {
		return geminiField(path+".parts", "contents.parts must not be empty.")
	}
	for j, p := range parts {
		where := fmt.Sprintf("%s.parts[%d]", path, j)
		if len(geminiSet(p)) == 0 {
			return geminiField(where+".data", "required oneof field 'data' must have one initialized field")
		}
		for member, field := range map[string]string{"functionCall": "function_call", "functionResponse": "function_response"} {
			if f, ok := p[member].(map[string]any); ok {
				if name, _ := f["name"].(string); name == "" {
					return geminiField(where+"."+field+".name", "Name cannot be empty.") // text not confirmed
				}
			}
		}
	}
	return nil
}

// geminiSystemShape checks the system instruction the way a content's parts are checked.
func geminiSystemShape(body map[string]any) *APIError {
	si, ok := body["systemInstruction"].(map[string]any)
	if !ok {
		return nil
	}
	// The sentence for empty parts is not confirmed for the system instruction: it is the contents'.
	return geminiPartsShape("system_instruction", si)
}

// geminiFunctionName is the pattern of a declared function's name: a letter or underscore first, then
// letters, digits, underscores, dots or dashes, 64 characters at most. Some reports give the API's
// sentence with colons allowed too; as which one holds now is not confirmed, the stricter is kept.
var geminiFunctionName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_.-]{0,63}$`)

// geminiToolsShape checks the function declarations' names, and that a function calling config comes with
// declarations to apply to.
func geminiToolsShape(body map[string]any) *APIError {
	tools, _ := body["tools"].([]any)
	declared := 0
	for t, v := range tools {
		tool, _ := v.(map[string]any)
		decls, _ := tool["functionDeclarations"].([]any)
		for k, d := range decls {
			decl, _ := d.(map[string]any)
			name, _ := decl["name"].(string)
			if !geminiFunctionName.MatchString(name) {
				return geminiField(fmt.Sprintf("tools[%d].function_declarations[%d].name", t, k),
					"Invalid function name. Must start with a letter or an underscore. Must be alphameric (a-z, A-Z, 0-9), underscores (_), dots (.) or dashes (-), with a maximum length of 64.")
			}
			declared++
		}
	}
	if tc, _ := body["toolConfig"].(map[string]any); tc["functionCallingConfig"] != nil && declared == 0 {
		return geminiInvalid("Function calling config is set without function_declarations.")
	}
	return nil
}

// geminiCount returns how many parts of c set member.
func geminiCount(c map[string]any, member string) int {
	n := 0
	for _, p := range geminiParts(c) {
		if p[member] != nil {
			n++
		}
	}
	return n
}

// geminiFunctionTurns checks the function-calling turns: a turn of calls comes right after a user turn (a
// prompt or the responses to earlier calls), a turn of responses right after the turn of calls, and it
// answers every call of it. A turn of calls that ends the contents is left to the model.
func geminiFunctionTurns(body map[string]any) *APIError {
	contents := geminiContents(body)
	for i, c := range contents {
		calls, responses := geminiCount(c, "functionCall"), geminiCount(c, "functionResponse")
		var prev map[string]any
		if i > 0 {
			prev = contents[i-1]
		}
		prevCalls := geminiCount(prev, "functionCall")
		if prevCalls > 0 && responses != prevCalls {
			return geminiInvalid("Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.")
		}
		if responses > 0 && prevCalls == 0 {
			return geminiInvalid("Please ensure that function response turn comes immediately after a function call turn.")
		}
		if calls > 0 && (prev == nil || geminiRole(prev) != "user") {
			return geminiInvalid("Please ensure that function call turn comes immediately after a user turn or after a function response turn.")
		}
	}
	return nil
}

// geminiRole is a content's role; none is the user's.
func geminiRole(c map[string]any) string {
	if role, ok := c["role"].(string); ok {
		return role
	}
	return "user"
}

// geminiSignatures applies Gemini 3's rule on thought signatures: in the current turn — the contents after
// the last user content without function responses — the first function call of each model content must
// carry a thoughtSignature. Earlier turns are not checked. A user content that holds responses and more
// (chatd puts the images a tool returned after the responses) is taken to continue the turn: the stricter
// reading, as the API's is not known.
func geminiSignatures(body map[string]any) *APIError {
	contents := geminiContents(body)
	start := 0
	for i, c := range contents {
		if geminiRole(c) == "user" && geminiCount(c, "functionResponse") == 0 {
			start = i + 1
		}
	}
	for i := start; i < len(contents); i++ {
		for _, p := range geminiParts(contents[i]) {
			fc, ok := p["functionCall"].(map[string]any)
			if !ok {
				continue
			}
			if sig, _ := p["thoughtSignature"].(string); sig == "" {
				return geminiInvalid("Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:%v` , position %d. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.", fc["name"], i+1)
			}
			break // only the first call of a step needs one
		}
	}
	return nil
}
