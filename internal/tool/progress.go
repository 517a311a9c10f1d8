package tool

import (
	"context"
)

// Progress is a report from a running tool: how far it is (Progress of Total, Total 0 when unknown)
// and an optional human line.
type Progress struct {
	Progress float64
	Total    float64
	Message  string
}

type progressKey struct{}

// WithProgress returns a context whose tool calls report progress to f. f must be safe for concurrent
// use and must not block; the caller stops it (it drops late reports) once the call has returned.
func WithProgress(ctx context.Context, f func(Progress)) context.Context {
	return context.WithValue(ctx, progressKey{}, f)
}

// ReportProgress sends p to the reporter of ctx, if it has one.
func ReportProgress(ctx context.Context, p Progress) {
	if f, ok := ctx.Value(progressKey{}).(func(Progress)); ok {
		f(p)
	}
}
