package provider

import (
	"strings"
	"testing"
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
	if _, err := New([]Config{{Name: "a", Type: "carrier-pigeon", BaseURL: "http://x/v1"}}, nil); err == nil || !strings.Contains(err.Error(), "not supported") {
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
