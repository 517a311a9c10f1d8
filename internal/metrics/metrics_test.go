package metrics

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestBoundedLabels: a label fed from requests (a tool's name) keeps its first maxValues values and
// counts the rest as other, so that no client can grow the series without bound; no value is longer
// than MaxLabelBytes.
func TestBoundedLabels(t *testing.T) {
	m := New()
	for i := range maxValues + 50 {
		m.ToolCall(fmt.Sprintf("tool%d", i), true, time.Second)
	}
	m.ToolCall("tool0", true, time.Second)
	if n := testutil.CollectAndCount(m.toolCalls); n != maxValues+1 {
		t.Errorf("%d series of chatd_tool_calls_total, want %d and other", n, maxValues+1)
	}
	if got := testutil.ToFloat64(m.toolCalls.WithLabelValues(Other, "success")); got != 50 {
		t.Errorf("other = %v, want 50", got)
	}
	if got := testutil.ToFloat64(m.toolCalls.WithLabelValues("tool0", "success")); got != 2 {
		t.Errorf("a value seen first still counts as itself: %v, want 2", got)
	}
	long := strings.Repeat("é", 20000)
	if got := (&bounded{seen: map[string]bool{}}).value(long); len(got) > MaxLabelBytes || !utf8.ValidString(got) {
		t.Errorf("a 40 KB value is kept as %d bytes (valid UTF-8: %v), want at most %d", len(got), utf8.ValidString(got), MaxLabelBytes)
	}
}

// TestModelLabels: only configured models have a label of their own. A client that names a thousand
// invented models of a configured provider adds one series (other), and a configured model named
// after them still counts as itself.
func TestModelLabels(t *testing.T) {
	m := New()
	m.KnownModels("openai/gpt-4o-mini", "openai/gpt-4o")
	for i := range 1000 {
		m.Tokens(fmt.Sprintf("openai/invented-%d-%s", i, strings.Repeat("x", 20000)), Usage{Input: 1})
		m.RunStarted("default", fmt.Sprintf("openai/invented-%d", i)).Ended("completed", time.Second)
	}
	m.Tokens("openai/gpt-4o", Usage{Input: 1})
	m.RunStarted("default", "openai/gpt-4o").Ended("completed", time.Second)
	if got := testutil.ToFloat64(m.tokens.WithLabelValues("openai/gpt-4o", "input")); got != 1 {
		t.Errorf("a configured model after 1,000 invented ones: %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.tokens.WithLabelValues(Other, "input")); got != 1000 {
		t.Errorf("other = %v, want 1000", got)
	}
	if n := testutil.CollectAndCount(m.tokens); n != 2 {
		t.Errorf("%d series of chatd_tokens_total, want 2", n)
	}
	if n := testutil.CollectAndCount(m.runsEnded); n != 2 {
		t.Errorf("%d series of chatd_runs_ended_total, want 2", n)
	}
}

// TestNil: a nil *Metrics, and what it returns, record nothing and do not panic.
func TestNil(t *testing.T) {
	var m *Metrics
	m.StreamOpened()
	m.StreamClosed()
	m.SlowReader()
	m.ModelCall("openai", "openai/x", time.Second, "rate_limit")
	m.ModelRetry("openai", "openai/x")
	m.ModelFallback("openai", "openai/x")
	m.Tokens("openai/x", Usage{Input: 1})
	m.ToolCall("t", true, time.Second)
	m.EventLogBatch(1, time.Second)
	m.StoreOp("op", time.Second)
	m.Func("x", "x", func() float64 { return 0 })
	m.MCP(nil, nil)
	r := m.RunStarted("default", "openai/x")
	r.FirstToken(time.Second)
	r.Ended("completed", time.Second)
	m.Route("GET /x").Observe(200, time.Second)
}
