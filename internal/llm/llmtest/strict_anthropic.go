package llmtest

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// ValidateAnthropic checks a decoded Messages API request body (POST /v1/messages) as Anthropic's API does
// and returns the error it answers with — status 400, Type "invalid_request_error", the API's message —
// or nil when it accepts the body. It covers what chatd sends: the messages and their blocks, the system
// prompt, the tools and tool_choice, cache breakpoints and the thinking parameters. Signatures are opaque:
// only their presence is checked.
//
// The API validates the request's schema first (required fields, block shapes, patterns; pydantic-style
// "field.path: …" messages) and its rules between fields and messages after; ValidateAnthropic keeps that
// order. Consecutive messages of one role are accepted: the API combines them into one turn (the Messages
// API reference), and so is a first message of the assistant (anthropic-sdk-typescript#622: only Bedrock
// still wants the user's first). The tool rules look at the messages as sent: the results of a tool_use
// must open the very next message (the tool-use guide; litellm reports a text message of the assistant
// between a call and its result refused).
//
// Each message is the API's own as users reported it, except those marked "text not confirmed" here.
func ValidateAnthropic(body map[string]any) *APIError {
	for _, check := range []func(map[string]any) *APIError{
		anthropicRequired,
		anthropicMessagesShape,
		anthropicSystemShape,
		anthropicToolsShape,
		anthropicToolChoiceShape,
		anthropicThinkingShape,
		anthropicThinkingRules,
		anthropicToolChoiceRules,
		anthropicContentRules,
		anthropicToolRules,
		anthropicCacheRules,
		anthropicThinkingHistory,
	} {
		if err := check(body); err != nil {
			return err
		}
	}
	return nil
}

func anthropicInvalid(format string, args ...any) *APIError {
	return &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: fmt.Sprintf(format, args...)}
}

// anthropicRequired checks the three members every request has.
func anthropicRequired(body map[string]any) *APIError {
	for _, field := range []string{"model", "max_tokens", "messages"} {
		if body[field] == nil {
			return anthropicInvalid("%s: Field required", field)
		}
	}
	if _, ok := body["messages"].([]any); !ok {
		return anthropicInvalid("messages: Input should be a valid list") // text not confirmed
	}
	if n, ok := body["max_tokens"].(float64); !ok || n < 1 {
		return anthropicInvalid("max_tokens: Input should be greater than or equal to 1") // text not confirmed
	}
	return nil
}

// anthropicMessages returns the messages; anthropicRequired has checked they are a list.
func anthropicMessages(body map[string]any) []map[string]any {
	return objects(body["messages"])
}

// blocks returns a message's content as blocks: a string is one text block, as the API reads it.
func anthropicBlocks(content any) []map[string]any {
	switch c := content.(type) {
	case string:
		return []map[string]any{{"type": "text", "text": c}}
	}
	return objects(content)
}

// anthropicToolID is the pattern of tool_use ids and of the tool_use_id of results; ids of other providers
// ("call_…|fc_…", "functions.read:0") break it.
var anthropicToolID = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// anthropicMessagesShape checks each message against the schema: its role, its content and the shape
// of each block.
func anthropicMessagesShape(body map[string]any) *APIError {
	for i, m := range anthropicMessages(body) {
		where := fmt.Sprintf("messages.%d", i)
		if m == nil {
			return anthropicInvalid("%s: Input should be a valid dictionary", where) // text not confirmed
		}
		if role := m["role"]; role == nil {
			return anthropicInvalid("%s.role: Field required", where)
		} else if role != "user" && role != "assistant" {
			return anthropicInvalid("%s.role: Input should be 'user' or 'assistant'", where)
		}
		switch c := m["content"].(type) {
		case nil:
			return anthropicInvalid("%s.content: Field required", where)
		case string:
		case []any:
			for j, b := range c {
				if err := anthropicBlockShape(fmt.Sprintf("%s.content.%d", where, j), b); err != nil {
					return err
				}
			}
		default:
			return anthropicInvalid("%s.content: Input should be a valid list", where) // text not confirmed
		}
	}
	return nil
}

// anthropicBlockTypes are the block types chatd may send, and the members each one requires.
var anthropicBlockTypes = map[string][]string{
	"text":              {"text"},
	"image":             {"source"},
	"tool_use":          {"id", "name", "input"},
	"tool_result":       {"tool_use_id"},
	"thinking":          {"thinking", "signature"},
	"redacted_thinking": {"data"},
}

// anthropicBlockShape checks one content block at where ("messages.1.content.0"): a known type, its
// required members, and the pattern of tool ids. The schema names a member under the block's type:
// "messages.1.content.0.tool_use.id".
func anthropicBlockShape(where string, v any) *APIError {
	b, ok := v.(map[string]any)
	if !ok {
		return anthropicInvalid("%s: Input should be a valid dictionary", where) // text not confirmed
	}
	typ, _ := b["type"].(string)
	required, known := anthropicBlockTypes[typ]
	if !known {
		// The tag list of the real message is longer (document, search_result, server tools …).
		return anthropicInvalid("%s: Input tag '%v' found using 'type' does not match any of the expected tags: 'text', 'image', 'tool_use', 'tool_result', 'thinking', 'redacted_thinking'", where, b["type"]) // text not confirmed (form confirmed)
	}
	for _, field := range required {
		if b[field] == nil {
			return anthropicInvalid("%s.%s.%s: Field required", where, typ, field)
		}
	}
	switch typ {
	case "text":
		if _, ok := b["text"].(string); !ok {
			return anthropicInvalid("%s.text.text: Input should be a valid string", where) // text not confirmed
		}
	case "image":
		src, _ := b["source"].(map[string]any)
		if src == nil || src["type"] == "base64" && (src["media_type"] == nil || src["data"] == nil) {
			return anthropicInvalid("%s.image.source: Field required", where)
		}
	case "tool_use":
		if id, _ := b["id"].(string); !anthropicToolID.MatchString(id) {
			return anthropicInvalid("%s.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'", where)
		}
		if name, _ := b["name"].(string); name == "" {
			return anthropicInvalid("%s.tool_use.name: String should have at least 1 character", where) // text not confirmed
		}
		if _, ok := b["input"].(map[string]any); !ok {
			return anthropicInvalid("%s.tool_use.input: Input should be a valid dictionary", where) // text not confirmed
		}
	case "tool_result":
		if id, _ := b["tool_use_id"].(string); !anthropicToolID.MatchString(id) {
			return anthropicInvalid("%s.tool_result.tool_use_id: String should match pattern '^[a-zA-Z0-9_-]+$'", where)
		}
		for k, nested := range anthropicBlocks(b["content"]) {
			if typ, _ := nested["type"].(string); typ != "text" && typ != "image" {
				return anthropicInvalid("%s.tool_result.content.%d: Input tag '%v' found using 'type' does not match any of the expected tags: 'text', 'image'", where, k, nested["type"]) // text not confirmed
			}
		}
	}
	return nil
}

// anthropicSystemShape checks the system prompt: a string, or a list of text blocks.
func anthropicSystemShape(body map[string]any) *APIError {
	switch s := body["system"].(type) {
	case nil, string:
		return nil
	case []any:
		for i, v := range s {
			b, _ := v.(map[string]any)
			if b["type"] != "text" {
				return anthropicInvalid("system.%d.type: Input should be 'text'", i) // text not confirmed
			}
			if _, ok := b["text"].(string); !ok {
				return anthropicInvalid("system.%d.text: Field required", i) // text not confirmed
			}
		}
		return nil
	}
	return anthropicInvalid("system: Input should be a valid string") // text not confirmed
}

// anthropicToolName is the pattern of a custom tool's name. MCP tools named "server.tool" break it.
var anthropicToolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)

// anthropicToolsShape checks the tool definitions: custom tools (no type, or "custom") with a valid
// name and an object input_schema. Server tools (a dated type such as "web_search_20250305") are not
// chatd's and are left alone.
func anthropicToolsShape(body map[string]any) *APIError {
	if body["tools"] == nil {
		return nil
	}
	tools, ok := body["tools"].([]any)
	if !ok {
		return anthropicInvalid("tools: Input should be a valid list") // text not confirmed
	}
	names := map[string]bool{}
	for i, v := range tools {
		t, _ := v.(map[string]any)
		if typ, _ := t["type"].(string); typ != "" && typ != "custom" {
			continue
		}
		where := fmt.Sprintf("tools.%d.custom", i)
		name, _ := t["name"].(string)
		if t["name"] == nil {
			return anthropicInvalid("%s.name: Field required", where) // text not confirmed
		}
		if !anthropicToolName.MatchString(name) {
			return anthropicInvalid("%s.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'", where)
		}
		if names[name] {
			return anthropicInvalid("tools: Tool names must be unique.") // text not confirmed
		}
		names[name] = true
		schema, _ := t["input_schema"].(map[string]any)
		if schema == nil {
			return anthropicInvalid("%s.input_schema: Field required", where) // text not confirmed
		}
		if schema["type"] != "object" {
			return anthropicInvalid("%s.input_schema.type: Input should be 'object'", where) // text not confirmed
		}
	}
	return nil
}

var anthropicToolChoices = []string{"auto", "any", "tool", "none"}

// anthropicToolChoiceShape checks tool_choice: {"type": auto|any|tool|none}, a name with "tool".
func anthropicToolChoiceShape(body map[string]any) *APIError {
	if body["tool_choice"] == nil {
		return nil
	}
	c, ok := body["tool_choice"].(map[string]any)
	if !ok {
		return anthropicInvalid("tool_choice: Input should be a valid dictionary") // text not confirmed
	}
	typ, _ := c["type"].(string)
	if !slices.Contains(anthropicToolChoices, typ) {
		return anthropicInvalid("tool_choice: Input tag '%v' found using 'type' does not match any of the expected tags: 'auto', 'any', 'tool', 'none'", c["type"]) // text not confirmed
	}
	if typ == "tool" && c["name"] == nil {
		return anthropicInvalid("tool_choice.tool.name: Field required") // text not confirmed
	}
	return nil
}

// thinking returns the thinking configuration when it turns thinking on.
func anthropicThinkingOn(body map[string]any) (map[string]any, bool) {
	th, _ := body["thinking"].(map[string]any)
	return th, th != nil && (th["type"] == "enabled" || th["type"] == "adaptive")
}

// anthropicThinkingShape checks the thinking configuration: a known type, and a budget of at least 1024
// tokens when enabled.
func anthropicThinkingShape(body map[string]any) *APIError {
	if body["thinking"] == nil {
		return nil
	}
	th, _ := body["thinking"].(map[string]any)
	switch th["type"] {
	case "enabled":
		budget, ok := th["budget_tokens"].(float64)
		if !ok {
			return anthropicInvalid("thinking.enabled.budget_tokens: Field required") // text not confirmed
		}
		if budget < 1024 {
			return anthropicInvalid("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
		}
	case "disabled", "adaptive":
	default:
		return anthropicInvalid("thinking: Input tag '%v' found using 'type' does not match any of the expected tags: 'enabled', 'disabled', 'adaptive'", th["type"]) // text not confirmed
	}
	return nil
}

// anthropicThinkingRules checks what thinking rules out: a budget not below max_tokens, a temperature
// other than 1, top_k, and a tool_choice that forces tool use.
func anthropicThinkingRules(body map[string]any) *APIError {
	th, on := anthropicThinkingOn(body)
	if !on {
		return nil
	}
	if th["type"] == "enabled" && th["budget_tokens"].(float64) >= body["max_tokens"].(float64) {
		return anthropicInvalid("`max_tokens` must be greater than `thinking.budget_tokens`.")
	}
	if t, ok := body["temperature"].(float64); ok && t != 1 {
		return anthropicInvalid("`temperature` may only be set to 1 when thinking is enabled or in adaptive mode")
	}
	if body["top_k"] != nil {
		return anthropicInvalid("`top_k` must be unset when thinking is enabled. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#important-considerations-when-using-extended-thinking")
	}
	if c, _ := body["tool_choice"].(map[string]any); c["type"] == "any" || c["type"] == "tool" {
		return anthropicInvalid("Thinking may not be enabled when tool_choice forces tool use.")
	}
	return nil
}

// anthropicToolChoiceRules checks that a tool_choice comes with tools, and names one of them.
func anthropicToolChoiceRules(body map[string]any) *APIError {
	c, _ := body["tool_choice"].(map[string]any)
	if c == nil {
		return nil
	}
	tools, _ := body["tools"].([]any)
	if len(tools) == 0 {
		return anthropicInvalid("tool_choice may only be specified while providing tools.")
	}
	if c["type"] == "tool" && !slices.ContainsFunc(tools, func(t any) bool { return t.(map[string]any)["name"] == c["name"] }) {
		return anthropicInvalid("tool_choice.name: tool '%v' was not found in tools", c["name"]) // text not confirmed
	}
	return nil
}

// anthropicContentRules checks the content of every message: at least one message, content in every
// message but a final assistant one, no empty or blank text block, no cache breakpoint on an empty text
// or on thinking, and no trailing whitespace at the end of a final assistant message (a prefill).
func anthropicContentRules(body map[string]any) *APIError {
	msgs := anthropicMessages(body)
	if len(msgs) == 0 {
		return anthropicInvalid("messages: at least one message is required") // text seen in clients' handling of Anthropic errors, not in a reported body
	}
	if s, ok := body["system"].([]any); ok {
		for i, v := range s {
			if b := v.(map[string]any); b["cache_control"] != nil && b["text"] == "" {
				return anthropicInvalid("system.%d: cache_control cannot be set for empty text blocks", i)
			}
		}
	}
	last := len(msgs) - 1
	for i, m := range msgs {
		bs := anthropicBlocks(m["content"])
		if m["content"] == "" || len(bs) == 0 {
			if i == last && m["role"] == "assistant" {
				continue
			}
			return anthropicInvalid("messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
		}
		for j, b := range bs {
			if err := anthropicBlockContent(fmt.Sprintf("messages.%d.content.%d", i, j), b); err != nil {
				return err
			}
		}
		if i == last && m["role"] == "assistant" {
			if b := bs[len(bs)-1]; b["type"] == "text" && strings.TrimRightFunc(b["text"].(string), unicode.IsSpace) != b["text"] {
				return anthropicInvalid("final assistant content cannot end with trailing whitespace")
			}
		}
	}
	return nil
}

// anthropicBlockContent checks the content of one block, and of the blocks a tool result holds.
func anthropicBlockContent(where string, b map[string]any) *APIError {
	switch b["type"] {
	case "text":
		text := b["text"].(string)
		if text == "" && b["cache_control"] != nil {
			return anthropicInvalid("%s.text: cache_control cannot be set for empty text blocks", where)
		}
		if text == "" {
			return anthropicInvalid("messages: text content blocks must be non-empty")
		}
		if strings.TrimSpace(text) == "" {
			return anthropicInvalid("messages: text content blocks must contain non-whitespace text") // which blocks the API holds to this is not confirmed
		}
	case "thinking", "redacted_thinking":
		if b["cache_control"] != nil {
			return anthropicInvalid("%s.%s.cache_control: Extra inputs are not permitted", where, b["type"]) // text not confirmed
		}
		if b["type"] == "thinking" && b["signature"] == "" {
			return anthropicInvalid("%s: Invalid `signature` in `thinking` block", where)
		}
	case "tool_result":
		if list, ok := b["content"].([]any); ok {
			for k, nested := range anthropicBlocks(list) {
				if err := anthropicBlockContent(fmt.Sprintf("%s.content.%d", where, k), nested); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// anthropicToolRules checks the tool blocks of the conversation: tool_use only from the assistant and
// tool_result only from the user, unique tool_use ids, each tool_use answered by a tool_result at the
// start of the next message, and each tool_result answering a tool_use of the message before it.
//
// Tool blocks need no tools declared beside them any more: the API refused them without ("Requests which
// include `tool_use` or `tool_result` blocks must define tools.") until 27 February 2025, when it began
// taking a history of tool use with no tools (anthropic-sdk-python#849). Bedrock still refuses it.
func anthropicToolRules(body map[string]any) *APIError {
	msgs := anthropicMessages(body)
	seen := map[string]bool{}
	for i, m := range msgs {
		for j, b := range anthropicBlocks(m["content"]) {
			switch {
			case b["type"] == "tool_use" && m["role"] != "assistant":
				return anthropicInvalid("messages.%d: `tool_use` blocks can only be in `assistant` messages", i) // text not confirmed
			case b["type"] == "tool_result" && m["role"] != "user":
				return anthropicInvalid("messages.%d: `tool_result` blocks can only be in `user` messages", i) // text not confirmed
			case b["type"] == "tool_use":
				id := b["id"].(string)
				if seen[id] {
					return anthropicInvalid("messages.%d.content.%d: `tool_use` ids must be unique", i, j)
				}
				seen[id] = true
			}
		}
		if i > 0 {
			if err := anthropicCheckResults(i, msgs[i-1], m); err != nil {
				return err
			}
		}
		if err := anthropicCheckAnswered(i, m, msgs[i+1:]); err != nil {
			return err
		}
	}
	return nil
}

// toolUses returns the ids of the tool_use blocks of m.
func anthropicToolUses(m map[string]any) []string {
	var ids []string
	for _, b := range anthropicBlocks(m["content"]) {
		if b["type"] == "tool_use" {
			ids = append(ids, b["id"].(string))
		}
	}
	return ids
}

// checkAnsweredNext checks that the message after m, message i, answers every tool_use of m, with
// tool_result blocks before anything else: results after other content, or in a later message, answer
// nothing.
func anthropicCheckAnswered(i int, m map[string]any, rest []map[string]any) *APIError {
	ids := anthropicToolUses(m)
	if len(ids) == 0 {
		return nil
	}
	answered := map[string]bool{}
	if len(rest) > 0 && rest[0]["role"] == "user" {
		for _, b := range anthropicBlocks(rest[0]["content"]) {
			if b["type"] != "tool_result" {
				break
			}
			answered[b["tool_use_id"].(string)] = true
		}
	}
	var missing []string
	for _, id := range ids {
		if !answered[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return anthropicInvalid("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i, strings.Join(missing, ", "))
}

// checkResults checks that every tool_result of m, message i, answers a tool_use of prev.
func anthropicCheckResults(i int, prev, m map[string]any) *APIError {
	ids := anthropicToolUses(prev)
	for j, b := range anthropicBlocks(m["content"]) {
		if b["type"] != "tool_result" {
			continue
		}
		if id := b["tool_use_id"].(string); !slices.Contains(ids, id) {
			return anthropicInvalid("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, j, id)
		}
	}
	return nil
}

// anthropicCacheRules counts the cache breakpoints: on tools, system blocks, message blocks and the
// blocks inside tool results, at most 4.
func anthropicCacheRules(body map[string]any) *APIError {
	n := 0
	count := func(list []map[string]any) {
		for _, b := range list {
			if b["cache_control"] != nil {
				n++
			}
			if b["type"] == "tool_result" {
				if nested, ok := b["content"].([]any); ok {
					for _, v := range nested {
						if v.(map[string]any)["cache_control"] != nil {
							n++
						}
					}
				}
			}
		}
	}
	if tools, ok := body["tools"].([]any); ok {
		count(anthropicBlocks(tools))
	}
	if system, ok := body["system"].([]any); ok {
		count(anthropicBlocks(system))
	}
	for _, m := range anthropicMessages(body) {
		if list, ok := m["content"].([]any); ok {
			count(anthropicBlocks(list))
		}
	}
	if n > 4 {
		return anthropicInvalid("A maximum of 4 blocks with cache_control may be provided. Found %d.", n)
	}
	return nil
}

// anthropicThinkingHistory checks, with thinking on, that the final assistant message starts with
// thinking: the assistant message that ends the request (a prefill), or the one whose tool calls the
// last message answers — the API wants the turn's thinking back. Earlier turns need none.
func anthropicThinkingHistory(body map[string]any) *APIError {
	if _, on := anthropicThinkingOn(body); !on {
		return nil
	}
	msgs := anthropicMessages(body)
	final := len(msgs) - 1
	if msgs[final]["role"] != "assistant" {
		answers := slices.ContainsFunc(anthropicBlocks(msgs[final]["content"]), func(b map[string]any) bool { return b["type"] == "tool_result" })
		if !answers || final == 0 || msgs[final-1]["role"] != "assistant" {
			return nil // no tool turn goes on; when results answer no assistant message, the tool rules have refused them
		}
		final--
	}
	content := anthropicBlocks(msgs[final]["content"])
	if len(content) == 0 || msgs[final]["content"] == "" {
		return nil // an empty prefill
	}
	if first := content[0]["type"]; first != "thinking" && first != "redacted_thinking" {
		return anthropicInvalid("messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%v`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking", final, first)
	}
	return nil
}
