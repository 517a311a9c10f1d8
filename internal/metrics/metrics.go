// Package metrics holds chatd's Prometheus metrics: one registry a server owns (never the global
// default, so that tests and several servers in one process do not collide), the families an operator
// watches, and the handler that serves them in the text format.
//
// Every label is bounded: route patterns, status classes, agents and models as configured, providers,
// tool names, error kinds — never a user, session or run id, nor text a user wrote. A model has a label of
// its own only when it is configured (KnownModels): any other model a request names is "other", so that
// no caller can invent label values. Tool names and error kinds pass through a bounded set: after its
// first maxValues distinct values, a new one is counted as "other". No label value is longer than
// MaxLabelBytes.
//
// A nil *Metrics records nothing, so packages take one without checking. It imports the Prometheus
// client and the standard library only.
package metrics

import (
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are chatd's metric families on their registry.
type Metrics struct {
	reg *prometheus.Registry

	httpRequests *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec
	streamsOpen  prometheus.Gauge
	slowDropped  prometheus.Counter

	runsStarted *prometheus.CounterVec
	runsEnded   *prometheus.CounterVec
	runDuration *prometheus.HistogramVec
	ttft        *prometheus.HistogramVec

	modelCalls     *prometheus.CounterVec
	modelErrors    *prometheus.CounterVec
	modelRetries   *prometheus.CounterVec
	modelFallbacks *prometheus.CounterVec
	modelDuration  *prometheus.HistogramVec
	tokens         *prometheus.CounterVec
	cost           *prometheus.CounterVec

	toolCalls    *prometheus.CounterVec
	toolDuration *prometheus.HistogramVec

	batchEvents   prometheus.Histogram
	batchDuration prometheus.Histogram
	storeDuration *prometheus.HistogramVec

	models          *known
	tools, errKinds *bounded
}

// maxValues bounds the distinct values of a label whose values come from requests.
const maxValues = 100

// Other is the label value of everything past a label's bound, and of a model not configured.
const Other = "other"

// MaxLabelBytes bounds a label's value: a longer one is cut (at a character's start).
const MaxLabelBytes = 128

// latency are the buckets of request, call and store durations, in seconds: 1 ms to 2 minutes.
var latency = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

// long are the buckets of runs, which last seconds to many minutes.
var long = []float64{.1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800}

// New returns the metrics on a registry of their own, with Go's runtime and the process's metrics.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), models: &known{names: map[string]bool{}}, tools: newBounded(), errKinds: newBounded()}
	f := factory{m.reg}
	m.httpRequests = f.counter("chatd_http_requests_total", "HTTP requests answered, by route pattern and status class.", "route", "status")
	m.httpDuration = f.histogram("chatd_http_request_duration_seconds",
		"Time to answer an HTTP request, by route pattern; for a stream, how long it lasted.", latency, "route")
	m.streamsOpen = f.gauge("chatd_sse_streams_open", "SSE streams being sent to clients.")
	m.slowDropped = f.counter("chatd_sse_slow_disconnects_total",
		"Stream readers disconnected because they could not take a batch of events within the write timeout.").WithLabelValues()
	m.runsStarted = f.counter("chatd_runs_started_total", "Runs started (run loops begun), by agent and model.", "agent", "model")
	m.runsEnded = f.counter("chatd_runs_ended_total", "Runs ended, by status, agent and model.", "status", "agent", "model")
	m.runDuration = f.histogram("chatd_run_duration_seconds", "Run duration from its start to its end, by agent and model.", long, "agent", "model")
	m.ttft = f.histogram("chatd_time_to_first_token_seconds",
		"Time from a run's start to the first text, reasoning or tool-call delta of its model, by agent and model.", latency, "agent", "model")
	m.modelCalls = f.counter("chatd_model_calls_total", "Model calls (each attempt), by provider, model and outcome (ok, error).", "provider", "model", "outcome")
	m.modelErrors = f.counter("chatd_model_call_errors_total",
		"Failed model calls, by provider, model and error kind (rate_limit, overloaded, server, transport, timeout, …).", "provider", "model", "kind")
	m.modelRetries = f.counter("chatd_model_retries_total", "Model calls retried after a failure before any output, by provider and model.", "provider", "model")
	m.modelFallbacks = f.counter("chatd_model_fallbacks_total", "Turns handed to a fallback model, by the provider and model that failed.", "provider", "model")
	m.modelDuration = f.histogram("chatd_model_call_duration_seconds", "Model call duration, request to last chunk, by provider and model.", long, "provider", "model")
	m.tokens = f.counter("chatd_tokens_total",
		"Tokens of model calls as the providers reported them, by model and kind (input, output, cache_read, cache_write, reasoning).", "model", "kind")
	m.cost = f.counter("chatd_cost_usd_total", "Cost of model calls in US dollars, from the configured prices, by model.", "model")
	m.toolCalls = f.counter("chatd_tool_calls_total", "Tool calls, by tool and outcome (success, error).", "tool", "outcome")
	m.toolDuration = f.histogram("chatd_tool_call_duration_seconds", "Tool call duration, by tool.", latency, "tool")
	m.batchEvents = f.histogram("chatd_eventlog_batch_events", "Events written by one event-log batch.",
		prometheus.ExponentialBuckets(1, 4, 9)).WithLabelValues().(prometheus.Histogram)
	m.batchDuration = f.histogram("chatd_eventlog_write_duration_seconds", "Time to write one event-log batch to the store.",
		latency).WithLabelValues().(prometheus.Histogram)
	m.storeDuration = f.histogram("chatd_store_operation_duration_seconds",
		"Store operations of runs (create_run, append_turn, append_record, finish_run, append_events, …), by operation.", latency, "op")
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// factory registers families on one registry.
type factory struct{ reg *prometheus.Registry }

func (f factory) counter(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	f.reg.MustRegister(g)
	return g
}

func (f factory) histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(h)
	return h
}

// KnownModels declares configured models (provider/model): the default model, the agents' models and
// fallbacks, the priced ones, those a provider's config lists. Only they get a model label of their
// own; any other model is counted as Other.
func (m *Metrics) KnownModels(names ...string) {
	if m != nil {
		m.models.add(names...)
	}
}

// Registry is where the families are registered, for a test that gathers them.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus text format (or OpenMetrics, when asked).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, EnableOpenMetrics: true})
}

// Func registers a gauge whose value is read from f at each scrape.
func (m *Metrics) Func(name, help string, f func() float64) {
	if m == nil {
		return
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
}

// Route is the metrics of one route, resolved once so that a request only adds to them: its latency and
// its counts of 2xx to 5xx answers (a 1xx or an odd status, never sent by chatd's handlers, is resolved
// when it comes).
type Route struct {
	pattern  string
	requests *prometheus.CounterVec
	classes  [6]prometheus.Counter // by status/100, 2 to 5
	duration prometheus.Observer
}

// statusClasses are the label values of status/100.
var statusClasses = [6]string{"other", "1xx", "2xx", "3xx", "4xx", "5xx"}

// Route resolves the metrics of the route pattern; nil when m is nil.
func (m *Metrics) Route(pattern string) *Route {
	if m == nil {
		return nil
	}
	r := &Route{pattern: pattern, requests: m.httpRequests, duration: m.httpDuration.WithLabelValues(pattern)}
	for i := 2; i <= 5; i++ {
		r.classes[i] = m.httpRequests.WithLabelValues(pattern, statusClasses[i])
	}
	return r
}

// Observe counts one answered request.
func (r *Route) Observe(status int, d time.Duration) {
	if r == nil {
		return
	}
	if i := status / 100; i >= 2 && i <= 5 {
		r.classes[i].Inc()
	} else {
		r.requests.WithLabelValues(r.pattern, StatusClass(status)).Inc()
	}
	r.duration.Observe(d.Seconds())
}

// StreamOpened and StreamClosed count the SSE streams being sent.
func (m *Metrics) StreamOpened() {
	if m != nil {
		m.streamsOpen.Inc()
	}
}

func (m *Metrics) StreamClosed() {
	if m != nil {
		m.streamsOpen.Dec()
	}
}

// SlowReaders is the counter of slow readers disconnected, for tests.
func (m *Metrics) SlowReaders() prometheus.Counter { return m.slowDropped }

// SlowReader counts a stream reader disconnected for being too slow.
func (m *Metrics) SlowReader() {
	if m != nil {
		m.slowDropped.Inc()
	}
}

// Run is the metrics of one run, resolved when it starts.
type Run struct {
	m            *Metrics
	agent, model string
	duration     prometheus.Observer
	ttft         prometheus.Observer
}

// RunStarted counts a run's start and returns what its end is counted with.
func (m *Metrics) RunStarted(agent, model string) *Run {
	r := m.Run(agent, model)
	r.Started()
	return r
}

// Run returns what a run's start and end are counted with, without counting its start: a run that
// begins before it is stored is counted as started once it is (Started).
func (m *Metrics) Run(agent, model string) *Run {
	if m == nil {
		return nil
	}
	agent, model = Cut(agent), m.models.value(model)
	return &Run{m: m, agent: agent, model: model, duration: m.runDuration.WithLabelValues(agent, model),
		ttft: m.ttft.WithLabelValues(agent, model)}
}

// Started counts the run's start.
func (r *Run) Started() {
	if r != nil {
		r.m.runsStarted.WithLabelValues(r.agent, r.model).Inc()
	}
}

// RunNotStarted returns what counts the end of a run that ended before it started — a queued run
// cancelled or failed while it waited: chatd_runs_ended_total, with no start and no duration.
func (m *Metrics) RunNotStarted(agent, model string) *Run {
	if m == nil {
		return nil
	}
	return &Run{m: m, agent: Cut(agent), model: m.models.value(model)}
}

// FirstToken records the run's time to its first token.
func (r *Run) FirstToken(d time.Duration) {
	if r != nil && r.ttft != nil {
		r.ttft.Observe(d.Seconds())
	}
}

// Ended counts the run's end with its status and duration.
func (r *Run) Ended(status string, d time.Duration) {
	if r == nil {
		return
	}
	r.m.runsEnded.WithLabelValues(status, r.agent, r.model).Inc()
	if r.duration != nil {
		r.duration.Observe(d.Seconds())
	}
}

// ModelCall counts one model call attempt: its duration and, when it failed, the error's kind.
func (m *Metrics) ModelCall(provider, model string, d time.Duration, errKind string) {
	if m == nil {
		return
	}
	model = m.models.value(model)
	outcome := "ok"
	if errKind != "" {
		outcome = "error"
		m.modelErrors.WithLabelValues(provider, model, m.errKinds.value(errKind)).Inc()
	}
	m.modelCalls.WithLabelValues(provider, model, outcome).Inc()
	m.modelDuration.WithLabelValues(provider, model).Observe(d.Seconds())
}

// ModelRetry counts a model call retried; ModelFallback a turn handed from this model to a fallback.
func (m *Metrics) ModelRetry(provider, model string) {
	if m != nil {
		m.modelRetries.WithLabelValues(provider, m.models.value(model)).Inc()
	}
}

func (m *Metrics) ModelFallback(provider, model string) {
	if m != nil {
		m.modelFallbacks.WithLabelValues(provider, m.models.value(model)).Inc()
	}
}

// Usage is one model call's tokens and cost.
type Usage struct {
	Input, Output, CacheRead, CacheWrite, Reasoning int64
	CostUSD                                         float64
}

// Tokens counts one model call's usage under model (provider/model).
func (m *Metrics) Tokens(model string, u Usage) {
	if m == nil {
		return
	}
	model = m.models.value(model)
	for _, k := range [...]struct {
		kind string
		n    int64
	}{{"input", u.Input}, {"output", u.Output}, {"cache_read", u.CacheRead}, {"cache_write", u.CacheWrite}, {"reasoning", u.Reasoning}} {
		if k.n > 0 {
			m.tokens.WithLabelValues(model, k.kind).Add(float64(k.n))
		}
	}
	if u.CostUSD > 0 {
		m.cost.WithLabelValues(model).Add(u.CostUSD)
	}
}

// ToolCall counts one tool call.
func (m *Metrics) ToolCall(tool string, ok bool, d time.Duration) {
	if m == nil {
		return
	}
	tool = m.tools.value(tool)
	outcome := "success"
	if !ok {
		outcome = "error"
	}
	m.toolCalls.WithLabelValues(tool, outcome).Inc()
	m.toolDuration.WithLabelValues(tool).Observe(d.Seconds())
}

// EventLogBatch records one event-log batch: how many events it wrote and how long the write took.
func (m *Metrics) EventLogBatch(events int, d time.Duration) {
	if m == nil {
		return
	}
	m.batchEvents.Observe(float64(events))
	m.batchDuration.Observe(d.Seconds())
}

// StoreOp records one store operation's duration; op is a constant of the caller's.
func (m *Metrics) StoreOp(op string, d time.Duration) {
	if m != nil {
		m.storeDuration.WithLabelValues(op).Observe(d.Seconds())
	}
}

// MCPServer is one MCP server's state for the metrics.
type MCPServer struct {
	Name, State string
	Attempts    int // connection attempts since start-up
}

// MCP reports the MCP servers at each scrape: chatd_mcp_servers by state, and each server's reconnects
// (its connection attempts after the first). Server names come from the operator's file: bounded.
func (m *Metrics) MCP(states []string, servers func() []MCPServer) {
	if m == nil {
		return
	}
	m.reg.MustRegister(&mcpCollector{states: states, servers: servers,
		byState:    prometheus.NewDesc("chatd_mcp_servers", "MCP servers by state.", []string{"state"}, nil),
		reconnects: prometheus.NewDesc("chatd_mcp_reconnects_total", "Connection attempts of an MCP server after its first, by server.", []string{"server"}, nil)})
}

type mcpCollector struct {
	states              []string
	servers             func() []MCPServer
	byState, reconnects *prometheus.Desc
}

func (c *mcpCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.byState
	ch <- c.reconnects
}

func (c *mcpCollector) Collect(ch chan<- prometheus.Metric) {
	count := map[string]int{}
	for _, st := range c.states {
		count[st] = 0
	}
	for _, s := range c.servers() {
		count[s.State]++
		ch <- prometheus.MustNewConstMetric(c.reconnects, prometheus.CounterValue, float64(max(s.Attempts-1, 0)), s.Name)
	}
	for st, n := range count {
		ch <- prometheus.MustNewConstMetric(c.byState, prometheus.GaugeValue, float64(n), st)
	}
}

// known passes the models it was told of through, and makes any other Other.
type known struct {
	mu    sync.RWMutex
	names map[string]bool
}

func (k *known) add(names ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, n := range names {
		if n != "" {
			k.names[n] = true
		}
	}
}

func (k *known) value(v string) string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	if k.names[v] {
		return Cut(v)
	}
	return Other
}

// Cut cuts a label value to MaxLabelBytes.
func Cut(v string) string {
	if len(v) <= MaxLabelBytes {
		return v
	}
	n := MaxLabelBytes
	for n > 0 && !utf8.RuneStart(v[n]) {
		n--
	}
	return v[:n]
}

// bounded passes a label's values through until it has seen maxValues of them; later new ones are
// Other.
type bounded struct {
	mu   sync.Mutex
	seen map[string]bool
}

func newBounded() *bounded { return &bounded{seen: map[string]bool{}} }

func (b *bounded) value(v string) string {
	v = Cut(v)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen[v] {
		return v
	}
	if len(b.seen) >= maxValues {
		return Other
	}
	b.seen[v] = true
	return v
}

// StatusClass is the label of an HTTP status: "2xx" …, or "other".
func StatusClass(status int) string {
	if i := status / 100; i >= 1 && i <= 5 {
		return statusClasses[i]
	}
	return statusClasses[0]
}
