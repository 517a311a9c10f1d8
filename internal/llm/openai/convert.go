package openai

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"chatd/internal/llm"
)

var (
	emptyObject     = json.RawMessage("{}")
	emptyParameters = json.RawMessage(`{"type":"object","properties":{}}`)
)

// newChatRequest translates req into the Chat Completions shape.
func (c *Client) newChatRequest(req *llm.Request) (*chatRequest, error) {
	out := &chatRequest{
		Model:         req.Model,
		Temperature:   req.Temperature,
		Stream:        true,
		StreamOptions: &streamOptions{IncludeUsage: true},
	}
	if req.MaxTokens > 0 {
		// OpenAI's reasoning models refuse max_tokens; compatible servers often only know it.
		if c.maxCompletionTokens {
			out.MaxCompletionTokens = req.MaxTokens
		} else {
			out.MaxTokens = req.MaxTokens
		}
	}
	if r := req.Reasoning; r != nil {
		out.ReasoningEffort = effort(r)
	}
	out.Messages = make([]wireMessage, 0, len(req.Messages)+1)
	if req.System != "" {
		out.Messages = append(out.Messages, wireMessage{Role: "system", Content: req.System})
	}
	for i := range req.Messages {
		m, err := convertMessage(&req.Messages[i])
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		out.Messages = append(out.Messages, m)
	}
	for _, t := range req.Tools {
		params := t.InputSchema
		if len(params) == 0 {
			params = emptyParameters
		}
		out.Tools = append(out.Tools, wireTool{
			Type:     "function",
			Function: wireToolDef{Name: t.Name, Description: t.Description, Parameters: params},
		})
	}
	if len(out.Tools) > 0 {
		out.ToolChoice = string(req.ToolChoice)
	}
	return out, nil
}

// effort is the reasoning_effort of r: its Effort, or one derived from its budget.
func effort(r *llm.Reasoning) string {
	switch {
	case r.Effort != "":
		return r.Effort
	case r.BudgetTokens == 0:
		return ""
	case r.BudgetTokens < 2048:
		return "low"
	case r.BudgetTokens < 8192:
		return "medium"
	}
	return "high"
}

func convertMessage(m *llm.Message) (wireMessage, error) {
	switch m.Role {
	case llm.RoleSystem, llm.RoleUser:
		content, err := userContent(m.Parts)
		return wireMessage{Role: string(m.Role), Content: content}, err
	case llm.RoleAssistant:
		out := wireMessage{Role: "assistant"} // content null
		// Reasoning is not sent back: Chat Completions has no field for it and DeepSeek refuses it.
		if text := m.Text(); text != "" || len(m.ToolCalls) == 0 {
			out.Content = text
		}
		for _, tc := range m.ToolCalls {
			args := tc.Arguments
			if len(args) == 0 {
				args = emptyObject
			}
			out.ToolCalls = append(out.ToolCalls, wireToolCall{
				ID:       tc.ID,
				Type:     "function",
				Function: wireFunction{Name: tc.Name, Arguments: string(args)},
			})
		}
		return out, nil
	case llm.RoleTool:
		return wireMessage{Role: "tool", ToolCallID: m.ToolCallID, Content: m.Text()}, nil
	}
	return wireMessage{}, fmt.Errorf("unknown role %q", m.Role)
}

// userContent is a plain string for text-only content and an array of parts when images are present.
func userContent(parts []llm.Part) (any, error) {
	hasImage := false
	for _, p := range parts {
		hasImage = hasImage || p.Kind == llm.PartImage
	}
	if !hasImage {
		var text string
		for _, p := range parts {
			if p.Kind == llm.PartText {
				text += p.Text
			}
		}
		return text, nil
	}
	wire := make([]wirePart, 0, len(parts))
	for _, p := range parts {
		switch p.Kind {
		case llm.PartText:
			wire = append(wire, wirePart{Type: "text", Text: p.Text})
		case llm.PartImage:
			url := "data:" + p.MediaType + ";base64," + base64.StdEncoding.EncodeToString(p.Data)
			wire = append(wire, wirePart{Type: "image_url", ImageURL: &imageURL{URL: url}})
		}
	}
	return wire, nil
}
