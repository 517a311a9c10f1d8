package chat

import (
	"encoding/json"
	"unicode/utf8"

	"chatd/internal/store"
)

// Run event types (PRODUCT.md, "Run events").
const (
	EventRunStart       = "run_start"
	EventStatus         = "status"
	EventTextDelta      = "text_delta"
	EventReasoningDelta = "reasoning_delta"
	EventToolCallDelta  = "tool_call_delta"
	EventToolStart      = "tool_start"
	EventToolProgress   = "tool_progress"
	EventToolComplete   = "tool_complete"
	EventRecord         = "record"
	EventUsage          = "usage"
	EventComplete       = "complete"
	EventError          = "error"
	EventCancelled      = "cancelled"
	EventDone           = "done"
)

type runStartData struct {
	RunID     string `json:"run_id"`
	SessionID string `json:"session_id"`
	Model     string `json:"model"`
	Agent     string `json:"agent"`
}

type toolCallDeltaData struct {
	Index          int    `json:"index"`
	ID             string `json:"id"`
	Name           string `json:"name"`
	ArgumentsDelta string `json:"arguments_delta"`
}

type toolStartData struct {
	ToolCallID string          `json:"tool_call_id"`
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
}

type toolCompleteData struct {
	ToolCallID string          `json:"tool_call_id"`
	Name       string          `json:"name"`
	Success    bool            `json:"success"`
	Content    string          `json:"content"`
	DurationMS int64           `json:"duration_ms"`
	Payload    json.RawMessage `json:"payload,omitempty"`
}

type toolProgressData struct {
	ToolCallID string  `json:"tool_call_id"`
	Progress   float64 `json:"progress"`
	Total      float64 `json:"total,omitempty"`
	Message    string  `json:"message,omitempty"`
}

type recordData struct {
	Message *store.Record `json:"message"`
}

type usageData struct {
	Model string `json:"model"`
	store.Usage
}

type completeData struct {
	Message          *store.Record      `json:"message"`
	FinishReason     string             `json:"finish_reason"`
	Usage            store.Usage        `json:"usage"`
	ToolHistory      []ToolHistoryEntry `json:"tool_history"`
	SuggestedValues  []json.RawMessage  `json:"suggested_values"`
	SuggestedActions []json.RawMessage  `json:"suggested_actions"`
	Payloads         []json.RawMessage  `json:"payloads"`
}

type cancelledData struct {
	Reason string `json:"reason"`
}

type doneData struct {
	Status string `json:"status"`
}

// mustJSON encodes event data. The data types above always encode; a failure is a bug.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("chat: encode event: " + err.Error())
	}
	return b
}

// textData encodes {"<key>":"<text>"} with one allocation: the per-token path.
func textData(key, text string) []byte {
	b := make([]byte, 0, len(key)+len(text)+8+len(text)/8)
	b = append(b, `{"`...)
	b = append(b, key...)
	b = append(b, `":`...)
	b = appendString(b, text)
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, as with encoding/json; U+2028
// and U+2029 are escaped so the JSON is also safe inside JavaScript source.
func appendString(b []byte, s string) []byte {
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
