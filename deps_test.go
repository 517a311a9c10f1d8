package chatd_test

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// pkg is what go list says of one package.
type pkg struct {
	ImportPath string
	Imports    []string // direct, without test files
	Deps       []string // transitive
	Standard   bool
}

func listPackages(t *testing.T) map[string]pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", "std", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// TestDependencies pins the import graph: one concept per package, imports pointing one way (from the
// HTTP API and the binary down to the store, the model adapters and the standard library).
func TestDependencies(t *testing.T) {
	pkgs := listPackages(t)
	std := func(path string) bool { return pkgs[path].Standard || strings.HasPrefix(path, "vendor/") }
	ours := func(path string) bool { return path == "chatd" || strings.HasPrefix(path, "chatd/") }

	// Packages that import only the standard library.
	for _, p := range []string{"chatd/internal/llm", "chatd/internal/sse", "chatd/internal/store", "chatd/internal/webui", "chatd/internal/marker"} {
		for _, imp := range pkgs[p].Imports {
			if !std(imp) {
				t.Errorf("%s imports %s; it may import only the standard library", p, imp)
			}
		}
	}
	// Packages of chatd each may depend on (transitively); nil means none.
	allowed := map[string][]string{
		"chatd/internal/llm":           nil,
		"chatd/internal/sse":           nil,
		"chatd/internal/store":         nil,
		"chatd/internal/tool":          nil,
		"chatd/internal/runevent":      {"chatd/internal/store"},
		"chatd/internal/agent":         {"chatd/internal/llm"},
		"chatd/internal/llm/upstream":  {"chatd/internal/llm"},
		"chatd/internal/llm/openai":    {"chatd/internal/llm", "chatd/internal/llm/upstream", "chatd/internal/sse"},
		"chatd/internal/llm/responses": {"chatd/internal/llm", "chatd/internal/llm/upstream", "chatd/internal/sse"},
		"chatd/internal/llm/anthropic": {"chatd/internal/llm", "chatd/internal/llm/upstream", "chatd/internal/sse"},
		"chatd/internal/llm/gemini":    {"chatd/internal/llm", "chatd/internal/llm/upstream", "chatd/internal/sse"},
		"chatd/internal/llm/llmtest":   {"chatd/internal/llm"},
		"chatd/internal/prompt":        {"chatd/internal/llm", "chatd/internal/store"},
		"chatd/internal/marker":        nil,
		"chatd/internal/chat": {"chatd/internal/agent", "chatd/internal/llm", "chatd/internal/marker", "chatd/internal/prompt", "chatd/internal/runevent",
			"chatd/internal/store", "chatd/internal/tool", "chatd/internal/metrics", "chatd/internal/tracing", "chatd/internal/logging"},
		// The telemetry packages know nothing of chatd but what tracing hands the adapters.
		"chatd/internal/metrics": nil,
		"chatd/internal/logging": nil,
		"chatd/internal/tracing": {"chatd/internal/llm"},
		// auth knows keys, sign-ins and limits: it reads the store's accounts, nothing else of chatd.
		"chatd/internal/auth": {"chatd/internal/store"},
		// A store driver implements the store's contract and knows nothing else of chatd.
		"chatd/internal/store/sqlite":   {"chatd/internal/store"},
		"chatd/internal/store/postgres": {"chatd/internal/store"},
		"chatd/internal/httpapi": {"chatd/internal/auth", "chatd/internal/chat", "chatd/internal/agent", "chatd/internal/prompt", "chatd/internal/llm",
			"chatd/internal/marker", "chatd/internal/runevent", "chatd/internal/store",
			"chatd/internal/tool", "chatd/internal/sse", "chatd/internal/metrics", "chatd/internal/tracing", "chatd/internal/logging"},
		"chatd/internal/mcpclient": {"chatd/internal/tool", "chatd/internal/tracing", "chatd/internal/llm"},
		"chatd/internal/fetchurl":  {"chatd/internal/tool"},
		"chatd/internal/webui":     nil,
		// provider is the one package that knows every adapter.
		"chatd/internal/provider": {"chatd/internal/llm", "chatd/internal/llm/upstream", "chatd/internal/sse",
			"chatd/internal/llm/openai", "chatd/internal/llm/responses", "chatd/internal/llm/anthropic", "chatd/internal/llm/gemini"},
	}
	// config turns the file into the option types of what it configures: providers, tools and chat's
	// agents, and so may reach what they reach, and nothing else (no store driver, no MCP, no HTTP API).
	allowed["chatd/internal/config"] = slices.Concat([]string{"chatd/internal/chat", "chatd/internal/provider", "chatd/internal/tool"},
		allowed["chatd/internal/chat"], allowed["chatd/internal/provider"])
	for p, ok := range allowed {
		if _, found := pkgs[p]; !found {
			t.Errorf("package %s is gone: update this test", p)
			continue
		}
		for _, dep := range pkgs[p].Deps {
			if ours(dep) && !slices.Contains(ok, dep) {
				t.Errorf("%s depends on %s, which it must not", p, dep)
			}
		}
	}
	// Only the command reads the configuration; chat and the API never reach a concrete provider.
	for path, p := range pkgs {
		if !ours(path) {
			continue
		}
		if slices.Contains(p.Deps, "chatd/internal/config") && path != "chatd/cmd/chatd" {
			t.Errorf("%s depends on internal/config; only cmd/chatd may", path)
		}
	}
	// chat is the orchestration layer: it never speaks HTTP itself.
	if slices.Contains(pkgs["chatd/internal/chat"].Imports, "net/http") {
		t.Error("internal/chat imports net/http")
	}
}
