package openai

// The reference encoding: the Chat Completions request as wire structs for encoding/json, which
// appendRequest must match byte for byte (TestEncodeMatchesJSON).

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"chatd/internal/llm"
)

var emptyObject = json.RawMessage("{}")

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

type chatRequest struct {
	Model               string         `json:"model"`
	Messages            []wireMessage  `json:"messages"`
	Tools               []wireTool     `json:"tools,omitempty"`
	ToolChoice          string         `json:"tool_choice,omitempty"`
	Temperature         *float64       `json:"temperature,omitempty"`
	MaxTokens           int            `json:"max_tokens,omitempty"`
	MaxCompletionTokens int            `json:"max_completion_tokens,omitempty"`
	ReasoningEffort     string         `json:"reasoning_effort,omitempty"`
	Stream              bool           `json:"stream"`
	StreamOptions       *streamOptions `json:"stream_options,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// wireMessage is one message. Content is a string, a []wirePart, or nil for null (an assistant message
// that only calls tools): encoded as they are, not as a json.RawMessage, which encoding/json would
// validate and copy again.
type wireMessage struct {
	Role       string         `json:"role"`
	Content    any            `json:"content"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type wirePart struct {
	Type     string    `json:"type"`
	Text     string    `json:"text,omitempty"`
	ImageURL *imageURL `json:"image_url,omitempty"`
}

type imageURL struct {
	URL string `json:"url"`
}

type wireToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // a JSON text, as a string
}

type wireTool struct {
	Type     string      `json:"type"`
	Function wireToolDef `json:"function"`
}

type wireToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}
