// Package upstream is the HTTP side every provider adapter shares: the Options each adapter takes and
// the endpoint they configure, a client with connect and first-byte timeouts, posting one streamed
// request, the watchdog that ends a stream gone quiet, the reading of an error response into an
// *llm.Error, and paging through a model list. What the bytes mean is each adapter's business.
//
// It imports llm and the standard library only.
package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"chatd/internal/llm"
)

// Default timeouts.
const (
	DefaultConnectTimeout   = 10 * time.Second
	DefaultFirstByteTimeout = 3 * time.Minute // a long prompt can take a while before the first byte
	DefaultIdleTimeout      = 5 * time.Minute // a reasoning model may think long between chunks
)

// Timeouts bound a model call. The zero value of each means its default.
type Timeouts struct {
	Connect   time.Duration // to open the connection
	FirstByte time.Duration // from sending the request to the response's headers
	Idle      time.Duration // between two reads of the streamed body
}

func (t Timeouts) withDefaults() Timeouts {
	if t.Connect <= 0 {
		t.Connect = DefaultConnectTimeout
	}
	if t.FirstByte <= 0 {
		t.FirstByte = DefaultFirstByteTimeout
	}
	if t.Idle <= 0 {
		t.Idle = DefaultIdleTimeout
	}
	return t
}

// maxIdleConns is how many idle connections a provider's client keeps, to each host and in all.
const maxIdleConns = 1024

// The buffers of an upstream connection: see NewHTTPClient.
const (
	readBufferSize  = 2 << 10
	writeBufferSize = 1 << 10
)

// NewHTTPClient returns a client with t's connect and first-byte timeouts and no overall timeout: a
// stream may last minutes.
func NewHTTPClient(t Timeouts) *http.Client {
	t = t.withDefaults()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: t.Connect, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = t.Connect
	tr.ResponseHeaderTimeout = t.FirstByte
	// Keep a connection for every stream that may run at once: with the default two per host, each
	// stream beyond two to one HTTP/1.1 upstream (vLLM, Ollama, a local gateway) would dial again, and
	// each to a TLS upstream without HTTP/2 would shake hands again, before its first token.
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = maxIdleConns, maxIdleConns
	// An HTTP/1.1 connection holds its buffers for as long as a stream is open, and the default 4 KB each
	// way is more than a stream needs: the write buffer takes only a request's headers (the body is
	// written straight through), and the stream's reader (internal/sse) buffers again what it reads.
	tr.ReadBufferSize, tr.WriteBufferSize = readBufferSize, writeBufferSize
	return &http.Client{Transport: tr}
}

// ErrorParser reads a provider's error body: its error code (or type) and message. Either may be empty.
type ErrorParser func(body []byte) (code, message string)

// Endpoint posts streamed requests for one provider.
type Endpoint struct {
	Provider string // names the provider in errors
	Base     string // the API's root without a trailing slash, as Options.Endpoint checked it
	HTTP     *http.Client
	Idle     time.Duration
	// FirstByte is the HTTP client's wait for the response's headers, as configured.
	FirstByte time.Duration
	// Header is sent with every request (authentication, API version, configured extra headers).
	Header http.Header
	// ParseError reads error bodies; nil keeps the body's text (cut) as the message.
	ParseError ErrorParser
	// Secret is removed from every error message: an error body may echo the request's key.
	Secret string
	// RetryDelay, when set, reads when to retry from an error body that no retry-after header
	// answered (Gemini puts it in the body's RetryInfo).
	RetryDelay func(body []byte) time.Duration
}

// NewEndpoint returns an endpoint with a client built from t.
func NewEndpoint(provider string, t Timeouts, header http.Header, parse ErrorParser) *Endpoint {
	t = t.withDefaults()
	return &Endpoint{Provider: provider, HTTP: NewHTTPClient(t), Idle: t.Idle, FirstByte: t.FirstByte, Header: header, ParseError: parse}
}

// Post sends body as JSON to url and returns the streamed response. A non-2xx answer is an *llm.Error;
// a failure to connect is an *llm.Error of kind transport; a cancelled ctx is ctx's error.
func (e *Endpoint) Post(ctx context.Context, url string, body []byte) (*Body, error) {
	// The watchdog cancels the request when the server goes quiet: a hung upstream must not leave a run
	// generating forever.
	reqCtx, cancel := context.WithCancelCause(ctx)
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		cancel(nil)
		return nil, fmt.Errorf("%s: new request: %w", e.Provider, err)
	}
	for k, v := range e.Header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	llm.AddHeaders(ctx, req.Header) // the trace context, when the call is traced
	resp, err := e.HTTP.Do(req)
	if err != nil {
		cancel(nil)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &llm.Error{Provider: e.Provider, Kind: llm.KindTransport, Message: transportMessage(err), Err: err}
	}
	if resp.StatusCode/100 != 2 {
		defer cancel(nil)
		defer resp.Body.Close()
		return nil, e.StatusError(resp)
	}
	b := &Body{provider: e.Provider, ctx: ctx, resp: resp, cancel: cancel, timeout: e.idle()}
	// A watchdog, not a timer reset at every read: a read that brings bytes costs a clock read and an
	// atomic store, on the per-token path.
	b.dog = llm.NewWatchdog(b.timeout, func() { cancel(errIdle) })
	return b, nil
}

// Get fetches url (a model list) and returns its body, at most limit bytes. A non-2xx answer is an
// *llm.Error.
func (e *Endpoint) Get(ctx context.Context, url string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: new request: %w", e.Provider, err)
	}
	for k, v := range e.Header {
		req.Header[k] = v
	}
	resp, err := e.HTTP.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &llm.Error{Provider: e.Provider, Kind: llm.KindTransport, Message: transportMessage(err), Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, e.StatusError(resp)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, &llm.Error{Provider: e.Provider, Kind: llm.KindStream, Message: "cannot read the answer", Err: err}
	}
	if int64(len(raw)) > limit {
		return nil, &llm.Error{Provider: e.Provider, Kind: llm.KindStream, Message: fmt.Sprintf("the answer is over %d bytes", limit)}
	}
	return raw, nil
}

// Patience is the longest a call may go without a byte under the endpoint's timeouts: what
// llm.Patient reports.
func (e *Endpoint) Patience() time.Duration {
	return max(e.idle(), e.FirstByte)
}

// Host returns the host name of the API's root.
func (e *Endpoint) Host() string {
	u, err := url.Parse(e.Base)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

func (e *Endpoint) idle() time.Duration {
	if e.Idle <= 0 {
		return DefaultIdleTimeout
	}
	return e.Idle
}

// transportMessage says what went wrong reaching the server without naming its address.
func transportMessage(err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "the server did not answer in time"
	case strings.Contains(err.Error(), "connection refused"):
		return "the server refused the connection"
	}
	return "cannot reach the server"
}

// StatusError reads a non-2xx response into an *llm.Error.
func (e *Endpoint) StatusError(resp *http.Response) *llm.Error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	out := &llm.Error{
		Provider:   e.Provider,
		Kind:       llm.KindForStatus(resp.StatusCode),
		Status:     resp.StatusCode,
		RetryAfter: llm.ParseRetryAfter(resp.Header, time.Now()),
	}
	if e.ParseError != nil {
		out.Code, out.Message = e.ParseError(raw)
	}
	if out.RetryAfter == 0 && e.RetryDelay != nil {
		out.RetryAfter = e.RetryDelay(raw)
	}
	if out.Message == "" {
		out.Message = cut(strings.TrimSpace(string(raw)), 300)
	}
	if out.Message == "" {
		out.Message = http.StatusText(resp.StatusCode)
	}
	out.Message = Redact(out.Message, e.Secret)
	if IsContextLength(out.Code, out.Message) {
		out.Kind = llm.KindContextLength
	}
	return out
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// IsContextLength reports whether an error's code or message says the prompt does not fit the model's
// window, in the words of OpenAI, Anthropic, Gemini and the common compatible servers.
func IsContextLength(code, msg string) bool {
	if code == "context_length_exceeded" {
		return true
	}
	m := strings.ToLower(msg)
	return strings.Contains(m, "maximum context length") ||
		strings.Contains(m, "context length") ||
		strings.Contains(m, "context window") ||
		strings.Contains(m, "prompt is too long") ||
		strings.Contains(m, "input token count") && strings.Contains(m, "exceeds")
}

// errIdle is the cause of a request the idle watchdog cancelled.
var errIdle = errors.New("idle timeout")

// Body is a streamed response body read under the idle watchdog. Close it when done.
type Body struct {
	provider string
	ctx      context.Context // the caller's: its end is not the server's failure
	resp     *http.Response
	cancel   context.CancelCauseFunc
	timeout  time.Duration
	dog      *llm.Watchdog
}

// Header returns the response's headers.
func (b *Body) Header() http.Header { return b.resp.Header }

func (b *Body) Read(p []byte) (int, error) {
	n, err := b.resp.Body.Read(p)
	if n > 0 {
		b.dog.Poke()
	}
	if err != nil && b.dog.Fired() {
		err = fmt.Errorf("the server sent nothing for %s: %w", b.timeout, errIdle)
	}
	return n, err
}

// Close stops the watchdog and closes the connection.
func (b *Body) Close() error {
	b.dog.Stop()
	err := b.resp.Body.Close()
	b.cancel(nil)
	return err
}

// ReadError classifies a failure to read the body: the caller's cancellation as ctx's error, the
// watchdog as a transport error, anything else as a broken stream.
func (b *Body) ReadError(err error) error {
	return ReadError(b.ctx, b.provider, err)
}

// ReadError classifies a failure to read a streamed body; see Body.ReadError.
func ReadError(ctx context.Context, provider string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, errIdle) {
		return &llm.Error{Provider: provider, Kind: llm.KindTransport, Message: err.Error()}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return err
	}
	return &llm.Error{Provider: provider, Kind: llm.KindStream, Message: "the stream broke", Err: err}
}

// Cut returns the error for a stream that ended before the model finished.
func Cut(provider string) error {
	return &llm.Error{Provider: provider, Kind: llm.KindStream, Message: "the stream ended before the model finished"}
}

// baseURL returns raw without trailing slashes, or def when raw is empty, and its host name. It is an
// error unless the URL is http(s) with a host.
func baseURL(adapter, raw, def string) (base, host string, err error) {
	base = strings.TrimRight(raw, "/")
	if base == "" {
		base = def
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", "", fmt.Errorf("%s: base URL %q is not an http(s) URL", adapter, raw)
	}
	return base, u.Hostname(), nil
}

// minSecret is the shortest key Redact hides; real API keys are much longer.
const minSecret = 6

// Redact removes secret from s: an error body may echo the request's key.
func Redact(s, secret string) string {
	if len(secret) < minSecret {
		// Not a real key (a test's "k", a local server's "x"): replacing it would garble the text
		// without hiding anything.
		return s
	}
	return strings.ReplaceAll(s, secret, "[redacted]")
}
