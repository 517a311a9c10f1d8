// Package llm is chatd's provider-agnostic vocabulary: the messages of a conversation, the request sent to
// a model, the events a model streams back, token usage, and the one error type for upstream failures.
// Each provider adapter (llm/openai, …) translates between this vocabulary and its own wire protocol; no
// provider type crosses that boundary.
//
// This package imports only the standard library.
package llm

import (
	"context"
	"encoding/json"
	"iter"
)

// Provider streams one model call. It is the only thing the agent loop needs from a provider.
//
// The stream is pull-based: breaking out of the loop closes the upstream connection. A yielded error is
// terminal; it is an *Error when the failure is the provider's (HTTP status, in-band error, broken stream).
type Provider interface {
	Stream(ctx context.Context, req *Request) iter.Seq2[Event, error]
}

// Role is who speaks a message.
type Role string

// Roles of a message.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one message of the conversation sent to a model.
type Message struct {
	Role  Role
	Parts []Part
	// ToolCalls are the calls an assistant message made.
	ToolCalls []ToolCall
	// ToolCallID, ToolName and IsError describe a tool message: the result of one call.
	ToolCallID string
	ToolName   string
	IsError    bool
}

// Text returns the concatenated text parts of m.
func (m *Message) Text() string {
	if len(m.Parts) == 1 && m.Parts[0].Kind == PartText {
		return m.Parts[0].Text
	}
	var s string
	for _, p := range m.Parts {
		if p.Kind == PartText {
			s += p.Text
		}
	}
	return s
}

// TextMessage returns a message of one text part.
func TextMessage(role Role, text string) Message {
	return Message{Role: role, Parts: []Part{{Kind: PartText, Text: text}}}
}

// PartKind says what a Part holds.
type PartKind uint8

// Kinds of parts.
const (
	PartText      PartKind = iota + 1 // Text
	PartImage                         // MediaType and Data
	PartReasoning                     // Text: the model's thinking, sent back only where the provider wants it
)

// Part is one piece of a message's content.
type Part struct {
	Kind      PartKind
	Text      string
	MediaType string
	Data      []byte
}

// ToolCall is one call of a tool by the model. Arguments is the JSON object of its arguments.
type ToolCall struct {
	ID        string
	Name      string
	Arguments json.RawMessage
}

// ToolSpec declares a tool to the model.
type ToolSpec struct {
	Name        string
	Description string
	InputSchema json.RawMessage // a JSON Schema object
}

// ToolChoice says whether the model may or must call tools.
type ToolChoice string

// Tool choices. The empty choice is the provider's default (auto).
const (
	ToolChoiceAuto ToolChoice = "auto"
	ToolChoiceNone ToolChoice = "none"
)

// Request is one model call.
type Request struct {
	Model       string // the provider's model name, without the "provider/" prefix
	System      string
	Messages    []Message
	Tools       []ToolSpec
	ToolChoice  ToolChoice
	Temperature *float64
	MaxTokens   int // 0: the provider's default
}

// EventKind says what an Event carries.
type EventKind uint8

// Kinds of streamed events.
const (
	// EventText carries Text, a fragment of the answer.
	EventText EventKind = iota + 1
	// EventReasoning carries Text, a fragment of the model's thinking.
	EventReasoning
	// EventToolCallDelta carries Index and a fragment of one tool call: ID and Name when the provider
	// sends them (usually once, in the first fragment), and Text, a fragment of the JSON arguments split
	// at an arbitrary point.
	EventToolCallDelta
	// EventToolCallEnd says the tool call at Index has all its arguments.
	EventToolCallEnd
	// EventUsage carries Usage for the whole call; it may come before or after EventFinish.
	EventUsage
	// EventFinish carries FinishReason. Events may still follow (usage).
	EventFinish
)

// Event is one step of a streamed model call.
type Event struct {
	Kind         EventKind
	Text         string
	Index        int
	ID           string
	Name         string
	Usage        Usage
	FinishReason FinishReason
}

// FinishReason says why the model stopped.
type FinishReason string

// Finish reasons, normalized across providers.
const (
	FinishStop          FinishReason = "stop"
	FinishToolCalls     FinishReason = "tool_calls"
	FinishLength        FinishReason = "length"
	FinishContentFilter FinishReason = "content_filter"
)

// Usage counts the tokens of one model call.
type Usage struct {
	InputTokens      int64
	OutputTokens     int64
	CacheReadTokens  int64
	CacheWriteTokens int64
	ReasoningTokens  int64
}

// Add adds v to u.
func (u *Usage) Add(v Usage) {
	u.InputTokens += v.InputTokens
	u.OutputTokens += v.OutputTokens
	u.CacheReadTokens += v.CacheReadTokens
	u.CacheWriteTokens += v.CacheWriteTokens
	u.ReasoningTokens += v.ReasoningTokens
}

// IsZero reports whether u counts nothing.
func (u Usage) IsZero() bool { return u == Usage{} }
