package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"chatd/internal/auth"
	"chatd/internal/chat"
	"chatd/internal/config"
	"chatd/internal/httpapi"
)

// threeAgents is a config file with three agents: one with scopes of its own, one with an allow-list
// and limits, one with nothing but a description (the top-level scopes and defaults apply).
const threeAgents = `
tool_history_rounds: 6
tool_scopes:
  global: [current_time]
agents:
  default:
    description: Answers anything.
  support:
    description: The help desk of Example Inc.
    model: openai/gpt-4o
    tools: [current_time, "everything__*"]
    max_iterations: 5
    max_tokens: 2048
    temperature: 0.2
    tool_history_rounds: 4
    context_window: 32768
    compact_at: 0.7
    suggestions: true
  reports:
    description: Reads the reports.
    payloads:
      - name: schema_proposal
        marker: "SCHEMA_PROPOSAL:"
        instructions: Propose a table's schema when asked for one.
        schema: {type: object, required: [columns]}
        scope: {page: reports}
    tool_scopes:
      pages:
        reports:
          tools: ["warehouse__*"]
          tabs:
            articles: {tools: [search__query]}
`

// TestListAgents: GET /v1/agents lists the agents of a config with three, as the config says them,
// with the defaults filled in; a key limited to one agent sees that one only.
func TestListAgents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "chatd.yaml")
	if err := os.WriteFile(path, []byte(threeAgents), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load([]string{"--config", path}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	e := newKeyedEnvWith(t, httpapi.Options{}, auth.Options{}, chat.Options{Agents: cfg.Agents, Scopes: cfg.ToolScopes,
		Context: chat.ContextOptions{ToolHistoryRounds: cfg.Context.ToolHistoryRounds}})
	all, _ := e.key(t, auth.KeySpec{User: "alice"})
	support, _ := e.key(t, auth.KeySpec{User: "helpdesk", Agents: []string{"support"}})

	resp, raw := e.call(t, "GET", "/v1/agents", "", e.bearer(all))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/agents: %d %s", resp.StatusCode, raw)
	}
	golden(t, "agents", fmt.Appendf(nil, "GET /v1/agents\n%d\nContent-Type: %s\n\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), raw))
	var got struct {
		Agents []struct {
			Name          string          `json:"name"`
			Description   string          `json:"description"`
			Model         string          `json:"model"`
			Tools         []string        `json:"tools"`
			PayloadTypes  json.RawMessage `json:"payload_types"`
			Suggestions   bool            `json:"suggestions"`
			ContextScopes json.RawMessage `json:"context_scopes"`
			Limits        map[string]any  `json:"limits"`
		} `json:"agents"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range got.Agents {
		names = append(names, a.Name)
	}
	if want := []string{"default", "reports", "support"}; !slices.Equal(names, want) {
		t.Fatalf("agents %q, want %q", names, want)
	}
	def, reports, sup := got.Agents[0], got.Agents[1], got.Agents[2]
	if def.Model != "openai/gpt-4o-mini" || def.Tools != nil || def.Limits["max_iterations"] != 10.0 ||
		def.Limits["tool_history_rounds"] != 6.0 || string(def.ContextScopes) != `{"global":["current_time"]}` {
		t.Errorf("default agent: %+v", def)
	}
	if sup.Model != "openai/gpt-4o" || !slices.Equal(sup.Tools, []string{"current_time", "everything__*"}) ||
		sup.Limits["max_iterations"] != 5.0 || sup.Limits["temperature"] != 0.2 || sup.Limits["tool_history_rounds"] != 4.0 {
		t.Errorf("support agent: %+v", sup)
	}
	if want := `{"pages":{"reports":{"tools":["warehouse__*"],"tabs":{"articles":{"tools":["search__query"]}}}}}`; string(reports.ContextScopes) != want {
		t.Errorf("reports' scopes: %s, want %s", reports.ContextScopes, want)
	}
	if want := `[{"name":"schema_proposal","marker":"SCHEMA_PROPOSAL:","schema":{"required":["columns"],"type":"object"},"instructions":"Propose a table's schema when asked for one.","scope":{"page":"reports"}}]`; string(reports.PayloadTypes) != want {
		t.Errorf("reports' payload types: %s, want %s", reports.PayloadTypes, want)
	}
	if string(def.PayloadTypes) != "[]" || string(sup.PayloadTypes) != "[]" || !sup.Suggestions || def.Suggestions {
		t.Errorf("payload types and suggestions: default %s %v, support %s %v", def.PayloadTypes, def.Suggestions, sup.PayloadTypes, sup.Suggestions)
	}

	resp, raw = e.call(t, "GET", "/v1/agents", "", e.bearer(support))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/agents with a key for support: %d %s", resp.StatusCode, raw)
	}
	got.Agents = nil
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Agents) != 1 || got.Agents[0].Name != "support" {
		t.Errorf("a key limited to support sees %s", raw)
	}
	if resp, raw := e.call(t, "GET", "/v1/agents", "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/agents without a key: %d %s", resp.StatusCode, raw)
	}
}
