package anthropic

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/llm"
)

// TestModels pages through the model list the way the API serves it: has_more and last_id, asked for
// again with after_id.
func TestModels(t *testing.T) {
	pages := map[string]string{
		"": `{"data":[{"type":"model","id":"claude-opus-4-1-20250805","display_name":"Claude Opus 4.1","created_at":"2025-08-05T00:00:00Z"},` +
			`{"type":"model","id":"claude-sonnet-4-5-20250929","display_name":"Claude Sonnet 4.5","created_at":"2025-09-29T00:00:00Z"}],` +
			`"has_more":true,"first_id":"claude-opus-4-1-20250805","last_id":"claude-sonnet-4-5-20250929"}`,
		"claude-sonnet-4-5-20250929": `{"data":[{"type":"model","id":"claude-3-5-haiku-20241022","display_name":"Claude Haiku 3.5","created_at":"2024-10-22T00:00:00Z"}],` +
			`"has_more":false,"first_id":"claude-3-5-haiku-20241022","last_id":"claude-3-5-haiku-20241022"}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/models" || r.URL.Query().Get("limit") != "1000" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.String(), http.StatusBadRequest)
			return
		}
		if r.Header.Get("x-api-key") != "sk-ant-test" || r.Header.Get("anthropic-version") != APIVersion {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
			return
		}
		page, ok := pages[r.URL.Query().Get("after_id")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, page)
	}))
	defer srv.Close()
	got, err := newTestClient(t, srv.URL+"/").Models(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"claude-opus-4-1-20250805", "claude-sonnet-4-5-20250929", "claude-3-5-haiku-20241022"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("models (-want +got):\n%s", diff)
	}

	c, _ := New(Options{BaseURL: srv.URL, APIKey: "sk-ant-wrong"})
	_, err = c.Models(t.Context())
	if e, ok := errors.AsType[*llm.Error](err); !ok || e.Kind != llm.KindAuth || e.Code != "authentication_error" {
		t.Errorf("with a bad key: error %v, want an auth *llm.Error", err)
	}
}

// TestHeaders: the configured headers go with every request and may replace the API version; the key
// goes as x-api-key.
func TestHeaders(t *testing.T) {
	got := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	}))
	defer srv.Close()
	c, err := New(Options{BaseURL: srv.URL, APIKey: "sk-ant-test", Headers: map[string]string{
		"anthropic-beta":    "interleaved-thinking-2025-05-14",
		"anthropic-version": "2023-01-01",
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range c.Stream(t.Context(), &llm.Request{Model: "m", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	h := <-got
	for k, want := range map[string]string{
		"x-api-key":         "sk-ant-test",
		"anthropic-version": "2023-01-01",
		"anthropic-beta":    "interleaved-thinking-2025-05-14",
		"content-type":      "application/json",
		"authorization":     "",
	} {
		if h.Get(k) != want {
			t.Errorf("header %s = %q, want %q", k, h.Get(k), want)
		}
	}
}

// TestModelsKeepTheirIDs: an id is what the API takes back as "model", so it is listed as the server
// sends it, whatever a compatible server's ids look like.
func TestModelsKeepTheirIDs(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"data":[{"type":"model","id":"models/claude-custom"},{"type":"model","id":"anthropic/claude-sonnet-4-5"}],"has_more":false}`)
	}))
	defer srv.Close()
	got, err := newTestClient(t, srv.URL).Models(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"models/claude-custom", "anthropic/claude-sonnet-4-5"}, got); diff != "" {
		t.Errorf("models (-want +got):\n%s", diff)
	}
}

// TestModelsPageCap: a server that says has_more forever, with a new last_id each time, is asked 100
// times, not forever; one that hands out the same last_id again is not asked again.
func TestModelsPageCap(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := requests.Add(1)
		fmt.Fprintf(w, `{"data":[{"type":"model","id":"m%d"}],"has_more":true,"last_id":"m%d"}`, n, n)
	}))
	defer srv.Close()
	got, err := newTestClient(t, srv.URL).Models(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n := requests.Load(); n != 100 || len(got) != 100 || got[99] != "m100" {
		t.Errorf("%d requests, %d models, want 100 of each", n, len(got))
	}

	requests.Store(0)
	same := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		fmt.Fprint(w, `{"data":[{"type":"model","id":"m"}],"has_more":true,"last_id":"m"}`)
	}))
	defer same.Close()
	got, err = newTestClient(t, same.URL).Models(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n := requests.Load(); n != 2 || len(got) != 2 {
		t.Errorf("%d requests, models %v; want 2 of each", n, got)
	}
}
