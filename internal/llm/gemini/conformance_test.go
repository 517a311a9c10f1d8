package gemini

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
	"chatd/internal/llm/upstream"
)

const testKey = "AIzaSy-test-key"

func TestConformance(t *testing.T) {
	llmtest.Conformance(t, llmtest.Adapter{
		Name: "conformance",
		New: func(t *testing.T, baseURL string, idle time.Duration) llm.Provider {
			c, err := New(Options{Name: "conformance", BaseURL: baseURL, APIKey: testKey, Timeouts: upstream.Timeouts{Idle: idle}})
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
		Recordings:   os.DirFS("testdata/conformance"),
		CheckRequest: checkRequest,
	})
}

// checkRequest checks what every streamed request must be: the path and query, the key in its header
// and nowhere else, and a body the API accepts in shape.
func checkRequest(t *testing.T, r *http.Request, body []byte) {
	t.Helper()
	if want := "/v1beta/models/conformance-model:streamGenerateContent"; r.URL.Path != want {
		t.Errorf("path %q, want %q", r.URL.Path, want)
	}
	if r.URL.RawQuery != "alt=sse" {
		t.Errorf("query %q, want alt=sse", r.URL.RawQuery)
	}
	if got := r.Header.Get("x-goog-api-key"); got != testKey {
		t.Errorf("x-goog-api-key %q, want %q", got, testKey)
	}
	if strings.Contains(r.URL.String(), testKey) || r.Header.Get("Authorization") != "" {
		t.Errorf("the key leaks into the URL or an Authorization header: %s", r.URL)
	}
	var req struct {
		Contents []struct {
			Role  string           `json:"role"`
			Parts []map[string]any `json:"parts"`
		} `json:"contents"`
		SystemInstruction *struct {
			Parts []map[string]any `json:"parts"`
		} `json:"systemInstruction"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("body: %v", err)
	}
	if len(req.Contents) == 0 || req.SystemInstruction == nil {
		t.Errorf("no contents or no system instruction: %s", body)
	}
	for i, c := range req.Contents {
		if c.Role != "user" && c.Role != "model" {
			t.Errorf("content %d has role %q", i, c.Role)
		}
		if len(c.Parts) == 0 {
			t.Errorf("content %d has no parts", i)
		}
		for _, p := range c.Parts {
			if text, ok := p["text"]; ok && text == "" {
				t.Errorf("content %d has an empty text part: %s", i, body)
			}
		}
	}
}
