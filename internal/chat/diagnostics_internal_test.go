package chat

import (
	"strconv"
	"strings"
	"testing"

	"chatd/internal/agent"
	"chatd/internal/llm"
)

// TestDiagnosticsBounds: the kept diagnostics are bounded by count and by the bytes of their requests
// (text as well as attachments), oldest first; the latest run's are always kept, but a request over a
// quarter of the limit is not: its diagnostics say it was omitted.
func TestDiagnosticsBounds(t *testing.T) {
	const limit = 4 << 20
	g := diagnostics{limit: limit}
	add := func(id string, data, text int) *diagEntry {
		e := &diagEntry{user: "u", d: Diagnostics{RunID: id}}
		g.mu.Lock()
		if g.runs == nil {
			g.runs = map[string]*diagEntry{}
		}
		g.runs[id] = e
		g.order = append(g.order, id)
		g.evict()
		g.mu.Unlock()
		req := &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Parts: []llm.Part{{Data: make([]byte, data)},
			{Kind: llm.PartText, Text: strings.Repeat("x", text)}}}}}
		g.sending(e)(agent.Model{Name: "m", ProviderName: "p"}, req)
		return e
	}
	for i := range keptDiagnostics + 10 {
		add("r"+strconv.Itoa(i), 0, 0)
	}
	if len(g.runs) != keptDiagnostics || g.runs["r9"] != nil || g.runs["r10"] == nil {
		t.Fatalf("kept %d runs (r9 %v, r10 %v), want the last %d", len(g.runs), g.runs["r9"] != nil, g.runs["r10"] != nil, keptDiagnostics)
	}
	for i := range 4 {
		add("big"+strconv.Itoa(i), limit/8, limit/8) // a quarter each: half attachments, half text
	}
	if g.bytes != limit || len(g.runs) < 4 {
		t.Fatalf("four quarters of the budget: %d runs, %d bytes", len(g.runs), g.bytes)
	}
	add("text", 0, 1)
	if g.runs["big0"] != nil || g.runs["big1"] == nil || g.bytes != 3*limit/4+1 {
		t.Fatalf("over the budget: kept big0 %v big1 %v, %d bytes", g.runs["big0"] != nil, g.runs["big1"] != nil, g.bytes)
	}
	huge := add("huge", 0, limit)
	if huge.req.Messages != nil || huge.d.RequestOmitted == "" || g.runs["huge"] == nil || g.bytes > limit {
		t.Fatalf("a request over a quarter of the budget: kept %d messages, omitted %q, %d bytes kept", len(huge.req.Messages), huge.d.RequestOmitted, g.bytes)
	}
}
