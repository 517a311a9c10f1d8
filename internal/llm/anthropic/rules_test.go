package anthropic

import (
	"errors"
	"fmt"
	"regexp"
)

var toolIDPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// checkBody checks a decoded request body against the rules the Messages API enforces on what chatd
// sends, and returns the first one broken: the shape of every block, roles taking turns, the tool
// results of a turn first in the next user message, signed thinking, at most four cache breakpoints,
// and the thinking parameters with what they rule out.
func checkBody(body map[string]any) error {
	if s, _ := body["model"].(string); s == "" {
		return errors.New("model: missing")
	}
	maxTokens, _ := body["max_tokens"].(float64)
	if maxTokens < 1 {
		return errors.New("max_tokens: missing")
	}
	if body["stream"] != true {
		return errors.New("stream: not true")
	}
	breakpoints := 0
	count := func(b map[string]any) {
		if b["cache_control"] != nil {
			breakpoints++
		}
	}
	for i, b := range list(body["system"]) {
		if b["type"] != "text" || b["text"] == "" {
			return fmt.Errorf("system.%d: not a non-empty text block", i)
		}
		count(b)
	}
	tools := list(body["tools"])
	for _, t := range tools {
		count(t)
	}
	if body["tool_choice"] != nil && len(tools) == 0 {
		return errors.New("tool_choice: set without tools")
	}
	if th, ok := body["thinking"].(map[string]any); ok {
		budget, _ := th["budget_tokens"].(float64)
		if th["type"] != "enabled" || budget < 1024 || maxTokens <= budget {
			return fmt.Errorf("thinking: %v with max_tokens %v", th, maxTokens)
		}
		if body["temperature"] != nil {
			return errors.New("temperature: may not be set with thinking")
		}
		if tc, _ := body["tool_choice"].(map[string]any); tc["type"] == "any" || tc["type"] == "tool" {
			return errors.New("tool_choice: thinking may not be enabled when tool_choice forces tool use")
		}
	}
	msgs := list(body["messages"])
	if len(msgs) == 0 || msgs[0]["role"] != "user" {
		return errors.New("messages: the first message must be the user's")
	}
	var pending map[string]bool // tool_use ids of the last assistant message
	for i, m := range msgs {
		content := list(m["content"])
		if len(content) == 0 {
			return fmt.Errorf("messages.%d: empty content", i)
		}
		if i > 0 && m["role"] == msgs[i-1]["role"] {
			return fmt.Errorf("messages.%d: two %v messages in a row", i, m["role"])
		}
		results := 0
		for j, b := range content {
			where := fmt.Sprintf("messages.%d.content.%d", i, j)
			if err := checkBlock(where, m["role"], b); err != nil {
				return err
			}
			count(b)
			if b["type"] == "tool_result" {
				id, _ := b["tool_use_id"].(string)
				if !pending[id] || results != j {
					return fmt.Errorf("%s: tool_result %q answers no tool_use of the previous message, or follows other content", where, id)
				}
				delete(pending, id)
				results++
			}
		}
		if len(pending) > 0 {
			return fmt.Errorf("messages.%d: tool_use ids %v have no tool_result right after them", i, pending)
		}
		if m["role"] == "assistant" {
			pending = map[string]bool{}
			for _, b := range content {
				if b["type"] == "tool_use" {
					pending[b["id"].(string)] = true
				}
			}
		}
	}
	if breakpoints > maxBreakpoints {
		return fmt.Errorf("%d cache_control blocks, at most %d allowed", breakpoints, maxBreakpoints)
	}
	return nil
}

func checkBlock(where string, role any, b map[string]any) error {
	assistant := role == "assistant"
	switch b["type"] {
	case "text":
		if s, _ := b["text"].(string); s == "" {
			return fmt.Errorf("%s: text content blocks must be non-empty", where)
		}
	case "image":
		src, _ := b["source"].(map[string]any)
		if assistant || src["type"] != "base64" || src["media_type"] == "" || src["data"] == "" {
			return fmt.Errorf("%s: bad image %v", where, b)
		}
	case "thinking":
		if _, ok := b["thinking"].(string); !ok || !assistant || b["signature"] == "" || b["signature"] == nil || b["cache_control"] != nil {
			return fmt.Errorf("%s: thinking needs thinking and a signature, in an assistant message, uncached", where)
		}
	case "redacted_thinking":
		if !assistant || b["data"] == "" || b["data"] == nil || b["cache_control"] != nil {
			return fmt.Errorf("%s: bad redacted_thinking", where)
		}
	case "tool_use":
		id, _ := b["id"].(string)
		if _, ok := b["input"].(map[string]any); !ok || !assistant || !toolIDPattern.MatchString(id) || b["name"] == "" {
			return fmt.Errorf("%s: bad tool_use %v", where, b)
		}
	case "tool_result":
		id, _ := b["tool_use_id"].(string)
		if assistant || !toolIDPattern.MatchString(id) {
			return fmt.Errorf("%s: bad tool_result %v", where, b)
		}
	default:
		return fmt.Errorf("%s: unexpected block type %v", where, b["type"])
	}
	return nil
}
