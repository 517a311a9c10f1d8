package anthropic

import (
	"encoding/json"
	"net/http"
	"os"
	"testing"
	"time"

	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
	"chatd/internal/llm/upstream"
)

func TestConformance(t *testing.T) {
	llmtest.Conformance(t, llmtest.Adapter{
		Name: "conformance",
		New: func(t *testing.T, baseURL string, idle time.Duration) llm.Provider {
			c, err := New(Options{Name: "conformance", BaseURL: baseURL, APIKey: "sk-ant-conformance", Timeouts: upstream.Timeouts{Idle: idle}})
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
		Recordings:        os.DirFS("testdata/conformance"),
		CheckRequest:      checkRequest,
		NoReasoningTokens: true,
	})
}

// checkRequest checks what the API checks of a request: its path, headers and body.
func checkRequest(t *testing.T, r *http.Request, body []byte) {
	t.Helper()
	if r.URL.Path != "/v1/messages" {
		t.Errorf("path %q, want /v1/messages", r.URL.Path)
	}
	for k, want := range map[string]string{
		"x-api-key":         "sk-ant-conformance",
		"anthropic-version": "2023-06-01",
		"content-type":      "application/json",
	} {
		if got := r.Header.Get(k); got != want {
			t.Errorf("header %s: %q, want %q", k, got, want)
		}
	}
	var decoded map[string]any
	if err := json.Unmarshal(body, &decoded); err != nil {
		t.Fatalf("body: %v", err)
	}
	if err := checkBody(decoded); err != nil {
		t.Errorf("the API would refuse the request: %v\n%s", err, body)
	}
}
