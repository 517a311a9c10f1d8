package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"chatd/internal/httpapi"
	"chatd/internal/metrics"
	"chatd/internal/tracing"
)

// BenchmarkRequestObserved is the cost a request pays for metrics and tracing: GET /v1/models (no
// catalog: an empty list) through the API's handler, without network, with neither, with metrics, and
// with metrics and tracing (spans kept in memory). Probes (/healthz) are not traced, so not measured.
func BenchmarkRequestObserved(b *testing.B) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(b.Context())
	for _, c := range []struct {
		name string
		opts httpapi.Options
	}{
		{"plain", httpapi.Options{}},
		{"metrics", httpapi.Options{Metrics: metrics.New()}},
		{"metrics+tracing", httpapi.Options{Metrics: metrics.New(), Tracing: tracing.New(tp, false)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			h := httpapi.New(c.opts)
			r := httptest.NewRequest("GET", "http://localhost/v1/models", nil)
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, r)
				exp.Reset()
			}
			if w.bytes == 0 {
				b.Fatal("no answer")
			}
		})
	}
}
