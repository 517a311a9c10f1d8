package mcpclient

import (
	"encoding/json"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"chatd/internal/tracing"
)

// TestCallTraced: a tools/call is a client span per the MCP conventions, under the caller's span, and
// its trace context reaches the server in the request's _meta (traceparent), beside the progress token.
func TestCallTraced(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(t.Context())
	opts := testOptions()
	opts.Tracing = tracing.New(tp, false)
	srv := httpServer(t, newTestServer(nil), nil)
	_, reg := startManager(t, httpConfig("srv", srv.URL, ""), nil, opts)

	ctx, parent := tp.Tracer("test").Start(t.Context(), "execute_tool srv__meta")
	out := reg.Call(ctx, "srv__meta", json.RawMessage(`{}`))
	parent.End()
	if !out.Success {
		t.Fatalf("call: %+v", out)
	}
	var meta map[string]any
	if err := json.Unmarshal([]byte(out.Content), &meta); err != nil {
		t.Fatalf("the server's _meta %q: %v", out.Content, err)
	}
	var span tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "tools/call meta" {
			span = s
		}
	}
	if span.Name == "" {
		t.Fatalf("no tools/call span in %v", exp.GetSpans())
	}
	if span.Parent.SpanID() != parent.SpanContext().SpanID() || span.SpanKind.String() != "client" {
		t.Errorf("the call's span: parent %v kind %v, want the caller's and client", span.Parent.SpanID(), span.SpanKind)
	}
	want := "00-" + span.SpanContext.TraceID().String() + "-" + span.SpanContext.SpanID().String() + "-01"
	if meta["traceparent"] != want || meta["progressToken"] == nil {
		t.Errorf("_meta = %v, want traceparent %s and a progress token", meta, want)
	}
	attrs := map[string]string{}
	for _, kv := range span.Attributes {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	for k, v := range map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "meta",
		"gen_ai.operation.name": "execute_tool", "network.transport": "tcp"} {
		if attrs[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, attrs[k], v, attrs)
		}
	}
	if attrs["mcp.session.id"] == "" || attrs["mcp.protocol.version"] == "" {
		t.Errorf("no session id or protocol version: %v", attrs)
	}
}
