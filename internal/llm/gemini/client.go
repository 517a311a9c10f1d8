// Package gemini is chatd's adapter for the Google Generative Language API (Gemini): streamGenerateContent
// over SSE, and the model list. It owns the translation between llm's vocabulary and Gemini's contents,
// parts, thought signatures, finish reasons and usage metadata.
//
// It imports llm, sse and upstream and nothing else of chatd; no Google SDK type is used.
package gemini

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strings"
	"time"

	"chatd/internal/llm"
	"chatd/internal/llm/upstream"
)

// DefaultBaseURL is the Generative Language API's host root, as GEMINI_BASE_URL expects it (no /v1beta).
const DefaultBaseURL = "https://generativelanguage.googleapis.com"

// Options configure a Client. The zero value talks to Google without a key. Name, default "gemini", is
// the Origin of the messages the client writes: thought signatures are sent back only to the provider
// of that name. BaseURL is the host root; the key goes as x-goog-api-key, never in the URL.
type Options = upstream.Options

// api is how New sets up the endpoint.
var api = upstream.API{
	Adapter:        "gemini",
	DefaultName:    "gemini",
	DefaultBaseURL: DefaultBaseURL,
	KeyHeader:      "x-goog-api-key",
	ParseError:     parseError,
	RetryDelay:     retryDelay,
}

// Client streams Gemini generations. It is safe for concurrent use.
type Client struct {
	name string
	base string
	ep   *upstream.Endpoint
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
	return &Client{name: ep.Provider, base: ep.Base, ep: ep}, nil
}

// Stream sends req and streams the model's answer.
func (c *Client) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		payload, err := c.Encode(req)
		if err != nil {
			yield(llm.Event{}, err)
			return
		}
		if req.Encoded != nil {
			req.Encoded(payload)
		}
		u := c.base + "/v1beta/models/" + url.PathEscape(modelID(req.Model)) + ":streamGenerateContent?alt=sse"
		body, err := c.ep.Post(ctx, u, payload)
		if err != nil {
			yield(llm.Event{}, keyError(err))
			return
		}
		defer body.Close()
		d := decoder{provider: c.name, key: c.ep.Secret}
		d.run(ctx, body, yield)
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
	enc.SetEscapeHTML(false) // the text goes to an API, not into HTML: no \u003c for every "<"
	if err := enc.Encode(wire); err != nil {
		return nil, fmt.Errorf("%s: encode request: %w", c.name, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// modelID is the model's name without the "models/" prefix the API's own names carry.
func modelID(model string) string {
	return strings.TrimPrefix(model, "models/")
}

// reasonKeyInvalid is the ErrorInfo reason of a request whose API key the API does not know.
const reasonKeyInvalid = "API_KEY_INVALID"

// parseError reads Gemini's error body: its status as the code, or API_KEY_INVALID when an ErrorInfo
// detail gives that reason, and its message.
func parseError(body []byte) (code, message string) {
	if e := parseErrorBody(body); e != nil {
		if e.hasReason(reasonKeyInvalid) {
			return reasonKeyInvalid, e.Message
		}
		return e.Status, e.Message
	}
	return "", ""
}

// keyError makes a bad API key an auth error. Gemini answers it with HTTP 400 INVALID_ARGUMENT, which
// the status alone would call an invalid request; it is the configured key that is wrong.
func keyError(err error) error {
	if e, ok := errors.AsType[*llm.Error](err); ok && e.Status == http.StatusBadRequest && e.Code == reasonKeyInvalid {
		e.Kind = llm.KindAuth
	}
	return err
}

// retryDelay reads the RetryInfo delay of an error body: Gemini says when to retry there, not in a
// header.
func retryDelay(body []byte) time.Duration {
	if e := parseErrorBody(body); e != nil {
		return e.retryDelay()
	}
	return 0
}

// Models returns the names of the models that generate content, all pages of the list, without the
// "models/" prefix of the API's names.
func (c *Client) Models(ctx context.Context) ([]string, error) {
	ids, err := c.ep.Models(ctx, upstream.ModelList{URL: c.base + "/v1beta/models?pageSize=1000", Cursor: "pageToken",
		Decode: decodeModels, TrimPrefix: "models/"})
	return ids, keyError(err)
}

// decodeModels reads a page of the model list, keeping the models that generate content.
func decodeModels(raw []byte) (names []string, next string, err error) {
	var page modelList
	if err := json.Unmarshal(raw, &page); err != nil {
		return nil, "", err
	}
	for _, m := range page.Models {
		if m.generates() {
			names = append(names, m.Name)
		}
	}
	return names, page.NextPageToken, nil
}

// generates reports whether a listed model serves generateContent; a server that does not list the
// methods (a proxy, a mock) is taken at its word.
func (m *listedModel) generates() bool {
	if m.SupportedGenerationMethods == nil {
		return true
	}
	for _, s := range m.SupportedGenerationMethods {
		if s == "generateContent" || s == "streamGenerateContent" {
			return true
		}
	}
	return false
}

// parseErrorBody reads Gemini's error body, {"error": {code, message, status, details}}. The streaming
// endpoint may wrap it in an array, as it does its chunks with alt=json. It returns nil for anything
// else.
func parseErrorBody(body []byte) *apiError {
	var one errorBody
	if json.Unmarshal(body, &one) == nil && one.Error != nil {
		return one.Error
	}
	var many []errorBody
	if json.Unmarshal(body, &many) == nil && len(many) > 0 && many[0].Error != nil {
		return many[0].Error
	}
	return nil
}

// The @types of the details chatd reads: when to retry, and why the request failed.
const (
	retryInfoType = "type.googleapis.com/google.rpc.RetryInfo"
	errorInfoType = "type.googleapis.com/google.rpc.ErrorInfo"
)

// hasReason reports whether one of the error's ErrorInfo details gives reason.
func (e *apiError) hasReason(reason string) bool {
	for _, raw := range e.Details {
		var d errorDetail
		if json.Unmarshal(raw, &d) == nil && d.Type == errorInfoType && d.Reason == reason {
			return true
		}
	}
	return false
}

// retryDelay returns the RetryInfo delay of the error's details ("7s", "34.4s": a protobuf Duration in
// JSON), or 0.
func (e *apiError) retryDelay() time.Duration {
	for _, raw := range e.Details {
		var d errorDetail
		if json.Unmarshal(raw, &d) != nil || d.Type != retryInfoType {
			continue
		}
		if v, err := time.ParseDuration(d.RetryDelay); err == nil && v > 0 {
			return v
		}
	}
	return 0
}

// inBandError converts an {"error": …} chunk sent after HTTP 200. Its kind follows the error's status
// the way the HTTP status would have classified it. The key is removed from its message: a proxy may
// echo it there.
func inBandError(provider string, e *apiError, key string) *llm.Error {
	out := &llm.Error{Provider: provider, Kind: llm.KindStream, Code: e.Status, Message: upstream.Redact(e.Message, key),
		RetryAfter: e.retryDelay()}
	switch {
	case e.Status == "UNAVAILABLE" || e.Code == http.StatusServiceUnavailable:
		out.Kind = llm.KindOverloaded
	case e.Status == "RESOURCE_EXHAUSTED" || e.Code == http.StatusTooManyRequests:
		out.Kind = llm.KindRateLimit
	case e.Status == "INTERNAL" || e.Code >= 500:
		out.Kind = llm.KindServer
	case upstream.IsContextLength(e.Status, e.Message):
		out.Kind = llm.KindContextLength
	}
	if out.Code == "" && e.Code != 0 {
		out.Code = fmt.Sprint(e.Code)
	}
	if out.Message == "" {
		out.Message = "the server sent an error without a message"
	}
	return out
}

// Patience is the longest a call may go without a byte under the configured timeouts.
func (c *Client) Patience() time.Duration { return c.ep.Patience() }

var _ llm.Patient = (*Client)(nil)
