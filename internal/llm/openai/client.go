// Package openai is chatd's adapter for the OpenAI Chat Completions streaming API, and so for every server
// that speaks it: OpenAI, Ollama, vLLM, llama.cpp, LiteLLM, OpenRouter and the provider mocks.
//
// It imports llm, sse and upstream and nothing else of chatd; no OpenAI SDK type is used.
package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"strings"
	"time"

	"chatd/internal/llm"
	"chatd/internal/llm/upstream"
)

// DefaultBaseURL is OpenAI's API, /v1 included, as OPENAI_BASE_URL expects.
const DefaultBaseURL = "https://api.openai.com/v1"

// Options configure a Client. The zero value talks to OpenAI without a key. Name ("openai", "ollama", a
// configured name) defaults to "openai"; BaseURL includes /v1; the key goes as a bearer token.
type Options = upstream.Options

// api is how New sets up the endpoint.
var api = upstream.API{
	Adapter:        "openai",
	DefaultName:    "openai",
	DefaultBaseURL: DefaultBaseURL,
	KeyHeader:      "Authorization",
	KeyPrefix:      "Bearer ",
	ParseError:     parseError,
}

// Client streams chat completions. It is safe for concurrent use.
type Client struct {
	name     string
	base     string
	endpoint *upstream.Endpoint
	// maxCompletionTokens selects max_completion_tokens over max_tokens (OpenAI itself).
	maxCompletionTokens bool
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
	return &Client{name: ep.Provider, base: ep.Base, endpoint: ep, maxCompletionTokens: ep.Host() == "api.openai.com"}, nil
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
		resp, err := c.endpoint.Post(ctx, c.base+"/chat/completions", body)
		if err != nil {
			yield(llm.Event{}, err)
			return
		}
		defer resp.Close()
		d := decoder{provider: c.name, key: c.endpoint.Secret}
		d.run(ctx, resp, yield)
	}
}

// Encode returns the JSON body Stream sends for req.
func (c *Client) Encode(req *llm.Request) ([]byte, error) {
	body, err := c.appendRequest(make([]byte, 0, requestSize(req)), req)
	if err != nil {
		return nil, fmt.Errorf("%s: encode request: %w", c.name, err)
	}
	return body, nil
}

// Models lists the server's models (GET /models), as OpenAI, Ollama, vLLM and OpenRouter serve them,
// in one page.
func (c *Client) Models(ctx context.Context) ([]string, error) {
	return c.endpoint.Models(ctx, upstream.ModelList{URL: c.base + "/models", Decode: decodeModels})
}

// decodeModels reads the model list, leaving out entries without an id.
func decodeModels(raw []byte) (ids []string, next string, err error) {
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, "", err
	}
	for _, m := range list.Data {
		if m.ID != "" {
			ids = append(ids, m.ID)
		}
	}
	return ids, "", nil
}

// parseError reads an error body: OpenAI's envelope, or the bare {"message"} / {"detail"} of some
// compatible servers.
func parseError(raw []byte) (code, message string) {
	var body errorBody
	if json.Unmarshal(raw, &body) != nil {
		return "", ""
	}
	switch {
	case body.Error != nil:
		return errorCode(body.Error), body.Error.Message
	case body.Message != "":
		return "", body.Message
	}
	return "", body.Detail
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

// inBandError converts an error chunk sent after HTTP 200. The key is removed from its message: a
// compatible server or proxy may echo it there.
func inBandError(provider string, e *apiError, key string) *llm.Error {
	out := &llm.Error{Provider: provider, Kind: llm.KindStream, Code: errorCode(e), Message: upstream.Redact(e.Message, key)}
	switch {
	case upstream.IsContextLength(out.Code, out.Message):
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

// Patience is the longest a call may go without a byte under the configured timeouts.
func (c *Client) Patience() time.Duration { return c.endpoint.Patience() }

var _ llm.Patient = (*Client)(nil)
