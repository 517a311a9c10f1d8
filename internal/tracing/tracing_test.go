package tracing

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestSetupFromEnvironment: tracing is off without an endpoint or when the SDK is disabled, on with
// one, and a protocol other than OTLP over HTTP is refused with a reason.
func TestSetupFromEnvironment(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, off := range []map[string]string{
		nil,
		{"OTEL_SERVICE_NAME": "chatd"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"},
	} {
		if tr, err := Setup(t.Context(), env(off), "test"); tr != nil || err != nil {
			t.Errorf("%v: %v %v, want off", off, tr, err)
		}
	}
	tr, err := Setup(t.Context(), env(map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}), "test")
	if tr == nil || err != nil || tr.Capture() {
		t.Fatalf("with an endpoint: %v %v", tr, err)
	}
	tr.Shutdown(t.Context())
	_, err = Setup(t.Context(), env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}), "test")
	if err == nil || !strings.Contains(err.Error(), "http/protobuf") {
		t.Errorf("grpc: %v, want a refusal naming http/protobuf", err)
	}
}

// TestNil: a nil *Tracing starts no span and hands back the context it was given.
func TestNil(t *testing.T) {
	var tr *Tracing
	ctx := t.Context()
	got, span := tr.Run(ctx, "r", "s", "default", "openai/x")
	if got != ctx || span.IsRecording() {
		t.Error("a nil Tracing started a span")
	}
	_, span = tr.Chat(ctx, ModelCall{Model: "x"})
	tr.EndChat(span, ChatEnd{})
	_, span = tr.Tool(ctx, "t", "c", false, nil)
	tr.EndTool(span, true, "")
	_, span, meta := tr.MCP(ctx, "tools/call", "t", "tcp", "", "")
	EndMCP(span, nil, false)
	if meta != nil || tr.Capture() {
		t.Error("a nil Tracing sends trace context")
	}
}

// TestSpanNamesBounded: what a caller or a model chooses does not name spans: a method the
// conventions do not know is "HTTP" (http.request.method _OTHER), a long path is cut, a model that is
// not configured is "chat", and attribute values are bounded by default.
func TestSpanNamesBounded(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithRawSpanLimits(spanLimits(func(string) string { return "" })))
	tr := New(tp, false)
	tr.KnownModels("openai/gpt-4o")

	r := httptest.NewRequest("FROBNICATE", "/"+strings.Repeat("p", 5000), nil)
	ctx, span := tr.HTTP(r, false)
	EndHTTP(span, 404)
	_, span = tr.Chat(ctx, ModelCall{Provider: "openai", Model: "gpt-4o"})
	tr.EndChat(span, ChatEnd{})
	_, span = tr.Chat(ctx, ModelCall{Provider: "openai", Model: "invented"})
	tr.EndChat(span, ChatEnd{Model: strings.Repeat("m", 10000)})

	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans", len(spans))
	}
	attrs := func(s tracetest.SpanStub) map[string]string {
		out := map[string]string{}
		for _, kv := range s.Attributes {
			out[string(kv.Key)] = kv.Value.Emit()
		}
		return out
	}
	h := attrs(spans[0])
	if spans[0].Name != "HTTP" || h["http.request.method"] != "_OTHER" || h["http.request.method_original"] != "FROBNICATE" {
		t.Errorf("unknown method: span %q %v", spans[0].Name, h)
	}
	if n := len(h["url.path"]); n > maxPath {
		t.Errorf("url.path is %d bytes, want at most %d", n, maxPath)
	}
	if spans[1].Name != "chat gpt-4o" || spans[2].Name != "chat" {
		t.Errorf("model call spans %q, %q; want chat gpt-4o, chat", spans[1].Name, spans[2].Name)
	}
	if n := len(attrs(spans[2])["gen_ai.response.model"]); n != DefaultValueLength {
		t.Errorf("a 10,000-byte attribute is kept as %d bytes, want %d", n, DefaultValueLength)
	}
	if l := spanLimits(func(k string) string { return map[string]string{"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "99"}[k] }); l.AttributeValueLengthLimit != 99 {
		t.Errorf("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT=99: %d", l.AttributeValueLengthLimit)
	}
}

// TestNoTracestateToMCP: a trusted caller's trace goes on to MCP servers, without its tracestate.
func TestNoTracestateToMCP(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
	tr := New(tp, false)
	r := httptest.NewRequest("POST", "/v1/chat", nil)
	r.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	r.Header.Set("tracestate", "caller=secret")
	ctx, span := tr.HTTP(r, true)
	defer span.End()
	_, mspan, meta := tr.MCP(ctx, "tools/call", "t", "tcp", "", "")
	EndMCP(mspan, nil, false)
	if tp, _ := meta["traceparent"].(string); !strings.Contains(tp, "4bf92f3577b34da6a3ce929d0e0e4736") {
		t.Errorf("_meta traceparent %q, want the caller's trace", tp)
	}
	if _, ok := meta["tracestate"]; ok {
		t.Errorf("_meta carries the caller's tracestate: %v", meta)
	}
}

// TestErrorHandler: the SDK's errors go to the log at most once an interval, the next line counting
// those left out, and never with the collector's response body.
func TestErrorHandler(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 11, 26, 7, 0, 0, 0, time.UTC)
	h := NewErrorHandler(slog.New(slog.NewJSONHandler(&buf, nil)), time.Minute, func() time.Time { return now })
	export := errors.New("failed to send to http://collector:4318/v1/traces: 400 Bad Request (body: secret-answer)")
	for range 100 {
		h.Handle(export)
	}
	now = now.Add(time.Minute)
	h.Handle(export)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
	}
	if strings.Contains(buf.String(), "secret-answer") {
		t.Errorf("a response body is logged:\n%s", buf.String())
	}
	if !strings.Contains(lines[0], "400 Bad Request") || !strings.Contains(lines[1], `"errors_not_logged":99`) {
		t.Errorf("lines:\n%s", buf.String())
	}
}
