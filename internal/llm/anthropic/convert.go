package anthropic

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"chatd/internal/llm"
)

var defaultSchema = json.RawMessage(`{"type":"object","properties":{}}`)

// maxBreakpoints is how many cache_control breakpoints the API accepts in one request.
const maxBreakpoints = 4

// Thinking budgets derived from llm.Reasoning.Effort, and the API's minimum.
const (
	budgetLow     = 1024
	budgetMedium  = 4096
	budgetHigh    = 16384
	minimumBudget = 1024
)

// Output bounds with thinking on.
const (
	// answerReserve is what a budget leaves of max_tokens for the answer: the budget shrinks to keep it.
	answerReserve = 1024
	// maxDefaultOutput caps the max_tokens chosen for a request that sets none: the output cap of
	// Claude Sonnet 4.5 and Haiku 4.5. The API refuses more than a model's cap, so a caller of a model
	// with a smaller one (Opus 4.1: 32000) and a large budget sets MaxTokens.
	maxDefaultOutput = 64000
)

// newRequest translates req into the Messages API's shape.
func (c *Client) newRequest(req *llm.Request) (*messagesRequest, error) {
	out := &messagesRequest{
		Model:       req.Model,
		MaxTokens:   cmp.Or(req.MaxTokens, DefaultMaxTokens),
		Temperature: req.Temperature,
		Stream:      true,
	}
	b := builder{own: llm.Origin(c.name, req.Model)}
	if req.System != "" {
		b.system = append(b.system, block{Type: "text", Text: req.System})
	}
	for i := range req.Messages {
		if err := b.add(&req.Messages[i]); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
	}
	if req.CacheSystem && len(b.system) > 0 {
		b.marks = append(b.marks, mark{system: true, block: len(b.system) - 1})
	}
	out.System, out.Messages = b.system, b.messages
	for _, t := range req.Tools {
		schema := t.InputSchema
		if len(bytes.TrimSpace(schema)) == 0 {
			schema = defaultSchema
		}
		out.Tools = append(out.Tools, tool{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	if budget := thinkingBudget(req.Reasoning); budget > 0 && !unsignedToolTurn(out.Messages) {
		out.MaxTokens, budget = thinkingTokens(req.MaxTokens, budget)
		out.Thinking = &thinkingCfg{Type: "enabled", BudgetTokens: budget}
		out.Temperature = nil // the API refuses a temperature with thinking on
	}
	if len(out.Tools) > 0 {
		out.ToolChoice = convertToolChoice(req.ToolChoice, out.Thinking != nil)
	}
	placeBreakpoints(out, b.marks, req.CacheTools)
	return out, nil
}

// unsignedToolTurn reports whether the request continues a tool-use turn whose assistant message does
// not start with thinking: its thinking came from another provider, or was never asked for. The API
// refuses thinking then ("a final assistant message must start with a thinking block"), so the
// request goes without it until the turn ends.
func unsignedToolTurn(msgs []message) bool {
	n := len(msgs)
	if n < 2 || msgs[n-2].Role != "assistant" || msgs[n-1].Content[0].Type != "tool_result" {
		return false
	}
	switch msgs[n-2].Content[0].Type {
	case "thinking", "redacted_thinking":
		return false
	}
	return true
}

// thinkingTokens returns the max_tokens and the thinking budget of a request with thinking on.
// Request.MaxTokens bounds the whole output, thinking included, as Gemini's maxOutputTokens and the
// Responses API's max_output_tokens do: adding the budget to it could pass the model's output cap,
// which the API refuses. When it is 0 the answer gets DefaultMaxTokens after the budget, up to
// maxDefaultOutput. The API wants max_tokens above the budget and the budget at least minimumBudget:
// the budget shrinks to leave answerReserve, and max_tokens grows only when that is not enough.
func thinkingTokens(maxTokens, budget int) (total, budgetTokens int) {
	total = maxTokens
	if total == 0 {
		total = min(budget+DefaultMaxTokens, maxDefaultOutput)
	}
	budget = max(min(budget, total-answerReserve), minimumBudget)
	if total <= budget {
		total = budget + answerReserve
	}
	return total, budget
}

func convertToolChoice(c llm.ToolChoice, thinking bool) *toolChoice {
	switch c {
	case llm.ToolChoiceAuto:
		return &toolChoice{Type: "auto"}
	case llm.ToolChoiceRequired:
		if thinking {
			// The API refuses forced tool use with thinking on ("Thinking may not be enabled when
			// tool_choice forces tool use"). The thinking asked for is kept and the choice relaxed
			// to auto, so the model may answer without a call: the caller checks for one.
			return &toolChoice{Type: "auto"}
		}
		return &toolChoice{Type: "any"}
	case llm.ToolChoiceNone:
		return &toolChoice{Type: "none"}
	}
	return nil // the API's default: auto
}

// thinkingBudget is the budget_tokens of r, or 0 for no thinking.
func thinkingBudget(r *llm.Reasoning) int {
	if r == nil {
		return 0
	}
	if r.BudgetTokens > 0 {
		return max(r.BudgetTokens, minimumBudget)
	}
	switch strings.ToLower(r.Effort) {
	case "none":
		return 0
	case "minimal", "low":
		return budgetLow
	case "high", "xhigh", "max":
		return budgetHigh
	}
	return budgetMedium
}

// builder gathers the system blocks and messages of a request, and where its cache breakpoints go.
type builder struct {
	own      string // the provider name whose signed thinking is sent back
	system   []block
	messages []message
	// results is set while the last message holds the tool results of one turn: the next tool
	// result, and a user message, join it.
	results bool
	marks   []mark
}

// mark is the place of a requested cache breakpoint: a block of the system prompt or of a message.
type mark struct {
	system  bool
	message int
	block   int
}

func (b *builder) add(m *llm.Message) error {
	var blocks []block
	switch m.Role {
	case llm.RoleSystem:
		// The API has no system role in messages: the text joins the system prompt.
		if text := m.Text(); text != "" {
			b.system = append(b.system, block{Type: "text", Text: text})
			if m.Cache {
				b.marks = append(b.marks, mark{system: true, block: len(b.system) - 1})
			}
		}
		return nil
	case llm.RoleUser:
		blocks = userBlocks(m.Parts)
	case llm.RoleAssistant:
		var err error
		if blocks, err = b.assistantBlocks(m); err != nil {
			return err
		}
	case llm.RoleTool:
		r, err := toolResult(m)
		if err != nil {
			return err
		}
		blocks = []block{r}
	default:
		return fmt.Errorf("unknown role %q", m.Role)
	}
	if len(blocks) == 0 {
		return nil // the API refuses a message without content
	}
	role := "user"
	if m.Role == llm.RoleAssistant {
		role = "assistant"
	}
	// Every tool result of a turn goes in the one user message after it, and text the user adds
	// goes after them in that message.
	if b.results && role == "user" {
		last := &b.messages[len(b.messages)-1]
		last.Content = append(last.Content, blocks...)
	} else {
		b.messages = append(b.messages, message{Role: role, Content: blocks})
	}
	b.results = m.Role == llm.RoleTool
	if m.Cache {
		b.markLast(len(blocks))
	}
	return nil
}

// markLast marks the last block that can carry a breakpoint among the n blocks just added.
func (b *builder) markLast(n int) {
	i := len(b.messages) - 1
	content := b.messages[i].Content
	for j := len(content) - 1; j >= len(content)-n; j-- {
		if cacheable(&content[j]) {
			b.marks = append(b.marks, mark{message: i, block: j})
			return
		}
	}
}

// cacheable reports whether the API accepts cache_control on a block: not on thinking, nor on an
// empty text.
func cacheable(bl *block) bool {
	switch bl.Type {
	case "thinking", "redacted_thinking":
		return false
	case "text":
		return bl.Text != ""
	}
	return true
}

func userBlocks(parts []llm.Part) []block {
	var out []block
	for _, p := range parts {
		switch p.Kind {
		case llm.PartText:
			if p.Text != "" {
				out = append(out, block{Type: "text", Text: p.Text})
			}
		case llm.PartImage:
			out = append(out, imageBlock(p))
		}
	}
	return out
}

func imageBlock(p llm.Part) block {
	return block{Type: "image", Source: &imageSource{
		Type:      "base64",
		MediaType: p.MediaType,
		Data:      base64.StdEncoding.EncodeToString(p.Data),
	}}
}

// assistantBlocks are the parts in order, then the tool calls. Thinking is sent back, verbatim, only
// to the provider that signed it, and only signed: the API refuses it otherwise.
func (b *builder) assistantBlocks(m *llm.Message) ([]block, error) {
	own := b.own != "" && m.Origin == b.own
	var out []block
	for _, p := range m.Parts {
		switch p.Kind {
		case llm.PartText:
			if p.Text != "" {
				out = append(out, block{Type: "text", Text: p.Text})
			}
		case llm.PartReasoning:
			if own && p.Signature != "" {
				out = append(out, block{Type: "thinking", Thinking: &p.Text, Signature: p.Signature})
			}
		case llm.PartRedactedReasoning:
			if own && p.Signature != "" {
				out = append(out, block{Type: "redacted_thinking", Data: p.Signature})
			}
		}
	}
	for i, tc := range m.ToolCalls {
		if tc.ID == "" {
			return nil, fmt.Errorf("tool call %d (%s) has no id", i, tc.Name)
		}
		args, err := arguments(tc.Arguments)
		if err != nil {
			return nil, fmt.Errorf("tool call %d (%s): %w", i, tc.Name, err)
		}
		out = append(out, block{Type: "tool_use", ID: toolID(tc.ID), Name: tc.Name, Input: args})
	}
	return out, nil
}

// arguments returns a call's arguments as the JSON object the API wants: as they are, or {} when empty.
func arguments(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return json.RawMessage("{}"), nil
	}
	if raw[0] != '{' || !json.Valid(raw) {
		return nil, fmt.Errorf("the arguments are not a JSON object: %.40q", raw)
	}
	return raw, nil
}

// toolResult is the tool_result block of a tool message: its text as a string, or text and image
// blocks when it holds images.
func toolResult(m *llm.Message) (block, error) {
	if m.ToolCallID == "" {
		return block{}, fmt.Errorf("the tool result (%s) has no call id", m.ToolName)
	}
	out := block{Type: "tool_result", ToolUseID: toolID(m.ToolCallID), IsError: m.IsError}
	hasImage := false
	for _, p := range m.Parts {
		hasImage = hasImage || p.Kind == llm.PartImage
	}
	var err error
	switch {
	case hasImage:
		out.Content, err = json.Marshal(userBlocks(m.Parts))
	case m.Text() != "":
		out.Content, err = json.Marshal(m.Text())
	}
	return out, err
}

// toolID makes a call id of another provider one the API accepts (^[a-zA-Z0-9_-]+$). The same id
// always maps to the same result, so a call and its result still match.
func toolID(id string) string {
	valid := func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
	}
	if strings.IndexFunc(id, func(r rune) bool { return !valid(r) }) < 0 {
		return id
	}
	return strings.Map(func(r rune) rune {
		if valid(r) {
			return r
		}
		return '_'
	}, id)
}

// placeBreakpoints puts cache_control on the marked blocks, the last tool when asked, and keeps the
// last maxBreakpoints of them in the order system, tools, messages: the API refuses more.
func placeBreakpoints(out *messagesRequest, marks []mark, cacheTools bool) {
	var places []**cacheControl
	add := func(p **cacheControl) {
		if !slices.Contains(places, p) {
			places = append(places, p)
		}
	}
	for _, m := range marks {
		if m.system {
			add(&out.System[m.block].CacheControl)
		}
	}
	if cacheTools && len(out.Tools) > 0 {
		add(&out.Tools[len(out.Tools)-1].CacheControl)
	}
	for _, m := range marks {
		if !m.system {
			add(&out.Messages[m.message].Content[m.block].CacheControl)
		}
	}
	for _, p := range places[max(0, len(places)-maxBreakpoints):] {
		*p = ephemeral
	}
}
