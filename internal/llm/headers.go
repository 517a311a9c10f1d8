package llm

import (
	"context"
	"net/http"
)

type headersKey struct{}

// WithHeaders returns ctx asking the adapters to add headers to the HTTP requests they send for it: f is
// called with each request's headers. Tracing uses it to send the trace context (traceparent) upstream.
func WithHeaders(ctx context.Context, f func(http.Header)) context.Context {
	return context.WithValue(ctx, headersKey{}, f)
}

// AddHeaders adds the headers WithHeaders asked for, if any, to h.
func AddHeaders(ctx context.Context, h http.Header) {
	if f, ok := ctx.Value(headersKey{}).(func(http.Header)); ok {
		f(h)
	}
}
