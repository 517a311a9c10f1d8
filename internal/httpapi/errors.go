package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"chatd/internal/auth"
	"chatd/internal/chat"
	"chatd/internal/runevent"
	"chatd/internal/store"
)

// apiError is a failure with its HTTP status, a stable code and a message safe to show the caller.
type apiError struct {
	status  int
	code    string
	message string
	extra   map[string]any // more fields of the error object, e.g. the active run_id
	// retryAfter, when set, is the Retry-After of a 429, in seconds.
	retryAfter int64
}

func (e *apiError) Error() string { return e.message }

// handle adapts a handler that returns an error.
func (s *server) handle(h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// writeError is the one mapping from errors to HTTP: the caller gets a status, a code and a safe message;
// the log gets the cause of anything unexpected.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := toAPIError(err)
	if le, ok := errors.AsType[*store.LimitError](err); ok {
		e = s.limitError(r.Context(), le)
	}
	switch {
	case e.status == http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="chatd"`)
	case e.retryAfter > 0:
		w.Header().Set("Retry-After", strconv.FormatInt(e.retryAfter, 10))
	}
	if e.status >= 500 {
		s.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	body := map[string]any{"code": e.code, "message": e.message}
	for k, v := range e.extra {
		body[k] = v
	}
	writeJSON(w, e.status, map[string]any{"error": body})
}

func toAPIError(err error) *apiError {
	if e, ok := errors.AsType[*apiError](err); ok {
		return e
	}
	if e, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return &apiError{status: http.StatusRequestEntityTooLarge, code: "body_too_large",
			message: "the request body is larger than the limit of " + byteSize(e.Limit)}
	}
	if e, ok := errors.AsType[*auth.Error](err); ok {
		return authError(e)
	}
	if e, ok := errors.AsType[*chat.Error](err); ok {
		out := &apiError{status: http.StatusBadRequest, code: e.Code, message: e.Message}
		switch {
		case errors.Is(e, store.ErrNotFound):
			out.status = http.StatusNotFound
		case errors.Is(e, chat.ErrForbidden):
			out.status = http.StatusForbidden
		case errors.Is(e, chat.ErrBusy), errors.Is(e, chat.ErrKeyReused), errors.Is(e, chat.ErrConflict):
			out.status = http.StatusConflict
			if e.RunID != "" {
				out.extra = map[string]any{"run_id": e.RunID}
			}
		case errors.Is(e, chat.ErrClosed):
			out.status = http.StatusServiceUnavailable
		}
		return out
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return &apiError{status: http.StatusNotFound, code: "not_found", message: "not found"}
	case errors.Is(err, store.ErrConflict):
		return &apiError{status: http.StatusConflict, code: "conflict", message: "the request conflicts with the current state"}
	}
	return &apiError{status: http.StatusInternalServerError, code: "internal", message: "internal error; the server log has the details"}
}

// runErrorStatus is the status of POST /v1/chat for a run that failed: 502 when its model provider
// failed (an upstream_ code), else 500. The answer still carries the run, since the message is stored.
func runErrorStatus(e *runevent.Error) int {
	if strings.HasPrefix(e.Code, "upstream_") {
		return http.StatusBadGateway
	}
	return http.StatusInternalServerError
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return itoa(n>>20) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return itoa(n>>10) + " KiB"
	}
	return itoa(n) + " bytes"
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(b, '\n')) // a failed write means the client is gone: nothing left to tell it
	return nil
}
