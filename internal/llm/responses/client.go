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
	"net/url"
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

// Models returns the ids of the models the key may use, every page of the list.
func (c *Client) Models(ctx context.Context) ([]string, error) {
	const maxPages = 50 // OpenAI answers in one page; the bound guards against a server that loops
	var names []string
	after := ""
	for range maxPages {
		u := c.base + "/models"
		if after != "" {
			u += "?after=" + url.QueryEscape(after)
		}
		raw, err := c.endpoint.Get(ctx, u, 8<<20)
		if err != nil {
			return nil, err
		}
		var page modelList
		if err := json.Unmarshal(raw, &page); err != nil {
			return nil, &llm.Error{Provider: c.name, Kind: llm.KindStream, Message: "cannot decode the model list", Err: err}
		}
		for _, m := range page.Data {
			names = append(names, strings.TrimPrefix(m.ID, "models/"))
		}
		if !page.HasMore || page.LastID == "" || page.LastID == after || len(page.Data) == 0 {
			return names, nil
		}
		after = page.LastID
	}
	return names, nil
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
