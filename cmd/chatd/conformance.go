package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"chatd/internal/mcpclient"
	"chatd/internal/tool"
)

// conformanceServer is the name the scenario server gets in chatd, so its tools are conformance__<tool>.
const conformanceServer = "conformance"

// conformanceScenario is what chatd does in one client scenario of @modelcontextprotocol/conformance,
// once connected (initialize, then tools/list): call one tool, if any, and find want in its text.
type conformanceScenario struct {
	tool, args, want string
}

var conformanceScenarios = map[string]conformanceScenario{
	"initialize": {},
	"tools_call": {tool: "add_numbers", args: `{"a":2,"b":3}`, want: "5"},
	// The server answers the call with an SSE stream it closes after a priming event (an id and
	// retry: 500); the answer comes on the GET that resumes the stream with Last-Event-ID.
	"sse-retry": {tool: "test_reconnection", args: `{}`, want: "Reconnection test completed successfully"},
}

// conformanceUnsupported says why chatd's client cannot take part in the other scenarios.
func conformanceUnsupported(name string) string {
	switch {
	case strings.HasPrefix(name, "elicitation"):
		return "chatd's MCP client puts an elicitation to the person behind a run's call, and this command runs no run: it would decline"
	case strings.HasPrefix(name, "auth/"):
		return "chatd's MCP client does not do OAuth; it sends the headers configured for a server"
	}
	return "chatd runs " + strings.Join(slices.Sorted(maps.Keys(conformanceScenarios)), ", ")
}

// conformance runs chatd's MCP client against one scenario server of @modelcontextprotocol/conformance,
// which runs this command with the server's URL as the last argument and the scenario in
// MCP_CONFORMANCE_SCENARIO. The client is the one `chatd serve` runs: an mcpclient.Manager filling a
// tool.Registry, through which the tool is called.
func conformance(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mcp-conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("scenario", getenv("MCP_CONFORMANCE_SCENARIO"), "the scenario (default $MCP_CONFORMANCE_SCENARIO, else initialize)")
	timeout := fs.Duration("timeout", 10*time.Second, "bound on connecting, and on the tool call")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: chatd mcp-conformance [flags] URL\n\n"+
			"Connects chatd's MCP client to the streamable HTTP server at URL and runs one client scenario of\n"+
			"@modelcontextprotocol/conformance: %s.\n\n", strings.Join(slices.Sorted(maps.Keys(conformanceScenarios)), ", "))
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errUsage
	}
	*name = cmp.Or(*name, "initialize")
	sc, ok := conformanceScenarios[*name]
	if !ok {
		return fmt.Errorf("mcp-conformance: scenario %q is not supported: %s", *name, conformanceUnsupported(*name))
	}
	fmt.Fprintf(stdout, "scenario %s against %s\n", *name, fs.Arg(0))

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tools := tool.NewRegistry(tool.Options{DefaultTimeout: *timeout, Logger: log})
	defer tools.Close()
	m, err := connectConformance(ctx, fs.Arg(0), tools, *timeout, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "initialized: protocol %s\n", m.Servers()[0].Protocol)
	var names []string
	for _, info := range tools.List() {
		names = append(names, info.Name)
	}
	fmt.Fprintf(stdout, "listed %d tools: %s\n", len(names), strings.Join(names, " "))
	if sc.tool != "" {
		err = callConformance(ctx, tools, sc, stdout)
	}
	m.Close()
	fmt.Fprintln(stdout, "closed")
	return err
}

// connectConformance starts a Manager with the server at url as its one server, and waits for it to be
// connected: initialized, and its tools listed into tools.
func connectConformance(ctx context.Context, url string, tools *tool.Registry, timeout time.Duration, log *slog.Logger) (*mcpclient.Manager, error) {
	file, err := json.Marshal(map[string]any{"mcpServers": map[string]any{conformanceServer: map[string]string{"url": url}}})
	if err != nil {
		return nil, err
	}
	servers, err := mcpclient.ParseConfig(file, nil)
	if err != nil {
		return nil, fmt.Errorf("mcp-conformance: %w", err)
	}
	m := mcpclient.New(servers, mcpclient.Options{Registry: tools, Logger: log, Version: version,
		ConnectTimeout: timeout, KeepAlive: -1})
	m.Start(ctx)
	if st := m.Servers()[0]; st.State != mcpclient.StateConnected {
		m.Close()
		why := cmp.Or(st.LastError, fmt.Sprintf("still %s after %s", st.State, timeout))
		return nil, fmt.Errorf("mcp-conformance: connect to %s: %s", url, why)
	}
	return m, nil
}

// callConformance calls the scenario's tool through the registry, as the agent loop would.
func callConformance(ctx context.Context, tools *tool.Registry, sc conformanceScenario, stdout io.Writer) error {
	name := mcpclient.ToolName(conformanceServer, sc.tool)
	if _, ok := tools.Info(name); !ok {
		return fmt.Errorf("mcp-conformance: the server did not list the tool %s", sc.tool)
	}
	out := tools.Call(ctx, name, json.RawMessage(sc.args))
	fmt.Fprintf(stdout, "called %s %s in %s: %s\n", sc.tool, out.Arguments, out.Duration.Round(time.Millisecond), out.Content)
	if !out.Success {
		return fmt.Errorf("mcp-conformance: call %s failed: %s", sc.tool, out.Content)
	}
	if !strings.Contains(out.Content, sc.want) {
		return fmt.Errorf("mcp-conformance: call %s: the result does not say %q", sc.tool, sc.want)
	}
	return nil
}
