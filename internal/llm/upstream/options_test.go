package upstream

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestOptionsEndpoint: the adapter's defaults fill what the options leave out; configured headers
// replace the adapter's but never the key's.
func TestOptionsEndpoint(t *testing.T) {
	api := API{Adapter: "a", DefaultName: "a-default", DefaultBaseURL: "https://api.example.com/v1",
		Header: http.Header{"Api-Version": {"1"}}, KeyHeader: "Authorization", KeyPrefix: "Bearer "}
	ep, err := Options{}.Endpoint(api)
	if err != nil {
		t.Fatal(err)
	}
	if ep.Provider != "a-default" || ep.Base != "https://api.example.com/v1" || ep.Host() != "api.example.com" || ep.Secret != "" {
		t.Errorf("defaults: provider %q, base %q, host %q, secret %q", ep.Provider, ep.Base, ep.Host(), ep.Secret)
	}
	if diff := cmp.Diff(http.Header{"Api-Version": {"1"}}, ep.Header); diff != "" {
		t.Errorf("default header (-want +got):\n%s", diff)
	}

	ep, err = Options{Name: "mine", BaseURL: "http://localhost:8080/v1/", APIKey: "sk-123456",
		Headers: map[string]string{"api-version": "2", "authorization": "Basic x", "X-Title": "chatd"}}.Endpoint(api)
	if err != nil {
		t.Fatal(err)
	}
	if ep.Provider != "mine" || ep.Base != "http://localhost:8080/v1" || ep.Host() != "localhost" || ep.Secret != "sk-123456" {
		t.Errorf("configured: provider %q, base %q, host %q, secret %q", ep.Provider, ep.Base, ep.Host(), ep.Secret)
	}
	want := http.Header{"Api-Version": {"2"}, "Authorization": {"Bearer sk-123456"}, "X-Title": {"chatd"}}
	if diff := cmp.Diff(want, ep.Header); diff != "" {
		t.Errorf("configured header (-want +got):\n%s", diff)
	}
	if got := api.Header.Get("Api-Version"); got != "1" {
		t.Errorf("the adapter's default header became %q", got)
	}

	for _, u := range []string{"ftp://x", "api.example.com", "http://"} {
		if _, err := (Options{BaseURL: u}).Endpoint(api); err == nil {
			t.Errorf("base URL %q accepted", u)
		}
	}
}

// TestOptionsHTTPClient: a given client replaces the one built from the timeouts.
func TestOptionsHTTPClient(t *testing.T) {
	c := &http.Client{}
	ep, err := Options{HTTPClient: c}.Endpoint(API{DefaultBaseURL: "http://x"})
	if err != nil {
		t.Fatal(err)
	}
	if ep.HTTP != c {
		t.Error("HTTPClient was not used")
	}
}
