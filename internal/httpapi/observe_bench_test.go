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

// BenchmarkRequestObserved is the cost a request pays for metrics and tracing: GET /healthz through
// the API's handler (no network) with neither, with metrics, and with metrics and tracing (spans kept
// in memory).
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
			r := httptest.NewRequest("GET", "/healthz", nil)
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, r)
				exp.Reset()
			}
		})
	}
}
