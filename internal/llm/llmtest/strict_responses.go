package llmtest

import (
	"fmt"
	"net/http"
	"slices"
)

// ValidateResponses checks a decoded Responses API request body (POST /v1/responses) as the OpenAI API does
// and returns the error it answers with, in Validate's shape — Type "invalid_request_error", Param and
// Code as the API sets them — or nil when it accepts the body. It covers what chatd sends: the input items
// (messages, function calls and their outputs, reasoning items), the function tools and tool_choice.
//
// The request schema is checked over the whole body first, the rules between items after. A reasoning
// item sent back with "store": false must carry its encrypted content: the API cannot look it up by id.
//
// Each message is the API's own as users reported it, except those marked "text not confirmed" here.
func ValidateResponses(body map[string]any) *APIError {
	items, err := responsesInput(body)
	if err != nil {
		return err
	}
	for i, it := range items {
		if err := responsesItemShape(i, it); err != nil {
			return err
		}
	}
	if err := responsesTools(body["tools"]); err != nil {
		return err
	}
	if err := responsesToolChoice(body["tool_choice"], body["tools"]); err != nil {
		return err
	}
	if err := responsesStoredItems(body, items); err != nil {
		return err
	}
	return responsesSequence(items)
}

// responsesInput returns the input's items, each an object; a string input is one user message.
func responsesInput(body map[string]any) ([]map[string]any, *APIError) {
	switch in := body["input"].(type) {
	case nil:
		return nil, missingParam("input")
	case string:
		return nil, nil
	case []any:
		items := make([]map[string]any, len(in))
		for i, v := range in {
			it, ok := v.(map[string]any)
			if !ok {
				return nil, invalidType(fmt.Sprintf("input[%d]", i), "an object", v) // text not confirmed
			}
			items[i] = it
		}
		return items, nil
	}
	return nil, invalidType("input", "one of a string or array of objects", body["input"]) // text not confirmed
}

// responsesItemTypes are the item types chatd sends; the API knows many more (tool calls of its own tools,
// item references …), which the list of the real message names too.
var responsesItemTypes = []string{"message", "reasoning", "function_call", "function_call_output"}

// responsesItemType is an item's type; an item with a role and no type is a message.
func responsesItemType(it map[string]any) string {
	if typ, ok := it["type"].(string); ok {
		return typ
	}
	if it["type"] == nil && it["role"] != nil {
		return "message"
	}
	return ""
}

// responsesItemShape checks input item i against the schema: a known type and the members it requires.
func responsesItemShape(i int, it map[string]any) *APIError {
	param := fmt.Sprintf("input[%d]", i)
	switch typ := responsesItemType(it); typ {
	case "message":
		return responsesMessageShape(param, it)
	case "function_call":
		for _, f := range []string{"call_id", "name", "arguments"} {
			if _, err := requiredString(param+"."+f, it[f]); err != nil {
				return err
			}
		}
	case "function_call_output":
		if _, err := requiredString(param+".call_id", it["call_id"]); err != nil {
			return err
		}
		if it["output"] == nil {
			return missingParam(param + ".output")
		}
	case "reasoning":
		if it["summary"] == nil {
			return missingParam(param + ".summary")
		}
		if it["id"] == nil && it["encrypted_content"] == nil {
			return missingParam(param + ".encrypted_content")
		}
	case "":
		return missingParam(param + ".type") // text not confirmed
	default:
		return invalidValue(param+".type", typ, responsesItemTypes) // text not confirmed: the real list is longer
	}
	return nil
}

var responsesRoles = []string{"assistant", "system", "developer", "user"}

// responsesMessageShape checks a message item: a role, content as a string or parts, and parts of the
// types its role may send — output_text and refusal for the assistant, input parts for the others.
func responsesMessageShape(param string, it map[string]any) *APIError {
	role, err := requiredString(param+".role", it["role"])
	if err != nil {
		return err
	}
	if !slices.Contains(responsesRoles, role) {
		return invalidValue(param+".role", role, responsesRoles) // text not confirmed
	}
	switch content := it["content"].(type) {
	case nil:
		return missingParam(param + ".content")
	case string:
		return nil
	case []any:
		for j, v := range content {
			if err := responsesPartShape(fmt.Sprintf("%s.content[%d]", param, j), role, v); err != nil {
				return err
			}
		}
		return nil
	}
	return invalidType(param+".content", "one of a string or array of objects", it["content"]) // text not confirmed
}

var (
	responsesPartTypes     = []string{"input_text", "input_image", "output_text", "refusal", "input_file", "computer_screenshot", "summary_text"}
	responsesInputParts    = []string{"input_text", "input_image", "input_file"}
	responsesAssistantPart = []string{"output_text", "refusal"}
)

// responsesPartShape checks one content part of a message of role.
func responsesPartShape(param, role string, v any) *APIError {
	part, ok := v.(map[string]any)
	if !ok {
		return invalidType(param, "an object", v) // text not confirmed
	}
	typ, err := requiredString(param+".type", part["type"])
	if err != nil {
		return err
	}
	if !slices.Contains(responsesPartTypes, typ) {
		return invalidValue(param+".type", typ, responsesPartTypes)
	}
	allowed := responsesInputParts
	if role == "assistant" {
		allowed = responsesAssistantPart
	}
	if !slices.Contains(allowed, typ) {
		return invalidValue(param, typ, allowed)
	}
	switch typ {
	case "input_text", "output_text":
		if _, err := requiredString(param+".text", part["text"]); err != nil {
			return err
		}
	case "input_image":
		if part["image_url"] == nil && part["file_id"] == nil {
			return missingParam(param + ".image_url") // text not confirmed
		}
	}
	return nil
}

// responsesTools checks the tools: function tools need a name of the allowed characters, 64 at most, and
// an object of parameters. The API's own tools (web_search …) are left alone.
func responsesTools(v any) *APIError {
	if v == nil {
		return nil
	}
	tools, ok := v.([]any)
	if !ok {
		return invalidType("tools", "an array of objects", v) // text not confirmed
	}
	for i, t := range tools {
		param := fmt.Sprintf("tools[%d]", i)
		tool, ok := t.(map[string]any)
		if !ok {
			return invalidType(param, "an object", t) // text not confirmed
		}
		typ, err := requiredString(param+".type", tool["type"])
		if err != nil {
			return err
		}
		if typ != "function" {
			continue
		}
		name, err := nonEmptyString(param+".name", tool["name"])
		if err != nil {
			return err
		}
		if len(name) > 64 {
			return invalid(param+".name", "string_above_max_length", fmt.Sprintf(
				"Invalid '%s.name': string too long. Expected a string with maximum length 64, but got a string with length %d instead.", param, len(name))) // text not confirmed for this API
		}
		if !functionName.MatchString(name) {
			return invalid(param+".name", "invalid_value", fmt.Sprintf(
				"Invalid '%s.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.", param))
		}
		if p, ok := tool["parameters"]; ok && p != nil {
			if _, ok := p.(map[string]any); !ok {
				return invalidType(param+".parameters", "an object", p) // text not confirmed
			}
		}
	}
	return nil
}

// responsesToolChoice checks tool_choice: none, auto or required, or an object naming a declared tool.
func responsesToolChoice(choice, tools any) *APIError {
	switch c := choice.(type) {
	case nil:
		return nil
	case string:
		if !slices.Contains(toolChoices, c) {
			return invalidValue("tool_choice", c, toolChoices)
		}
		return nil
	case map[string]any:
		typ, _ := c["type"].(string)
		name := typ
		if typ == "function" {
			name, _ = c["name"].(string)
		}
		if typ == "allowed_tools" || responsesDeclares(tools, typ, name) {
			return nil
		}
		return invalid("tool_choice", "", fmt.Sprintf("Tool choice '%s' not found in 'tools' parameter.", name)) // confirmed for built-in tools; for a function, that the name is quoted is not
	}
	return invalidType("tool_choice", "one of one of 'none', 'auto', or 'required' or object", choice) // text not confirmed
}

// responsesDeclares reports whether tools has a tool of typ, a function called name when typ is function.
func responsesDeclares(tools any, typ, name string) bool {
	list, _ := tools.([]any)
	return slices.ContainsFunc(list, func(t any) bool {
		tool, _ := t.(map[string]any)
		return tool["type"] == typ && (typ != "function" || tool["name"] == name)
	})
}

// responsesStoredItems refuses, with "store": false, a reasoning item that names an id but brings no
// encrypted content: the API would look the item up, and nothing is stored.
func responsesStoredItems(body map[string]any, items []map[string]any) *APIError {
	if body["store"] != false {
		return nil // the item may be stored; whether it is cannot be told from here
	}
	for _, it := range items {
		if responsesItemType(it) == "reasoning" && it["encrypted_content"] == nil {
			return &APIError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "input", Message: fmt.Sprintf(
				"Item with id '%v' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input.", it["id"])}
		}
	}
	return nil
}

// responsesSequence applies the rules between items: a function_call_output answers a function_call
// made before it, every function_call is answered, and a reasoning item is followed by the item it
// produced: a message of the assistant or a call.
func responsesSequence(items []map[string]any) *APIError {
	called := map[string]bool{}
	var calls []string
	for i, it := range items {
		switch responsesItemType(it) {
		case "function_call":
			id := it["call_id"].(string)
			if !called[id] {
				calls = append(calls, id)
			}
			called[id] = true
		case "function_call_output":
			id := it["call_id"].(string)
			if !called[id] {
				return invalid("input", "", fmt.Sprintf("No tool call found for function call output with call_id %s.", id))
			}
			delete(called, id)
			calls = slices.DeleteFunc(calls, func(c string) bool { return c == id })
		case "reasoning":
			if i+1 == len(items) || !responsesFollows(items[i+1]) {
				return invalid("input", "", fmt.Sprintf("Item '%v' of type 'reasoning' was provided without its required following item.", it["id"]))
			}
		}
	}
	if len(calls) > 0 {
		return invalid("input", "", fmt.Sprintf("No tool output found for function call %s.", calls[0])) // param not confirmed
	}
	return nil
}

// responsesFollows reports whether it may follow a reasoning item: an item the model produced.
func responsesFollows(it map[string]any) bool {
	switch responsesItemType(it) {
	case "message":
		return it["role"] == "assistant"
	case "function_call":
		return true
	}
	return false
}
