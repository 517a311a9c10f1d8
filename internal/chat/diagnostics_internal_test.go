package chat

import (
	"strconv"
	"testing"

	"chatd/internal/agent"
	"chatd/internal/llm"
)

// TestDiagnosticsBounds: the kept diagnostics are bounded by count and by attachment bytes, oldest
// first, and the latest run's are always kept.
func TestDiagnosticsBounds(t *testing.T) {
	var g diagnostics
	add := func(id string, bytes int) {
		e := &diagEntry{user: "u", d: Diagnostics{RunID: id}}
		g.mu.Lock()
		if g.runs == nil {
			g.runs = map[string]*diagEntry{}
		}
		g.runs[id] = e
		g.order = append(g.order, id)
		g.evict()
		g.mu.Unlock()
		req := &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Parts: []llm.Part{{Data: make([]byte, bytes)}}}}}
		g.sending(e)(agent.Model{Name: "m", ProviderName: "p"}, req)
	}
	for i := range keptDiagnostics + 10 {
		add("r"+strconv.Itoa(i), 0)
	}
	if len(g.runs) != keptDiagnostics || g.runs["r9"] != nil || g.runs["r10"] == nil {
		t.Fatalf("kept %d runs (r9 %v, r10 %v), want the last %d", len(g.runs), g.runs["r9"] != nil, g.runs["r10"] != nil, keptDiagnostics)
	}
	add("big1", keptDiagnosticsBytes/2)
	add("big2", keptDiagnosticsBytes/2)
	if g.runs["big1"] == nil || g.runs["big2"] == nil || g.bytes != keptDiagnosticsBytes {
		t.Fatalf("two halves of the budget: kept big1 %v big2 %v, %d bytes", g.runs["big1"] != nil, g.runs["big2"] != nil, g.bytes)
	}
	add("big3", 1)
	if g.runs["big1"] != nil || g.runs["big2"] == nil || g.bytes != keptDiagnosticsBytes/2+1 {
		t.Fatalf("over the budget: kept big1 %v big2 %v, %d bytes", g.runs["big1"] != nil, g.runs["big2"] != nil, g.bytes)
	}
	add("huge", 2*keptDiagnosticsBytes)
	if len(g.runs) != 1 || g.runs["huge"] == nil || g.bytes != 2*keptDiagnosticsBytes {
		t.Fatalf("one request over the whole budget: kept %d runs, %d bytes; want only it", len(g.runs), g.bytes)
	}
}
