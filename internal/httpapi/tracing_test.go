package httpapi_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"chatd/internal/chat"
	"chatd/internal/httpapi"
	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
	"chatd/internal/logging"
	"chatd/internal/store/sqlite"
	"chatd/internal/tracing"
)

// tracedRun runs one chat with a tool call through a server traced into an in-memory exporter, sent
// with the caller's traceparent, and returns the spans of its trace and the upstream's requests.
func tracedRun(t *testing.T, capture bool) ([]tracetest.SpanStub, []llmtest.Request) {
	spans, reqs, _ := tracedRunLogged(t, capture)
	return spans, reqs
}

// tracedRunLogged is tracedRun, with the server's JSON log. The caller is a trusted peer (loopback), and
// its trace context is continued.
func tracedRunLogged(t *testing.T, capture bool) ([]tracetest.SpanStub, []llmtest.Request, *syncBuffer) {
	t.Helper()
	all, reqs, logs := tracedRunAs(t, capture, true, "01")
	var spans []tracetest.SpanStub
	for _, s := range all {
		if s.SpanContext.TraceID().String() == traceID {
			spans = append(spans, s)
		}
	}
	return spans, reqs, logs
}

// tracedRunAs runs tracedRun's chat from a trusted peer or not, its traceparent with these flags and a
// tracestate, and returns every span exported. turns, when given, are the model's answers instead of
// tracedRun's.
func tracedRunAs(t *testing.T, capture, trusted bool, flags string, turns ...llmtest.Turn) ([]tracetest.SpanStub, []llmtest.Request, *syncBuffer) {
	t.Helper()
	if turns == nil {
		turns = []llmtest.Turn{
			{ToolCalls: []llmtest.ToolCall{{ID: "call_a", Name: "current_time", Arguments: `{"timezone":"Europe/Paris"}`}},
				Usage: &llm.Usage{InputTokens: 100, OutputTokens: 20}},
			{Text: "It is ten in Paris.", Usage: &llm.Usage{InputTokens: 150, OutputTokens: 30}},
		}
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(t.Context()) })
	tr := tracing.New(tp, capture)

	e := &env{upstream: llmtest.NewServer(t, turns...)}
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "chatd.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log, err := logging.New(logs, "json", slog.LevelDebug)
	if err != nil {
		t.Fatal(err)
	}
	chats, tools := newChat(t, db, e.upstream, fixedNow, chat.Options{Tracing: tr, Logger: log})
	opts := httpapi.Options{Chat: chats, Store: db, Tools: tools, Tracing: tr, Logger: log}
	if trusted {
		opts.TrustedPeers = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	}
	e.srv = httptest.NewServer(httpapi.New(opts))
	t.Cleanup(func() {
		e.srv.Close()
		closeChat(t, chats, tools)
		db.Close()
	})
	me := &metricsEnv{env: e, client: &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}}
	resp, body := me.request(t, "POST", "/v1/chat", `{"message":"What time is it in Paris, secretly?"}`,
		"traceparent", "00-"+traceID+"-00f067aa0ba902b7-"+flags, "tracestate", "caller=secret-state")
	if resp.StatusCode != 200 {
		t.Fatalf("POST /v1/chat: %d %s", resp.StatusCode, body)
	}
	me.request(t, "GET", "/healthz", "") // the POST's span has ended once this is read
	return exp.GetSpans(), e.upstream.Requests(), logs
}

// syncBuffer is a log's output, written from the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestRunLogs: in JSON, a run's lines carry its run_id, session_id, user and trace_id, and its end is
// one line with its status, agent, model, tokens and durations; no line holds what was said.
func TestRunLogs(t *testing.T) {
	spans, _, logs := tracedRunLogged(t, false)
	var runID string
	for _, s := range spans {
		for _, kv := range s.Attributes {
			if kv.Key == "chatd.run.id" {
				runID = kv.Value.AsString()
			}
		}
	}
	var ended map[string]any
	for line := range strings.Lines(logs.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a log line that is not JSON: %q: %v", line, err)
		}
		if rec["msg"] == "run ended" {
			ended = rec
		}
		if strings.Contains(line, "secretly") || strings.Contains(line, "ten in Paris") {
			t.Errorf("a log line holds message text: %s", line)
		}
	}
	if ended == nil {
		t.Fatalf("no run ended line in\n%s", logs)
	}
	for k, v := range map[string]any{"run_id": runID, "user": httpapi.LocalUser, "trace_id": traceID, "status": "completed",
		"agent": "default", "model": "openai/gpt-4o-mini", "input_tokens": 250.0, "output_tokens": 50.0, "tool_calls": 1.0} {
		if ended[k] != v {
			t.Errorf("run ended: %s = %v, want %v", k, ended[k], v)
		}
	}
	for _, k := range []string{"session_id", "duration_ms", "ttft_ms"} {
		if _, ok := ended[k]; !ok {
			t.Errorf("run ended has no %s: %v", k, ended)
		}
	}
}

const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"

// TestTraceOfARun: one run is one trace under the caller's: the HTTP request's server span, the run's
// invoke_agent span under it, a chat span per model call and an execute_tool span for the tool call,
// with the GenAI attributes; each model request carries its chat span as traceparent; and no message
// text is recorded.
func TestTraceOfARun(t *testing.T) {
	spans, reqs := tracedRun(t, false)
	byName := map[string][]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = append(byName[s.Name], s)
	}
	one := func(name string) tracetest.SpanStub {
		t.Helper()
		if len(byName[name]) != 1 {
			var names []string
			for _, s := range spans {
				names = append(names, s.Name)
			}
			t.Fatalf("%d spans %q in %q", len(byName[name]), name, names)
		}
		return byName[name][0]
	}
	req, run, tool := one("POST /v1/chat"), one("invoke_agent default"), one("execute_tool current_time")
	calls := byName["chat gpt-4o-mini"]
	if len(calls) != 2 {
		t.Fatalf("%d chat spans, want 2", len(calls))
	}
	if req.Parent.SpanID().String() != "00f067aa0ba902b7" || !req.Parent.IsRemote() {
		t.Errorf("the request's span continues %v, want the caller's 00f067aa0ba902b7", req.Parent.SpanID())
	}
	if run.Parent.SpanID() != req.SpanContext.SpanID() {
		t.Errorf("the run's span is under %v, want the request's %v", run.Parent.SpanID(), req.SpanContext.SpanID())
	}
	for _, c := range calls {
		if c.Parent.SpanID() != run.SpanContext.SpanID() {
			t.Errorf("a chat span is under %v, want the run's", c.Parent.SpanID())
		}
	}
	if p := tool.Parent.SpanID(); p != run.SpanContext.SpanID() && p != calls[0].SpanContext.SpanID() {
		t.Errorf("the tool's span is under %v, want the run's or its model call's", p)
	}
	attrs := func(s tracetest.SpanStub) map[string]string {
		out := map[string]string{}
		for _, kv := range s.Attributes {
			out[string(kv.Key)] = kv.Value.Emit()
		}
		return out
	}
	for _, c := range []struct {
		span tracetest.SpanStub
		want map[string]string
	}{
		{req, map[string]string{"http.request.method": "POST", "http.route": "/v1/chat", "http.response.status_code": "200"}},
		{run, map[string]string{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "default",
			"gen_ai.request.model": "openai/gpt-4o-mini", "chatd.run.status": "completed"}},
		{calls[0], map[string]string{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
			"gen_ai.request.model": "gpt-4o-mini", "gen_ai.response.model": "gpt-4o-mini",
			"gen_ai.usage.input_tokens": "100", "gen_ai.usage.output_tokens": "20", "gen_ai.response.finish_reasons": `["tool_calls"]`}},
		{calls[1], map[string]string{"gen_ai.usage.input_tokens": "150", "gen_ai.usage.output_tokens": "30",
			"gen_ai.response.finish_reasons": `["stop"]`}},
		{tool, map[string]string{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "current_time",
			"gen_ai.tool.call.id": "call_a", "gen_ai.tool.type": "function"}},
	} {
		got := attrs(c.span)
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("span %q: %s = %q, want %q", c.span.Name, k, got[k], v)
			}
		}
	}
	// The model's requests carry their chat span's context.
	if len(reqs) != 2 {
		t.Fatalf("%d model requests", len(reqs))
	}
	for i, r := range reqs {
		want := "00-" + traceID + "-" + calls[i].SpanContext.SpanID().String() + "-01"
		if got := r.Header.Get("traceparent"); got != want {
			t.Errorf("model request %d: traceparent %q, want %q", i+1, got, want)
		}
		if got := r.Header.Get("tracestate"); got != "" {
			t.Errorf("model request %d: the caller's tracestate %q was sent on", i+1, got)
		}
	}
	// No content: not the user's message, the tool's arguments or result, nor the answer.
	for _, s := range spans {
		for _, kv := range s.Attributes {
			v := kv.Value.Emit()
			if strings.Contains(v, "secretly") || strings.Contains(v, "Europe/Paris") || strings.Contains(v, "ten in Paris") ||
				strings.Contains(v, "2026-11-21") {
				t.Errorf("span %q records content: %s = %.80q", s.Name, kv.Key, v)
			}
		}
	}
}

// TestTraceContentOptIn: with content capture on, a tool call's span holds its arguments and result.
func TestTraceContentOptIn(t *testing.T) {
	spans, _ := tracedRun(t, true)
	i := slices.IndexFunc(spans, func(s tracetest.SpanStub) bool { return s.Name == "execute_tool current_time" })
	if i < 0 {
		t.Fatal("no execute_tool span")
	}
	got := map[string]string{}
	for _, kv := range spans[i].Attributes {
		got[string(kv.Key)] = kv.Value.Emit()
	}
	if !strings.Contains(got["gen_ai.tool.call.arguments"], "Europe/Paris") || got["gen_ai.tool.call.result"] == "" {
		t.Errorf("captured tool span attributes: %v", got)
	}
}

// TestTraceUntrustedCaller: a caller that is not a trusted peer cannot choose the trace: its request
// starts a new trace (sampled by chatd's sampler, though the caller's flags said not to sample), linked
// to the caller's span, and neither its trace id nor its tracestate reaches the model.
func TestTraceUntrustedCaller(t *testing.T) {
	spans, reqs, _ := tracedRunAs(t, false, false, "00")
	var req *tracetest.SpanStub
	for i, s := range spans {
		if s.SpanContext.TraceID().String() == traceID {
			t.Errorf("span %q is in the caller's trace", s.Name)
		}
		if s.Name == "POST /v1/chat" {
			req = &spans[i]
		}
	}
	if req == nil {
		t.Fatalf("no span of the request among %d", len(spans))
	}
	if req.Parent.IsValid() {
		t.Errorf("the request's span has parent %v, want none", req.Parent.SpanID())
	}
	if len(req.Links) != 1 || req.Links[0].SpanContext.TraceID().String() != traceID ||
		req.Links[0].SpanContext.SpanID().String() != "00f067aa0ba902b7" || req.Links[0].SpanContext.TraceState().Len() != 0 {
		t.Errorf("the request's span links %+v, want the caller's span without its tracestate", req.Links)
	}
	if len(reqs) == 0 {
		t.Fatal("no model request")
	}
	for i, r := range reqs {
		tp := r.Header.Get("traceparent")
		if !strings.HasPrefix(tp, "00-"+req.SpanContext.TraceID().String()+"-") || !strings.HasSuffix(tp, "-01") {
			t.Errorf("model request %d: traceparent %q, want chatd's sampled trace %s", i+1, tp, req.SpanContext.TraceID())
		}
		if got := r.Header.Get("tracestate"); got != "" {
			t.Errorf("model request %d: tracestate %q", i+1, got)
		}
	}
}

// TestTraceUnknownTool: the span of a call of a tool the run does not offer is named as its metrics
// label is, execute_tool unknown: the model, not the operator, chose the name.
func TestTraceUnknownTool(t *testing.T) {
	spans, _, _ := tracedRunAs(t, false, true, "01",
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_x", Name: "invented_tool_of_the_model", Arguments: `{}`}}},
		llmtest.Turn{Text: "No such tool."})
	var names []string
	for _, s := range spans {
		names = append(names, s.Name)
		if strings.Contains(s.Name, "invented_tool") {
			t.Errorf("a span is named %q", s.Name)
		}
	}
	if !slices.Contains(names, "execute_tool unknown") {
		t.Errorf("spans %q, want one execute_tool unknown", names)
	}
}
