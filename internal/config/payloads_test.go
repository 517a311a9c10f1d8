package config

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/chat"
)

func TestPayloadTypes(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	write := func(body string) {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`
agents:
  app:
    suggestions: true
    payloads:
      - name: schema_proposal
        marker: "SCHEMA_PROPOSAL:"
        instructions: Propose a table when the user asks for one.
        schema: {type: object, required: [table], properties: {table: {type: string}}}
        scope: {page: reports, tab: schema}
      - name: note
        marker: "NOTE:"
limits:
  marker_bytes: 1024
`)
	c, err := Load([]string{"--config", p}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a := c.Agents["app"]
	want := []chat.PayloadType{
		{Name: "schema_proposal", Marker: "SCHEMA_PROPOSAL:", Instructions: "Propose a table when the user asks for one.",
			Schema: json.RawMessage(`{"properties":{"table":{"type":"string"}},"required":["table"],"type":"object"}`), Page: "reports", Tab: "schema"},
		{Name: "note", Marker: "NOTE:"},
	}
	if diff := cmp.Diff(want, a.Payloads); diff != "" || !a.Suggestions || c.Limits.MarkerBytes != 1024 {
		t.Errorf("payloads (-want +got):\n%s\nsuggestions %v, marker_bytes %d", diff, a.Suggestions, c.Limits.MarkerBytes)
	}
	for body, contains := range map[string]string{
		"agents:\n  app:\n    payloads:\n      - {name: a, marker: \"lower:\"}\n":                `config: agent "app": payloads: payload type "a": marker "lower:"`,
		"agents:\n  app:\n    payloads:\n      - {name: a, marker: \"A:\", schema: {type: 3}}\n": `config: agent "app": payloads: payload type "a": schema`,
		"limits:\n  marker_bytes: -1\n": "marker_bytes must be positive",
	} {
		write(body)
		if _, err := Load([]string{"--config", p}, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), contains) {
			t.Errorf("%q: error %v, want one containing %q", body, err, contains)
		}
	}
}
