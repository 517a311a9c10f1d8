// Package e2e runs the real chatd binary the way its users run it: against software nobody on the team
// wrote — here the provider mock @copilotkit/aimock, installed from npm into e2e/node_modules by
// script/test (or `npm ci --prefix e2e`) — and through crashes and shutdowns (crash_test.go, against
// llmtest, which needs nothing but Go).
//
// A test whose peer is missing skips with the reason, except under CI (CHATD_CI=1), where that fails;
// script/test prints the skips at the end of its output.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/sse"
)

const apiKey = "sk-e2e-secret-4f1c9a" // must never appear in chatd's log or database

// require skips (or, under CI, fails) when a peer is missing. The skip is also recorded in the file
// CHATD_SKIP_LOG names, if set: go test shows nothing of a passing package's output, so script/test
// reads that file and prints the skips where they are seen.
func require(t *testing.T, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CHATD_CI") != "" {
		t.Fatalf("%s (CHATD_CI is set: peers must be installed; script/test installs them)", why)
	}
	recordSkip(t, why)
	t.Skipf("%s; script/test installs the peers (the npm ones alone: npm ci --prefix e2e)", why)
}

// recordSkip appends "TestName: why" to the file CHATD_SKIP_LOG names, if set.
func recordSkip(t *testing.T, why string) {
	t.Helper()
	path := os.Getenv("CHATD_SKIP_LOG")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Errorf("record the skip: %v", err)
		return
	}
	defer f.Close()
	line := t.Name() + ": " + strings.Join(strings.Fields(why), " ") + "\n"
	if _, err := f.WriteString(line); err != nil {
		t.Errorf("record the skip in %s: %v", path, err)
	}
}

// start runs a command until the test ends and waits until it accepts connections on port.
func start(t *testing.T, name string, port int, env []string, args ...string) (*exec.Cmd, *logBuffer) {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	out := &logBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
	listening := poll(func() bool {
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			conn.Close()
		}
		return err == nil
	})
	if !listening {
		t.Fatalf("%s did not listen on %d within %s:\n%s", name, port, patience, out.String())
	}
	return cmd, out
}

// startAimock runs aimock on a free port with the fixtures file (and flags such as --strict) until the
// test ends, and returns its port.
func startAimock(t *testing.T, fixtures string, flags ...string) int {
	t.Helper()
	node, err := exec.LookPath("node")
	require(t, err == nil, "node is not installed")
	cli, _ := filepath.Abs("node_modules/@copilotkit/aimock/dist/cli.js")
	_, err = os.Stat(cli)
	require(t, err == nil, "@copilotkit/aimock is not installed in e2e/node_modules")
	port := freePort(t)
	args := append([]string{node, cli, "-p", strconv.Itoa(port), "-h", "127.0.0.1", "-f", fixtures, "--validate-on-load"}, flags...)
	start(t, "aimock", port, nil, args...)
	return port
}

func TestChatAgainstAimock(t *testing.T) {
	t.Parallel() // each test has its own processes, ports and files
	mockPort := startAimock(t, "testdata/aimock-fixtures.json")

	dir := t.TempDir()
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	chatd, chatdLog := start(t, "chatd", port, []string{
		"OPENAI_API_KEY=" + apiKey,
		fmt.Sprintf("OPENAI_BASE_URL=http://127.0.0.1:%d/v1", mockPort),
		"CHATD_DB=sqlite:" + filepath.Join(dir, "chatd.db"),
		"CHATD_ADDR=127.0.0.1:" + strconv.Itoa(port),
		"CHATD_LOG_LEVEL=debug",
	}, buildChatd(t), "serve")

	events := stream(t, base, `{"message":"What time is it in Paris and in Tokyo?"}`)
	sessionID := checkStreamedTurn(t, events)
	checkStoredRecords(t, base, sessionID)
	checkUpstreamRequests(t, mockPort)
	checkBatch(t, base)
	checkMalformed(t, base)

	// SIGTERM: chatd stops cleanly, and the key was never written to its log or database.
	chatd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- chatd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("chatd exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("chatd did not stop within 30s of SIGTERM")
	}
	if strings.Contains(chatdLog.String(), apiKey) {
		t.Error("the API key appears in chatd's log")
	}
	for _, f := range []string{"chatd.db", "chatd.db-wal"} {
		raw, _ := os.ReadFile(filepath.Join(dir, f))
		if bytes.Contains(raw, []byte(apiKey)) {
			t.Errorf("the API key appears in %s", f)
		}
	}
}

func stream(t *testing.T, base, body string) []event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/stream", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), raw)
	}
	var out []event
	for ev, err := range sse.Scan(resp.Body) {
		if err != nil {
			t.Fatal(err)
		}
		var data map[string]any
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			t.Fatalf("event %s: %v: %s", ev.Type, err, ev.Data)
		}
		out = append(out, event{ID: ev.ID, Type: ev.Type, Data: data})
	}
	return out
}

// checkStreamedTurn checks the events of a turn with two parallel current_time calls and an answer.
func checkStreamedTurn(t *testing.T, events []event) string {
	t.Helper()
	var order []string
	starts, completes := map[string]bool{}, map[string]bool{}
	var text strings.Builder
	for i, ev := range events {
		if ev.ID != strconv.Itoa(i+1) {
			t.Fatalf("event %d (%s) has id %q: ids must run 1, 2, 3 … without gaps", i, ev.Type, ev.ID)
		}
		switch ev.Type {
		case "tool_start":
			starts[ev.Data["tool_call_id"].(string)] = true
			continue
		case "tool_complete":
			completes[ev.Data["tool_call_id"].(string)] = ev.Data["success"] == true
			continue
		case "text_delta":
			text.WriteString(ev.Data["text"].(string))
		case "status", "tool_call_delta":
			continue
		}
		if n := len(order); n > 0 && order[n-1] == ev.Type && ev.Type == "text_delta" {
			continue
		}
		order = append(order, ev.Type)
	}
	want := []string{"run_start", "record", "usage", "record", "record", "record", "text_delta", "usage", "record", "complete", "done"}
	if diff := cmp.Diff(want, order); diff != "" {
		t.Errorf("event order (-want +got):\n%s", diff)
	}
	for _, id := range []string{"call_paris", "call_tokyo"} {
		if !starts[id] || !completes[id] {
			t.Errorf("%s: started %v, completed successfully %v", id, starts[id], completes[id])
		}
	}
	if text.String() != "In Paris it is 10:00; in Tokyo it is 18:00." {
		t.Errorf("streamed text = %q", text.String())
	}
	last := events[len(events)-1]
	if last.Type != "done" || last.Data["status"] != "completed" {
		t.Fatalf("last event %v", last)
	}
	if c := events[len(events)-2].Data; c["finish_reason"] != "stop" || len(c["tool_history"].([]any)) != 2 {
		t.Errorf("complete = %v", c)
	}
	return events[0].Data["session_id"].(string)
}

func checkStoredRecords(t *testing.T, base, sessionID string) {
	t.Helper()
	var got struct{ Messages []record }
	getJSON(t, base+"/v1/sessions/"+sessionID+"/messages", &got)
	var roles []string
	for _, r := range got.Messages {
		roles = append(roles, r.Role)
	}
	if diff := cmp.Diff([]string{"user", "assistant", "tool", "tool", "assistant"}, roles); diff != "" {
		t.Fatalf("stored roles (-want +got):\n%s", diff)
	}
	a := got.Messages[1]
	if len(a.ToolCalls) != 2 || a.ToolCalls[0].Arguments["timezone"] != "Europe/Paris" || a.ToolCalls[1].ID != "call_tokyo" || a.FinishReason != "tool_calls" {
		t.Errorf("assistant record = %+v", a)
	}
	answered := map[string]bool{}
	for _, r := range got.Messages[2:4] {
		if r.Success == nil || !*r.Success || r.Name != "current_time" || !strings.Contains(r.Content, `"time"`) {
			t.Errorf("tool record = %+v", r)
		}
		answered[r.ToolCallID] = true
	}
	if !answered["call_paris"] || !answered["call_tokyo"] {
		t.Errorf("tool records answer %v", answered)
	}
	if f := got.Messages[4]; f.Content != "In Paris it is 10:00; in Tokyo it is 18:00." || f.Model != "openai/gpt-4o-mini" {
		t.Errorf("final record = %+v", f)
	}
}

// checkUpstreamRequests reads aimock's journal: what chatd sent to the provider.
func checkUpstreamRequests(t *testing.T, mockPort int) {
	t.Helper()
	var journal []struct {
		Headers map[string]string
		Body    struct {
			Messages []map[string]any
			Tools    []any
			Stream   bool
		}
	}
	getJSON(t, fmt.Sprintf("http://127.0.0.1:%d/__aimock/journal", mockPort), &journal)
	if len(journal) < 2 {
		t.Fatalf("aimock saw %d requests, want 2", len(journal))
	}
	first, second := journal[0], journal[1]
	// aimock redacts the header's value; internal/httpapi's tests check it against their own upstream.
	if first.Headers["authorization"] == "" || !first.Body.Stream || len(first.Body.Tools) != 1 {
		t.Errorf("first upstream request: stream=%v tools=%d authorization=%q", first.Body.Stream, len(first.Body.Tools), first.Headers["authorization"])
	}
	var roles []string
	for _, m := range second.Body.Messages {
		roles = append(roles, fmt.Sprint(m["role"], ":", m["tool_call_id"]))
	}
	want := []string{"system:<nil>", "user:<nil>", "assistant:<nil>", "tool:call_paris", "tool:call_tokyo"}
	if diff := cmp.Diff(want, roles); diff != "" {
		t.Errorf("second upstream request (-want +got):\n%s", diff)
	}
}

func checkBatch(t *testing.T, base string) {
	t.Helper()
	resp, err := http.Post(base+"/v1/chat", "application/json", strings.NewReader(`{"message":"What time is it in Paris and in Tokyo? (batch)"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var got struct {
		SessionID    string `json:"session_id"`
		RunID        string `json:"run_id"`
		Status       string
		Message      record
		ToolHistory  []map[string]any `json:"tool_history"`
		Usage        map[string]int
		FinishReason string `json:"finish_reason"`
	}
	if err := json.Unmarshal(raw, &got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("batch: %d %s", resp.StatusCode, raw)
	}
	if got.Status != "completed" || got.FinishReason != "stop" || got.SessionID == "" || got.RunID == "" ||
		got.Message.Content != "In Paris it is 10:00; in Tokyo it is 18:00." || len(got.ToolHistory) != 2 || got.Usage["input_tokens"] == 0 {
		t.Errorf("batch answer: %s", raw)
	}
}

func checkMalformed(t *testing.T, base string) {
	t.Helper()
	for _, path := range []string{"/v1/chat/stream", "/v1/chat"} {
		resp, err := http.Post(base+path, "application/json", strings.NewReader(`{"message": "unterminated`))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(raw), `"code":"invalid_json"`) {
			t.Errorf("malformed body on %s: %d %s", path, resp.StatusCode, raw)
		}
	}
}
