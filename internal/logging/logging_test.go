package logging_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"chatd/internal/logging"
)

// TestContextAttrs: a line logged with a context carries the run and the trace the context names; one
// logged without carries neither.
func TestContextAttrs(t *testing.T) {
	var buf bytes.Buffer
	log, err := logging.New(&buf, "json", slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("test").Start(context.Background(), "x")
	defer span.End()
	ctx = logging.WithRun(ctx, logging.RunIdentity{RunID: "r1", SessionID: "s1", User: "alice"})
	log.InfoContext(ctx, "with")
	log.Info("without")
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) != 2 {
		t.Fatalf("%d lines: %s", len(lines), buf.Bytes())
	}
	var with, without map[string]any
	json.Unmarshal(lines[0], &with)
	json.Unmarshal(lines[1], &without)
	for k, v := range map[string]string{"run_id": "r1", "session_id": "s1", "user": "alice",
		"trace_id": span.SpanContext().TraceID().String(), "span_id": span.SpanContext().SpanID().String()} {
		if with[k] != v {
			t.Errorf("with a context: %s = %v, want %s", k, with[k], v)
		}
		if _, ok := without[k]; ok {
			t.Errorf("without a context: %s = %v", k, without[k])
		}
	}
	if _, err := logging.New(&buf, "xml", slog.LevelInfo); err == nil {
		t.Error("log format xml accepted")
	}
}
