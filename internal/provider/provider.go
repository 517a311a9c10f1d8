// Package provider builds the configured LLM providers and resolves "provider/model" names to them. It
// is the one place that knows every adapter; the rest of chatd sees llm.Provider.
package provider

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"chatd/internal/llm"
	"chatd/internal/llm/anthropic"
	"chatd/internal/llm/gemini"
	"chatd/internal/llm/openai"
	"chatd/internal/llm/responses"
	"chatd/internal/llm/upstream"
)

// Types of providers: the wire protocol each speaks.
const (
	TypeOpenAI          = "openai"           // Chat Completions: OpenAI and every compatible server
	TypeOpenAIResponses = "openai-responses" // OpenAI's Responses API, for reasoning models
	TypeAnthropic       = "anthropic"        // Anthropic Messages
	TypeGemini          = "gemini"           // Google's Gemini API
)

// Types lists the supported types.
var Types = []string{TypeOpenAI, TypeOpenAIResponses, TypeAnthropic, TypeGemini}

// Config is one provider as configured.
type Config struct {
	Name     string // the prefix of model names: "openai" in "openai/gpt-4o-mini"
	Type     string // one of Types; "" is TypeOpenAI
	BaseURL  string // "" is the type's official API
	APIKey   string
	Headers  map[string]string
	Models   []string // the models it offers, when known
	Timeouts upstream.Timeouts
}

// Unconfigured names a provider chatd knows but that is not set up, and how to set it up.
type Unconfigured struct {
	Name string
	Hint string // e.g. "set OPENAI_API_KEY (and OPENAI_BASE_URL for a compatible server)"
}

// Set is the configured providers.
type Set struct {
	byName  map[string]entry
	hints   map[string]string
	names   []string
	listTTL time.Duration

	mu    sync.Mutex
	lists map[string]cachedList
}

type entry struct {
	cfg Config
	p   llm.Provider
}

type cachedList struct {
	models []string
	at     time.Time
}

// New builds a provider for each config.
func New(configs []Config, unconfigured []Unconfigured) (*Set, error) {
	s := &Set{byName: map[string]entry{}, hints: map[string]string{}, lists: map[string]cachedList{}, listTTL: 5 * time.Minute}
	for _, c := range configs {
		if _, dup := s.byName[c.Name]; dup {
			return nil, fmt.Errorf("provider %q is configured twice", c.Name)
		}
		c.Type = strings.ToLower(c.Type)
		if c.Type == "" {
			c.Type = TypeOpenAI
		}
		p, err := build(c)
		if err != nil {
			return nil, fmt.Errorf("provider %q: %w", c.Name, err)
		}
		s.byName[c.Name] = entry{cfg: c, p: p}
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
	opts := upstream.Options{Name: c.Name, BaseURL: c.BaseURL, APIKey: c.APIKey, Headers: c.Headers, Timeouts: c.Timeouts}
	switch c.Type {
	case TypeOpenAI:
		return openai.New(opts)
	case TypeOpenAIResponses:
		return responses.New(opts)
	case TypeAnthropic:
		return anthropic.New(opts)
	case TypeGemini:
		return gemini.New(opts)
	}
	return nil, fmt.Errorf("type %q is not supported; supported: %s", c.Type, strings.Join(Types, ", "))
}

// Names lists the configured providers.
func (s *Set) Names() []string { return s.names }

// Configured lists the models the providers' config names, as provider/model.
func (s *Set) Configured() []string {
	var out []string
	for _, name := range s.names {
		for _, m := range s.byName[name].cfg.Models {
			out = append(out, llm.Origin(name, m))
		}
	}
	return out
}

// Resolve returns the provider of a "provider/model" name and the provider's own model name.
func (s *Set) Resolve(name string) (llm.Provider, string, error) {
	prov, model, ok := strings.Cut(name, "/")
	if !ok || prov == "" || model == "" {
		return nil, "", fmt.Errorf("model %q is not of the form provider/model, for example openai/gpt-4o-mini", name)
	}
	if e, ok := s.byName[prov]; ok {
		return e.p, model, nil
	}
	if hint, ok := s.hints[prov]; ok {
		return nil, "", fmt.Errorf("model %q needs the %s provider, which is not configured: %s", name, prov, hint)
	}
	configured := "none is configured (set OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY or OLLAMA_HOST)"
	if len(s.names) > 0 {
		configured = "configured: " + strings.Join(s.names, ", ")
	}
	return nil, "", fmt.Errorf("model %q names an unknown provider %q; %s", name, prov, configured)
}

// Listing is what one provider offers.
type Listing struct {
	Provider string
	Type     string
	Models   []string // provider/model names
	// Live says Models come from the provider's own list; otherwise they are the configured ones.
	Live bool
	// Err says why the live list could not be read, in words safe to show.
	Err string
}

// Catalog lists each provider's models: its live list where the API has one (kept for five minutes),
// else the configured models. Providers are asked in parallel, each for at most timeout.
func (s *Set) Catalog(ctx context.Context, timeout time.Duration) []Listing {
	out := make([]Listing, len(s.names))
	var wg sync.WaitGroup
	for i, name := range s.names {
		wg.Go(func() { out[i] = s.listing(ctx, s.byName[name], timeout) })
	}
	wg.Wait()
	return out
}

func (s *Set) listing(ctx context.Context, e entry, timeout time.Duration) Listing {
	l := Listing{Provider: e.cfg.Name, Type: e.cfg.Type}
	models, err := s.live(ctx, e, timeout)
	switch {
	case err == nil && models != nil:
		l.Live = true
	case err != nil:
		l.Err = publicError(err)
		fallthrough
	default:
		models = e.cfg.Models
	}
	l.Models = make([]string, 0, len(models))
	for _, m := range models {
		l.Models = append(l.Models, e.cfg.Name+"/"+m)
	}
	slices.Sort(l.Models)
	return l
}

// live returns the provider's own model list; nil, nil when it has none.
func (s *Set) live(ctx context.Context, e entry, timeout time.Duration) ([]string, error) {
	lister, ok := e.p.(llm.ModelLister)
	if !ok {
		return nil, nil
	}
	s.mu.Lock()
	c, ok := s.lists[e.cfg.Name]
	s.mu.Unlock()
	if ok && time.Since(c.at) < s.listTTL {
		return c.models, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	models, err := lister.Models(ctx)
	if err != nil {
		return nil, err
	}
	if models == nil {
		models = []string{}
	}
	s.mu.Lock()
	s.lists[e.cfg.Name] = cachedList{models: models, at: time.Now()}
	s.mu.Unlock()
	return models, nil
}

func publicError(err error) string {
	if e, ok := errors.AsType[*llm.Error](err); ok {
		return e.Public()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "the provider did not list its models in time"
	}
	return err.Error()
}
