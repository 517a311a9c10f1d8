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

// patience is how long a test waits for what takes milliseconds on an idle machine and seconds on a
// busy one before it gives up: a safety net against a hang, never what a test measures. The timeouts
// the tests give servers and tools to prove a call did not wait for them are far longer (longTimeout).
const patience = time.Minute

// longTimeout is a timeout that must not run out during a test: a call that returns within patience
// did not wait for it.
const longTimeout = "10m"

// eventually fails t unless cond holds within patience. It polls: the conditions are states of servers,
// children and supervisors that announce no change.
func eventually(t testing.TB, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(patience)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("condition not met within %s", patience)
		}
	}
}

// receive waits for a value from ch and fails t with what if none comes within patience.
func receive[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(patience):
		t.Fatalf("%s (waited %s)", what, patience)
		var zero T
		return zero
	}
}

// testOptions back off briefly, so that reconnects happen fast. Their ConnectTimeout is generous: a
// stdio child of the race-enabled test binary can take seconds to start on a loaded machine, and an
// attempt that timed out would change the attempts the tests count. Start returns as soon as every
// first attempt has ended, so StartupWait costs nothing when the servers answer.
func testOptions() Options {
	return Options{
		Getenv:         os.Getenv,
		ConnectTimeout: patience,
		StartupWait:    patience,
		MinBackoff:     20 * time.Millisecond,
		MaxBackoff:     200 * time.Millisecond,
	}
}

// callPromptly calls a tool and fails t unless the call returns within patience: a call whose
// server's or tool's timeout is longTimeout returned without waiting for it.
func callPromptly(t testing.TB, reg *tool.Registry, name, args string) tool.Outcome {
	t.Helper()
	done := make(chan tool.Outcome, 1)
	go func() { done <- reg.Call(t.Context(), name, json.RawMessage(args)) }()
	return receive(t, done, name+" did not return")
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
	return `{"mcpServers":{"` + name + `":{"command":` + testBinary() + `,"env":{"` + serverEnv + `":"` + mode + `"}` + extra + `}}}`
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
