package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

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
		// Each record's parts go out as it is stored: the tool's payload, then the answer's suggestions
		// and payload.
		if len(parts) != 3 || parts[0]["type"] != "data-payload" || parts[1]["type"] != "data-suggestions" || parts[2]["type"] != "data-payload" {
			t.Fatalf("%s: data parts %v", what, parts)
		}
		b, _ := json.Marshal(parts[1]["data"])
		if !strings.Contains(string(b), `"value":"And in Tokyo?"`) || !strings.Contains(string(b), `"handler":"server"`) {
			t.Errorf("%s: suggestions %s", what, b)
		}
		tool, _ := parts[0]["data"].(map[string]any)
		mark, _ := parts[2]["data"].(map[string]any)
		if tool["source"] != "tool" || tool["type"] != "current_time" || parts[0]["id"] != tool["id"] || tool["data"] == nil || mark["data"] == nil ||
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
	if d := cmp.Diff(live, reloaded); d != "" {
		t.Errorf("the data parts differ after a reload (-live +reloaded):\n%s", d)
	}
}

// TestUIPayloadPartsOfFailedRun: a run that fails after its tool returned a payload streams the payload
// as it is stored, as the history shows it after a reload; complete (of a run that completes) names
// its payloads without their data.
func TestUIPayloadPartsOfFailedRun(t *testing.T) {
	e := newAgentEnv(t, proposalAgent,
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "current_time", Arguments: `{"timezone":"Europe/Paris"}`}}},
		llmtest.Turn{Status: http.StatusBadRequest, ErrorMessage: "no"},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "c2", Name: "current_time", Arguments: `{"timezone":"UTC"}`}}},
		llmtest.Turn{Text: markedText})
	body := `{"id":"chat-fail","trigger":"submit-message","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"time?"}]}]}`
	_, chunks, done := uiChunks(t, e, "POST", "/v1/ui/chat", body)
	if !done {
		t.Fatal("no [DONE]")
	}
	var live []map[string]any
	failed := false
	for _, c := range chunks {
		switch c["type"] {
		case "data-suggestions", "data-payload":
			live = append(live, c)
		case "error":
			failed = true
		}
	}
	if !failed || len(live) != 1 || live[0]["type"] != "data-payload" {
		t.Fatalf("the failed run's stream: error %v, data parts %v", failed, live)
	}
	_, raw := e.do(t, "GET", "/v1/ui/chat/chat-fail", "")
	var h struct {
		Messages []struct{ Parts []map[string]any }
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
	if d := cmp.Diff(live, reloaded); d != "" {
		t.Errorf("the data parts differ after a reload (-live +reloaded):\n%s", d)
	}

	_, events := e.stream(t, `{"message":"again","session_id":"chat-fail"}`)
	for _, ev := range events {
		if ev.Type != runevent.TypeComplete {
			continue
		}
		ps, _ := ev.Data["payloads"].([]any)
		if len(ps) != 2 {
			t.Fatalf("complete's payloads: %v", ev.Data["payloads"])
		}
		for _, p := range ps {
			if p := p.(map[string]any); p["id"] == "" || p["summary"] == "" || p["record_id"] == "" || p["data"] != nil {
				t.Errorf("complete names payload %v", p)
			}
		}
		return
	}
	t.Fatalf("no complete: %v", types(events))
}

// suggestingText is an answer that suggests two server actions, one with data its tool refuses, and
// a client one.
const suggestingText = "Which time?\nSUGGESTED_ACTIONS: [" +
	`{"label": "UTC time", "action": "current_time", "handler": "server", "data": {"timezone":   "UTC"}},` +
	`{"label": "Tokyo", "action": "current_time", "handler": "server", "data": {"timezone": "Asia/Tokyo"}},` +
	`{"label": "Broken", "action": "current_time", "handler": "server", "data": {"timezone": 7}},` +
	`{"label": "Open map", "action": "open_map", "handler": "client"}]` + "\n"

// TestServerAction: a server action the session's last answer suggested runs its tool in the session
// as a run of its own, streamed, with the data as the answer gave it; the stored history holds the call
// (under an id every provider takes as it is) and its result; another button of the same answer runs
// too. An action the last answer did not suggest (another tool, other data, after a newer answer, in
// another session), a client action, a tool not selected, data over the limit and an agent without
// suggestions are refused.
func TestServerAction(t *testing.T) {
	e := newAgentEnv(t, map[string]chat.Agent{"default": {Suggestions: true}, "quiet": {}},
		llmtest.Turn{Text: suggestingText}, llmtest.Turn{Text: suggestingText}, llmtest.Turn{Text: "after"}, llmtest.Turn{Text: "quiet"})
	_, events := e.stream(t, `{"message":"hi"}`)
	sid := sessionOf(t, events)
	action := func(sid, body string) (*http.Response, []byte) {
		return e.do(t, "POST", "/v1/sessions/"+sid+"/actions", body)
	}
	// The client sends the data back as it decoded it, spaced otherwise.
	resp, raw := action(sid, `{"label":"UTC time","action":"current_time","handler":"server","data":{ "timezone" : "UTC" }}`)
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
		string(recs[2].ToolCalls[0].Arguments) != `{"timezone":"UTC"}` ||
		recs[3].Role != "tool" || recs[3].ParentID != recs[2].ID || !*recs[3].Success {
		t.Fatalf("stored: %+v", recs)
	}
	callID := recs[2].ToolCalls[0].ID
	if len(callID) > 40 {
		t.Errorf("the action's call id %q is %d characters; providers take at most 40", callID, len(callID))
	}
	// Another button of the same answer, sent with an Idempotency-Key twice: the retry replays its run.
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
	if first.StatusCode != http.StatusOK || first.Header.Get("X-Run-Id") == "" || second.Header.Get("X-Run-Id") != first.Header.Get("X-Run-Id") ||
		second.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("a retried action: %d, runs %q and %q (replayed %q)", first.StatusCode, first.Header.Get("X-Run-Id"),
			second.Header.Get("X-Run-Id"), second.Header.Get("Idempotent-Replayed"))
	}
	big := `{"action":"current_time","handler":"server","data":{"timezone":"` + strings.Repeat("x", 300<<10) + `"}}`
	_, quiet := e.stream(t, `{"message":"hi","agent":"quiet"}`)
	quietSID := sessionOf(t, quiet)
	refused := func(when string, cases []struct {
		sid, body string
		status    int
		code      string
	}) {
		t.Helper()
		for _, tc := range cases {
			resp, raw := action(tc.sid, tc.body)
			if resp.StatusCode != tc.status || !strings.Contains(string(raw), `"code":"`+tc.code+`"`) {
				t.Errorf("%s: POST actions %.120s: %d %s, want %d %s", when, tc.body, resp.StatusCode, raw, tc.status, tc.code)
			}
		}
	}
	type refusal = struct {
		sid, body string
		status    int
		code      string
	}
	refused("after the answer", []refusal{
		{sid, `{"action":"open_map","handler":"client"}`, 400, "not_server_action"},
		{sid, `{"action":"open_map","handler":"server"}`, 400, "unknown_tool"},
		{sid, `{"action":"get_payload","handler":"server","data":{"id":"x"}}`, 400, "unknown_tool"},
		{sid, `{"action":"current_time","handler":"server","data":{"timezone":"Europe/Paris"}}`, 409, "action_not_suggested"},
		{sid, `{"action":"current_time","handler":"server"}`, 409, "action_not_suggested"},
		{sid, `{"action":"current_time","handler":"server","data":{"timezone":"UTC"},"selected_tools":[]}`, 400, "unknown_tool"},
		{sid, `{"action":"current_time","handler":"server","data":{"timezone":7}}`, 400, "invalid_action_data"},
		{sid, big, 400, "action_data_too_large"},
		{quietSID, `{"action":"current_time","handler":"server","data":{"timezone":"UTC"}}`, 400, "suggestions_off"},
		{"no-such-session", `{"action":"current_time","handler":"server"}`, 404, "session_not_found"},
	})
	// The conversation goes on, valid for the strict upstream, and the action's call is sent under its
	// stored id.
	if _, events := e.stream(t, `{"message":"and now?","session_id":"`+sid+`"}`); types(events)[len(events)-1] != "done" {
		t.Fatalf("next message: %v", types(events))
	}
	reqs := e.upstream.Requests()
	if sent := string(reqs[len(reqs)-1].Raw); !strings.Contains(sent, `"`+callID+`"`) {
		t.Errorf("the next request does not send the action's call under its id %s:\n%s", callID, sent)
	}
	refused("after a newer answer", []refusal{
		{sid, `{"action":"current_time","handler":"server","data":{"timezone":"Asia/Tokyo"}}`, 409, "action_not_suggested"},
	})
}

// TestRegenerateAction: the answer a server action's run belongs to is not regenerated — the action's
// tool has run — while a newer answer is.
func TestRegenerateAction(t *testing.T) {
	e := newAgentEnv(t, map[string]chat.Agent{"default": {Suggestions: true}},
		llmtest.Turn{Text: suggestingText}, llmtest.Turn{Text: "again"}, llmtest.Turn{Text: "later"}, llmtest.Turn{Text: "later, again"})
	_, events := e.stream(t, `{"message":"hi"}`)
	sid := sessionOf(t, events)
	resp, raw := e.do(t, "POST", "/v1/sessions/"+sid+"/actions", `{"action":"current_time","handler":"server","data":{"timezone":"Asia/Tokyo"}}`)
	if resp.StatusCode != 200 || !strings.Contains(string(raw), `"agent":"default","action":true}`) {
		t.Fatalf("action: %d %s", resp.StatusCode, raw)
	}
	// The UI knows the action's message, live (run_start) and after a reload, and offers no regenerate.
	_, hist := e.do(t, "GET", "/v1/ui/chat/"+sid, "")
	var h struct {
		Messages []struct{ Metadata map[string]any }
	}
	if err := json.Unmarshal(hist, &h); err != nil || len(h.Messages) != 3 || h.Messages[1].Metadata["action"] != nil || h.Messages[2].Metadata["action"] != true {
		t.Fatalf("history %s (%v)", hist, err)
	}
	resp, raw = e.do(t, "POST", "/v1/chat", `{"session_id":"`+sid+`","regenerate":true}`)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(raw), `"code":"action_not_regenerable"`) {
		t.Fatalf("regenerate after an action: %d %s", resp.StatusCode, raw)
	}
	if resp, raw := e.do(t, "POST", "/v1/chat", `{"session_id":"`+sid+`","message":"more"}`); resp.StatusCode != 200 {
		t.Fatalf("next message: %d %s", resp.StatusCode, raw)
	}
	if resp, raw := e.do(t, "POST", "/v1/chat", `{"session_id":"`+sid+`","regenerate":true}`); resp.StatusCode != 200 {
		t.Fatalf("regenerate the newer answer: %d %s", resp.StatusCode, raw)
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
