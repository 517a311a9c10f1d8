package llm

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// ErrorKind classifies an upstream failure.
type ErrorKind string

// Kinds of upstream failures.
const (
	KindRateLimit     ErrorKind = "rate_limit"      // 429
	KindOverloaded    ErrorKind = "overloaded"      // 503/529, "overloaded" in-band errors
	KindServer        ErrorKind = "server"          // other 5xx
	KindAuth          ErrorKind = "auth"            // 401, 403
	KindInvalid       ErrorKind = "invalid_request" // other 4xx
	KindNotFound      ErrorKind = "not_found"       // 404: unknown model or endpoint
	KindContextLength ErrorKind = "context_length"  // the request does not fit the model's window
	KindTransport     ErrorKind = "transport"       // connection refused, reset, timeout
	KindStream        ErrorKind = "stream"          // the stream broke: bad JSON, in-band error, EOF too early
)

// Error is an upstream provider failure.
type Error struct {
	Provider   string
	Kind       ErrorKind
	Status     int           // HTTP status; 0 for transport and in-stream failures
	Code       string        // the provider's error code or type, when it sent one
	Message    string        // the provider's message, safe to show (never holds the key)
	RetryAfter time.Duration // from the retry-after header; 0 when absent
	Err        error         // the underlying cause, if any
}

func (e *Error) Error() string {
	msg := e.Public()
	if e.Err != nil && e.Message != "" {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Public describes the failure without its underlying cause, which may name internal addresses: the
// text for API clients. Error adds the cause, for the log.
func (e *Error) Public() string {
	msg := e.Message
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	if e.Status != 0 {
		return fmt.Sprintf("%s: %s (HTTP %d): %s", e.Provider, e.Kind, e.Status, msg)
	}
	return fmt.Sprintf("%s: %s: %s", e.Provider, e.Kind, msg)
}

func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether the same request may succeed when sent again later.
func (e *Error) Retryable() bool {
	switch e.Kind {
	case KindRateLimit, KindOverloaded, KindServer, KindTransport:
		return true
	}
	return false
}

// KindForStatus maps an HTTP status to an error kind.
func KindForStatus(status int) ErrorKind {
	switch {
	case status == http.StatusTooManyRequests:
		return KindRateLimit
	case status == http.StatusServiceUnavailable || status == 529:
		return KindOverloaded
	case status >= 500:
		return KindServer
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return KindAuth
	case status == http.StatusNotFound:
		return KindNotFound
	case status == http.StatusRequestEntityTooLarge:
		return KindContextLength
	}
	return KindInvalid
}

// ParseRetryAfter reads a retry-after header: delay seconds or an HTTP date. It returns 0 when absent or
// unparsable. retry-after-ms (OpenAI, Anthropic) wins when present.
func ParseRetryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("retry-after")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
