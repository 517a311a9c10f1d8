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
	"time"
)

// Provider streams one model call. It is the only thing the agent loop needs from a provider.
//
// The stream is pull-based: breaking out of the loop closes the upstream connection. A yielded error is
// terminal; it is an *Error when the failure is the provider's (HTTP status, in-band error, broken stream).
type Provider interface {
	Stream(ctx context.Context, req *Request) iter.Seq2[Event, error]
}

// Patient is the optional capability of a provider whose calls are configured to wait for a model
// longer than usual (a slow local server): Patience is the longest its own timeouts let a call go
// without a byte, which a caller's idle limit should not undercut.
type Patient interface {
	Patience() time.Duration
}

// ModelLister is the optional capability of a provider whose API lists its models.
type ModelLister interface {
	// Models returns the provider's model names, without the "provider/" prefix.
	Models(ctx context.Context) ([]string, error)
}

// Encoder is the optional capability of a provider that can show the body it would send for a request:
// the diagnostics view, and the tests that hold a request to a provider's rules. Its Stream hands the
// body it sends to the request's Encoded hook, when one is set.
type Encoder interface {
	Encode(req *Request) ([]byte, error)
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
	// Origin names the model that wrote an assistant message, as Origin(provider, model): the
	// provider's configured name and its model name. Signatures, item ids and redacted reasoning are
	// sent back only to that provider and model (encrypted reasoning is bound to the model that wrote
	// it); any other drops them, and the reasoning with them.
	Origin string
	// Cache asks the provider to cache the prompt up to and including this message (Anthropic's
	// cache_control breakpoint). Providers that cache on their own, or not at all, ignore it.
	Cache bool
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

// Origin is the Message.Origin of a message written by model (the provider's own model name) of the
// provider configured as provider.
func Origin(provider, model string) string { return provider + "/" + model }

// TextMessage returns a message of one text part.
func TextMessage(role Role, text string) Message {
	return Message{Role: role, Parts: []Part{{Kind: PartText, Text: text}}}
}

// PartKind says what a Part holds.
type PartKind uint8

// Kinds of parts.
const (
	PartText      PartKind = iota + 1 // Text; Signature when the provider signed it (Gemini)
	PartImage                         // MediaType and Data
	PartReasoning                     // Text: the model's thinking; Signature and ID when the provider sent them
	// PartRedactedReasoning is thinking the provider returned encrypted (Anthropic's redacted_thinking):
	// Signature holds the opaque data, to be sent back verbatim.
	PartRedactedReasoning
)

// Part is one piece of a message's content.
type Part struct {
	Kind      PartKind
	Text      string
	MediaType string
	Data      []byte
	// Signature is the provider's opaque token for the part, sent back verbatim on later turns:
	// Anthropic's thinking signature, Gemini's thoughtSignature, the encrypted_content of an OpenAI
	// Responses reasoning item, or the data of redacted thinking.
	Signature string
	// ID is the provider's id of the item the part belongs to (an OpenAI Responses reasoning item,
	// "rs_…"); consecutive parts with one ID are one item.
	ID string
}

// HasReplay reports whether the part carries something only its provider can read back.
func (p *Part) HasReplay() bool {
	return p.Signature != "" || p.ID != "" || p.Kind == PartRedactedReasoning
}

// ToolCall is one call of a tool by the model. Arguments is the JSON object of its arguments.
type ToolCall struct {
	ID        string
	Name      string
	Arguments json.RawMessage
	// Signature is the provider's opaque token for the call (Gemini's thoughtSignature on a
	// functionCall part), sent back verbatim with the call.
	Signature string
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
	ToolChoiceAuto     ToolChoice = "auto"
	ToolChoiceNone     ToolChoice = "none"
	ToolChoiceRequired ToolChoice = "required" // the model must call at least one tool
)

// Request is one model call.
type Request struct {
	Model       string // the provider's model name, without the "provider/" prefix
	System      string
	Messages    []Message
	Tools       []ToolSpec
	ToolChoice  ToolChoice
	Temperature *float64
	// MaxTokens bounds the whole output, thinking included; 0: the provider's default (Anthropic,
	// which needs one: 8192, or the thinking budget plus 8192 capped at 64000 when thinking is on).
	MaxTokens int
	// Reasoning asks a reasoning model to think, and to stream its thinking where the API can. nil:
	// the provider's default (Anthropic and Gemini 2.5 Flash: no thinking).
	Reasoning *Reasoning
	// CacheSystem and CacheTools ask for a cache breakpoint after the system prompt and after the tool
	// declarations; Message.Cache places one after a message. See Message.Cache.
	CacheSystem bool
	CacheTools  bool
	// Encoded, when set, is handed the body a provider that is an Encoder encodes for this request,
	// once per Stream call, before it sends it: what the upstream receives, byte for byte, without
	// encoding the request a second time. The bytes are the provider's; neither it nor the hook may
	// change them afterwards (the hook may keep them). A provider whose Stream fails before it has a
	// body does not call it. The hook is not part of what is sent (nor of any JSON of a Request).
	Encoded func(body []byte) `json:"-"`
}

// Reasoning configures a model's thinking. Each adapter maps what its API has: Effort for OpenAI
// ("low", "medium", "high") and Gemini 3 (thinkingLevel), BudgetTokens for Anthropic and Gemini 2.5;
// an adapter given only one derives the other.
type Reasoning struct {
	Effort       string
	BudgetTokens int
}

// EventKind says what an Event carries.
type EventKind uint8

// Kinds of streamed events.
const (
	// EventText carries Text, a fragment of the answer. Signature, when set, belongs to the text part
	// being streamed (Gemini signs text parts); Text may then be empty.
	EventText EventKind = iota + 1
	// EventReasoning carries Text, a fragment of the model's thinking. Signature and ID, when set,
	// belong to the reasoning part being streamed.
	EventReasoning
	// EventReasoningEnd ends the reasoning part being streamed: the next reasoning fragment starts a
	// new part. Signature and ID, when set, are the part's (Anthropic sends the signature last; an
	// OpenAI Responses reasoning item may have no text at all, only encrypted content). With Redacted,
	// it is a whole part of redacted thinking whose opaque data is Signature.
	EventReasoningEnd
	// EventToolCallDelta carries Index and a fragment of one tool call: ID and Name when the provider
	// sends them (usually once, in the first fragment), Text, a fragment of the JSON arguments split
	// at an arbitrary point, and the call's Signature when the provider signs calls (Gemini).
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
	Signature    string
	Redacted     bool
}

// FinishReason says why the model stopped.
type FinishReason string

// Finish reasons, normalized across providers.
const (
	FinishStop          FinishReason = "stop"
	FinishToolCalls     FinishReason = "tool_calls"
	FinishLength        FinishReason = "length"
	FinishContentFilter FinishReason = "content_filter" // also refusals and safety stops
	// FinishPause: the provider paused a long turn (Anthropic's pause_turn); sending the partial
	// answer back as the last message lets it continue.
	FinishPause FinishReason = "pause"
)

// Usage counts the tokens of one model call. InputTokens counts the whole prompt, cached or not
// (OpenAI's convention; adapters of APIs that count cache reads and writes apart add them in);
// CacheReadTokens and CacheWriteTokens say how much of it was read from or written to the cache.
// ReasoningTokens is the part of OutputTokens spent thinking, when the API reports it.
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
