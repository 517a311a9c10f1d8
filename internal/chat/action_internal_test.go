package chat

import (
	"encoding/json"
	"testing"
)

// TestCanonicalData: an action's data matches the suggestion's however the client encoded it again —
// keys reordered, spacing, 1.0 written as 1, null or nothing for {} — and nothing else does.
func TestCanonicalData(t *testing.T) {
	same := [][2]string{
		{`{"a": 1.0, "b": [true, {"c": "x"}]}`, `{"b":[true,{"c":"x"}],"a":1}`},
		{`{"s": "\u00e9<"}`, `{"s":"é<"}`},
		{``, `{}`},
		{`null`, `{}`},
	}
	for _, tt := range same {
		a, okA := canonicalData(json.RawMessage(tt[0]))
		b, okB := canonicalData(json.RawMessage(tt[1]))
		if !okA || !okB || a != b {
			t.Errorf("%s and %s: %q, %q", tt[0], tt[1], a, b)
		}
	}
	for _, tt := range [][2]string{{`{"a":1}`, `{"a":2}`}, {`{"a":1}`, `{"a":1,"b":null}`}, {`{"a":"1"}`, `{"a":1}`}, {`{}`, `[]`}} {
		a, _ := canonicalData(json.RawMessage(tt[0]))
		b, _ := canonicalData(json.RawMessage(tt[1]))
		if a == b {
			t.Errorf("%s and %s match", tt[0], tt[1])
		}
	}
}
