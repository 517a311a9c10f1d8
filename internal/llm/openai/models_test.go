package openai

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

// TestModels: the list is one page, asked for with the bearer key; its ids are kept as the server sends
// them, entries without one left out, and a has_more is not followed.
func TestModels(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.Method != http.MethodGet || r.URL.RequestURI() != "/v1/models" || r.Header.Get("Authorization") != "Bearer sk-test" {
			t.Errorf("request %s %s with Authorization %q", r.Method, r.URL.RequestURI(), r.Header.Get("Authorization"))
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object":"list","data":[{"id":"gpt-4o-mini","object":"model"},{"object":"model"},{"id":"models/llama3","object":"model"}],"has_more":true,"last_id":"models/llama3"}`)
	}))
	defer srv.Close()
	got, err := newTestClient(t, srv.URL+"/v1/").Models(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"gpt-4o-mini", "models/llama3"}, got); diff != "" {
		t.Errorf("models (-want +got):\n%s", diff)
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestModelsError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"message":"Incorrect API key provided: sk-test.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)
	}))
	defer srv.Close()
	_, err := newTestClient(t, srv.URL).Models(t.Context())
	if e, ok := errors.AsType[*llm.Error](err); !ok || e.Kind != llm.KindAuth || e.Code != "invalid_api_key" {
		t.Fatalf("error = %#v, want an auth *llm.Error", err)
	}

	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<html>not a list</html>`)
	}))
	defer broken.Close()
	_, err = newTestClient(t, broken.URL).Models(t.Context())
	if e, ok := errors.AsType[*llm.Error](err); !ok || e.Kind != llm.KindStream || e.Provider != "openai" {
		t.Fatalf("error = %#v, want a stream *llm.Error", err)
	}
}
