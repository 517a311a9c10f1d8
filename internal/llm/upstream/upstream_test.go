package upstream

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"chatd/internal/llm"
)

func TestStatusError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/header":
			w.Header().Set("retry-after", "3")
			http.Error(w, `{"msg":"slow down","delay":9}`, http.StatusTooManyRequests)
		case "/body":
			http.Error(w, `{"msg":"slow down","delay":9}`, http.StatusTooManyRequests)
		case "/long":
			http.Error(w, `{"msg":"prompt is too long: 210000 tokens > 200000 maximum"}`, http.StatusBadRequest)
		default:
			http.Error(w, "", http.StatusBadGateway)
		}
	}))
	defer srv.Close()
	e := NewEndpoint("p", Timeouts{}, http.Header{"X-Key": {"secret"}}, func(body []byte) (string, string) {
		_, msg, _ := strings.Cut(string(body), `"msg":"`)
		msg, _, _ = strings.Cut(msg, `"`)
		return "", msg
	})
	e.RetryDelay = func([]byte) time.Duration { return 9 * time.Second }
	for path, want := range map[string]llm.Error{
		"/header": {Kind: llm.KindRateLimit, Status: 429, Message: "slow down", RetryAfter: 3 * time.Second},
		"/body":   {Kind: llm.KindRateLimit, Status: 429, Message: "slow down", RetryAfter: 9 * time.Second},
		"/long":   {Kind: llm.KindContextLength, Status: 400, Message: "prompt is too long: 210000 tokens > 200000 maximum", RetryAfter: 9 * time.Second},
		"/empty":  {Kind: llm.KindServer, Status: 502, Message: "Bad Gateway", RetryAfter: 9 * time.Second},
	} {
		_, err := e.Post(t.Context(), srv.URL+path, []byte(`{}`))
		got, ok := errors.AsType[*llm.Error](err)
		if !ok || got.Kind != want.Kind || got.Status != want.Status || got.Message != want.Message || got.RetryAfter != want.RetryAfter || got.Provider != "p" {
			t.Errorf("%s: %#v, want %+v", path, err, want)
		}
	}
}

// TestTransportError: a server that cannot be reached is a retryable transport error whose public
// text names no address.
func TestTransportError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = NewEndpoint("p", Timeouts{}, nil, nil).Post(t.Context(), "http://"+addr+"/v1", []byte(`{}`))
	e, ok := errors.AsType[*llm.Error](err)
	if !ok || e.Kind != llm.KindTransport || !e.Retryable() || strings.Contains(e.Public(), "127.0.0.1") {
		t.Errorf("error %v (public %q)", err, e.Public())
	}
}

// TestIdleWatchdog: a stream that goes quiet ends with a transport error after the idle timeout.
func TestIdleWatchdog(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("data: {}\n\n"))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	body, err := NewEndpoint("p", Timeouts{Idle: 50 * time.Millisecond}, nil, nil).Post(t.Context(), srv.URL, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	buf := make([]byte, 64)
	var readErr error
	for readErr == nil {
		_, readErr = body.Read(buf)
	}
	e, ok := errors.AsType[*llm.Error](body.ReadError(readErr))
	if !ok || e.Kind != llm.KindTransport || !strings.Contains(e.Message, "sent nothing for 50ms") {
		t.Errorf("read error %v → %v", readErr, body.ReadError(readErr))
	}
}

func TestIsContextLength(t *testing.T) {
	for _, msg := range []string{
		"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
		"prompt is too long: 210000 tokens > 200000 maximum",
		"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
		"Requested tokens exceed context window of 8192",
	} {
		if !IsContextLength("", msg) {
			t.Errorf("not recognised: %q", msg)
		}
	}
	if IsContextLength("", "Invalid API key") || !IsContextLength("context_length_exceeded", "") {
		t.Error("codes and other messages")
	}
}

// TestSecretRedacted: an error body that echoes the key never carries it into the error.
func TestSecretRedacted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad key sk-live-123456 given", http.StatusUnauthorized)
	}))
	defer srv.Close()
	e := NewEndpoint("p", Timeouts{}, nil, nil)
	e.Secret = "sk-live-123456"
	_, err := e.Post(t.Context(), srv.URL, []byte(`{}`))
	if got, ok := errors.AsType[*llm.Error](err); !ok || got.Message != "bad key [redacted] given" || got.Kind != llm.KindAuth {
		t.Errorf("error %v", err)
	}
}
