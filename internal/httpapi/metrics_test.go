package httpapi_test

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"chatd/internal/auth"
	"chatd/internal/chat"
	"chatd/internal/httpapi"
	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
	"chatd/internal/metrics"
	"chatd/internal/store"
	"chatd/internal/store/sqlite"
)

// metricsEnv is a test server whose chat service and API count into one set of metrics, served at
// /metrics; its client keeps one connection, so that a request is counted (after its handler returns)
// before the next one on it is read.
type metricsEnv struct {
	*env
	m      *metrics.Metrics
	client *http.Client
}

func newMetricsEnv(t *testing.T, opts httpapi.Options, copts chat.Options, turns ...llmtest.Turn) *metricsEnv {
	t.Helper()
	e := &env{upstream: llmtest.NewServer(t, turns...)}
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "chatd.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.db = db
	m := metrics.New()
	copts.Metrics = m
	chats, tools := newChat(t, db, e.upstream, fixedNow, copts)
	e.chat = chats
	opts.Chat, opts.Store, opts.Tools, opts.Metrics, opts.ServeMetrics = chats, db, tools, m, true
	e.srv = httptest.NewServer(httpapi.New(opts))
	t.Cleanup(func() {
		e.srv.Close()
		closeChat(t, chats, tools)
		db.Close()
	})
	return &metricsEnv{env: e, m: m, client: &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}}
}

// request sends one request on the env's one connection and returns the response's body.
func (e *metricsEnv) request(t *testing.T, method, path, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(raw)
}

// scrape reads /metrics with the Prometheus text parser.
func (e *metricsEnv) scrape(t *testing.T, header ...string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, body := e.request(t, "GET", "/metrics", "", header...)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %s %.200s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value returns the value of the family's series with exactly these labels (a counter's or gauge's
// value, a histogram's count), and whether there is one.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
series:
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		for _, l := range m.GetLabel() {
			if want[l.GetName()] != l.GetValue() {
				continue series
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// TestMetricsAfterARun: after a run whose first model call fails with a 503 and is retried, whose
// model then calls current_time twice and answers, every family holds what that run implies.
func TestMetricsAfterARun(t *testing.T) {
	calls := []llmtest.ToolCall{
		{ID: "call_a", Name: "current_time", Arguments: `{"timezone":"Europe/Paris"}`},
		{ID: "call_b", Name: "current_time", Arguments: `{"timezone":"Asia/Tokyo"}`},
	}
	e := newMetricsEnv(t, httpapi.Options{}, chat.Options{Prices: map[string]chat.Price{"openai/gpt-4o-mini": {Input: 1, Output: 2}}},
		llmtest.Turn{Status: http.StatusServiceUnavailable},
		llmtest.Turn{ToolCalls: calls, Usage: &llm.Usage{InputTokens: 100, OutputTokens: 20}},
		llmtest.Turn{Text: "Nine in Paris, five in Tokyo.", Usage: &llm.Usage{InputTokens: 150, OutputTokens: 30}},
	)
	e.m.MCP([]string{"connecting", "connected", "failed"}, func() []metrics.MCPServer {
		return []metrics.MCPServer{{Name: "files", State: "connected", Attempts: 3}, {Name: "search", State: "failed", Attempts: 1}}
	})
	resp, body := e.request(t, "POST", "/v1/chat", `{"message":"What time is it in Paris and Tokyo?"}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"completed"`) {
		t.Fatalf("POST /v1/chat: %d %s", resp.StatusCode, body)
	}
	e.scrape(t) // counted before the next request on the connection is read
	fams := e.scrape(t)

	const model = "openai/gpt-4o-mini"
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"chatd_http_requests_total", []string{"route", "POST /v1/chat", "status", "2xx"}, 1},
		{"chatd_http_request_duration_seconds", []string{"route", "POST /v1/chat"}, 1},
		{"chatd_http_requests_total", []string{"route", "GET /metrics", "status", "2xx"}, 1},
		{"chatd_sse_streams_open", nil, 0},
		{"chatd_sse_slow_disconnects_total", nil, 0},
		{"chatd_runs_started_total", []string{"agent", "default", "model", model}, 1},
		{"chatd_runs_ended_total", []string{"status", "completed", "agent", "default", "model", model}, 1},
		{"chatd_run_duration_seconds", []string{"agent", "default", "model", model}, 1},
		{"chatd_time_to_first_token_seconds", []string{"agent", "default", "model", model}, 1},
		{"chatd_runs_active", nil, 0},
		{"chatd_runs_queued", nil, 0},
		{"chatd_model_calls_total", []string{"provider", "openai", "model", model, "outcome", "error"}, 1},
		{"chatd_model_calls_total", []string{"provider", "openai", "model", model, "outcome", "ok"}, 2},
		{"chatd_model_call_errors_total", []string{"provider", "openai", "model", model, "kind", "overloaded"}, 1},
		{"chatd_model_retries_total", []string{"provider", "openai", "model", model}, 1},
		{"chatd_model_call_duration_seconds", []string{"provider", "openai", "model", model}, 3},
		{"chatd_tokens_total", []string{"model", model, "kind", "input"}, 250},
		{"chatd_tokens_total", []string{"model", model, "kind", "output"}, 50},
		{"chatd_tool_calls_total", []string{"tool", "current_time", "outcome", "success"}, 2},
		{"chatd_tool_call_duration_seconds", []string{"tool", "current_time"}, 2},
		{"chatd_store_operation_duration_seconds", []string{"op", "create_run"}, 1},
		{"chatd_store_operation_duration_seconds", []string{"op", "append_turn"}, 2},
		{"chatd_store_operation_duration_seconds", []string{"op", "append_record"}, 2},
		{"chatd_store_operation_duration_seconds", []string{"op", "finish_run"}, 1},
		{"chatd_mcp_servers", []string{"state", "connected"}, 1},
		{"chatd_mcp_servers", []string{"state", "failed"}, 1},
		{"chatd_mcp_servers", []string{"state", "connecting"}, 0},
		{"chatd_mcp_reconnects_total", []string{"server", "files"}, 2},
		{"chatd_mcp_reconnects_total", []string{"server", "search"}, 0},
	} {
		got, ok := value(fams, c.name, c.labels...)
		if !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	// $1 and $2 a million tokens: 250 in, 50 out.
	if got, _ := value(fams, "chatd_cost_usd_total", "model", model); math.Abs(got-0.00035) > 1e-12 {
		t.Errorf("chatd_cost_usd_total = %v, want 0.00035", got)
	}
	if _, ok := value(fams, "chatd_model_fallbacks_total", "provider", "openai", "model", model); ok {
		t.Error("a fallback was counted; the run had none")
	}
	// The event log writes in batches on its own clock: whether this short run's events went in one
	// is not the run's to say, but the families are there.
	for _, name := range []string{"chatd_eventlog_batch_events", "chatd_eventlog_write_duration_seconds"} {
		if f := fams[name]; f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
			t.Errorf("%s: %v, want a histogram", name, f)
		}
	}
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_resident_memory_bytes", "process_cpu_seconds_total"} {
		if fams[name] == nil {
			t.Errorf("%s is missing", name)
		}
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), "Paris") || l.GetName() == "run_id" || l.GetName() == "session_id" || l.GetName() == "user" {
					t.Errorf("%s has label %s=%q", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
}

// TestMetricsCardinality: a thousand sessions, each with a run, add no series: every label is bounded.
func TestMetricsCardinality(t *testing.T) {
	turns := make([]llmtest.Turn, 1001)
	for i := range turns {
		turns[i] = llmtest.Turn{Text: "ok", Usage: &llm.Usage{InputTokens: 3, OutputTokens: 1}}
	}
	e := newMetricsEnv(t, httpapi.Options{}, chat.Options{}, turns...)
	series := func() int {
		n := 0
		for name, f := range e.scrape(t) {
			if strings.HasPrefix(name, "chatd_") {
				n += len(f.GetMetric())
			}
		}
		return n
	}
	send := func(i int) {
		resp, body := e.request(t, "POST", "/v1/chat", fmt.Sprintf(`{"message":"hello number %d"}`, i))
		if resp.StatusCode != 200 {
			t.Fatalf("send %d: %d %s", i, resp.StatusCode, body)
		}
	}
	send(0)
	e.request(t, "GET", "/v1/sessions", "")
	before := series()
	for i := 1; i <= 1000; i++ {
		send(i)
		if i%250 == 0 {
			e.request(t, "GET", "/v1/sessions", "")
		}
	}
	if after := series(); after != before {
		t.Errorf("chatd_* series: %d after one session, %d after 1,001", before, after)
	}
}

// TestMetricsAuth: with API keys, /metrics takes the metrics token or an admin's key, and nothing else.
func TestMetricsAuth(t *testing.T) {
	const token = "scrape-token-0123456789"
	e := newKeyedEnv(t, httpapi.Options{Metrics: metrics.New(), ServeMetrics: true, MetricsToken: token}, auth.Options{})
	admin, _ := e.key(t, auth.KeySpec{User: "root", Admin: true})
	alice, _ := e.key(t, auth.KeySpec{User: "alice"})
	for _, c := range []struct {
		name, authz string
		want        int
	}{
		{"no credentials", "", 401},
		{"a user's key", "Bearer " + alice, 403},
		{"a wrong token", "Bearer scrape-token-wrong-000000", 401},
		{"the metrics token", "Bearer " + token, 200},
		{"an admin's key", "Bearer " + admin, 200},
	} {
		var h map[string]string
		if c.authz != "" {
			h = map[string]string{"Authorization": c.authz}
		}
		resp, raw := e.call(t, "GET", "/metrics", "", h)
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d %.100s, want %d", c.name, resp.StatusCode, raw, c.want)
		}
		if c.want == 200 && !strings.Contains(string(raw), "chatd_http_requests_total") {
			t.Errorf("%s: no metrics in %.200s", c.name, raw)
		}
	}
}

// TestMetricsModelLabels: the models a request names cannot grow the metrics. A model of the configured
// provider that is not configured runs and counts as other; a configured one after a hundred invented
// ones still counts as itself; an overlong or odd model name is refused with 400 invalid_model.
func TestMetricsModelLabels(t *testing.T) {
	turns := make([]llmtest.Turn, 102)
	for i := range turns {
		turns[i] = llmtest.Turn{Text: "ok", Usage: &llm.Usage{InputTokens: 3, OutputTokens: 1}}
	}
	e := newMetricsEnv(t, httpapi.Options{}, chat.Options{}, turns...)
	for i := range 101 {
		body := fmt.Sprintf(`{"message":"hi","model":"openai/invented-%d"}`, i)
		if resp, raw := e.request(t, "POST", "/v1/chat", body); resp.StatusCode != 200 {
			t.Fatalf("send %d: %d %s", i, resp.StatusCode, raw)
		}
	}
	if resp, raw := e.request(t, "POST", "/v1/chat", `{"message":"hi"}`); resp.StatusCode != 200 {
		t.Fatalf("send with the default model: %d %s", resp.StatusCode, raw)
	}
	for _, model := range []string{"openai/" + strings.Repeat("x", 20000), "openai/x\ny", `openai/x"} 1`, "openai/é"} {
		body := fmt.Sprintf(`{"message":"hi","model":%q}`, model)
		resp, raw := e.request(t, "POST", "/v1/chat", body)
		if resp.StatusCode != 400 || !strings.Contains(raw, "invalid_model") {
			t.Errorf("model %.40q: %d %.200s, want 400 invalid_model", model, resp.StatusCode, raw)
		}
	}
	e.scrape(t)
	fams := e.scrape(t)
	for _, c := range []struct {
		model string
		want  float64
	}{{"openai/gpt-4o-mini", 1}, {metrics.Other, 101}} {
		if got, _ := value(fams, "chatd_runs_ended_total", "status", "completed", "agent", "default", "model", c.model); got != c.want {
			t.Errorf("runs ended of %s: %v, want %v", c.model, got, c.want)
		}
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), "invented") || len(l.GetValue()) > metrics.MaxLabelBytes {
					t.Errorf("%s has label %s=%.60q", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
}

// TestMetricsListener: the handler of --metrics-addr keeps the API's rules. Without auth it answers only
// loopback names (a DNS-rebinding page is refused); a trusted proxy's admin is believed only for one of
// chatd's names, as on the API's port; and its scrapes are counted.
func TestMetricsListener(t *testing.T) {
	get := func(t *testing.T, url, host string, header map[string]string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "GET", url+"/metrics", nil)
		req.Host = host
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	t.Run("without auth", func(t *testing.T) {
		m := metrics.New()
		srv := httptest.NewServer(httpapi.MetricsHandler(httpapi.Options{Metrics: m}))
		defer srv.Close()
		if code := get(t, srv.URL, "rebound.example.com", nil); code != 403 {
			t.Errorf("for another host name: %d, want 403", code)
		}
		if code := get(t, srv.URL, "localhost", nil); code != 200 {
			t.Errorf("for localhost: %d, want 200", code)
		}
		fams := (&metricsEnv{env: &env{srv: srv}, client: http.DefaultClient}).scrape(t)
		// The scrape that reads them is counted once it is answered.
		for status, want := range map[string]float64{"2xx": 1, "4xx": 1} {
			if got, _ := value(fams, "chatd_http_requests_total", "route", "GET /metrics", "status", status); got != want {
				t.Errorf("scrapes counted %s: %v, want %v", status, got, want)
			}
		}
	})
	t.Run("a trusted proxy's admin", func(t *testing.T) {
		const header = "X-Forwarded-Email"
		e := newKeyedEnv(t, httpapi.Options{}, auth.Options{TrustedHeader: header,
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Admins: []string{"ops@example.com"}})
		srv := httptest.NewServer(httpapi.MetricsHandler(httpapi.Options{Metrics: metrics.New(), Auth: e.auth,
			AllowedHosts: []string{"chat.example.com"}}))
		defer srv.Close()
		admin := map[string]string{header: "ops@example.com"}
		if code := get(t, srv.URL, "rebound.example.com", admin); code != 403 {
			t.Errorf("for another host name: %d, want 403", code)
		}
		if code := get(t, srv.URL, "chat.example.com", admin); code != 200 {
			t.Errorf("for chatd's name: %d, want 200", code)
		}
	})
}

// TestMetricsCancelledQueuedRun: a queued run cancelled before it started is counted among the runs
// ended, as cancelled, and not among those started.
func TestMetricsCancelledQueuedRun(t *testing.T) {
	hold := newLimHold()
	m := metrics.New()
	e := newLimEnv(t, limSetup{Hold: hold, Metrics: m, Respond: func(int, llmtest.Request) llmtest.Turn {
		return hold.turn("held answer", nil)
	}})
	key := e.key(t, auth.KeySpec{User: "alice"})
	running := e.open(t, key, `{"message":"hi"}`)
	hold.await(t, 1)
	session := e.run(t, key, running.runID).SessionID
	queued := e.open(t, key, fmt.Sprintf(`{"message":"later","session_id":%q,"on_active_run":"enqueue"}`, session))
	if a := e.send(t, key, "POST", "/v1/runs/"+queued.runID+"/cancel", ""); a.status != http.StatusOK && a.status != http.StatusAccepted {
		t.Fatalf("cancel the queued run: %v", a)
	}
	checkEnd(t, "the queued run", queued.wait(t), "cancelled", store.RunCancelled)
	hold.release()
	checkEnd(t, "the running run", running.wait(t), "complete", store.RunCompleted)

	gathered, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]*dto.MetricFamily{}
	for _, f := range gathered {
		fams[f.GetName()] = f
	}
	const model = "openai/gpt-4o-mini"
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"chatd_runs_started_total", []string{"agent", "default", "model", model}, 1},
		{"chatd_runs_ended_total", []string{"status", "completed", "agent", "default", "model", model}, 1},
		{"chatd_runs_ended_total", []string{"status", "cancelled", "agent", "default", "model", model}, 1},
		{"chatd_run_duration_seconds", []string{"agent", "default", "model", model}, 1},
	} {
		if got, _ := value(fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}
