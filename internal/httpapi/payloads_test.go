package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"chatd/internal/chat"
	"chatd/internal/httpapi"
	"chatd/internal/llm/llmtest"
	"chatd/internal/runevent"
	"chatd/internal/store/sqlite"
)

// newAgentEnv is newEnv with the service's agents set.
func newAgentEnv(t *testing.T, agents map[string]chat.Agent, turns ...llmtest.Turn) *env {
	t.Helper()
	e := &env{upstream: llmtest.NewServer(t, turns...)}
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "chatd.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.db = db
	c, tools := newChat(t, db, e.upstream, fixedNow, chat.Options{Agents: agents})
	e.chat = c
	e.srv = httptest.NewServer(httpapi.New(httpapi.Options{Chat: c, Store: db, Tools: tools}))
	t.Cleanup(func() {
		e.srv.Close()
		closeChat(t, c, tools)
		db.Close()
	})
	return e
}

var proposalAgent = map[string]chat.Agent{"default": {Payloads: []chat.PayloadType{{Name: "schema_proposal", Marker: "SCHEMA_PROPOSAL:"}}}}

const markedText = "It is 10:00.\nSUGGESTED_VALUES: [\"And in Tokyo?\"]\n" +
	"SUGGESTED_ACTIONS: [{\"label\": \"UTC time\", \"action\": \"current_time\", \"handler\": \"server\", \"data\": {\"timezone\": \"UTC\"}}]\n" +
	"SCHEMA_PROPOSAL: {\"table\": \"times\"}\n"

// TestUIPayloadParts: the AI SDK stream carries the answer's suggestions and the run's payloads (the
// tool's and the answer's) as data-suggestions and data-payload parts, and so does the history.
func TestUIPayloadParts(t *testing.T) {
	e := newAgentEnv(t, proposalAgent,
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "current_time", Arguments: `{"timezone":"Europe/Paris"}`}}},
		llmtest.Turn{Text: markedText, ChunkRunes: 2})
	body := `{"id":"chat-pl","trigger":"submit-message","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"time?"}]}]}`
	_, chunks, done := uiChunks(t, e, "POST", "/v1/ui/chat", body)
	if !done {
		t.Fatal("no [DONE]")
	}
	checkUIStream(t, chunks)
	var text strings.Builder
	var live []map[string]any
	for _, c := range chunks {
		switch c["type"] {
		case "text-delta":
			text.WriteString(c["delta"].(string))
		case "data-suggestions", "data-payload":
			live = append(live, c)
		}
	}
	if text.String() != "It is 10:00.\n" {
		t.Errorf("text %q", text.String())
	}
	check := func(what string, parts []map[string]any) {
		t.Helper()
		if len(parts) != 3 || parts[0]["type"] != "data-suggestions" || parts[1]["type"] != "data-payload" || parts[2]["type"] != "data-payload" {
			t.Fatalf("%s: data parts %v", what, parts)
		}
		b, _ := json.Marshal(parts[0]["data"])
		if !strings.Contains(string(b), `"value":"And in Tokyo?"`) || !strings.Contains(string(b), `"handler":"server"`) {
			t.Errorf("%s: suggestions %s", what, b)
		}
		tool, _ := parts[1]["data"].(map[string]any)
		mark, _ := parts[2]["data"].(map[string]any)
		if tool["source"] != "tool" || tool["type"] != "current_time" || parts[1]["id"] != tool["id"] ||
			mark["source"] != "marker" || mark["type"] != "schema_proposal" || !strings.Contains(mark["summary"].(string), "schema_proposal") {
			t.Errorf("%s: payload parts %v", what, parts[1:])
		}
	}
	check("stream", live)

	_, raw := e.do(t, "GET", "/v1/ui/chat/chat-pl", "")
	var h struct {
		Messages []struct {
			Role  string
			Parts []map[string]any
		}
	}
	if err := json.Unmarshal(raw, &h); err != nil || len(h.Messages) != 2 {
		t.Fatalf("history %s (%v)", raw, err)
	}
	var reloaded []map[string]any
	for _, p := range h.Messages[1].Parts {
		if ty, _ := p["type"].(string); strings.HasPrefix(ty, "data-") {
			reloaded = append(reloaded, p)
		}
	}
	check("history", reloaded)
	if reloaded[1]["id"] != live[1]["id"] || reloaded[2]["id"] != live[2]["id"] {
		t.Errorf("payload ids differ after a reload: %v, then %v", live, reloaded)
	}
}

// TestServerAction: a server action runs its tool in the session as a run of its own, streamed; the
// stored history holds the call and its result; a tool the agent does not offer, bad data, a client
// action and another session are refused.
func TestServerAction(t *testing.T) {
	e := newAgentEnv(t, map[string]chat.Agent{"default": {}, "none": {Tools: []string{}}},
		llmtest.Turn{Text: "hi"}, llmtest.Turn{Text: "hello"}, llmtest.Turn{Text: "after"})
	_, events := e.stream(t, `{"message":"hi"}`)
	sid := sessionOf(t, events)
	resp, raw := e.do(t, "POST", "/v1/sessions/"+sid+"/actions", `{"label":"UTC time","action":"current_time","handler":"server","data":{"timezone":"UTC"}}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Run-Id") == "" {
		t.Fatalf("action: %d %s", resp.StatusCode, raw)
	}
	body := string(raw)
	for _, want := range []string{"event: run_start", "event: tool_start", `"name":"current_time"`, "event: tool_complete", `"success":true`,
		"event: complete", `"source":"tool"`, `"status":"completed"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the action's stream lacks %s:\n%s", want, body)
		}
	}
	recs, err := e.db.Records(t.Context(), httpapi.LocalUser, sid)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(recs); n != 4 || recs[2].Role != "assistant" || len(recs[2].ToolCalls) != 1 || recs[2].ToolCalls[0].Name != "current_time" ||
		recs[3].Role != "tool" || recs[3].ParentID != recs[2].ID || !*recs[3].Success {
		t.Fatalf("stored: %+v", recs)
	}
	// The same action sent again with its Idempotency-Key replays its run.
	again := func() (*http.Response, []byte) {
		req, _ := http.NewRequest("POST", e.srv.URL+"/v1/sessions/"+sid+"/actions",
			strings.NewReader(`{"action":"current_time","handler":"server","data":{"timezone":"Asia/Tokyo"}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "press-1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, b
	}
	first, _ := again()
	second, _ := again()
	if first.Header.Get("X-Run-Id") == "" || second.Header.Get("X-Run-Id") != first.Header.Get("X-Run-Id") || second.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("a retried action: runs %q and %q (replayed %q)", first.Header.Get("X-Run-Id"), second.Header.Get("X-Run-Id"), second.Header.Get("Idempotent-Replayed"))
	}
	// The conversation goes on, valid for the strict upstream.
	if _, events := e.stream(t, `{"message":"and now?","session_id":"`+sid+`"}`); types(events)[len(events)-1] != "done" {
		t.Fatalf("next message: %v", types(events))
	}
	_, other := e.stream(t, `{"message":"hi","agent":"none"}`)
	otherSID := sessionOf(t, other)
	for _, tc := range []struct {
		path, body string
		status     int
		code       string
	}{
		{"/v1/sessions/" + sid + "/actions", `{"action":"current_time","handler":"client"}`, 400, "not_server_action"},
		{"/v1/sessions/" + sid + "/actions", `{"action":"rm_rf","handler":"server"}`, 400, "unknown_tool"},
		{"/v1/sessions/" + sid + "/actions", `{"action":"get_payload","handler":"server","data":{"id":"x"}}`, 400, "unknown_tool"},
		{"/v1/sessions/" + sid + "/actions", `{"action":"current_time","handler":"server","data":{"timezone":7}}`, 400, "invalid_action_data"},
		{"/v1/sessions/" + otherSID + "/actions", `{"action":"current_time","handler":"server"}`, 400, "unknown_tool"},
		{"/v1/sessions/no-such-session/actions", `{"action":"current_time","handler":"server"}`, 404, "session_not_found"},
	} {
		resp, raw := e.do(t, "POST", tc.path, tc.body)
		if resp.StatusCode != tc.status || !strings.Contains(string(raw), tc.code) {
			t.Errorf("POST %s %s: %d %s, want %d %s", tc.path, tc.body, resp.StatusCode, raw, tc.status, tc.code)
		}
	}
}

func sessionOf(t *testing.T, events []event) string {
	t.Helper()
	for _, ev := range events {
		if ev.Type == runevent.TypeRunStart {
			return ev.Data["session_id"].(string)
		}
	}
	t.Fatal("no run_start")
	return ""
}
