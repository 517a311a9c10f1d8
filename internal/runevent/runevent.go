// Package runevent is the schema of a run's events: their types, the data each carries, and their
// encoding. chat encodes events once, when a run emits them; the event log stores those bytes; the
// native SSE stream sends them as they are; the AI SDK converter, the batch endpoint and the tests
// decode them with the same types. The README's "Run events" section documents the shapes, and
// testdata/events.golden pins them.
//
// Record, Usage and ToolCall here are the API's shapes of a stored record and its parts: they appear in
// event data, which is encoded when a run emits it, and every route that returns records uses them too.
// They are converted from the store's types in one place (RecordOf), so a change of storage cannot change
// what clients see. This package imports only the standard library and store.
package runevent

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Event types, the `event:` of the SSE stream.
const (
	TypeRunStart       = "run_start"
	TypeStatus         = "status"
	TypeTextDelta      = "text_delta"
	TypeReasoningDelta = "reasoning_delta"
	TypeToolCallDelta  = "tool_call_delta"
	TypeToolStart      = "tool_start"
	TypeToolProgress   = "tool_progress"
	TypeToolComplete   = "tool_complete"
	TypeRecord         = "record"
	TypeUsage          = "usage"
	TypeComplete       = "complete"
	TypeError          = "error"
	TypeCancelled      = "cancelled"
	TypeDone           = "done"
	// A run that waits for a person: each call that waits, then the pause that ends this part of the
	// stream; each decision once it is made.
	TypeApprovalRequired = "approval_required"
	TypeAwaitingApproval = "awaiting_approval"
	TypeApprovalDecided  = "approval_decided"
)

// ApprovalRequired is a tool call that waits for a person's decision instead of running: it has no
// result until one is made (POST /v1/runs/{id}/approvals).
type ApprovalRequired struct {
	// Kind is "approval" (approve or deny the call) or "question" (ask_user: answer its questions,
	// which are its arguments).
	Kind       string          `json:"kind"`
	ToolCallID string          `json:"tool_call_id"`
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
	Reason     string          `json:"reason"`
	// Source is "mcp" for a question an MCP server asks while its tool runs (an elicitation): the run
	// stays running and waits for the answer in memory, on the instance that runs it. Its Message and
	// Fields say what the server asks; the answer is the values of the fields (decision answer, with
	// content). Empty for the model's calls that wait (approvals, ask_user).
	Source  string  `json:"source,omitempty"`
	Message string  `json:"message,omitempty"`
	Fields  []Field `json:"fields,omitempty"`
	// ExpiresAt, for a question from an MCP server, is when it is declined if nobody has answered.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Field is one value an MCP server's question asks for: a property of its requested schema.
type Field struct {
	Name        string `json:"name"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	// Type is string, number, integer, boolean or array (several of Choices: Multiple is set).
	Type     string `json:"type"`
	Format   string `json:"format,omitempty"` // a string's: email, uri, date or date-time
	Required bool   `json:"required,omitempty"`
	// Default is the value the form starts with, as the server gave it.
	Default  json.RawMessage `json:"default,omitempty"`
	Choices  []Choice        `json:"choices,omitempty"`
	Multiple bool            `json:"multiple,omitempty"`
	Minimum  *float64        `json:"minimum,omitempty"`
	Maximum  *float64        `json:"maximum,omitempty"`
	// MinLength and MaxLength bound a string's characters; MinItems and MaxItems an array's choices.
	MinLength *int `json:"min_length,omitempty"`
	MaxLength *int `json:"max_length,omitempty"`
	MinItems  *int `json:"min_items,omitempty"`
	MaxItems  *int `json:"max_items,omitempty"`
}

// Choice is one value a field may take, and what a person reads for it.
type Choice struct {
	Value string `json:"value"`
	Label string `json:"label"`
}

// AwaitingApproval ends the part of a run's stream before a pause: the run's status is now
// awaiting_approval, it runs nowhere, and its log goes on (the next Seq) once every call it waits for
// is decided, or it is cancelled, or it expires (ExpiresAt) with every open call denied.
type AwaitingApproval struct {
	Calls     []ApprovalRequired `json:"calls"`
	ExpiresAt time.Time          `json:"expires_at"`
}

// ApprovalDecided is a decision on a call that waited: approve (with the arguments it runs with),
// deny (with the reason the model is told) or answer (a question's answers, in order). For a question
// from an MCP server (Source "mcp") it is answer with Content (the values sent to the server), deny
// (declined), or cancel: nobody answered before the call, or the run, ended or the wait expired.
type ApprovalDecided struct {
	ToolCallID string          `json:"tool_call_id"`
	Decision   string          `json:"decision"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	Answers    []string        `json:"answers,omitempty"`
	Source     string          `json:"source,omitempty"`
	Content    json.RawMessage `json:"content,omitempty"`
	// DecidedBy is the admin who decided for the run's owner; "" when the owner decided (or it expired).
	DecidedBy string `json:"decided_by,omitempty"`
}

// RunStart is the first event of a run.
type RunStart struct {
	RunID     string `json:"run_id"`
	SessionID string `json:"session_id"`
	Model     string `json:"model"`
	Agent     string `json:"agent"`
	// Action says the run is a server action's (POST /v1/sessions/{id}/actions): it runs one tool,
	// calls no model, and cannot be regenerated.
	Action bool `json:"action,omitempty"`
}

// Status is a line of progress for the user ("Thinking…").
type Status struct {
	Message string `json:"message"`
}

// Text is the data of text_delta and reasoning_delta: the next piece of the answer or of its reasoning.
type Text struct {
	Text string `json:"text"`
}

// ToolCallDelta is a piece of a tool call as the model streams it. ID and Name are repeated on every
// piece of the call; ArgumentsDelta is the next piece of its JSON arguments.
type ToolCallDelta struct {
	Index          int    `json:"index"`
	ID             string `json:"id"`
	Name           string `json:"name"`
	ArgumentsDelta string `json:"arguments_delta"`
}

// ToolStart says a tool call is complete and starts to run.
type ToolStart struct {
	ToolCallID string          `json:"tool_call_id"`
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
}

// ToolProgress is a running tool's report.
type ToolProgress struct {
	ToolCallID string  `json:"tool_call_id"`
	Progress   float64 `json:"progress"`
	Total      float64 `json:"total,omitempty"`
	Message    string  `json:"message,omitempty"`
}

// ToolComplete is a tool call's result. Content is what the model is sent; Payload, when the tool
// returned one, is structured data for the client.
type ToolComplete struct {
	ToolCallID string          `json:"tool_call_id"`
	Name       string          `json:"name"`
	Success    bool            `json:"success"`
	Content    string          `json:"content"`
	DurationMS int64           `json:"duration_ms"`
	Payload    json.RawMessage `json:"payload,omitempty"`
}

// RecordEvent carries a record the moment it is stored.
type RecordEvent struct {
	Message *Record `json:"message"`
}

// UsageEvent is one model call's token counts.
type UsageEvent struct {
	Model string `json:"model"`
	Usage
}

// Complete ends a run that answered: its last assistant record, the run's total usage and every tool
// call it made. SuggestedValues and SuggestedActions are the last answer's; Payloads names the run's
// payloads (without their data, which the record events and the stored records carry: a run's tool
// payloads may be large). The three are always lists, empty when there is none.
type Complete struct {
	Message          *Record           `json:"message"`
	FinishReason     string            `json:"finish_reason"`
	Usage            Usage             `json:"usage"`
	ToolHistory      []ToolHistory     `json:"tool_history"`
	SuggestedValues  []SuggestedValue  `json:"suggested_values"`
	SuggestedActions []SuggestedAction `json:"suggested_actions"`
	Payloads         []Payload         `json:"payloads"`
}

// ToolHistory summarizes one tool call of a run.
type ToolHistory struct {
	ToolCallID string          `json:"tool_call_id"`
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
	Success    bool            `json:"success"`
	Content    string          `json:"content"`
	DurationMS int64           `json:"duration_ms"`
	Payload    json.RawMessage `json:"payload,omitempty"`
}

// Error is a run's failure, or a notice such as events_lost.
type Error struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

// Cancelled says why a run was cancelled.
type Cancelled struct {
	Reason string `json:"reason"`
}

// Done is the last event of every run.
type Done struct {
	Status string `json:"status"`
}

// Data is the set of event data types.
type Data interface {
	RunStart | Status | Text | ToolCallDelta | ToolStart | ToolProgress | ToolComplete | RecordEvent |
		UsageEvent | Complete | Error | Cancelled | Done | ApprovalRequired | AwaitingApproval | ApprovalDecided
}

// Encode returns an event's data as JSON. The types above always encode: a failure is a bug.
func Encode[T Data](d T) []byte {
	b, err := json.Marshal(d)
	if err != nil {
		panic("runevent: encode " + fmt.Sprintf("%T", d) + ": " + err.Error())
	}
	return b
}

// EncodeText returns {"text":…}, the data of a text or reasoning delta, with one allocation: the
// per-token path. It decodes as Encode(Text{text}) does; unlike encoding/json it leaves <, > and &
// unescaped.
func EncodeText(text string) []byte { return encodeString("text", text) }

// EncodeStatus returns {"message":…}, a status event's data, as EncodeText does.
func EncodeStatus(message string) []byte { return encodeString("message", message) }

// AppendText appends EncodeText(text) to b: a caller that keeps the data of many deltas in one buffer
// pays one allocation for many tokens.
func AppendText(b []byte, text string) []byte {
	b = append(b, `{"text":`...)
	b = AppendString(b, text)
	return append(b, '}')
}

// TextSize is about how many bytes AppendText appends for text: exact unless text needs escapes.
func TextSize(text string) int { return len(`{"text":""}`) + len(text) }

func encodeString(key, s string) []byte {
	b := make([]byte, 0, len(key)+len(s)+8+len(s)/8)
	b = append(b, `{"`...)
	b = append(b, key...)
	b = append(b, `":`...)
	b = AppendString(b, s)
	return append(b, '}')
}

// Decode decodes an event's data. An event whose data does not decode is an error: the log holds only
// what Encode wrote.
func Decode[T Data](data []byte) (T, error) {
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return v, fmt.Errorf("runevent: decode %T: %w", v, err)
	}
	return v, nil
}

// ErrNotText is returned by RawText for data that is not a text delta's.
var ErrNotText = errors.New("runevent: not a text delta's data")

// RawText returns the text of a text or reasoning delta's data as a JSON string, quotes included,
// ready to be copied into other JSON: for data EncodeText wrote (the log holds no other) it is a slice
// of data, with no decoding on the per-token path; other data is decoded and encoded again.
func RawText(data []byte) ([]byte, error) {
	const prefix, suffix = `{"text":"`, `"}`
	if n := len(data); n >= len(prefix)+len(suffix) && string(data[:len(prefix)]) == prefix &&
		string(data[n-len(suffix):]) == suffix && plainString(data[len(prefix)-1:n-1]) {
		return data[len(prefix)-1 : n-1], nil
	}
	t, err := Decode[Text](data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotText, err)
	}
	return AppendString(nil, t.Text), nil
}

// plainString reports whether s is one valid JSON string: quoted, no raw quote or control byte inside,
// every escape one JSON allows.
func plainString(s []byte) bool {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		switch c := s[i]; {
		case c == '"' || c < 0x20:
			return false
		case c == '\\':
			i++
			if i >= len(s)-1 {
				return false
			}
			switch s[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(s)-1 || !isHex(s[i+1]) || !isHex(s[i+2]) || !isHex(s[i+3]) || !isHex(s[i+4]) {
					return false
				}
				i += 4
			default:
				return false
			}
		}
	}
	return true
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, as with encoding/json; U+2028
// and U+2029 are escaped so the JSON is also safe inside JavaScript source.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
