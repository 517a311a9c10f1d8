package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The MCP tests run chatd with the MCP reference servers from npm (@modelcontextprotocol/server-everything
// and server-filesystem, in e2e/node_modules), with aimock as the model: its fixtures
// (testdata/mcp-fixtures.json) make the model call the servers' tools, then answer once it has read the
// result. Each subtest runs its own chatd with its own servers; they share aimock and the binary, and
// tell their upstream requests apart by their user message.

// everythingTools is how many tools server-everything 2026.8.31 lists to chatd, which offers elicitation
// in form mode: its 13 tools for a client that offers no capabilities, and trigger-elicitation-request.
const everythingTools = 14

// mcpPeers is what every MCP test needs: node, the servers' entry points, the chatd binary and aimock.
type mcpPeers struct {
	node       string
	everything string // server-everything's dist/index.js
	filesystem string // server-filesystem's dist/index.js
	loopback   string // testdata/loopback.cjs
	bin        string
	mock       string // aimock's base URL
}

// newMCPPeers finds the peers (skipping, or under CI failing, when one is missing), starts aimock with
// the MCP fixtures and builds chatd.
func newMCPPeers(t *testing.T) *mcpPeers {
	t.Helper()
	node, err := exec.LookPath("node")
	require(t, err == nil, "node is not installed")
	m := &mcpPeers{node: node}
	for _, f := range []struct {
		path *string
		rel  string
	}{
		{&m.everything, "node_modules/@modelcontextprotocol/server-everything/dist/index.js"},
		{&m.filesystem, "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"},
		{&m.loopback, "testdata/loopback.cjs"},
	} {
		*f.path, _ = filepath.Abs(f.rel)
		_, err := os.Stat(*f.path)
		require(t, err == nil, f.rel+" is missing")
	}
	mockPort := startAimock(t, "testdata/mcp-fixtures.json", "--strict")
	m.mock = fmt.Sprintf("http://127.0.0.1:%d", mockPort)
	m.bin = buildChatd(t)
	return m
}

// everythingServer is server-everything as one test runs it.
type everythingServer struct {
	transport string         // stdio, http or sse
	entry     map[string]any // its entry in chatd's mcpServers file
	port      int            // http and sse: the port it listens on
	cmd       *exec.Cmd      // http and sse: its process
}

// startEverything runs server-everything over transport for the test (over stdio chatd runs it) and
// returns it; extra adds to its entry in the servers file. Over HTTP it calls listen(PORT) without a
// host: loopback.cjs makes that bind 127.0.0.1 only.
func (m *mcpPeers) startEverything(t *testing.T, transport string, extra map[string]any) *everythingServer {
	t.Helper()
	e := &everythingServer{transport: transport}
	switch transport {
	case "stdio":
		e.entry = map[string]any{"command": m.node, "args": []string{m.everything}}
	case "http":
		e.port = freePort(t)
		e.entry = map[string]any{"url": fmt.Sprintf("http://127.0.0.1:%d/mcp", e.port)}
	case "sse":
		e.port = freePort(t)
		e.entry = map[string]any{"url": fmt.Sprintf("http://127.0.0.1:%d/sse", e.port), "transport": "sse"}
	}
	for k, v := range extra {
		e.entry[k] = v
	}
	if e.port != 0 {
		e.listen(t, m)
	}
	return e
}

// listen starts a remote server's process.
func (e *everythingServer) listen(t *testing.T, m *mcpPeers) {
	t.Helper()
	arg := map[string]string{"http": "streamableHttp", "sse": "sse"}[e.transport]
	e.cmd, _ = start(t, "server-everything "+arg, e.port,
		[]string{"PORT=" + strconv.Itoa(e.port), "NODE_OPTIONS=--require " + m.loopback},
		m.node, m.everything, arg)
	checkLoopbackOnly(t, e.port)
}

// checkLoopbackOnly checks that nothing answers on port at the machine's other addresses.
func checkLoopbackOnly(t *testing.T, port int) {
	t.Helper()
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		ipnet, ok := a.(*net.IPNet)
		if !ok || ipnet.IP.IsLoopback() || ipnet.IP.IsLinkLocalUnicast() {
			continue
		}
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(ipnet.IP.String(), strconv.Itoa(port)), time.Second)
		if err == nil {
			conn.Close()
			t.Errorf("a server listens on %s:%d: it must listen on 127.0.0.1 only", ipnet.IP, port)
		}
	}
}

// kill ends the server with SIGKILL: over stdio the child chatd runs (status is its entry in GET
// /v1/mcp/servers), over HTTP the process the test runs.
func (e *everythingServer) kill(t *testing.T, status mcpStatus) {
	t.Helper()
	if e.cmd == nil {
		if status.PID <= 0 || !running(status.PID) {
			t.Fatalf("GET /v1/mcp/servers: %+v, want the running server's pid", status)
		}
		if err := syscall.Kill(status.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		return
	}
	e.cmd.Process.Kill()
	e.cmd.Wait()
}

// startChatd runs chatd with the MCP servers given (the "mcpServers" object of its file) and aimock as
// its only provider. When the test ends chatd is stopped with SIGTERM, which must stop its stdio
// servers: one that outlives chatd fails the test.
func (m *mcpPeers) startChatd(t *testing.T, servers map[string]any, env ...string) *process {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "mcp.json")
	raw, err := json.MarshalIndent(map[string]any{"mcpServers": servers}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	env = append([]string{
		"OPENAI_API_KEY=" + apiKey,
		"OPENAI_BASE_URL=" + m.mock + "/v1",
		"ANTHROPIC_API_KEY=", "GEMINI_API_KEY=", "OLLAMA_HOST=",
		"CHATD_MCP_CONFIG=" + file,
		"CHATD_LOG_LEVEL=debug",
	}, env...)
	p := startChatd(t, "chatd", m.bin, filepath.Join(dir, "chatd.db"), env...)
	// Registered after startChatd's cleanup, so it runs first: a graceful stop, then the SIGKILL there.
	t.Cleanup(func() { stopChatd(t, p) })
	return p
}

// stopChatd stops chatd with SIGTERM and checks that the stdio servers it ran are gone with it.
func stopChatd(t *testing.T, p *process) {
	t.Helper()
	var pids []int
	if !exited(p) {
		// t.Context() has ended when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", p.base+"/v1/mcp/servers", nil)
		var got struct{ Servers []mcpStatus }
		if resp, err := http.DefaultClient.Do(req); err == nil {
			json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
		}
		for _, s := range got.Servers {
			if s.PID > 0 {
				pids = append(pids, s.PID)
			}
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		if _, ok := p.waitExit(20 * time.Second); !ok {
			t.Errorf("chatd did not stop within 20s of SIGTERM")
		}
	}
	checkGone(t, "a stdio MCP server", pids)
}

func exited(p *process) bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// checkGone waits up to patience for processes to end; those still running fail the test and are
// killed.
func checkGone(t *testing.T, what string, pids []int) {
	t.Helper()
	for _, pid := range pids {
		if !poll(func() bool { return !running(pid) }) {
			t.Errorf("%s (pid %d) still runs after chatd stopped", what, pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// procState is the state letter of /proc/pid/stat (R, S, Z …), or 0 when there is no such process.
func procState(pid int) byte {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state …; comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 || i+2 >= len(stat) {
		return 0
	}
	return stat[i+2]
}

// running reports whether pid is a live process; a zombie has ended and only waits to be reaped.
func running(pid int) bool {
	s := procState(pid)
	return s != 0 && s != 'Z'
}

// mcpStatus is one server of GET /v1/mcp/servers.
type mcpStatus struct {
	Name, Transport, State string
	Tools                  int
	LastError              string `json:"last_error"`
	Attempts               int
	PID                    int
}

func mcpStatuses(t *testing.T, p *process) map[string]mcpStatus {
	t.Helper()
	var got struct{ Servers []mcpStatus }
	getJSON(t, p.base+"/v1/mcp/servers", &got)
	out := map[string]mcpStatus{}
	for _, s := range got.Servers {
		out[s.Name] = s
	}
	return out
}

// waitServer polls GET /v1/mcp/servers until the server satisfies ok, up to patience, and returns its
// status.
func waitServer(t *testing.T, p *process, name string, ok func(mcpStatus) bool) mcpStatus {
	t.Helper()
	var s mcpStatus
	var found bool
	if !poll(func() bool {
		s, found = mcpStatuses(t, p)[name]
		return found && ok(s)
	}) {
		t.Fatalf("MCP server %s after %s: %+v (found %v)", name, patience, s, found)
	}
	return s
}

func connected(s mcpStatus) bool { return s.State == "connected" }

// toolWire is one tool of GET /v1/tools.
type toolWire struct {
	Name        string
	Source      string
	InputSchema json.RawMessage `json:"input_schema"`
}

func listTools(t *testing.T, p *process) []toolWire {
	t.Helper()
	var got struct{ Tools []toolWire }
	getJSON(t, p.base+"/v1/tools", &got)
	return got.Tools
}

// callEvents are the events of one tool call in a run.
type callEvents struct {
	start, complete   map[string]any
	startAt, endAt    int // indexes in the run's events; -1 when absent
	progress          []event
	progressAfterEnd  []event // progress reported after the call's tool_complete
	starts, completes int
	text              string // the run's streamed answer
	cancelled         bool   // the run has a cancelled event
	done              string // the done event's status
}

func (c callEvents) success() bool { return c.complete["success"] == true }
func (c callEvents) content() string {
	s, _ := c.complete["content"].(string)
	return s
}

// eventsOf picks the events of the call callID out of a run's events.
func eventsOf(events []event, callID string) callEvents {
	c := callEvents{startAt: -1, endAt: -1}
	var text strings.Builder
	for i, ev := range events {
		mine := ev.Data["tool_call_id"] == callID
		switch {
		case ev.Type == "tool_start" && mine:
			c.starts++
			c.start, c.startAt = ev.Data, i
		case ev.Type == "tool_complete" && mine:
			c.completes++
			c.complete, c.endAt = ev.Data, i
		case ev.Type == "tool_progress" && mine:
			if c.endAt >= 0 {
				c.progressAfterEnd = append(c.progressAfterEnd, ev)
			} else {
				c.progress = append(c.progress, ev)
			}
		case ev.Type == "text_delta":
			text.WriteString(str(ev.Data["text"]))
		case ev.Type == "cancelled":
			c.cancelled = true
		case ev.Type == "done":
			c.done = str(ev.Data["status"])
		}
	}
	c.text = text.String()
	return c
}

// checkCall checks a run that made the one call callID of the tool name: numbered events ending with
// done (status want), the call started once and then completed once. It returns the call's events.
func checkCall(t *testing.T, events []event, callID, name, wantDone string) callEvents {
	t.Helper()
	if err := checkSeq(events); err != nil {
		t.Fatalf("%v; events:\n%s", err, eventList(events))
	}
	c := eventsOf(events, callID)
	switch {
	case c.starts != 1 || c.completes != 1:
		t.Fatalf("call %s: %d tool_start and %d tool_complete events, want one each; events:\n%s", callID, c.starts, c.completes, eventList(events))
	case c.startAt > c.endAt:
		t.Errorf("call %s: tool_complete (event %d) before tool_start (event %d)", callID, c.endAt+1, c.startAt+1)
	case c.start["name"] != name || c.complete["name"] != name:
		t.Errorf("call %s: tool_start names %v, tool_complete %v, want %s", callID, c.start["name"], c.complete["name"], name)
	}
	if c.done != wantDone {
		t.Errorf("the run ended with done %q, want %q; events:\n%s", c.done, wantDone, eventList(events))
	}
	return c
}

// chat sends message (in session, when not "") and returns the run's events, failing on a send or a
// stream that does not end cleanly.
func chat(t *testing.T, p *process, session, message string) []event {
	t.Helper()
	body := map[string]any{"message": message}
	if session != "" {
		body["session_id"] = session
	}
	r := p.chat(t, body, "")
	if r.status != 200 || r.err != nil {
		t.Fatalf("chat %q: %d %s %v", message, r.status, r.body, r.err)
	}
	return r.events
}

func sessionOf(events []event) string { return str(events[0].Data["session_id"]) }

// toolRecord is the stored tool record answering callID.
func toolRecord(t *testing.T, p *process, session, callID string) record {
	t.Helper()
	recs := p.records(t, session)
	for _, r := range recs {
		if r.Role == "tool" && r.ToolCallID == callID {
			return r
		}
	}
	t.Fatalf("no tool record answers %s; records:\n%s", callID, describe(recs))
	return record{}
}

// mcpUpstream is a request as aimock's journal keeps it (converted to the Chat Completions shape).
type mcpUpstream struct {
	Body struct {
		Messages []struct {
			Role       string
			Content    any
			ToolCallID string `json:"tool_call_id"`
		}
		Tools []struct{ Function struct{ Name string } }
	}
	Response struct{ Status int }
}

// upstreamRequests returns the requests aimock received whose last user message is message.
func upstreamRequests(t *testing.T, mock, message string) []mcpUpstream {
	t.Helper()
	var journal []mcpUpstream
	getJSON(t, mock+"/__aimock/journal", &journal)
	var out []mcpUpstream
	for _, e := range journal {
		last := ""
		for _, m := range e.Body.Messages {
			if m.Role == "user" {
				last = fmt.Sprint(m.Content)
			}
		}
		if last == message {
			out = append(out, e)
		}
	}
	return out
}

func TestMCP(t *testing.T) {
	t.Parallel() // each test has its own processes, ports and files
	m := newMCPPeers(t)
	for _, transport := range []string{"stdio", "http", "sse"} {
		t.Run("everything/"+transport, func(t *testing.T) {
			t.Parallel()
			testEverything(t, m, transport)
		})
		t.Run("crash/"+transport, func(t *testing.T) {
			t.Parallel()
			testMCPCrash(t, m, transport)
		})
	}
	tests := []struct {
		name string
		f    func(*testing.T, *mcpPeers)
	}{
		{"cancel", testMCPCancel},
		{"timeout", testMCPTimeout},
		{"invalid-arguments", testMCPInvalidArguments},
		{"filesystem", testMCPFilesystem},
		{"hung-server", testMCPHungServer},
		{"environment", testMCPEnvironment},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.f(t, m)
		})
	}
}

// testEverything runs server-everything over one transport: its tools listed and called (get-sum), its
// progress streamed (trigger-long-running-operation).
func testEverything(t *testing.T, m *mcpPeers, transport string) {
	p := m.startChatd(t, map[string]any{"everything": m.startEverything(t, transport, nil).entry})

	// Start-up waits for the server's first attempt: it is connected with every tool by now.
	s := mcpStatuses(t, p)["everything"]
	if s.State != "connected" || s.Transport != transport || s.Tools != everythingTools || s.LastError != "" {
		t.Errorf("GET /v1/mcp/servers: %+v, want everything connected over %s with %d tools", s, transport, everythingTools)
	}
	if (s.PID > 0) != (transport == "stdio") {
		t.Errorf("GET /v1/mcp/servers: pid %d over %s", s.PID, transport)
	}
	checkEverythingTools(t, p, s.Tools)

	message := "[mcp-sum] over " + transport
	events := chat(t, p, "", message)
	c := checkCall(t, events, "call_sum", "everything__get-sum", "completed")
	if args, _ := json.Marshal(c.start["arguments"]); string(args) != `{"a":2,"b":3}` {
		t.Errorf("tool_start arguments = %s", args)
	}
	const result = "The sum of 2 and 3 is 5."
	if !c.success() || c.content() != result {
		t.Errorf("tool_complete: success %v, content %q, want %q", c.success(), c.content(), result)
	}
	if c.text != "Two and three make 5, says the MCP server." {
		t.Errorf("streamed answer %q", c.text)
	}
	session := sessionOf(events)
	if r := toolRecord(t, p, session, "call_sum"); r.Success == nil || !*r.Success || r.Name != "everything__get-sum" || r.Content != result {
		t.Errorf("stored tool record %+v", r)
	}

	// What the model was sent: the MCP tools, then the call's result.
	up := upstreamRequests(t, m.mock, message)
	if len(up) != 2 || up[0].Response.Status != 200 || up[1].Response.Status != 200 {
		t.Fatalf("aimock received %d requests for %q (%+v), want 2 answered 200", len(up), message, up)
	}
	if !slices.ContainsFunc(up[0].Body.Tools, func(tl struct{ Function struct{ Name string } }) bool {
		return tl.Function.Name == "everything__get-sum"
	}) {
		t.Errorf("the first upstream request offers no everything__get-sum: %+v", up[0].Body.Tools)
	}
	msgs := up[1].Body.Messages
	if n := len(msgs); n == 0 || msgs[n-1].Role != "tool" || msgs[n-1].ToolCallID != "call_sum" || !strings.Contains(fmt.Sprint(msgs[n-1].Content), result) {
		t.Errorf("the second upstream request does not end with the call's result: %+v", msgs)
	}

	checkProgress(t, p, transport)
}

// checkEverythingTools checks GET /v1/tools: server-everything's tools, named everything__<tool>, from
// source mcp:everything, as many as GET /v1/mcp/servers counts.
func checkEverythingTools(t *testing.T, p *process, count int) {
	t.Helper()
	tools := listTools(t, p)
	n := 0
	var sum *toolWire
	for i, tl := range tools {
		if tl.Source == "mcp:everything" {
			n++
			if !strings.HasPrefix(tl.Name, "everything__") {
				t.Errorf("tool %s from mcp:everything", tl.Name)
			}
		}
		if tl.Name == "everything__get-sum" {
			sum = &tools[i]
		}
	}
	if n != count {
		t.Errorf("GET /v1/tools lists %d tools from mcp:everything; GET /v1/mcp/servers counts %d", n, count)
	}
	if sum == nil {
		t.Fatalf("GET /v1/tools has no everything__get-sum: %+v", tools)
	}
	var schema struct {
		Properties map[string]struct{ Type string }
	}
	json.Unmarshal(sum.InputSchema, &schema)
	if sum.Source != "mcp:everything" || schema.Properties["a"].Type != "number" || schema.Properties["b"].Type != "number" {
		t.Errorf("everything__get-sum: source %q, input schema %s", sum.Source, sum.InputSchema)
	}
}

// checkProgress runs trigger-long-running-operation (4 steps in 1.2s): its progress notifications come
// as tool_progress events of the call, in order, before its tool_complete.
func checkProgress(t *testing.T, p *process, transport string) {
	t.Helper()
	events := chat(t, p, "", "[mcp-progress] over "+transport)
	c := checkCall(t, events, "call_progress", "everything__trigger-long-running-operation", "completed")
	if !c.success() || !strings.Contains(c.content(), "Long running operation completed") {
		t.Errorf("tool_complete: success %v, content %q", c.success(), c.content())
	}
	// The last notification may race the result and be dropped as late; the others may not.
	if len(c.progress) < 3 || len(c.progressAfterEnd) > 0 {
		t.Fatalf("%d tool_progress events before tool_complete and %d after, want 3 or 4 before and none after; events:\n%s",
			len(c.progress), len(c.progressAfterEnd), eventList(events))
	}
	last := 0.0
	for _, ev := range c.progress {
		got, _ := ev.Data["progress"].(float64)
		if got <= last || ev.Data["total"] != 4.0 || ev.seq() < c.startAt+1 {
			t.Errorf("tool_progress %v after progress %v", ev, last)
		}
		last = got
	}
	if c.text != "The long operation finished." {
		t.Errorf("streamed answer %q", c.text)
	}
}

// testMCPCancel cancels a run during an MCP call: the run ends at once, the call is stored as failed,
// and the progress the server keeps sending (it ignores the cancellation) goes nowhere. The session and
// the server's connection go on.
func testMCPCancel(t *testing.T, m *mcpPeers) {
	p := m.startChatd(t, map[string]any{"everything": m.startEverything(t, "stdio", nil).entry})
	before := mcpStatuses(t, p)["everything"]

	s := p.openStream(t, map[string]any{"message": "[mcp-cancel] a 30 s operation"})
	events, err := s.until(func(ev event) bool {
		return ev.Type == "tool_progress" && ev.Data["tool_call_id"] == "call_cancel"
	}, patience)
	if err != nil {
		t.Fatalf("waiting for the call's first progress: %v; events:\n%s", err, eventList(events))
	}
	runID := str(events[0].Data["run_id"])
	resp, err := p.post(t.Context(), "/v1/runs/"+runID+"/cancel", map[string]any{}, "")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel: %d %s", resp.StatusCode, raw)
	}
	// The operation runs 30 s, and so does the call's timeout: a cancel that waited for either would
	// not end the stream within 25 s, which is ample for one that did not, even on a loaded machine.
	rest, err := s.rest(25 * time.Second)
	events = append(events, rest...)
	if err != nil {
		t.Fatalf("after the cancel: %v; events:\n%s", err, eventList(events))
	}
	c := checkCall(t, events, "call_cancel", "everything__trigger-long-running-operation", "cancelled")
	if c.success() || len(c.progressAfterEnd) > 0 || !c.cancelled {
		t.Errorf("tool_complete success %v (want false); %d tool_progress events after it; a cancelled event: %v; events:\n%s",
			c.success(), len(c.progressAfterEnd), c.cancelled, eventList(events))
	}
	session := sessionOf(events)
	if r := toolRecord(t, p, session, "call_cancel"); r.Success == nil || *r.Success || r.Content == "" {
		t.Errorf("stored tool record %+v, want success false and a reason", r)
	}

	// The server goes on reporting progress for the cancelled call, ten times a second, for 30 s.
	// None of it may reach the next run of the session, which must work with the same connection and
	// reads its result from it after the reports sent before it…
	next := chat(t, p, session, "[mcp-sum] after a cancelled call")
	c = checkCall(t, next, "call_sum", "everything__get-sum", "completed")
	if !c.success() || !strings.Contains(c.content(), "is 5") {
		t.Errorf("the next run's call: success %v, content %q", c.success(), c.content())
	}
	for _, ev := range next {
		if ev.Type == "tool_progress" {
			t.Errorf("the next run has progress %v", ev)
		}
	}
	// …nor the cancelled run's log, read once the next run is over.
	logged := p.replay(t, runID, "")
	if err := checkSeq(logged); err != nil {
		t.Errorf("the run's log after the cancel: %v:\n%s", err, eventList(logged))
	}
	if n := len(eventsOf(logged, "call_cancel").progressAfterEnd); n > 0 || len(logged) != len(events) {
		t.Errorf("the run's log holds %d events (%d streamed), %d progress after the call ended:\n%s", len(logged), len(events), n, eventList(logged))
	}
	if after := mcpStatuses(t, p)["everything"]; after.State != "connected" || after.PID != before.PID {
		t.Errorf("after the cancel the server is %+v; before it was %+v: a cancel must not cost the connection", after, before)
	}
}

// testMCPTimeout gives trigger-long-running-operation a timeout of 1 s of its own: the call fails when
// it runs out and the run goes on to the model's answer (streamed over a second), while the server goes
// on with the operation and its progress. None of that progress may follow the call's tool_complete,
// and the connection stays.
func testMCPTimeout(t *testing.T, m *mcpPeers) {
	p := m.startChatd(t, map[string]any{"everything": m.startEverything(t, "stdio", map[string]any{
		"timeout": "20s",
		"tools":   map[string]any{"trigger-long-running-operation": map[string]any{"timeout": "1s"}},
	}).entry})
	before := mcpStatuses(t, p)["everything"]
	events := chat(t, p, "", "[mcp-timeout] a 30 s operation with a 1 s timeout")
	c := checkCall(t, events, "call_timeout", "everything__trigger-long-running-operation", "completed")
	ms, _ := c.complete["duration_ms"].(float64)
	// The message names the timeout that ended the call: the tool's 1 s, not the server's 20 s.
	if c.success() || !strings.Contains(c.content(), "timed out after 1s") || ms < 900 {
		t.Errorf("tool_complete: success %v after %v ms, content %q; want a failure at the tool's timeout of 1s", c.success(), ms, c.content())
	}
	if len(c.progress) == 0 || len(c.progressAfterEnd) > 0 {
		t.Errorf("%d tool_progress events before the call's tool_complete and %d after; want some before and none after; events:\n%s",
			len(c.progress), len(c.progressAfterEnd), eventList(events))
	}
	if c.text != "The operation took longer than it may, so I stopped waiting for it." {
		t.Errorf("streamed answer %q", c.text)
	}
	if after := mcpStatuses(t, p)["everything"]; after.State != "connected" || after.PID != before.PID {
		t.Errorf("after the timeout the server is %+v; before it was %+v: a timed-out call must not cost the connection", after, before)
	}
}

// testMCPInvalidArguments has the model call get-sum with {"a":"x"}: chatd refuses the call against the
// tool's input schema, the model reads why, and the run goes on to its answer.
func testMCPInvalidArguments(t *testing.T, m *mcpPeers) {
	p := m.startChatd(t, map[string]any{"everything": m.startEverything(t, "stdio", nil).entry})
	events := chat(t, p, "", "[mcp-bad-arguments] add x")
	c := checkCall(t, events, "call_bad", "everything__get-sum", "completed")
	msg := c.content()
	if c.success() || !strings.Contains(msg, "a") || !(strings.Contains(msg, "number") || strings.Contains(msg, "b")) {
		t.Errorf("tool_complete: success %v, content %q; want a failure naming the bad or missing argument", c.success(), msg)
	}
	t.Logf("the model read: %q", msg)
	if c.text != "The tool refused those arguments; a and b must be numbers." {
		t.Errorf("streamed answer %q", c.text)
	}
	if r := toolRecord(t, p, sessionOf(events), "call_bad"); r.Success == nil || *r.Success || r.Content != msg {
		t.Errorf("stored tool record %+v", r)
	}
}

// testMCPFilesystem runs server-filesystem with one allowed directory: a file in it is read, a file
// outside it is refused with the server's own message, and the run goes on.
func testMCPFilesystem(t *testing.T, m *mcpPeers) {
	root := t.TempDir()
	const notes = "hello from the allowed directory 5c1f\n"
	if err := os.WriteFile(filepath.Join(root, "notes.txt"), []byte(notes), 0o600); err != nil {
		t.Fatal(err)
	}
	p := m.startChatd(t, map[string]any{"filesystem": map[string]any{"command": m.node, "args": []string{m.filesystem, root}}})
	if s := mcpStatuses(t, p)["filesystem"]; s.State != "connected" || s.Tools == 0 {
		t.Fatalf("GET /v1/mcp/servers: %+v", s)
	}

	events := chat(t, p, "", "[mcp-fs-inside] read my notes")
	c := checkCall(t, events, "call_inside", "filesystem__read_text_file", "completed")
	if !c.success() || c.content() != notes {
		t.Errorf("reading a file inside the root: success %v, content %q", c.success(), c.content())
	}
	// The result's structuredContent is the call's payload.
	if payload, _ := c.complete["payload"].(map[string]any); payload["content"] != notes {
		t.Errorf("payload %v", c.complete["payload"])
	}

	events = chat(t, p, "", "[mcp-fs-outside] read /etc/hostname")
	c = checkCall(t, events, "call_outside", "filesystem__read_text_file", "completed")
	if c.success() || !strings.Contains(c.content(), "Access denied - path outside allowed directories") {
		t.Errorf("reading /etc/hostname: success %v, content %q", c.success(), c.content())
	}
	if c.text != "That file is outside the directories I may read." {
		t.Errorf("streamed answer %q", c.text)
	}
	if r := toolRecord(t, p, sessionOf(events), "call_outside"); r.Success == nil || *r.Success {
		t.Errorf("stored tool record %+v", r)
	}
}

// testMCPCrash kills the server during a call: the call fails at once (its timeout is 10 minutes; a
// call that fails within patience did not wait for it), the run goes on, and once the server is back (over stdio chatd starts it again) chatd
// reconnects and the next call works.
func testMCPCrash(t *testing.T, m *mcpPeers, transport string) {
	server := m.startEverything(t, transport, map[string]any{"timeout": "10m"})
	p := m.startChatd(t, map[string]any{"everything": server.entry})
	s := p.openStream(t, map[string]any{"message": "[mcp-crash] a 30 s operation over " + transport})
	events, err := s.until(func(ev event) bool {
		return ev.Type == "tool_progress" && ev.Data["tool_call_id"] == "call_crash"
	}, patience)
	if err != nil {
		t.Fatalf("waiting for the call's first progress: %v; events:\n%s", err, eventList(events))
	}
	old := mcpStatuses(t, p)["everything"]
	killedAt := time.Now()
	server.kill(t, old)
	// Over streamable HTTP the SDK tries to resume the call's stream three times (after 1, 1.5 and
	// 2.25 s) before the call fails; it must still fail of its own, long before its timeout.
	more, err := s.until(func(ev event) bool {
		return ev.Type == "tool_complete" && ev.Data["tool_call_id"] == "call_crash"
	}, patience)
	took := time.Since(killedAt)
	events = append(events, more...)
	if err != nil {
		t.Fatalf("waiting for the call's result: %v; events:\n%s", err, eventList(events))
	}
	rest, err := s.rest(patience)
	events = append(events, rest...)
	if err != nil {
		t.Fatalf("%v; events:\n%s", err, eventList(events))
	}
	c := checkCall(t, events, "call_crash", "everything__trigger-long-running-operation", "completed")
	if c.success() || c.content() == "" || strings.Contains(c.content(), "timed out") {
		t.Errorf("tool_complete: success %v, content %q; want a failure saying why, before the timeout", c.success(), c.content())
	}
	t.Logf("the failed call's result after %s: %q", took.Round(time.Millisecond), c.content())
	if c.text != "The MCP server went away during the call." {
		t.Errorf("streamed answer %q", c.text)
	}
	session := sessionOf(events)
	if r := toolRecord(t, p, session, "call_crash"); r.Success == nil || *r.Success {
		t.Errorf("stored tool record %+v", r)
	}

	if server.cmd != nil {
		server.listen(t, m) // on the same port, knowing none of chatd's sessions
	}
	now := waitServer(t, p, "everything", func(s mcpStatus) bool {
		return connected(s) && s.Attempts > old.Attempts && (server.cmd != nil || s.PID > 0 && s.PID != old.PID)
	})
	if now.Tools != everythingTools {
		t.Errorf("after the restart: %+v", now)
	}
	if server.cmd == nil && procState(old.PID) == 'Z' {
		t.Errorf("the killed server (pid %d) was never reaped", old.PID)
	}
	next := chat(t, p, session, "[mcp-sum] after the server crashed, over "+transport)
	c = checkCall(t, next, "call_sum", "everything__get-sum", "completed")
	if !c.success() || !strings.Contains(c.content(), "is 5") {
		t.Errorf("the call after the restart: success %v, content %q", c.success(), c.content())
	}
}

// hungServer is a stdio "server" that reads its input and never answers, ignores its input's end and
// SIGTERM (only SIGKILL stops it), and appends its pid to the file named by its argument.
const hungServer = `require("fs").appendFileSync(process.argv[1], process.pid + "\n");
process.on("SIGTERM", () => {});
process.stdin.on("data", () => {});
setInterval(() => {}, 1 << 30);`

// testMCPHungServer configures a server that never answers initialize next to a working one: chatd
// starts within its start-up wait, reports the hung server, serves the working one's tools, and stops
// every process the hung server's attempts started.
func testMCPHungServer(t *testing.T, m *mcpPeers) {
	pidFile := filepath.Join(t.TempDir(), "hung.pids")
	var pids []int
	t.Cleanup(func() {
		raw, _ := os.ReadFile(pidFile)
		for _, f := range strings.Fields(string(raw)) {
			pid, _ := strconv.Atoi(f)
			if !slices.Contains(pids, pid) && running(pid) {
				syscall.Kill(pid, syscall.SIGKILL) // the test failed before checking it
			}
		}
	})
	// The working server is one already running, over HTTP: a child process started now might not
	// answer initialize within the 3 s on a loaded machine either.
	everything := m.startEverything(t, "http", nil).entry
	began := time.Now()
	p := m.startChatd(t, map[string]any{
		"everything": everything,
		"hung":       map[string]any{"command": m.node, "args": []string{"-e", hungServer, pidFile}},
	}, "CHATD_MCP_CONNECT_TIMEOUT=3s")
	// The connect timeout (3 s) bounds the start-up wait: chatd answers /healthz before the 20 s it
	// would wait by default, and the hung server's attempt ends at 3 s.
	if took := time.Since(began); took >= 20*time.Second {
		t.Errorf("chatd answered /healthz %s after it started", took.Round(time.Millisecond))
	}
	hung := waitServer(t, p, "hung", func(s mcpStatus) bool { return s.LastError != "" })
	if (hung.State != "connecting" && hung.State != "failed") || hung.Tools != 0 ||
		!strings.Contains(hung.LastError, "no answer to initialize within 3s") {
		t.Errorf("the hung server: %+v, want connecting or failed, with no tools, at its 3 s connect timeout", hung)
	}
	t.Logf("the hung server: %+v", hung)
	if s := mcpStatuses(t, p)["everything"]; !connected(s) || s.Tools != everythingTools {
		t.Errorf("the working server: %+v", s)
	}
	events := chat(t, p, "", "[mcp-sum] next to a hung server")
	c := checkCall(t, events, "call_sum", "everything__get-sum", "completed")
	if !c.success() || !strings.Contains(c.content(), "is 5") {
		t.Errorf("tool_complete: success %v, content %q", c.success(), c.content())
	}

	// Each attempt started a process; a failed attempt must stop its own, and shutdown the last one.
	stopChatd(t, p)
	raw, _ := os.ReadFile(pidFile)
	for _, f := range strings.Fields(string(raw)) {
		pid, _ := strconv.Atoi(f)
		pids = append(pids, pid)
	}
	if len(pids) == 0 {
		t.Fatal("the hung server never started")
	}
	checkGone(t, "a hung server's process", pids)
}

// testMCPEnvironment runs server-everything's get-env: a stdio child sees PATH, HOME and the variables
// its entry names, and nothing else of chatd's environment, least of all chatd's provider key.
func testMCPEnvironment(t *testing.T, m *mcpPeers) {
	const named, secret = "named-value-4d2a", "chatd-only-9e8f71"
	p := m.startChatd(t, map[string]any{"everything": m.startEverything(t, "stdio", map[string]any{"env": map[string]string{"MCP_E2E_NAMED": named}}).entry},
		"MCP_E2E_SECRET="+secret)
	events := chat(t, p, "", "[mcp-env] what does the server see?")
	c := checkCall(t, events, "call_env", "everything__get-env", "completed")
	var env map[string]string
	if err := json.Unmarshal([]byte(c.content()), &env); err != nil || !c.success() {
		t.Fatalf("get-env: success %v, content %q: %v", c.success(), c.content(), err)
	}
	if env["MCP_E2E_NAMED"] != named || env["PATH"] != os.Getenv("PATH") {
		t.Errorf("the child's environment lacks its named variable or PATH: %v", env)
	}
	if strings.Contains(c.content(), apiKey) || strings.Contains(c.content(), secret) {
		t.Error("the child's environment holds a secret of chatd's")
	}
	// Besides what its entry names, PATH and HOME only: not OPENAI_API_KEY, MCP_E2E_SECRET, CHATD_….
	var extra []string
	for k := range env {
		if k != "MCP_E2E_NAMED" && k != "PATH" && k != "HOME" {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		slices.Sort(extra)
		t.Errorf("the child's environment has more than PATH, HOME and MCP_E2E_NAMED: %s", strings.Join(extra, ", "))
	}
	if home := os.Getenv("HOME"); env["HOME"] != home {
		t.Errorf("the child's HOME is %q, chatd's %q", env["HOME"], home)
	}
}
