package metrics

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestBoundedLabels: a label fed from requests keeps its first maxValues values and counts the rest as
// other, so that no client can grow the series without bound.
func TestBoundedLabels(t *testing.T) {
	m := New()
	for i := range maxValues + 50 {
		m.Tokens(fmt.Sprintf("openai/m%d", i), Usage{Input: 1})
	}
	m.Tokens("openai/m0", Usage{Input: 1})
	if n := testutil.CollectAndCount(m.tokens); n != maxValues+1 {
		t.Errorf("%d series of chatd_tokens_total, want %d and other", n, maxValues+1)
	}
	if got := testutil.ToFloat64(m.tokens.WithLabelValues(Other, "input")); got != 50 {
		t.Errorf("other = %v, want 50", got)
	}
	if got := testutil.ToFloat64(m.tokens.WithLabelValues("openai/m0", "input")); got != 2 {
		t.Errorf("a value seen first still counts as itself: %v, want 2", got)
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
