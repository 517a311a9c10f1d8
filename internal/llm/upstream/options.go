package upstream

import (
	"cmp"
	"net/http"
	"time"
)

// Options configure an adapter's client; each adapter's Options is this type. The zero value talks to
// the adapter's official API without a key.
type Options struct {
	// Name names the provider in errors and logs, and is the Origin of the messages its client writes:
	// what a model asked to have sent back (thinking signatures, reasoning items) goes back only to a
	// client of the same name. Default: the adapter's name.
	Name string
	// BaseURL is the API's root, in the form of the adapter's DefaultBaseURL (with /v1 or without);
	// default that.
	BaseURL string
	// APIKey is sent the adapter's way (a bearer token, x-api-key, x-goog-api-key), never in a URL, and
	// removed from the messages of error answers.
	APIKey string
	// Headers are sent with every request (a proxy's authentication, anthropic-beta); they may replace
	// the adapter's default headers, not the key's.
	Headers map[string]string
	// Timeouts bound the connection, the first byte and the silence between chunks; zero values take
	// the defaults.
	Timeouts Timeouts
	// HTTPClient replaces the client built from Timeouts (tests).
	HTTPClient *http.Client
}

// API is what an adapter tells Endpoint about the API it speaks.
type API struct {
	Adapter        string      // names the adapter in configuration errors ("openai")
	DefaultName    string      // the provider's name when Options.Name is empty
	DefaultBaseURL string      // the official API's root
	Header         http.Header // sent with every request unless Options.Headers replaces them
	KeyHeader      string      // the header that carries Options.APIKey
	KeyPrefix      string      // written before the key ("Bearer ")
	ParseError     ErrorParser
	// RetryDelay reads when to retry from an error body; see Endpoint.RetryDelay.
	RetryDelay func(body []byte) time.Duration
}

// Endpoint returns the endpoint o configures for api. It is an error unless the base URL is http(s)
// with a host.
func (o Options) Endpoint(api API) (*Endpoint, error) {
	base, _, err := baseURL(api.Adapter, o.BaseURL, api.DefaultBaseURL)
	if err != nil {
		return nil, err
	}
	header := api.Header.Clone()
	if header == nil {
		header = make(http.Header)
	}
	for k, v := range o.Headers {
		header.Set(k, v)
	}
	if o.APIKey != "" {
		header.Set(api.KeyHeader, api.KeyPrefix+o.APIKey)
	}
	ep := NewEndpoint(cmp.Or(o.Name, api.DefaultName), o.Timeouts, header, api.ParseError)
	ep.Base = base
	ep.Secret = o.APIKey
	ep.RetryDelay = api.RetryDelay
	if o.HTTPClient != nil {
		ep.HTTP = o.HTTPClient
	}
	return ep, nil
}
