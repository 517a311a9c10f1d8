package httpapi_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"chatd/internal/httpapi"
	"chatd/internal/llm/llmtest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/routes")

var (
	uuidRE     = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	timeRE     = regexp.MustCompile(`"20\d\d-\d\d-\d\dT[0-9:.]+(Z|[+-]\d\d:\d\d)"`)
	durationRE = regexp.MustCompile(`"duration_ms":\d+`)
	cursorRE   = regexp.MustCompile(`"next_cursor":"[^"]+"`)
	payloadRE  = regexp.MustCompile(`"pl_[0-9a-f]{10}"`)
)

// normalize replaces what changes from run to run — ids, times, durations — with stable names, ids
// numbered in the order they first appear, so that a golden file pins every other byte.
func normalize(b []byte, ids map[string]string) []byte {
	b = uuidRE.ReplaceAllFunc(b, func(id []byte) []byte {
		n, ok := ids[string(id)]
		if !ok {
			n = fmt.Sprintf("<id%d>", len(ids)+1)
			ids[string(id)] = n
		}
		return []byte(n)
	})
	b = timeRE.ReplaceAll(b, []byte(`"<time>"`))
	b = durationRE.ReplaceAll(b, []byte(`"duration_ms":0`))
	b = payloadRE.ReplaceAll(b, []byte(`"<payload id>"`))
	return cursorRE.ReplaceAll(b, []byte(`"next_cursor":"<cursor>"`))
}

// frames returns a native event stream's frames without their ids, sorted: a tool's result and the
// record of the call that asked for it race, so the golden pins each frame's bytes and the other tests
// the order.
func frames(raw []byte) []byte {
	var fs []string
	for f := range strings.SplitSeq(strings.TrimSpace(string(raw)), "\n\n") {
		_, rest, _ := strings.Cut(f, "\n") // the id line
		fs = append(fs, rest+"\n\n")
	}
	slices.Sort(fs)
	return []byte(strings.Join(fs, ""))
}

// golden compares got with testdata/routes/name.golden, or writes it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "routes", name+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestRouteGoldens -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s changed:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// TestRouteGoldens pins the bytes every route answers — status, content type and body — on one scripted
// conversation: a tool turn, an answer, a failed run, and the UI stream. The API's JSON is its own:
// a change in a storage type must not show here.
func TestRouteGoldens(t *testing.T) {
	fail := llmtest.Turn{Status: 401, ErrorMessage: "Incorrect API key provided"}
	// One call per turn: two would complete in either order.
	oneClock := llmtest.Turn{Text: "Let me check.", ToolCalls: twoClocks.ToolCalls[:1]}
	e := newEnv(t, httpapi.Options{}, oneClock, answer, fail, llmtest.Turn{Text: "Hello from the UI."},
		llmtest.Turn{Text: "A red dot."})
	ids := map[string]string{}
	var sessionID, runID string
	step := func(name, method, path, body string) []byte {
		t.Helper()
		var header map[string]string
		if body != "" {
			header = map[string]string{"Content-Type": "application/json"}
		}
		resp, raw := e.send(t, method, path, header, body)
		shown := raw
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") && bytes.HasPrefix(raw, []byte("id: ")) {
			shown = frames(raw)
		}
		var out bytes.Buffer
		fmt.Fprintf(&out, "%s %s\n%d\nContent-Type: %s\n\n%s", method, path, resp.StatusCode, resp.Header.Get("Content-Type"), shown)
		golden(t, name, normalize(out.Bytes(), ids))
		return raw
	}
	field := func(raw []byte, key string) string {
		t.Helper()
		m := regexp.MustCompile(`"` + key + `":"([^"]+)"`).FindSubmatch(raw)
		if m == nil {
			t.Fatalf("no %s in %s", key, raw)
		}
		return string(m[1])
	}

	raw := step("chat_stream", "POST", "/v1/chat/stream", `{"message":"What time is it in Paris and Tokyo?"}`)
	sessionID, runID = field(raw, "session_id"), field(raw, "run_id")
	step("get_run", "GET", "/v1/runs/"+runID, "")
	step("run_events", "GET", "/v1/runs/"+runID+"/events", "")
	step("run_events_after", "GET", "/v1/runs/"+runID+"/events?after=20", "")
	step("diagnostics", "GET", "/v1/runs/"+runID+"/diagnostics", "")
	step("cancel_ended", "POST", "/v1/runs/"+runID+"/cancel", "")
	step("chat_batch_failed", "POST", "/v1/chat", `{"message":"And now?","session_id":"`+sessionID+`"}`)
	step("get_session", "GET", "/v1/sessions/"+sessionID, "")
	step("patch_session", "PATCH", "/v1/sessions/"+sessionID, `{"title":"Clocks","metadata":{"tab":"x"}}`)
	step("messages", "GET", "/v1/sessions/"+sessionID+"/messages", "")
	step("create_session", "POST", "/v1/sessions", `{"title":"Empty","metadata":{"a":1}}`)
	step("list_sessions", "GET", "/v1/sessions?limit=1", "")
	step("ui_chat", "POST", "/v1/ui/chat", `{"id":"ui-chat-1","messages":[{"id":"m1","role":"user","parts":[{"type":"text","text":"Hi"}]}],"trigger":"submit-message"}`)
	step("ui_history", "GET", "/v1/ui/chat/ui-chat-1", "")
	step("ui_resume_idle", "GET", "/v1/ui/chat/ui-chat-1/stream", "")
	png := "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
	raw = step("chat_batch_attachment", "POST", "/v1/chat",
		`{"message":"What is this?","attachments":[{"media_type":"image/png","name":"dot.png","data":"`+png+`"}]}`)
	dotSession := field(raw, "session_id")
	step("messages_attachment", "GET", "/v1/sessions/"+dotSession+"/messages", "")
	step("ui_history_attachment", "GET", "/v1/ui/chat/"+dotSession, "")
	step("tools", "GET", "/v1/tools", "")
	step("mcp_servers", "GET", "/v1/mcp/servers", "")
	step("models", "GET", "/v1/models", "")
	step("delete_session", "DELETE", "/v1/sessions/"+sessionID, "")
	step("missing_session", "GET", "/v1/sessions/"+sessionID, "")
	step("missing_run", "GET", "/v1/runs/no-such-run", "")
	step("bad_body", "POST", "/v1/chat", `{"message":`)
}

// TestMCPServersGolden pins GET /v1/mcp/servers with a server in every field.
func TestMCPServersGolden(t *testing.T) {
	at := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	e := newEnv(t, httpapi.Options{MCPServers: func() []httpapi.MCPServer {
		return []httpapi.MCPServer{
			{Name: "everything", Transport: "stdio", State: "connected", Tools: 11, LastError: "exit status 1",
				LastErrorAt: &at, ConnectedAt: &at, Attempts: 2, PID: 4242, Protocol: "2025-06-18"},
			{Name: "remote", Transport: "http", State: "connecting", Attempts: 1},
		}
	}})
	resp, raw := e.do(t, "GET", "/v1/mcp/servers", "")
	golden(t, "mcp_servers_full", fmt.Appendf(nil, "GET /v1/mcp/servers\n%d\nContent-Type: %s\n\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), raw))
}
