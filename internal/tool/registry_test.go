package tool

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRegisterRejects(t *testing.T) {
	schemaFile := filepath.Join(t.TempDir(), "secret.json")
	if err := os.WriteFile(schemaFile, []byte(`{"type":"object"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	fileURL := "file://" + filepath.ToSlash(schemaFile)

	tests := []struct {
		name    string
		tool    Tool
		wantErr []string // substrings of the error
	}{
		{"nil tool", nil, []string{"nil tool"}},
		{"empty name", echoTool("", ""), []string{`""`, "1 to 64"}},
		{"long name", echoTool(strings.Repeat("a", 65), ""), []string{"1 to 64"}},
		{"space in name", echoTool("get weather", ""), []string{`"get weather"`, "letters, digits"}},
		{"dot in name", echoTool("srv.tool", ""), []string{"letters, digits"}},
		{"non-ASCII name", echoTool("météo", ""), []string{"letters, digits"}},
		{"duplicate", echoTool("echo", ""), []string{"echo", "already registered"}},
		{"schema not JSON", echoTool("bad_json", `{"type":`), []string{"bad_json", "parse input schema"}},
		{"unknown type", echoTool("bad_type", `{"type":"nope"}`), []string{"bad_type", "compile input schema"}},
		{"bad pattern", echoTool("bad_pattern", `{"properties":{"a":{"pattern":"("}}}`), []string{"bad_pattern", "compile input schema"}},
		{"ref to file", echoTool("file_ref", `{"$ref":"`+fileURL+`"}`), []string{"file_ref", "not allowed"}},
		{"ref to http", echoTool("http_ref", `{"properties":{"a":{"$ref":"http://127.0.0.1:1/s.json"}}}`), []string{"http_ref", "not allowed"}},
		{"remote metaschema", echoTool("meta_ref", `{"$schema":"http://127.0.0.1:1/meta.json"}`), []string{"meta_ref", "not allowed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestRegistry(t, Options{}, echoTool("echo", ""))
			err := r.Register(tt.tool)
			if err == nil {
				t.Fatal("Register succeeded, want an error")
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Register error %q does not mention %q", err, want)
				}
			}
		})
	}
}

func TestRegisterAccepts(t *testing.T) {
	tests := []struct {
		name   string
		tool   string
		schema string
	}{
		{"local ref", "local_ref", `{"type":"object","properties":{"p":{"$ref":"#/$defs/point"}},"$defs":{"point":{"type":"object"}}}`},
		{"draft-07", "draft7", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","definitions":{"a":{"type":"string"}}}`},
		{"boolean schema", "anything", `true`},
		{"64 characters", strings.Repeat("x", 64), `{}`},
		{"all allowed characters", "Az09_-", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := NewRegistry(Options{}).Register(echoTool(tt.tool, tt.schema)); err != nil {
				t.Fatalf("Register: %v", err)
			}
		})
	}
}

func TestListAndInfo(t *testing.T) {
	mcp := fakeTool{info: Info{
		Name:        "files__read",
		Description: "Read a file.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`),
		Timeout:     time.Minute,
		Source:      "mcp:files",
	}}
	r := newTestRegistry(t, Options{}, echoTool("zeta", ""), mcp, CurrentTime(nil))

	var names []string
	for _, info := range r.List() {
		names = append(names, info.Name)
	}
	if diff := cmp.Diff([]string{"current_time", "files__read", "zeta"}, names); diff != "" {
		t.Errorf("List names (-want +got):\n%s", diff)
	}

	got, ok := r.Info("zeta")
	want := Info{Name: "zeta", InputSchema: json.RawMessage(`{"type":"object"}`), Source: "builtin"}
	if !ok {
		t.Fatal(`Info("zeta") not found`)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Info(zeta) (-want +got):\n%s", diff)
	}
	if got, _ := r.Info("files__read"); got.Source != "mcp:files" || got.Timeout != time.Minute {
		t.Errorf("Info(files__read) = %+v, want source and timeout kept", got)
	}
	if _, ok := r.Info("missing"); ok {
		t.Error(`Info("missing") found a tool`)
	}
}

func TestRegisterWhileCalling(t *testing.T) {
	r := newTestRegistry(t, Options{}, CurrentTime(nil))
	ctx := t.Context()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 20 {
			if err := r.Register(echoTool("echo_"+string(rune('a'+i)), "")); err != nil {
				t.Error(err)
			}
		}
	}()
	for range 50 {
		if out := r.Call(ctx, "current_time", nil); !out.Success {
			t.Fatalf("Call: %s", out.Content)
		}
		r.List()
	}
	<-done
	if n := len(r.List()); n != 21 {
		t.Errorf("List has %d tools, want 21", n)
	}
}

func sourced(name, source, schema string) Tool {
	t := echoTool(name, schema).(fakeTool)
	t.info.Source = source
	return t
}

func TestReplace(t *testing.T) {
	r := newTestRegistry(t, Options{}, echoTool("echo", ""))
	if err := r.Replace("mcp:a", []Tool{sourced("a__x", "mcp:a", ""), sourced("a__y", "mcp:a", "")}); err != nil {
		t.Fatal(err)
	}
	// The second list drops a__x, keeps a__y, adds a__z; a bad schema, a taken name and a twice-listed
	// name are left out, each named in the error.
	err := r.Replace("mcp:a", []Tool{
		sourced("a__y", "mcp:a", ""), sourced("a__z", "mcp:a", ""),
		sourced("a__bad", "mcp:a", `{"type":"nope"}`), sourced("echo", "mcp:a", ""), sourced("a__z", "mcp:a", ""),
		sourced("b__q", "mcp:b", ""),
	})
	for _, want := range []string{"a__bad", "echo", "taken by a tool of builtin", "two tools", "b__q"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Replace error %v does not mention %q", err, want)
		}
	}
	var names []string
	for _, info := range r.List() {
		names = append(names, info.Name+"@"+info.Source)
	}
	if diff := cmp.Diff([]string{"a__y@mcp:a", "a__z@mcp:a", "echo@builtin"}, names); diff != "" {
		t.Errorf("tools after Replace (-want +got):\n%s", diff)
	}
	if err := r.Replace("mcp:a", nil); err != nil {
		t.Fatal(err)
	}
	if got := len(r.List()); got != 1 {
		t.Errorf("after an empty Replace %d tools remain, want 1 (echo)", got)
	}
}
