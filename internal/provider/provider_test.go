package provider

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestResolve(t *testing.T) {
	s, err := New([]Config{{Name: "openai", BaseURL: "http://127.0.0.1:1/v1"}, {Name: "router", Type: "openai", BaseURL: "https://openrouter.ai/api/v1"}},
		[]Unconfigured{{Name: "ollama", Hint: "set OLLAMA_HOST"}, {Name: "openai", Hint: "ignored: configured"}})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"openai/gpt-4o-mini":            "gpt-4o-mini",
		"router/anthropic/claude-4.5":   "anthropic/claude-4.5", // the rest after the first slash is the model
		"openai/Qwen/Qwen3-8B-Instruct": "Qwen/Qwen3-8B-Instruct",
	} {
		p, model, err := s.Resolve(name)
		if err != nil || p == nil || model != want {
			t.Errorf("Resolve(%q) = %v, %q, %v; want %q", name, p, model, err, want)
		}
	}
	for name, contains := range map[string]string{
		"gpt-4o":          "provider/model",
		"openai/":         "provider/model",
		"ollama/llama3.2": "set OLLAMA_HOST",
		"mistral/large":   "configured: openai, router",
	} {
		if _, _, err := s.Resolve(name); err == nil || !strings.Contains(err.Error(), contains) {
			t.Errorf("Resolve(%q): %v, want an error containing %q", name, err, contains)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	if _, err := New([]Config{{Name: "a", BaseURL: "http://x/v1"}, {Name: "a", BaseURL: "http://y/v1"}}, nil); err == nil {
		t.Error("a duplicate name was accepted")
	}
	if _, err := New([]Config{{Name: "a", Type: "carrier-pigeon", BaseURL: "http://x/v1"}}, nil); err == nil || !strings.Contains(err.Error(), "supported: openai, openai-responses, anthropic, gemini") {
		t.Errorf("unknown type: %v", err)
	}
	if _, err := New([]Config{{Name: "a", BaseURL: "localhost:1234"}}, nil); err == nil {
		t.Error("a base URL without a scheme was accepted")
	}
	s, _ := New(nil, nil)
	if _, _, err := s.Resolve("openai/x"); err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Errorf("with nothing configured: %v", err)
	}
}

func TestCatalog(t *testing.T) {
	var lists atomic.Int32
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		lists.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"object":"list","data":[{"id":"gpt-4o-mini","object":"model"},{"id":"gpt-4o","object":"model"}]}`))
	}))
	defer live.Close()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"message":"Invalid API key sk-should-not-matter","type":"invalid_request_error"}}`, http.StatusUnauthorized)
	}))
	defer down.Close()
	s, err := New([]Config{
		{Name: "openai", BaseURL: live.URL + "/v1"},
		{Name: "claude", Type: TypeAnthropic, BaseURL: down.URL, Models: []string{"claude-sonnet-4-5"}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		got := s.Catalog(t.Context(), 5*time.Second)
		if len(got) != 2 {
			t.Fatalf("catalog = %+v", got)
		}
		claude, openai := got[0], got[1]
		if !openai.Live || strings.Join(openai.Models, ",") != "openai/gpt-4o,openai/gpt-4o-mini" || openai.Type != TypeOpenAI {
			t.Errorf("openai listing = %+v", openai)
		}
		if claude.Live || strings.Join(claude.Models, ",") != "claude/claude-sonnet-4-5" || !strings.Contains(claude.Err, "HTTP 401") {
			t.Errorf("claude listing = %+v", claude)
		}
	}
	if n := lists.Load(); n != 1 {
		t.Errorf("the live list was fetched %d times; it is kept for five minutes", n)
	}
}

func TestEveryType(t *testing.T) {
	var configs []Config
	for _, typ := range Types {
		configs = append(configs, Config{Name: "p-" + typ, Type: typ, BaseURL: "http://127.0.0.1:1"})
	}
	s, err := New(configs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range Types {
		p, model, err := s.Resolve("p-" + typ + "/some-model")
		if err != nil || model != "some-model" {
			t.Fatalf("%s: %v", typ, err)
		}
		if _, ok := p.(interface {
			Models(ctx context.Context) ([]string, error)
		}); !ok {
			t.Errorf("%s: the adapter cannot list models", typ)
		}
	}
}
