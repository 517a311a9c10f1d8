package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// Payload is structured data a conversation produced for the user to see: a tool's result payload (MCP
// structuredContent), or a block an answer carried after a payload marker. Each has an id the model can
// name (get_payload) and a one-line summary for the payload manifest.
type Payload struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"` // the payload type's name; a tool's name for a tool payload
	Summary string          `json:"summary"`
	Data    json.RawMessage `json:"data"`
	// Source is "tool" or "marker"; ToolCallID names the call of a tool payload.
	Source     string `json:"source"`
	ToolCallID string `json:"tool_call_id,omitempty"`
}

// Payload sources.
const (
	PayloadTool   = "tool"
	PayloadMarker = "marker"
)

// PayloadID is the id of payload n of the record with id recordID: short, so that the model's manifest
// stays small, and the same every time it is derived.
func PayloadID(recordID string, n int) string {
	h := sha256.Sum256([]byte(recordID + "/" + strconv.Itoa(n)))
	return "pl_" + hex.EncodeToString(h[:5])
}

// RecordPayloads returns the payloads r carries: a tool record's payload, or an assistant record's
// marker payloads; nil for any other.
func RecordPayloads(r *Record) []Payload {
	if r.Role == RoleTool && len(r.Payload) > 0 {
		return []Payload{{ID: PayloadID(r.ID, 0), Type: r.Name, Summary: r.Name + " returned " + DescribeJSON(r.Payload),
			Data: r.Payload, Source: PayloadTool, ToolCallID: r.ToolCallID}}
	}
	return r.Payloads
}

// DescribeJSON says in a few words what a JSON value holds: "an object with keys a, b, c", "a list of
// 12 items", or its title when it has a string "title", "name" or "summary".
func DescribeJSON(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return "a value"
	}
	switch v := v.(type) {
	case map[string]any:
		for _, k := range []string{"summary", "title", "name"} {
			if s, ok := v[k].(string); ok && strings.TrimSpace(s) != "" {
				return oneLine(s)
			}
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if len(keys) > 8 {
			keys = append(keys[:8], "…")
		}
		return "an object with keys " + strings.Join(keys, ", ")
	case []any:
		if len(v) == 1 {
			return "a list of 1 item"
		}
		return "a list of " + strconv.Itoa(len(v)) + " items"
	case string:
		return "a string"
	default:
		return "a value"
	}
}

// oneLine is s on one line, at most 120 bytes (cut at a character boundary).
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= 120 {
		return s
	}
	cut := 120
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

// Parsed is how a record's SuggestedValues, SuggestedActions, Payloads and RawContent are stored: one
// JSON object, in the records' parsed column.
type Parsed struct {
	SuggestedValues  json.RawMessage `json:"suggested_values,omitempty"`
	SuggestedActions json.RawMessage `json:"suggested_actions,omitempty"`
	Payloads         []Payload       `json:"payloads,omitempty"`
	RawContent       string          `json:"raw_content,omitempty"`
}

// EncodeParsed returns r's parsed column: nil when r carries none of it.
func EncodeParsed(r *Record) ([]byte, error) {
	if r.SuggestedValues == nil && r.SuggestedActions == nil && r.Payloads == nil && r.RawContent == "" {
		return nil, nil
	}
	return json.Marshal(Parsed{SuggestedValues: r.SuggestedValues, SuggestedActions: r.SuggestedActions,
		Payloads: r.Payloads, RawContent: r.RawContent})
}

// DecodeParsed sets r's fields from its parsed column (nil: none).
func DecodeParsed(r *Record, b []byte) error {
	if b == nil {
		return nil
	}
	var p Parsed
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	r.SuggestedValues, r.SuggestedActions, r.Payloads, r.RawContent = p.SuggestedValues, p.SuggestedActions, p.Payloads, p.RawContent
	return nil
}
