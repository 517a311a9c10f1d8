package openai

import (
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
			c, err := New(Options{Name: "conformance", BaseURL: baseURL + "/v1", APIKey: "sk-test", Timeouts: upstream.Timeouts{Idle: idle}})
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
		Recordings: os.DirFS("testdata/conformance"),
		CheckRequest: func(t *testing.T, r *http.Request, body []byte) {
			if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer sk-test" {
				t.Errorf("request to %s with Authorization %q", r.URL.Path, r.Header.Get("Authorization"))
			}
		},
	})
}
