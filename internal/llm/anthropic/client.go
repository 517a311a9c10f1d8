// Package anthropic is chatd's adapter for Anthropic's Messages API, streamed: it turns an llm.Request
// into a POST /v1/messages with "stream": true, and the server-sent events of the answer into llm events
// (text, thinking with its signature, redacted thinking, tool calls, the stop reason and the usage). It
// also lists the API's models.
//
// It imports llm, sse and upstream and nothing else of chatd; no Anthropic SDK type is used.
package anthropic

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"time"

	"chatd/internal/llm"
	"chatd/internal/llm/upstream"
)

// DefaultBaseURL is Anthropic's API root, without /v1, as ANTHROPIC_BASE_URL expects.
const DefaultBaseURL = "https://api.anthropic.com"

// APIVersion is the anthropic-version header sent with every request.
const APIVersion = "2023-06-01"

// DefaultMaxTokens is the max_tokens of a request that sets none, the API requiring one; with thinking
// on, the room left for the answer after the thinking budget.
const DefaultMaxTokens = 8192

// Options configure a Client. The zero value talks to Anthropic without a key. Name, default
// "anthropic", is the Message.Origin whose thinking signatures and redacted thinking are sent back;
// BaseURL is the API's root without /v1; the key goes as x-api-key; Headers may replace the default
// anthropic-version.
type Options = upstream.Options

// api is how New sets up the endpoint.
var api = upstream.API{
	Adapter:        "anthropic",
	DefaultName:    "anthropic",
	DefaultBaseURL: DefaultBaseURL,
	Header:         http.Header{"Anthropic-Version": {APIVersion}},
	KeyHeader:      "x-api-key",
	ParseError:     parseError,
}

// Client streams messages from the Messages API. It is safe for concurrent use.
type Client struct {
	name     string
	base     string
	endpoint *upstream.Endpoint
}

var (
	_ llm.Provider    = (*Client)(nil)
	_ llm.ModelLister = (*Client)(nil)
)

// New returns a client for the API at opts.BaseURL.
func New(opts Options) (*Client, error) {
	ep, err := opts.Endpoint(api)
	if err != nil {
		return nil, err
	}
	return &Client{name: ep.Provider, base: ep.Base, endpoint: ep}, nil
}

// Stream sends req and streams the model's answer.
func (c *Client) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		body, err := c.Encode(req)
		if err != nil {
			yield(llm.Event{}, err)
			return
		}
		if req.Encoded != nil {
			req.Encoded(body)
		}
		resp, err := c.endpoint.Post(ctx, c.base+"/v1/messages", body)
		if err != nil {
			yield(llm.Event{}, err)
			return
		}
		defer resp.Close()
		d := decoder{ctx: ctx, provider: c.name, key: c.endpoint.Secret}
		d.run(resp, yield)
	}
}

// encode builds the JSON body of req.
// Encode returns the JSON body Stream sends for req.
func (c *Client) Encode(req *llm.Request) ([]byte, error) {
	wire, err := c.newRequest(req)
	if err != nil {
		return nil, fmt.Errorf("%s: build request: %w", c.name, err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the text goes to an API, not into HTML
	if err := enc.Encode(wire); err != nil {
		return nil, fmt.Errorf("%s: encode request: %w", c.name, err)
	}
	return buf.Bytes(), nil
}

// Models returns the ids of the models the API lists, every page of them.
func (c *Client) Models(ctx context.Context) ([]string, error) {
	return c.endpoint.Models(ctx, upstream.ModelList{URL: c.base + "/v1/models?limit=1000", Cursor: "after_id",
		Decode: decodeModels, MaxPages: 100})
}

// decodeModels reads a page of the model list: while has_more, its last_id asks for the next page.
// An id is listed as the server sends it: it is what the API takes back as "model".
func decodeModels(raw []byte) (ids []string, next string, err error) {
	var page modelList
	if err := json.Unmarshal(raw, &page); err != nil {
		return nil, "", err
	}
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	if !page.HasMore {
		return ids, "", nil
	}
	return ids, page.LastID, nil
}

// parseError reads an error body: {"type":"error","error":{"type":…,"message":…},"request_id":…}.
func parseError(body []byte) (code, message string) {
	var e errorBody
	if json.Unmarshal(body, &e) != nil {
		return "", ""
	}
	return e.Error.Type, cmp.Or(e.Error.Message, e.Message)
}

// inBandError converts an error event sent after HTTP 200. Its kind is the one the same error type
// has as an HTTP answer. The key is removed from its message: a proxy may echo it there.
func inBandError(provider string, e *apiError, key string) *llm.Error {
	out := &llm.Error{Provider: provider, Kind: llm.KindStream, Code: e.Type, Message: upstream.Redact(e.Message, key)}
	if status, ok := errorStatus[e.Type]; ok {
		out.Kind = llm.KindForStatus(status)
	}
	if upstream.IsContextLength(out.Code, out.Message) {
		out.Kind = llm.KindContextLength
	}
	if out.Message == "" {
		out.Message = "the server sent an error without a message"
	}
	return out
}

// errorStatus is the HTTP status of each error type of the API.
var errorStatus = map[string]int{
	"invalid_request_error": http.StatusBadRequest,
	"authentication_error":  http.StatusUnauthorized,
	"billing_error":         http.StatusPaymentRequired,
	"permission_error":      http.StatusForbidden,
	"not_found_error":       http.StatusNotFound,
	"request_too_large":     http.StatusRequestEntityTooLarge,
	"rate_limit_error":      http.StatusTooManyRequests,
	"api_error":             http.StatusInternalServerError,
	"timeout_error":         http.StatusGatewayTimeout,
	"overloaded_error":      529,
}

// Patience is the longest a call may go without a byte under the configured timeouts.
func (c *Client) Patience() time.Duration { return c.endpoint.Patience() }

var _ llm.Patient = (*Client)(nil)
