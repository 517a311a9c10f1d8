package llm

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCollectorInterleavedCalls: fragments of parallel calls may interleave (as some OpenAI-compatible
// servers send them); each call keeps its own.
func TestCollectorInterleavedCalls(t *testing.T) {
	var c Collector
	for _, ev := range []Event{
		{Kind: EventToolCallDelta, Index: 0, ID: "a", Name: "f", Text: `{"x":`},
		{Kind: EventToolCallDelta, Index: 1, ID: "b", Name: "g", Text: `{"y":`},
		{Kind: EventToolCallDelta, Index: 0, Text: `1}`},
		{Kind: EventToolCallDelta, Index: 1, Text: `2}`, Signature: "s"},
		{Kind: EventToolCallDelta, Index: 3, ID: "d", Name: "h", Text: `{}`},
	} {
		c.Add(ev)
	}
	m := c.Message()
	got := ""
	for _, tc := range m.ToolCalls {
		got += tc.ID + tc.Name + string(tc.Arguments) + tc.Signature + ";"
	}
	if want := `af{"x":1};bg{"y":2}s;;dh{};`; got != want {
		t.Errorf("calls = %s, want %s", got, want)
	}
}

// TestCollectorParts: kinds switch parts; an end closes a reasoning part; a redacted part stands alone.
func TestCollectorParts(t *testing.T) {
	var c Collector
	for _, ev := range []Event{
		{Kind: EventReasoning, Text: "a"}, {Kind: EventReasoning, Text: "b"}, {Kind: EventReasoningEnd, Signature: "s1"},
		{Kind: EventReasoning, Text: "c"}, {Kind: EventReasoningEnd},
		{Kind: EventReasoningEnd, Redacted: true, Signature: "r"},
		{Kind: EventReasoningEnd, Signature: "enc", ID: "rs_1"},
		{Kind: EventText, Text: "x"}, {Kind: EventText, Signature: "t"},
	} {
		c.Add(ev)
	}
	want := []Part{
		{Kind: PartReasoning, Text: "ab", Signature: "s1"}, {Kind: PartReasoning, Text: "c"},
		{Kind: PartRedactedReasoning, Signature: "r"}, {Kind: PartReasoning, Signature: "enc", ID: "rs_1"},
		{Kind: PartText, Text: "x", Signature: "t"},
	}
	if diff := cmp.Diff(want, c.Parts()); diff != "" {
		t.Errorf("parts (-want +got):\n%s", diff)
	}
	if c.Text() != "x" || c.Reasoning() != "abc" {
		t.Errorf("text %q reasoning %q", c.Text(), c.Reasoning())
	}
}
