package responses

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"chatd/internal/llm"
)

var emptyParameters = json.RawMessage(`{"type":"object","properties":{}}`)

// Encode returns the JSON body Stream sends for req.
func (c *Client) Encode(req *llm.Request) ([]byte, error) {
	wire, err := c.newRequest(req)
	if err != nil {
		return nil, fmt.Errorf("%s: build request: %w", c.name, err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// Text goes back as the model wrote it: no \u003c for every "<" of a summary or an answer.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(wire); err != nil {
		return nil, fmt.Errorf("%s: encode request: %w", c.name, err)
	}
	return buf.Bytes(), nil
}

// newRequest translates req into the Responses shape. Prompt-cache breakpoints (Message.Cache,
// CacheSystem, CacheTools) are ignored: OpenAI caches prompt prefixes on its own.
func (c *Client) newRequest(req *llm.Request) (*request, error) {
	out := &request{
		Model:           req.Model,
		Instructions:    req.System,
		Input:           make([]any, 0, len(req.Messages)+1),
		MaxOutputTokens: req.MaxTokens,
		// Nothing is kept on OpenAI's side: each reasoning item comes back with its encrypted content,
		// which later requests carry instead of a reference.
		Store:  false,
		Stream: true,
	}
	switch {
	case req.Reasoning != nil || isReasoningModel(req.Model):
		// Only a reasoning model may be asked for encrypted content: the others refuse the whole
		// request ("Encrypted content is not supported with this model"). Reasoning models refuse a
		// temperature.
		out.Include = []string{"reasoning.encrypted_content"}
		if r := req.Reasoning; r != nil {
			out.Reasoning = &reasoningConfig{Effort: effort(r), Summary: "auto"}
		}
	default:
		out.Temperature = req.Temperature
	}
	for i := range req.Messages {
		var err error
		out.Input, err = c.appendMessage(out.Input, &req.Messages[i], llm.Origin(c.name, req.Model))
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
	}
	for _, t := range req.Tools {
		params := t.InputSchema
		if len(params) == 0 {
			params = emptyParameters
		}
		out.Tools = append(out.Tools, tool{Type: "function", Name: t.Name, Description: t.Description, Parameters: params})
	}
	if len(out.Tools) > 0 {
		out.ToolChoice = string(req.ToolChoice)
	}
	return out, nil
}

// isReasoningModel reports, by its name, whether model is one of OpenAI's reasoning models, which return
// encrypted reasoning and refuse a temperature: the o-series, GPT-5 and Codex families, except their
// "chat" variants (gpt-5-chat-latest, …), which do not reason. The rule is the model-family check of the
// Vercel AI SDK's OpenAI provider (getResponsesModelConfig in @ai-sdk/openai), widened from gpt-5-chat to
// every "chat" name. Any other model is treated as a reasoning one only when the request asks for
// reasoning.
func isReasoningModel(model string) bool {
	m := strings.ToLower(model)
	if strings.Contains(m, "chat") {
		return false
	}
	for _, prefix := range []string{"o1", "o3", "o4", "gpt-5", "codex"} {
		if strings.HasPrefix(m, prefix) {
			return true
		}
	}
	return false
}

// effort is the reasoning effort asked for, derived from a token budget when only that is given.
func effort(r *llm.Reasoning) string {
	switch {
	case r.Effort != "":
		return r.Effort
	case r.BudgetTokens <= 0:
		return "" // the model's default
	case r.BudgetTokens < 2048:
		return "low"
	case r.BudgetTokens < 8192:
		return "medium"
	}
	return "high"
}

func (c *Client) appendMessage(input []any, m *llm.Message, origin string) ([]any, error) {
	switch m.Role {
	case llm.RoleUser, llm.RoleSystem:
		content := userContent(m.Parts)
		if len(content) == 0 {
			return input, nil // the API refuses a message without content
		}
		return append(input, inputMessage{Role: string(m.Role), Content: content}), nil
	case llm.RoleAssistant:
		return append(input, c.assistantItems(m, origin)...), nil
	case llm.RoleTool:
		if m.ToolCallID == "" {
			return nil, errors.New("a tool result without the id of its call")
		}
		return append(input, functionCallOutput{Type: "function_call_output", CallID: m.ToolCallID, Output: m.Text()}), nil
	}
	return nil, fmt.Errorf("unknown role %q", m.Role)
}

// userContent returns the content of a user or system message, without its empty text parts.
func userContent(parts []llm.Part) []contentPart {
	out := make([]contentPart, 0, len(parts))
	for _, p := range parts {
		switch p.Kind {
		case llm.PartText:
			if p.Text == "" {
				continue // an input_text needs its text: the API refuses one without
			}
			out = append(out, contentPart{Type: "input_text", Text: p.Text})
		case llm.PartImage:
			url := "data:" + p.MediaType + ";base64," + base64.StdEncoding.EncodeToString(p.Data)
			out = append(out, contentPart{Type: "input_image", ImageURL: url})
		}
	}
	return out
}

// assistantItems returns the output items of an assistant turn in the order the model produced them:
// reasoning items and text messages as their parts came, then the function calls.
//
// The reasoning parts of one item (one Part.ID) become that item again, with its summaries in order and
// its encrypted content, and only when this client wrote the message: no other provider can read them.
// The API requires a reasoning item to be followed by the item it preceded ("was provided without its
// required following item"), and with store false it can only use one that carries its encrypted
// content: a reasoning item that lacks either is dropped.
func (c *Client) assistantItems(m *llm.Message, origin string) []any {
	own := m.Origin == origin
	var (
		items     []any
		reasoning = map[string]*reasoningItem{}
		text      strings.Builder
	)
	flush := func() {
		if text.Len() > 0 {
			items = append(items, inputMessage{Type: "message", Role: "assistant",
				Content: []contentPart{{Type: "output_text", Text: text.String()}}})
			text.Reset()
		}
	}
	for _, p := range m.Parts {
		switch {
		case p.Kind == llm.PartText:
			text.WriteString(p.Text)
		case p.Kind == llm.PartReasoning && own && p.ID != "":
			it := reasoning[p.ID]
			if it == nil {
				flush()
				it = &reasoningItem{ID: p.ID, Type: "reasoning", Summary: []summaryText{}}
				reasoning[p.ID] = it
				items = append(items, it)
			}
			if p.Text != "" {
				it.Summary = append(it.Summary, summaryText{Type: "summary_text", Text: p.Text})
			}
			if p.Signature != "" {
				it.EncryptedContent = p.Signature
			}
		}
	}
	flush()
	for _, tc := range m.ToolCalls {
		args := string(tc.Arguments)
		if args == "" {
			args = "{}"
		}
		items = append(items, functionCall{Type: "function_call", CallID: tc.ID, Name: tc.Name, Arguments: args})
	}
	return replayable(items)
}

// replayable drops the reasoning items the API would refuse: those without encrypted content and those
// not followed by a message or function call.
func replayable(items []any) []any {
	keep := make([]bool, len(items))
	followed := false // whether the next kept item is a message or function call
	for i := len(items) - 1; i >= 0; i-- {
		it, ok := items[i].(*reasoningItem)
		switch {
		case !ok:
			keep[i], followed = true, true
		case followed && it.EncryptedContent != "":
			keep[i], followed = true, false
		}
	}
	out := items[:0]
	for i, it := range items {
		if keep[i] {
			out = append(out, it)
		}
	}
	return out
}
