package llmtest

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strings"
)

// APIError is an error the Chat Completions API answers instead of a completion. Status is the HTTP status;
// Message, Type, Param and Code are the fields of the body's "error" object, an empty Param or Code being
// JSON null.
type APIError struct {
	Status                     int
	Message, Type, Param, Code string
}

func (e *APIError) Error() string {
	if e.Param == "" {
		return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message)
	}
	return fmt.Sprintf("%d %s at %s: %s", e.Status, e.Type, e.Param, e.Message)
}

// write sends e as the API sends an error: {"error": {"message", "type", "param", "code"}}, in that order.
func (e *APIError) write(w http.ResponseWriter) {
	type body struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Param   any    `json:"param"`
		Code    any    `json:"code"`
	}
	b, _ := json.Marshal(map[string]body{"error": {e.Message, e.Type, nilIfEmpty(e.Param), nilIfEmpty(e.Code)}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	w.Write(b)
}

// Validate checks a decoded Chat Completions request body as the OpenAI API does and returns the error the
// API answers it with, or nil when the API accepts it. It covers what chatd sends — the messages, the tools
// and tool_choice — not the sampling parameters or the model.
//
// The texts, params and codes are the API's own. They come in two styles: the request schema's
// ("Invalid type for 'messages[1].content': …", param messages[1].content, a code) and the older checks that
// run after it ("Invalid value for 'content': …", param messages.[1].content, no code). The API runs the
// schema over the whole request before any of the older checks, so a bad role at message 5 is reported
// before a missing content at message 0; Validate keeps that order.
func Validate(body map[string]any) *APIError {
	msgs, err := messageList(body)
	if err != nil {
		return err
	}
	for i, m := range msgs {
		if err := checkMessageShape(i, m); err != nil {
			return err
		}
	}
	if err := checkTools(body["tools"]); err != nil {
		return err
	}
	if err := checkToolChoice(body["tool_choice"], body["tools"]); err != nil {
		return err
	}
	for i, m := range msgs {
		if err := checkMessageRequired(i, m); err != nil {
			return err
		}
	}
	return checkToolSequence(msgs)
}

// messageList returns the messages, each an object, or the error for a missing or empty list.
func messageList(body map[string]any) ([]map[string]any, *APIError) {
	raw := body["messages"]
	if raw == nil {
		return nil, missingParam("messages")
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, invalidType("messages", "an array of objects", raw)
	}
	if len(list) == 0 {
		return nil, emptyArray("messages")
	}
	msgs := make([]map[string]any, len(list))
	for i, v := range list {
		if msgs[i], ok = v.(map[string]any); !ok {
			return nil, invalidType(fmt.Sprintf("messages[%d]", i), "an object", v)
		}
	}
	return msgs, nil
}

// roles are the values the API lists for a message's role. "function" is the deprecated form of "tool".
var roles = []string{"system", "assistant", "user", "function", "tool", "developer"}

// checkMessageShape checks message i against the request schema: its role, the type of its content and
// parts, and for an assistant message the shape of its tool calls.
func checkMessageShape(i int, m map[string]any) *APIError {
	role, err := checkRole(i, m["role"])
	if err != nil {
		return err
	}
	if err := checkContentShape(i, role, m); err != nil {
		return err
	}
	switch role {
	case "assistant":
		return checkToolCallsShape(i, m["tool_calls"])
	case "tool":
		if id, ok := m["tool_call_id"]; ok && id != nil {
			if _, ok := id.(string); !ok {
				return invalidType(fmt.Sprintf("messages[%d].tool_call_id", i), "a string", id)
			}
		}
	}
	return nil
}

func checkRole(i int, v any) (string, *APIError) {
	param := fmt.Sprintf("messages[%d].role", i)
	if v == nil {
		return "", missingParam(param)
	}
	role, ok := v.(string)
	if !ok {
		return "", invalidType(param, "a string", v)
	}
	if !slices.Contains(roles, role) {
		return "", invalidValue(param, role, roles)
	}
	return role, nil
}

// checkContentShape checks that content, when set, is a string or an array of parts the role may carry. A
// developer message's schema requires content outright; the other roles' missing content is caught later,
// by checkMessageRequired, in the older style.
func checkContentShape(i int, role string, m map[string]any) *APIError {
	param := fmt.Sprintf("messages[%d].content", i)
	content, present := m["content"]
	if role == "developer" && !present {
		return missingParam(param)
	}
	switch c := content.(type) {
	case string:
		return nil
	case nil:
		if role == "developer" {
			return invalidType(param, "one of a string or array of objects", nil)
		}
		return nil
	case []any:
		// An empty array is content, as the empty string is: the API accepts both.
		for j, p := range c {
			if err := checkPart(i, j, role, p); err != nil {
				return err
			}
		}
		return nil
	}
	return invalidType(param, "one of a string or array of objects", content)
}

// partTypes are the part types the schema knows; partTypesOf are those each role may carry.
var (
	partTypes   = []string{"text", "image_url", "input_audio", "refusal", "audio", "file"}
	partTypesOf = map[string][]string{
		"user":      {"text", "image_url", "input_audio", "file"},
		"assistant": {"text", "refusal"},
	}
)

// checkPart checks part j of message i's content: a known type, the member that type needs, and a type the
// role may carry (only a user message may carry an image; system, developer and tool messages carry text).
func checkPart(i, j int, role string, v any) *APIError {
	param := fmt.Sprintf("messages[%d].content[%d]", i, j)
	part, ok := v.(map[string]any)
	if !ok {
		return invalidType(param, "an object", v)
	}
	typ, err := requiredString(param+".type", part["type"])
	if err != nil {
		return err
	}
	if !slices.Contains(partTypes, typ) {
		return invalidValue(param+".type", typ, partTypes)
	}
	switch typ {
	case "text":
		if _, err := requiredString(param+".text", part["text"]); err != nil {
			return err
		}
	case "image_url":
		img, ok := part["image_url"].(map[string]any)
		if !ok {
			return missingOrType(param+".image_url", "an object", part["image_url"])
		}
		if _, err := requiredString(param+".image_url.url", img["url"]); err != nil {
			return err
		}
		if role != "user" {
			return invalid(fmt.Sprintf("messages[%d]", i), "invalid_value", fmt.Sprintf(
				"Invalid 'messages[%d]'. Image URLs are only allowed for messages with role 'user', but this message with role '%s' contains an image URL.", i, role))
		}
	}
	allowed, ok := partTypesOf[role]
	if !ok {
		allowed = []string{"text"}
	}
	if !slices.Contains(allowed, typ) {
		return invalidValue(param+".type", typ, allowed)
	}
	return nil
}

// checkToolCallsShape checks an assistant message's tool_calls: a non-empty array of well-formed calls with
// distinct ids. A null tool_calls is no array to check (and no stand-in for content either).
func checkToolCallsShape(i int, v any) *APIError {
	if v == nil {
		return nil
	}
	param := fmt.Sprintf("messages[%d].tool_calls", i)
	calls, ok := v.([]any)
	if !ok {
		return invalidType(param, "an array of objects", v)
	}
	if len(calls) == 0 {
		return emptyArray(param)
	}
	seen := map[string]int{}
	for j, c := range calls {
		id, err := checkToolCall(fmt.Sprintf("%s[%d]", param, j), c)
		if err != nil {
			return err
		}
		if k, dup := seen[id]; dup {
			return invalid(fmt.Sprintf("messages.[%d].tool_calls.[%d].id", i, j), "", fmt.Sprintf(
				"Invalid parameter: Duplicate value for 'id' of '%s', in messages[%d].tool_calls[%d] and messages[%d].tool_calls[%d].", id, i, k, i, j))
		}
		seen[id] = j
	}
	return nil
}

// checkToolCall checks one call an assistant message made and returns its id.
func checkToolCall(param string, v any) (string, *APIError) {
	call, ok := v.(map[string]any)
	if !ok {
		return "", invalidType(param, "an object", v)
	}
	id, err := nonEmptyString(param+".id", call["id"])
	if err != nil {
		return "", err
	}
	types := []string{"function", "custom"}
	typ, err := requiredString(param+".type", call["type"])
	if err != nil {
		return "", err
	}
	if !slices.Contains(types, typ) {
		return "", invalidValue(param+".type", typ, types)
	}
	if typ == "custom" {
		return id, nil
	}
	fn, ok := call["function"].(map[string]any)
	if !ok {
		return "", missingOrType(param+".function", "an object", call["function"])
	}
	if _, err := nonEmptyString(param+".function.name", fn["name"]); err != nil {
		return "", err
	}
	if _, err := requiredString(param+".function.arguments", fn["arguments"]); err != nil {
		return "", err
	}
	return id, nil
}

// checkTools checks the tools list: absent, or a non-empty array of function (or custom) tools.
func checkTools(v any) *APIError {
	if v == nil {
		return nil
	}
	tools, ok := v.([]any)
	if !ok {
		return invalidType("tools", "an array of objects", v)
	}
	if len(tools) == 0 {
		return emptyArray("tools")
	}
	for i, t := range tools {
		if err := checkTool(fmt.Sprintf("tools[%d]", i), t); err != nil {
			return err
		}
	}
	return nil
}

// functionName is the pattern the API holds a function's name to; names from MCP servers often break it.
var functionName = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

func checkTool(param string, v any) *APIError {
	tool, ok := v.(map[string]any)
	if !ok {
		return invalidType(param, "an object", v)
	}
	types := []string{"function", "custom"}
	typ, err := requiredString(param+".type", tool["type"])
	if err != nil {
		return err
	}
	if !slices.Contains(types, typ) {
		return invalidValue(param+".type", typ, types)
	}
	if typ == "custom" {
		return nil
	}
	fn, ok := tool["function"].(map[string]any)
	if !ok {
		return missingOrType(param+".function", "an object", tool["function"])
	}
	name, err := nonEmptyString(param+".function.name", fn["name"])
	if err != nil {
		return err
	}
	if len(name) > 64 {
		return invalid(param+".function.name", "string_above_max_length", fmt.Sprintf(
			"Invalid '%s.function.name': string too long. Expected a string with maximum length 64, but got a string with length %d instead.", param, len(name)))
	}
	if !functionName.MatchString(name) {
		return invalid(param+".function.name", "invalid_value", fmt.Sprintf(
			"Invalid '%s.function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.", param))
	}
	if p, ok := fn["parameters"]; ok && p != nil {
		if _, ok := p.(map[string]any); !ok {
			return invalidType(param+".function.parameters", "an object", p)
		}
	}
	return nil
}

var toolChoices = []string{"none", "auto", "required"}

// checkToolChoice checks tool_choice: one of toolChoices or an object naming a declared function, and only
// alongside tools.
func checkToolChoice(choice, tools any) *APIError {
	if choice == nil {
		return nil
	}
	var named string
	switch c := choice.(type) {
	case string:
		if !slices.Contains(toolChoices, c) {
			return invalidValue("tool_choice", c, toolChoices)
		}
	case map[string]any:
		if c["type"] == "allowed_tools" || c["type"] == "custom" {
			break // the newer forms, which chatd does not send; only their need for tools is checked
		}
		fn, ok := c["function"].(map[string]any)
		if !ok {
			return missingOrType("tool_choice.function", "an object", c["function"])
		}
		name, err := requiredString("tool_choice.function.name", fn["name"])
		if err != nil {
			return err
		}
		named = name
	default:
		return invalidType("tool_choice", "one of one of 'none', 'auto', or 'required' or object", choice)
	}
	if tools == nil {
		return invalid("tool_choice", "", "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.")
	}
	if named != "" && !declares(tools, named) {
		return invalid("function_call", "", fmt.Sprintf(
			"Invalid value for 'function_call': no function named '%s' was specified in the 'functions' parameter.", named))
	}
	return nil
}

// declares reports whether the (already checked) tools list has a function called name.
func declares(tools any, name string) bool {
	list, _ := tools.([]any)
	return slices.ContainsFunc(list, func(t any) bool {
		tool, _ := t.(map[string]any)
		fn, _ := tool["function"].(map[string]any)
		return fn["name"] == name
	})
}

// checkMessageRequired applies the older checks that a message has what its role needs: content (for which
// an assistant message may substitute tool calls, a function call, a refusal or audio), a tool message's
// tool_call_id and a function message's name.
func checkMessageRequired(i int, m map[string]any) *APIError {
	role := m["role"].(string) // checkRole has passed
	switch role {
	case "tool":
		if id, _ := m["tool_call_id"].(string); id == "" {
			return invalid(fmt.Sprintf("messages.[%d].tool_call_id", i), "",
				"Missing parameter 'tool_call_id': messages with role 'tool' must have a 'tool_call_id'.")
		}
	case "function":
		if name, _ := m["name"].(string); name == "" {
			return invalid(fmt.Sprintf("messages.[%d].name", i), "",
				"Missing parameter 'name': messages with role 'function' must have a 'name'.")
		}
	case "assistant":
		for _, stand := range []string{"tool_calls", "function_call", "refusal", "audio"} {
			if m[stand] != nil {
				return nil
			}
		}
	}
	if m["content"] == nil {
		return invalid(fmt.Sprintf("messages.[%d].content", i), "", "Invalid value for 'content': expected a string, got null.")
	}
	return nil
}

// checkToolSequence applies the rules between messages: the calls an assistant message makes are each
// answered, once, by the tool messages that directly follow it, and a tool message answers one of them.
// The API reports unanswered calls at the first message that is not a tool message, or at "messages" when
// the history ends first.
func checkToolSequence(msgs []map[string]any) *APIError {
	var (
		calls    []string       // the ids the last non-tool message called
		answered map[string]int // id → the tool message that answered it
	)
	for i, m := range msgs {
		if m["role"] != "tool" {
			if err := checkAnswered(fmt.Sprintf("messages.[%d].role", i), calls, answered); err != nil {
				return err
			}
			calls, answered = toolCallIDs(m), map[string]int{}
			continue
		}
		id := m["tool_call_id"].(string) // checkMessageRequired has passed
		if !slices.Contains(calls, id) {
			return invalid(fmt.Sprintf("messages.[%d].role", i), "",
				"Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.")
		}
		if k, dup := answered[id]; dup {
			return invalid(fmt.Sprintf("messages.[%d].tool_call_id", i), "", fmt.Sprintf(
				"Invalid parameter: Duplicate value for 'tool_call_id' of '%s', in messages[%d] and messages[%d].", id, k, i))
		}
		answered[id] = i
	}
	return checkAnswered("messages", calls, answered)
}

// checkAnswered reports the calls not in answered, at param.
func checkAnswered(param string, calls []string, answered map[string]int) *APIError {
	var missing []string
	for _, id := range calls {
		if _, ok := answered[id]; !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return invalid(param, "", "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: "+strings.Join(missing, ", "))
}

// toolCallIDs returns the ids of the calls m makes: an assistant message's tool_calls, already checked.
func toolCallIDs(m map[string]any) []string {
	if m["role"] != "assistant" {
		return nil
	}
	calls, _ := m["tool_calls"].([]any)
	ids := make([]string, len(calls))
	for j, c := range calls {
		ids[j] = c.(map[string]any)["id"].(string)
	}
	return ids
}

// The schema's error sentences.

func invalid(param, code, msg string) *APIError {
	return &APIError{Status: http.StatusBadRequest, Message: msg, Type: "invalid_request_error", Param: param, Code: code}
}

func missingParam(param string) *APIError {
	return invalid(param, "missing_required_parameter", fmt.Sprintf("Missing required parameter: '%s'.", param))
}

func invalidType(param, want string, got any) *APIError {
	return invalid(param, "invalid_type", fmt.Sprintf("Invalid type for '%s': expected %s, but got %s instead.", param, want, jsonType(got)))
}

func emptyArray(param string) *APIError {
	return invalid(param, "empty_array", fmt.Sprintf("Invalid '%s': empty array. Expected an array with minimum length 1, but got an empty array instead.", param))
}

func emptyString(param string) *APIError {
	return invalid(param, "empty_string", fmt.Sprintf("Invalid '%s': empty string. Expected a string with minimum length 1, but got an empty string instead.", param))
}

// invalidValue is the sentence for a value outside an enumeration: "Supported values are: 'a', 'b', and 'c'."
func invalidValue(param, got string, supported []string) *APIError {
	quoted := make([]string, len(supported))
	for i, s := range supported {
		quoted[i] = "'" + s + "'"
	}
	list := quoted[0]
	switch n := len(quoted); {
	case n == 2:
		list = quoted[0] + " and " + quoted[1]
	case n > 2:
		list = strings.Join(quoted[:n-1], ", ") + ", and " + quoted[n-1]
	}
	return invalid(param, "invalid_value", fmt.Sprintf("Invalid value: '%s'. Supported values are: %s.", got, list))
}

// missingOrType is the error for a member that is absent (nil) or of the wrong type.
func missingOrType(param, want string, v any) *APIError {
	if v == nil {
		return missingParam(param)
	}
	return invalidType(param, want, v)
}

func requiredString(param string, v any) (string, *APIError) {
	s, ok := v.(string)
	if !ok {
		return "", missingOrType(param, "a string", v)
	}
	return s, nil
}

func nonEmptyString(param string, v any) (string, *APIError) {
	s, err := requiredString(param, v)
	if err == nil && s == "" {
		err = emptyString(param)
	}
	return s, err
}

// jsonType names the JSON type of a decoded value as the API's sentences do.
// objects returns a JSON list's elements as objects (nil for an element that is not one); nil when v
// is not a list or is empty.
func objects(v any) []map[string]any {
	list, _ := v.([]any)
	if len(list) == 0 {
		return nil
	}
	out := make([]map[string]any, len(list))
	for i, e := range list {
		out[i], _ = e.(map[string]any)
	}
	return out
}

func jsonType(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case float64:
		if v == math.Trunc(v) {
			return "an integer"
		}
		return "a decimal number"
	case json.Number:
		if _, err := v.Int64(); err == nil {
			return "an integer"
		}
		return "a decimal number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("a %T", v)
}
