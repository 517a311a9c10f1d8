package tracing

import (
	"log/slog"
	"strings"
	"sync"
	"time"
)

// ErrorHandler is the OpenTelemetry SDK's error handler (otel.SetErrorHandler) that writes to log
// rather than to the standard library's logger, which the SDK falls back to. A collector that is down
// fails every export: the handler writes at most one line an interval, the next saying how many it left
// out. A line holds no response body (an exporter's error quotes the collector's answer, which is not
// ours to log) and at most maxErrorText bytes of the error.
type ErrorHandler struct {
	log      *slog.Logger
	interval time.Duration
	now      func() time.Time

	mu      sync.Mutex
	last    time.Time
	dropped int
}

// maxErrorText bounds the error's text in a line.
const maxErrorText = 300

// NewErrorHandler returns a handler writing to log at most once an interval; now is the clock (nil:
// time.Now).
func NewErrorHandler(log *slog.Logger, interval time.Duration, now func() time.Time) *ErrorHandler {
	if now == nil {
		now = time.Now
	}
	return &ErrorHandler{log: log, interval: interval, now: now}
}

// Handle logs err, unless a line was written less than an interval ago.
func (h *ErrorHandler) Handle(err error) {
	if err == nil {
		return
	}
	h.mu.Lock()
	now := h.now()
	if !h.last.IsZero() && now.Sub(h.last) < h.interval {
		h.dropped++
		h.mu.Unlock()
		return
	}
	dropped := h.dropped
	h.last, h.dropped = now, 0
	h.mu.Unlock()
	attrs := []any{"err", errorText(err)}
	if dropped > 0 {
		attrs = append(attrs, "errors_not_logged", dropped)
	}
	h.log.Warn("tracing: the OpenTelemetry SDK failed", attrs...)
}

// errorText is err's text without a response body, cut at maxErrorText bytes.
func errorText(err error) string {
	s := err.Error()
	if i := strings.Index(s, "body:"); i >= 0 {
		s = strings.TrimRight(s[:i], " (:") + " (response body not logged)"
	}
	return cut(s, maxErrorText)
}
