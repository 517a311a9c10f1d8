package config

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/tool"
)

// TestToolScopes: tool_scopes at the top and per agent are read from the file, and a pattern with a
// misplaced "*" is refused with a message naming where it is.
func TestToolScopes(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := Load([]string{"--config", write(`
tool_scopes:
  global: [current_time]
  pages:
    reports:
      tools: ["everything__*"]
      tabs:
        table:
          tools: [table_edit]
          subtabs:
            sql: {tools: [sql_run]}
agents:
  app:
    tools: ["*"]
    tool_scopes:
      pages:
        home: {tools: [weather]}
`)}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := &tool.Scopes{Global: []string{"current_time"}, Pages: map[string]tool.PageScope{
		"reports": {Tools: []string{"everything__*"}, Tabs: map[string]tool.TabScope{
			"table": {Tools: []string{"table_edit"}, Subtabs: map[string]tool.SubtabScope{"sql": {Tools: []string{"sql_run"}}}},
		}},
	}}
	if diff := cmp.Diff(want, c.ToolScopes); diff != "" {
		t.Errorf("tool_scopes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&tool.Scopes{Pages: map[string]tool.PageScope{"home": {Tools: []string{"weather"}}}}, c.Agents["app"].Scopes); diff != "" {
		t.Errorf("the agent's tool_scopes (-want +got):\n%s", diff)
	}

	for body, contains := range map[string]string{
		"tool_scopes:\n  global: [\"a*b\"]\n":                                       `config: tool_scopes: global: tool pattern "a*b" is invalid`,
		"tool_scopes:\n  pages:\n    p: {tools: [\"*x\"]}\n":                        `config: tool_scopes: pages.p: tool pattern "*x"`,
		"tool_scopes:\n  pages:\n    p:\n      tabs:\n        t: {tools: [\"\"]}\n": `config: tool_scopes: pages.p.tabs.t: a tool pattern is empty`,
		"agents:\n  app:\n    tool_scopes:\n      pages:\n        p:\n          tabs:\n            t:\n              subtabs:\n                s: {tools: [\"x**\"]}\n": `config: agent "app": tool_scopes: pages.p.tabs.t.subtabs.s: tool pattern "x**"`,
		"agents:\n  app:\n    tool_scopes:\n      global: [\"srv*__a\"]\n":                                                                                              `config: agent "app": tool_scopes: global: tool pattern "srv*__a"`,
		"agents:\n  app:\n    tools: [current_time, \"*srv\"]\n":                                                                                                        `config: agent "app": tools: tool pattern "*srv"`,
	} {
		_, err := Load([]string{"--config", write(body)}, env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), contains) {
			t.Errorf("%q: error %v, want one containing %q", body, err, contains)
		}
	}
}
