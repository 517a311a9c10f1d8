// Package logging builds chatd's logger: slog's text or JSON lines, each carrying the identity of the
// run and the trace it belongs to when its context has them (run_id, session_id, user, trace_id,
// span_id), so that one run's lines can be found among every other's.
//
// It knows nothing of chatd's other packages; it imports the OpenTelemetry trace API only to read the
// trace id a context carries (a no-op when tracing is off).
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Formats are the log formats New takes.
var Formats = []string{"text", "json"}

// New returns a logger writing format ("text" or "json") lines of level and above to w.
func New(w io.Writer, format string, level slog.Leveler) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch format {
	case "", "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("log format %q: use text or json", format)
	}
	return slog.New(Handler(h)), nil
}

// Handler wraps h so that a record logged with a context (InfoContext …) carries the context's run
// (WithRun) and trace ids.
func Handler(h slog.Handler) slog.Handler { return &handler{next: h} }

type handler struct{ next slog.Handler }

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	if ctx != nil {
		if id, ok := ctx.Value(runKey{}).(*RunIdentity); ok {
			r.AddAttrs(id.attrs()...)
		}
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
		}
	}
	return h.next.Handle(ctx, r)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler { return &handler{next: h.next.WithAttrs(as)} }
func (h *handler) WithGroup(name string) slog.Handler    { return &handler{next: h.next.WithGroup(name)} }

// RunIdentity names a run in log lines. User is left out when empty.
type RunIdentity struct {
	RunID, SessionID, User string
}

// Attrs are the run's attributes, for a line about a run logged without its context (a run recovered
// or started from a queue).
func (id RunIdentity) Attrs() []any {
	var out []any
	for _, a := range id.attrs() {
		out = append(out, a)
	}
	return out
}

func (id *RunIdentity) attrs() []slog.Attr {
	as := []slog.Attr{slog.String("run_id", id.RunID), slog.String("session_id", id.SessionID)}
	if id.User != "" {
		as = append(as, slog.String("user", id.User))
	}
	return as
}

type runKey struct{}

// WithRun returns ctx carrying the run's identity for the lines logged with it.
func WithRun(ctx context.Context, id RunIdentity) context.Context {
	return context.WithValue(ctx, runKey{}, &id)
}

// RunAttrs are the attributes of the run and trace ctx carries, for a logger bound to them (With).
func RunAttrs(ctx context.Context) []any {
	var out []any
	if id, ok := ctx.Value(runKey{}).(*RunIdentity); ok {
		for _, a := range id.attrs() {
			out = append(out, a)
		}
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		out = append(out, slog.String("trace_id", sc.TraceID().String()))
	}
	return out
}
