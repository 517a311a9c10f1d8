// Package provider builds the configured LLM providers and resolves "provider/model" names to them. It
// is the one place that knows every adapter; the rest of chatd sees llm.Provider.
package provider

import (
	"fmt"
	"slices"
	"strings"

	"chatd/internal/llm"
	"chatd/internal/llm/openai"
)

// Config is one provider as configured.
type Config struct {
	Name    string // the prefix of model names: "openai" in "openai/gpt-4o-mini"
	Type    string // the wire protocol: "openai" (OpenAI-compatible Chat Completions)
	BaseURL string
	APIKey  string
	Headers map[string]string
	Models  []string // the models it offers, when known
}

// Unconfigured names a provider chatd knows but that is not set up, and how to set it up.
type Unconfigured struct {
	Name string
	Hint string // e.g. "set OPENAI_API_KEY (and OPENAI_BASE_URL for a compatible server)"
}

// Set is the configured providers.
type Set struct {
	byName map[string]llm.Provider
	hints  map[string]string
	names  []string
}

// New builds a provider for each config.
func New(configs []Config, unconfigured []Unconfigured) (*Set, error) {
	s := &Set{byName: map[string]llm.Provider{}, hints: map[string]string{}}
	for _, c := range configs {
		if _, dup := s.byName[c.Name]; dup {
			return nil, fmt.Errorf("provider %q is configured twice", c.Name)
		}
		p, err := build(c)
		if err != nil {
			return nil, fmt.Errorf("provider %q: %w", c.Name, err)
		}
		s.byName[c.Name] = p
		s.names = append(s.names, c.Name)
	}
	for _, u := range unconfigured {
		if _, ok := s.byName[u.Name]; !ok {
			s.hints[u.Name] = u.Hint
		}
	}
	slices.Sort(s.names)
	return s, nil
}

func build(c Config) (llm.Provider, error) {
	switch c.Type {
	case "openai", "":
		return openai.New(openai.Options{Name: c.Name, BaseURL: c.BaseURL, APIKey: c.APIKey, Headers: c.Headers})
	}
	return nil, fmt.Errorf("type %q is not supported; supported: openai (any OpenAI-compatible server)", c.Type)
}

// Names lists the configured providers.
func (s *Set) Names() []string { return s.names }

// Resolve returns the provider of a "provider/model" name and the provider's own model name.
func (s *Set) Resolve(name string) (llm.Provider, string, error) {
	prov, model, ok := strings.Cut(name, "/")
	if !ok || prov == "" || model == "" {
		return nil, "", fmt.Errorf("model %q is not of the form provider/model, for example openai/gpt-4o-mini", name)
	}
	if p, ok := s.byName[prov]; ok {
		return p, model, nil
	}
	if hint, ok := s.hints[prov]; ok {
		return nil, "", fmt.Errorf("model %q needs the %s provider, which is not configured: %s", name, prov, hint)
	}
	configured := "none is configured (set OPENAI_API_KEY, or OLLAMA_HOST)"
	if len(s.names) > 0 {
		configured = "configured: " + strings.Join(s.names, ", ")
	}
	return nil, "", fmt.Errorf("model %q names an unknown provider %q; %s", name, prov, configured)
}
