package mcpclient

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"chatd/internal/tool"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(serverEnv); mode != "" {
		os.Exit(serveStdio(mode))
	}
	// Idle keep-alive connections of http.DefaultTransport, which the manager's HTTP clients share, are
	// not leaks.
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// eventually fails t unless cond holds within 5s; it polls.
func eventually(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testOptions are small, so that failures and reconnects happen fast.
func testOptions() Options {
	return Options{
		Getenv:         os.Getenv,
		ConnectTimeout: 2 * time.Second,
		StartupWait:    2 * time.Second,
		MinBackoff:     20 * time.Millisecond,
		MaxBackoff:     200 * time.Millisecond,
	}
}

// startManager parses config (getenv may be nil), starts a Manager on a new registry and closes both
// when the test ends.
func startManager(t testing.TB, config string, getenv func(string) string, opts Options) (*Manager, *tool.Registry) {
	t.Helper()
	servers, err := ParseConfig([]byte(config), getenv)
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	reg := tool.NewRegistry(tool.Options{DefaultTimeout: 10 * time.Second})
	opts.Registry = reg
	m := New(servers, opts)
	t.Cleanup(reg.Close)
	t.Cleanup(m.Close)
	m.Start(context.Background())
	return m, reg
}

// httpConfig is the config of one streamable HTTP server.
func httpConfig(name, url string, extra string) string {
	return `{"mcpServers":{"` + name + `":{"url":"` + url + `"` + extra + `}}}`
}

// stdioConfig is the config of one stdio server: this test binary in mode.
func stdioConfig(name, mode string, extra string) string {
	cmd, _ := json.Marshal(os.Args[0])
	return `{"mcpServers":{"` + name + `":{"command":` + string(cmd) + `,"env":{"` + serverEnv + `":"` + mode + `"}` + extra + `}}}`
}

// status is the status of the server called name.
func status(t testing.TB, m *Manager, name string) Status {
	t.Helper()
	for _, s := range m.Servers() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no server %q in %+v", name, m.Servers())
	return Status{}
}

func connected(m *Manager, name string) bool {
	for _, s := range m.Servers() {
		if s.Name == name {
			return s.State == StateConnected
		}
	}
	return false
}

// call calls a tool through the registry with t's context.
func call(t testing.TB, reg *tool.Registry, name, args string) tool.Outcome {
	t.Helper()
	return reg.Call(t.Context(), name, json.RawMessage(args))
}

// mustCall calls a tool and fails t unless it succeeds.
func mustCall(t testing.TB, reg *tool.Registry, name, args string) tool.Outcome {
	t.Helper()
	out := call(t, reg, name, args)
	if !out.Success {
		t.Fatalf("%s: %s", name, out.Content)
	}
	return out
}

func names(reg *tool.Registry, source string) []string {
	var out []string
	for _, info := range reg.List() {
		if source == "" || info.Source == source {
			out = append(out, info.Name)
		}
	}
	return out
}
