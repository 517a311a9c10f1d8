package responses

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/llm"
)

func TestModels(t *testing.T) {
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Authorization"); got != "Bearer sk-test" {
			t.Errorf("Authorization %q", got)
		}
		paths = append(paths, r.URL.RequestURI())
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Query().Get("after") {
		case "":
			w.Write([]byte(`{"object":"list","data":[{"id":"gpt-5-2025-08-07","object":"model","created":1754425777,"owned_by":"system"},{"id":"o4-mini","object":"model","created":1744225351,"owned_by":"system"}],"has_more":true,"first_id":"gpt-5-2025-08-07","last_id":"o4-mini"}`))
		default:
			// A compatible server that names its models like Gemini's.
			w.Write([]byte(`{"object":"list","data":[{"id":"models/gpt-5-mini","object":"model","created":1754425928,"owned_by":"system"}],"has_more":false}`))
		}
	}))
	defer srv.Close()
	got, err := newTestClient(t, srv.URL+"/v1").Models(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"gpt-5-2025-08-07", "o4-mini", "gpt-5-mini"}, got); diff != "" {
		t.Errorf("models (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"/v1/models", "/v1/models?after=o4-mini"}, paths); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestModelsError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error":{"message":"Incorrect API key provided: sk-test.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`))
	}))
	defer srv.Close()
	_, err := newTestClient(t, srv.URL).Models(t.Context())
	e, ok := errors.AsType[*llm.Error](err)
	if !ok || e.Kind != llm.KindAuth || e.Code != "invalid_api_key" || e.Message != "Incorrect API key provided: [redacted]." {
		t.Fatalf("error = %#v, want an auth *llm.Error without the key", err)
	}
}

// TestModelsEmptyPage: a page without models ends the list, whatever its has_more says.
func TestModelsEmptyPage(t *testing.T) {
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.RequestURI())
		if r.URL.Query().Get("after") == "" {
			w.Write([]byte(`{"object":"list","data":[{"id":"o4-mini"}],"has_more":true,"last_id":"o4-mini"}`))
			return
		}
		w.Write([]byte(`{"object":"list","data":[],"has_more":true,"last_id":"o5"}`))
	}))
	defer srv.Close()
	got, err := newTestClient(t, srv.URL+"/v1").Models(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"o4-mini"}, got); diff != "" {
		t.Errorf("models (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"/v1/models", "/v1/models?after=o4-mini"}, paths); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}
