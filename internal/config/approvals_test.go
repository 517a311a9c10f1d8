package config

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/tool"
)

func TestApprovalRules(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	write := func(body string) {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`
agents:
  app:
    approvals:
      - tools: [bank__pay]
        decision: ask
        allow_if: {properties: {amount: {maximum: 100}}}
        reason: Payments over 100 need a person.
      - tools: ["fs__*"]
        decision: deny
`)
	c, err := Load([]string{"--config", p}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []tool.ApprovalRule{
		{Tools: []string{"bank__pay"}, Decision: tool.Ask, AllowIf: json.RawMessage(`{"properties":{"amount":{"maximum":100}}}`), Reason: "Payments over 100 need a person."},
		{Tools: []string{"fs__*"}, Decision: tool.Deny},
	}
	if diff := cmp.Diff(want, c.Agents["app"].Approvals); diff != "" {
		t.Errorf("approvals (-want +got):\n%s", diff)
	}
	for body, contains := range map[string]string{
		"agents:\n  app:\n    approvals:\n      - {tools: [a], decision: sometimes}\n":                `config: agent "app": approvals[0]: decision "sometimes"`,
		"agents:\n  app:\n    approvals:\n      - {decision: ask}\n":                                  `config: agent "app": approvals[0]: tools is empty`,
		"agents:\n  app:\n    approvals:\n      - {tools: [a], decision: ask, allow_if: {type: 3}}\n": `config: agent "app": approvals[0]: allow_if`,
	} {
		write(body)
		if _, err := Load([]string{"--config", p}, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), contains) {
			t.Errorf("%q: error %v, want one containing %q", body, err, contains)
		}
	}
}
