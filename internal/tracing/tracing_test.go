package tracing

import (
	"strings"
	"testing"
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
