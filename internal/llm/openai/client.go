// Package openai is chatd's adapter for the OpenAI Chat Completions streaming API, and so for every server
// that speaks it: OpenAI, Ollama, vLLM, llama.cpp, LiteLLM, OpenRouter and the provider mocks.
//
// It imports llm and sse and nothing else of chatd; no OpenAI SDK type is used.
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"chatd/internal/llm"
)

// DefaultBaseURL is OpenAI's API, /v1 included, as OPENAI_BASE_URL expects.
const DefaultBaseURL = "https://api.openai.com/v1"

// Options configure a Client. The zero value talks to OpenAI without a key.
type Options struct {
	// Name names the provider in errors and logs ("openai", "ollama", a configured name).
	Name    string
	BaseURL string // includes /v1; default DefaultBaseURL
	APIKey  string // sent as a bearer token when set
	Headers map[string]string
	// HTTPClient defaults to a client with connect and response-header timeouts and no overall timeout
	// (a stream may last minutes).
	HTTPClient *http.Client
	// IdleTimeout ends a stream that sends nothing for this long; default 5 minutes (a reasoning model
	// may think a long while between chunks).
	IdleTimeout time.Duration
}

// Client streams chat completions. It is safe for concurrent use.
type Client struct {
	name     string
	endpoint string
	apiKey   string
	headers  http.Header
	http     *http.Client
	idle     time.Duration
	// maxCompletionTokens selects max_completion_tokens over max_tokens (OpenAI itself).
	maxCompletionTokens bool
}

var _ llm.Provider = (*Client)(nil)

// New returns a client for the server at opts.BaseURL.
func New(opts Options) (*Client, error) {
	base := strings.TrimRight(opts.BaseURL, "/")
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("openai: base URL %q is not an http(s) URL", opts.BaseURL)
	}
	c := &Client{
		name:                opts.Name,
		endpoint:            base + "/chat/completions",
		apiKey:              opts.APIKey,
		headers:             make(http.Header),
		http:                opts.HTTPClient,
		idle:                opts.IdleTimeout,
		maxCompletionTokens: u.Hostname() == "api.openai.com",
	}
	if c.name == "" {
		c.name = "openai"
	}
	for k, v := range opts.Headers {
		c.headers.Set(k, v)
	}
	if c.http == nil {
		c.http = defaultHTTPClient()
	}
	if c.idle <= 0 {
		c.idle = 5 * time.Minute
	}
	return c, nil
}

func defaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.ResponseHeaderTimeout = 3 * time.Minute // a long prompt can take a while before the first byte
	return &http.Client{Transport: t}
}

// Stream sends req and streams the model's answer.
func (c *Client) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		// The watchdog cancels the request when the server goes quiet: a hung upstream must not leave a
		// run generating forever.
		reqCtx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		resp, err := c.send(reqCtx, req)
		if err != nil {
			yield(llm.Event{}, err)
			return
		}
		defer resp.Body.Close()
		body := newIdleReader(resp.Body, c.idle, func() { cancel(errIdle) })
		defer body.stop()
		d := decoder{provider: c.name}
		d.run(ctx, body, yield)
	}
}

func (c *Client) send(ctx context.Context, req *llm.Request) (*http.Response, error) {
	wire, err := c.newChatRequest(req)
	if err != nil {
		return nil, fmt.Errorf("%s: build request: %w", c.name, err)
	}
	body, err := json.Marshal(wire)
	if err != nil {
		return nil, fmt.Errorf("%s: encode request: %w", c.name, err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s: new request: %w", c.name, err)
	}
	for k, v := range c.headers {
		hreq.Header[k] = v
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	if c.apiKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.http.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &llm.Error{Provider: c.name, Kind: llm.KindTransport, Message: "cannot reach the server", Err: err}
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, c.statusError(resp)
	}
	return resp, nil
}

// statusError reads an error response into an *llm.Error.
func (c *Client) statusError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &llm.Error{
		Provider:   c.name,
		Kind:       llm.KindForStatus(resp.StatusCode),
		Status:     resp.StatusCode,
		RetryAfter: llm.ParseRetryAfter(resp.Header, time.Now()),
	}
	var body errorBody
	if json.Unmarshal(raw, &body) == nil {
		switch {
		case body.Error != nil:
			e.Message, e.Code = body.Error.Message, errorCode(body.Error)
		case body.Message != "":
			e.Message = body.Message
		case body.Detail != "":
			e.Message = body.Detail
		}
	}
	if e.Message == "" {
		e.Message = strings.TrimSpace(string(raw))
		if len(e.Message) > 300 {
			e.Message = e.Message[:300] + "…"
		}
	}
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	if isContextLength(e.Code, e.Message) {
		e.Kind = llm.KindContextLength
	}
	return e
}

// errorCode is the code of an API error as a string: OpenAI sends a string, some servers a number.
func errorCode(e *apiError) string {
	var s string
	if json.Unmarshal(e.Code, &s) == nil && s != "" {
		return s
	}
	if len(e.Code) > 0 && string(e.Code) != "null" {
		return string(e.Code)
	}
	return e.Type
}

func isContextLength(code, msg string) bool {
	return code == "context_length_exceeded" ||
		strings.Contains(msg, "maximum context length") ||
		strings.Contains(msg, "context length")
}

// inBandError converts an error chunk sent after HTTP 200.
func inBandError(provider string, e *apiError) *llm.Error {
	out := &llm.Error{Provider: provider, Kind: llm.KindStream, Code: errorCode(e), Message: e.Message}
	switch {
	case isContextLength(out.Code, out.Message):
		out.Kind = llm.KindContextLength
	case strings.Contains(out.Code, "rate_limit"):
		out.Kind = llm.KindRateLimit
	case strings.Contains(out.Code, "overloaded") || strings.Contains(e.Type, "overloaded"):
		out.Kind = llm.KindOverloaded
	case e.Type == "server_error" || out.Code == "server_error":
		out.Kind = llm.KindServer
	}
	if out.Message == "" {
		out.Message = "the server sent an error without a message"
	}
	return out
}

// errIdle is the cause of a request the idle watchdog cancelled.
var errIdle = errors.New("idle timeout")

// idleReader calls onIdle when no Read has returned data for the timeout.
type idleReader struct {
	r       io.Reader
	timeout time.Duration
	timer   *time.Timer
	idle    atomic.Bool
}

func newIdleReader(r io.Reader, timeout time.Duration, onIdle func()) *idleReader {
	ir := &idleReader{r: r, timeout: timeout}
	ir.timer = time.AfterFunc(timeout, func() {
		ir.idle.Store(true)
		onIdle()
	})
	return ir
}

func (ir *idleReader) Read(p []byte) (int, error) {
	n, err := ir.r.Read(p)
	if n > 0 {
		ir.timer.Reset(ir.timeout)
	}
	if err != nil && ir.idle.Load() {
		err = fmt.Errorf("the server sent nothing for %s: %w", ir.timeout, errIdle)
	}
	return n, err
}

func (ir *idleReader) stop() { ir.timer.Stop() }

// readError classifies a failure to read the response body.
func readError(ctx context.Context, provider string, err error) error {
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
