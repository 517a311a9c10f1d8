// Package responses is chatd's adapter for the OpenAI Responses streaming API (POST /responses), the API
// of OpenAI's reasoning models: it streams reasoning summaries and hands back each reasoning item's
// encrypted content, which later turns send back so the model keeps its chain of thought across tool
// calls without OpenAI storing anything (store is always false).
//
// It owns the translation between llm's vocabulary and the Responses wire format: the request
// (convert.go), the event stream (stream.go), the model list and the error bodies. It imports llm, sse
// and upstream and nothing else of chatd; no OpenAI SDK type is used.
package responses

import (
	"context"
	"encoding/json"
	"iter"
	"strings"
	"time"

	"chatd/internal/llm"
	"chatd/internal/llm/upstream"
)

// DefaultBaseURL is OpenAI's API, /v1 included, as OPENAI_BASE_URL expects.
const DefaultBaseURL = "https://api.openai.com/v1"

// Options configure a Client. The zero value talks to OpenAI without a key. Name, default
// "openai-responses", is the Origin of the messages the client writes: their reasoning items are sent
// back only to a client of the same name. BaseURL includes /v1; the key goes as a bearer token.
type Options = upstream.Options

// api is how New sets up the endpoint.
var api = upstream.API{
	Adapter:        "responses",
	DefaultName:    "openai-responses",
	DefaultBaseURL: DefaultBaseURL,
	KeyHeader:      "Authorization",
	KeyPrefix:      "Bearer ",
	ParseError:     parseError,
}

// Client streams responses. It is safe for concurrent use.
type Client struct {
	name     string
	base     string
	endpoint *upstream.Endpoint
	key      string // removed from the messages of in-stream errors
}

var (
	_ llm.Provider    = (*Client)(nil)
	_ llm.ModelLister = (*Client)(nil)
)

// New returns a client for the server at opts.BaseURL.
func New(opts Options) (*Client, error) {
	ep, err := opts.Endpoint(api)
	if err != nil {
		return nil, err
	}
	return &Client{name: ep.Provider, base: ep.Base, endpoint: ep, key: opts.APIKey}, nil
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
		resp, err := c.endpoint.Post(ctx, c.base+"/responses", body)
		if err != nil {
			yield(llm.Event{}, err)
			return
		}
		defer resp.Close()
		d := decoder{provider: c.name, key: c.key}
		d.run(ctx, resp, yield)
	}
}

// Models returns the ids of the models the key may use, every page of the list. A compatible server's
// "models/" prefix is trimmed, as Gemini's names carry it.
func (c *Client) Models(ctx context.Context) ([]string, error) {
	return c.endpoint.Models(ctx, upstream.ModelList{URL: c.base + "/models", Cursor: "after",
		Decode: decodeModels, TrimPrefix: "models/"})
}

// decodeModels reads a page of the model list: while has_more, its last_id asks for the next page; an
// empty page ends the list whatever it says.
func decodeModels(raw []byte) (ids []string, next string, err error) {
	var page modelList
	if err := json.Unmarshal(raw, &page); err != nil {
		return nil, "", err
	}
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	if !page.HasMore || len(page.Data) == 0 {
		return ids, "", nil
	}
	return ids, page.LastID, nil
}

// parseError reads OpenAI's error body, {"error":{"message","type","param","code"}}: the code, or the
// type when the code is null.
// The endpoint removes the key from the message (Endpoint.Secret).
func parseError(body []byte) (code, message string) {
	var b errorBody
	if json.Unmarshal(body, &b) != nil {
		return "", ""
	}
	if b.Error != nil {
		return b.Error.code(), b.Error.Message
	}
	return "", b.Message
}

// streamError converts a failure the server reported inside the stream: an error event or a failed
// response.
func streamError(provider string, e *apiError, key string) *llm.Error {
	out := &llm.Error{Provider: provider, Kind: llm.KindStream, Code: e.code(), Message: upstream.Redact(e.Message, key)}
	switch {
	case upstream.IsContextLength(out.Code, out.Message):
		out.Kind = llm.KindContextLength
	case out.Code == "rate_limit_exceeded":
		out.Kind = llm.KindRateLimit
	case strings.Contains(out.Code, "overloaded"):
		out.Kind = llm.KindOverloaded
	case out.Code == "server_error":
		out.Kind = llm.KindServer
	}
	if out.Message == "" {
		out.Message = "the server reported an error without a message"
	}
	return out
}

// Patience is the longest a call may go without a byte under the configured timeouts.
func (c *Client) Patience() time.Duration { return c.endpoint.Patience() }

var _ llm.Patient = (*Client)(nil)
