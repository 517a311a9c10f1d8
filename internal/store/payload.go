package store

import (
	"bytes"
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
		return []Payload{{ID: PayloadID(r.ID, 0), Type: r.Name, Summary: ToolPayloadSummary(r.Name, r.Payload),
			Data: r.Payload, Source: PayloadTool, ToolCallID: r.ToolCallID}}
	}
	return r.Payloads
}

// CountPayloads is len(RecordPayloads(r)), without describing any.
func CountPayloads(r *Record) int {
	if r.Role == RoleTool && len(r.Payload) > 0 {
		return 1
	}
	return len(r.Payloads)
}

// ToolPayloadSummary is the summary of a payload the tool called name returned.
func ToolPayloadSummary(name string, data json.RawMessage) string {
	return name + " returned " + DescribeJSON(data)
}

// DescribeJSON says in a few words what shape a JSON value has: "an object with keys a, b, c", "a list
// of 12 items", "a string". It repeats nothing the value says: a summary goes into the system prompt's
// payload manifest, and text a tool or a model wrote must not become instructions there. Of an
// object's keys only those that look like identifiers (at most 40 letters, digits, _, - and .) are
// named; the others are counted. It reads the value without decoding it, so that describing a large
// payload costs one pass over its bytes and no allocation for its content.
func DescribeJSON(raw json.RawMessage) string {
	b := bytes.TrimLeft(raw, " \t\r\n")
	if len(b) == 0 {
		return "a value"
	}
	switch b[0] {
	case '{':
		keys, n, ok := scanTop(b)
		if !ok {
			return "a value"
		}
		if n == 0 {
			return "an empty object"
		}
		slices.Sort(keys)
		keys = slices.Compact(keys)
		other := max(n-len(keys), 0)
		if len(keys) > 8 {
			other += len(keys) - 8
			keys = keys[:8]
		}
		switch {
		case len(keys) == 0:
			return "an object with " + plural(other, "key")
		case other > 0:
			return "an object with keys " + strings.Join(keys, ", ") + " and " + plural(other, "other key")
		}
		return "an object with keys " + strings.Join(keys, ", ")
	case '[':
		_, n, ok := scanTop(b)
		if !ok {
			return "a value"
		}
		return "a list of " + plural(n, "item")
	case '"':
		return "a string"
	}
	return "a value"
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// scanTop reads the object or array b starts with: the number of its members (keys or items) and, of
// an object, its keys that look like identifiers. It reports false when b does not begin with a whole
// object or array.
func scanTop(b []byte) (keys []string, n int, ok bool) {
	object := b[0] == '{'
	depth, inString, escaped := 0, false, false
	member := false // a member of the top level has begun since the last separator
	keyStart := -1  // where the key being read begins, after its quote
	for i, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
				if keyStart >= 0 {
					if k := b[keyStart:i]; identifierKey(k) {
						keys = append(keys, string(k))
					}
					keyStart = -1
				}
			}
			continue
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '"':
			inString = true
			if depth == 1 && object && !member {
				keyStart = i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				if member {
					n++
				}
				return keys, n, true
			}
		case ',':
			if depth == 1 {
				n++
				member = false
				continue
			}
		}
		if depth == 1 && i > 0 {
			member = true
		}
	}
	return nil, 0, false
}

// identifierKey reports whether an object's key may be named in a summary: a short identifier.
func identifierKey(k []byte) bool {
	if len(k) == 0 || len(k) > 40 {
		return false
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
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
	// Without HTML escaping: the bytes stored are the bytes the run that stored them keeps (a payload's
	// Data goes to a model as it is; its next run here and a run reading the store must send the same).
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(Parsed{SuggestedValues: r.SuggestedValues, SuggestedActions: r.SuggestedActions,
		Payloads: r.Payloads, RawContent: r.RawContent}); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
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
