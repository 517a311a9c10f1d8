package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/chat"
	"chatd/internal/config"
	"chatd/internal/httpapi"
	"chatd/internal/llm/llmtest"
	"chatd/internal/provider"
	"chatd/internal/runevent"
	"chatd/internal/sse"
	"chatd/internal/store"
	"chatd/internal/store/sqlite"
	"chatd/internal/tool"
)

type env struct {
	srv      *httptest.Server
	upstream *llmtest.Server
	db       *sqlite.DB
	chat     *chat.Service
}

// newEnv wires chatd as cmd/chatd does, on a SQLite file and the scripted upstream.
func newEnv(t *testing.T, opts httpapi.Options, turns ...llmtest.Turn) *env {
	t.Helper()
	e := &env{upstream: llmtest.NewServer(t, turns...)}
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "chatd.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.db = db
	var tools *tool.Registry
	e.chat, tools = newChat(t, db, e.upstream, fixedNow, chat.Options{})
	opts.Chat, opts.Store, opts.Tools = e.chat, db, tools
	e.srv = httptest.NewServer(httpapi.New(opts))
	t.Cleanup(func() {
		e.srv.Close()
		closeChat(t, e.chat, tools)
		db.Close()
	})
	return e
}

// fixedNow is the time current_time tells, so that answers and goldens hold still.
func fixedNow() time.Time { return time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC) }

// newChat makes the chat service of a test server as cmd/chatd does: on db, with the upstream as the
// openai provider (the hints for providers that are not configured are the real configuration's) and
// current_time telling now. opts adds what the test configures (agents, prices …).
func newChat(t *testing.T, db store.Store, upstream *llmtest.Server, now func() time.Time, opts chat.Options) (*chat.Service, *tool.Registry) {
	t.Helper()
	cfg, err := config.Load(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	provs, err := provider.New([]provider.Config{{Name: "openai", Type: "openai", BaseURL: upstream.BaseURL(), APIKey: "sk-test"}},
		cfg.Unconfigured)
	if err != nil {
		t.Fatal(err)
	}
	tools := tool.NewRegistry(tool.Options{})
	if err := tools.Register(tool.CurrentTime(now)); err != nil {
		t.Fatal(err)
	}
	opts.Store, opts.Models, opts.Tools, opts.DefaultModel, opts.RetryBase = db, provs, tools, "openai/gpt-4o-mini", time.Millisecond
	if opts.TitleModel == "" {
		opts.TitleModel = chat.TitleNone // the scripted upstream's answers are the runs'
	}
	return chat.New(opts), tools
}

// closeChat ends a test server's runs and tools.
func closeChat(t *testing.T, c *chat.Service, tools *tool.Registry) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Errorf("close chat: %v", err)
	}
	tools.Close()
}

// stepClock is an injected clock: it stands still until the test moves it.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (e *env) do(t *testing.T, method, path, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, raw
}

type event struct {
	ID   string
	Type string
	Data map[string]any
}

// patience is how long a test waits for what must happen before it fails: a safety net that a loaded
// machine does not reach, never a measure.
const patience = 2 * time.Minute

// stream posts to /v1/chat/stream and decodes the whole SSE answer. The server must close the stream
// after done: a stream that stays open fails the test at its deadline.
func (e *env) stream(t *testing.T, body string) (*http.Response, []event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/v1/chat/stream", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	var out []event
	for ev, err := range sse.Scan(resp.Body) {
		if err != nil {
			t.Fatal(err)
		}
		var data map[string]any
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			t.Fatalf("event %s %s: data is not a JSON object: %s", ev.ID, ev.Type, ev.Data)
		}
		out = append(out, event{ID: ev.ID, Type: ev.Type, Data: data})
	}
	return resp, out
}

func types(events []event) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.Type)
	}
	return out
}

func checkIDs(t *testing.T, events []event) {
	t.Helper()
	for i, e := range events {
		if e.ID != strconv.Itoa(i+1) {
			t.Fatalf("event %d (%s) has id %q, want %d: ids must be 1, 2, 3 … without gaps", i, e.Type, e.ID, i+1)
		}
	}
}

var twoClocks = llmtest.Turn{
	Text: "Let me check.",
	ToolCalls: []llmtest.ToolCall{
		{ID: "call_paris", Name: "current_time", Arguments: `{"timezone":"Europe/Paris"}`},
		{ID: "call_tokyo", Name: "current_time", Arguments: `{"timezone":"Asia/Tokyo"}`},
	},
}

var answer = llmtest.Turn{Text: "It is 10:00 in Paris and 18:00 in Tokyo."}

func TestStreamedTurnWithParallelTools(t *testing.T) {
	e := newEnv(t, httpapi.Options{}, twoClocks, answer)
	resp, events := e.stream(t, `{"message":"What time is it in Paris and Tokyo?"}`)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("Content-Type = %q", ct)
	}
	checkIDs(t, events)
	// Squash runs of deltas so the order of steps reads plainly.
	var steps []string
	for _, ty := range types(events) {
		if len(steps) > 0 && steps[len(steps)-1] == ty && strings.HasSuffix(ty, "_delta") {
			continue
		}
		steps = append(steps, ty)
	}
	// Both calls are read-only: they may start while the model streams, so their place among the
	// deltas varies; the rest of the order is fixed.
	var fixed []string
	var starts, completes int
	for _, s := range steps {
		switch s {
		case "tool_start":
			starts++
		case "tool_complete":
			completes++
		case "status", "tool_call_delta":
		default:
			fixed = append(fixed, s)
		}
	}
	want := []string{"run_start", "record", "text_delta", "usage", "record", "record", "record", "text_delta", "usage", "record", "complete", "done"}
	if diff := cmp.Diff(want, fixed); diff != "" {
		t.Errorf("event order (-want +got):\n%s\nall: %v", diff, types(events))
	}
	if starts != 2 || completes != 2 {
		t.Errorf("%d tool_start and %d tool_complete, want 2 each", starts, completes)
	}
	last := events[len(events)-1]
	if last.Type != "done" || last.Data["status"] != "completed" {
		t.Fatalf("last event = %+v", last)
	}
	var text strings.Builder
	for _, ev := range events {
		if ev.Type == "text_delta" {
			text.WriteString(ev.Data["text"].(string))
		}
	}
	if text.String() != "Let me check."+answer.Text {
		t.Errorf("streamed text = %q", text.String())
	}
	complete := events[len(events)-2].Data
	if complete["finish_reason"] != "stop" || len(complete["tool_history"].([]any)) != 2 {
		t.Errorf("complete = %v", complete)
	}
	for _, ev := range events {
		if ev.Type == "tool_complete" && ev.Data["success"] != true {
			t.Errorf("tool_complete = %v", ev.Data)
		}
	}
	sessionID := events[0].Data["session_id"].(string)
	checkStored(t, e, sessionID)

	if auth := e.upstream.Requests()[0].Header.Get("Authorization"); auth != "Bearer sk-test" {
		t.Errorf("upstream Authorization = %q", auth)
	}
	// The second model call saw both results, paired with their calls.
	msgs := e.upstream.Requests()[1].Messages()
	if len(msgs) != 5 || msgs[3]["tool_call_id"] != "call_paris" || !strings.Contains(fmt.Sprint(msgs[4]["content"]), "Asia/Tokyo") {
		t.Errorf("second upstream request messages = %v", msgs)
	}
}

// checkStored reads the session's records back through the API.
func checkStored(t *testing.T, e *env, sessionID string) {
	t.Helper()
	resp, raw := e.do(t, "GET", "/v1/sessions/"+sessionID+"/messages", "")
	if resp.StatusCode != 200 {
		t.Fatalf("messages: %d %s", resp.StatusCode, raw)
	}
	var got struct{ Messages []runevent.Record }
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, r := range got.Messages {
		roles = append(roles, r.Role)
	}
	if diff := cmp.Diff([]string{"user", "assistant", "tool", "tool", "assistant"}, roles); diff != "" {
		t.Fatalf("stored roles (-want +got):\n%s", diff)
	}
	calls := got.Messages[1].ToolCalls
	if len(calls) != 2 || calls[0].ID != "call_paris" || string(calls[1].Arguments) != `{"timezone":"Asia/Tokyo"}` {
		t.Errorf("stored calls = %+v", calls)
	}
	answered := map[string]bool{}
	for _, r := range got.Messages[2:4] {
		if r.Success == nil || !*r.Success || r.DurationMS == nil || !strings.Contains(r.Content, `"time"`) {
			t.Errorf("tool record = %+v", r)
		}
		answered[r.ToolCallID] = true
	}
	if !answered["call_paris"] || !answered["call_tokyo"] {
		t.Errorf("tool records answer %v", answered)
	}
	if a := got.Messages[4]; a.Content != answer.Text || a.FinishReason != "stop" || a.Usage == nil || a.Model != "openai/gpt-4o-mini" {
		t.Errorf("final record = %+v", a)
	}
}

func TestBatch(t *testing.T) {
	e := newEnv(t, httpapi.Options{}, twoClocks, answer)
	resp, raw := e.do(t, "POST", "/v1/chat", `{"message":"What time is it?"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	var got struct {
		SessionID    string `json:"session_id"`
		RunID        string `json:"run_id"`
		Status       string
		Message      runevent.Record
		ToolHistory  []runevent.ToolHistory `json:"tool_history"`
		Usage        store.Usage
		FinishReason string `json:"finish_reason"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status != "completed" || got.FinishReason != "stop" || got.Message.Content != answer.Text || got.RunID == "" {
		t.Errorf("batch answer = %s", raw)
	}
	if len(got.ToolHistory) != 2 || !got.ToolHistory[0].Success || got.Usage.InputTokens != 84 {
		t.Errorf("tool history %+v usage %+v", got.ToolHistory, got.Usage)
	}
	checkStored(t, e, got.SessionID)
}

func TestBatchUpstreamFailure(t *testing.T) {
	e := newEnv(t, httpapi.Options{}, llmtest.Turn{Status: 401, ErrorMessage: "Incorrect API key provided"})
	resp, raw := e.do(t, "POST", "/v1/chat", `{"message":"hi"}`)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(raw), `"code":"upstream_auth"`) || !strings.Contains(string(raw), `"session_id"`) {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t, httpapi.Options{MaxChatBodyBytes: 1 << 20})
	huge := `{"message":"` + strings.Repeat("a", 1<<20) + `"}`
	long := `{"message":"` + strings.Repeat("a", 300<<10) + `"}`
	tests := []struct {
		name, method, path, body string
		status                   int
		code, contains           string
	}{
		{"malformed", "POST", "/v1/chat/stream", `{"message": "hi"`, 400, "invalid_json", "ends too early"},
		{"malformed batch", "POST", "/v1/chat", `{message: hi}`, 400, "invalid_json", "not valid JSON"},
		{"not an object", "POST", "/v1/chat", `["hi"]`, 400, "invalid_json", "JSON object"},
		{"empty", "POST", "/v1/chat", ``, 400, "invalid_json", "empty"},
		{"two values", "POST", "/v1/chat", `{"message":"a"} {}`, 400, "invalid_json", "more than one"},
		{"wrong type", "POST", "/v1/chat", `{"message": 42}`, 400, "invalid_json", `"message" must be a string`},
		{"missing message", "POST", "/v1/chat/stream", `{"session_id":""}`, 400, "missing_message", "no message"},
		{"too large", "POST", "/v1/chat/stream", huge, 413, "body_too_large", "1 MiB"},
		{"message too long", "POST", "/v1/chat/stream", long, 400, "message_too_long", "the limit is 262144"},
		{"unknown session", "POST", "/v1/chat/stream", `{"message":"hi","session_id":"nope"}`, 404, "session_not_found", "nope"},
		{"unknown provider", "POST", "/v1/chat", `{"message":"hi","model":"mistral/large"}`, 400, "invalid_model", "unknown provider"},
		{"unconfigured provider", "POST", "/v1/chat", `{"message":"hi","model":"ollama/llama3.2"}`, 400, "invalid_model", "set OLLAMA_HOST"},
		{"unconfigured anthropic", "POST", "/v1/chat", `{"message":"hi","model":"anthropic/claude"}`, 400, "invalid_model", "set ANTHROPIC_API_KEY"},
		{"model without provider", "POST", "/v1/chat", `{"message":"hi","model":"gpt-4o"}`, 400, "invalid_model", "provider/model"},
		{"unknown agent", "POST", "/v1/chat", `{"message":"hi","agent":"nobody"}`, 400, "unknown_agent", "nobody"},
		{"unknown tool", "POST", "/v1/chat", `{"message":"hi","selected_tools":["rm_rf"]}`, 400, "unknown_tool", "rm_rf"},
		{"bad attachment", "POST", "/v1/chat", `{"message":"hi","attachments":[{"media_type":"image/png","data":"!!"}]}`, 400, "invalid_attachment", "base64"},
		{"bad media type", "POST", "/v1/chat", `{"message":"hi","attachments":[{"media_type":"text/html","data":"aGk="}]}`, 400, "invalid_attachment", "text/html"},
		{"bad temperature", "POST", "/v1/chat", `{"message":"hi","temperature":7}`, 400, "invalid_temperature", "between 0 and 2"},
		{"unknown policy", "POST", "/v1/chat", `{"message":"hi","on_active_run":"queue"}`, 400, "invalid_on_active_run", "reject, interrupt or enqueue"},
		{"unknown route", "GET", "/v1/nothing", ``, 404, "not_found", "/v1/nothing"},
		{"unknown session get", "GET", "/v1/sessions/x", ``, 404, "session_not_found", `"x"`},
		{"unknown session messages", "GET", "/v1/sessions/x/messages", ``, 404, "session_not_found", `"x"`},
		{"unknown session patch", "PATCH", "/v1/sessions/x", `{"title":"t"}`, 404, "session_not_found", `"x"`},
		{"unknown session delete", "DELETE", "/v1/sessions/x", ``, 404, "session_not_found", `"x"`},
		{"bad limit", "GET", "/v1/sessions?limit=0", ``, 400, "invalid_limit", "1 to 200"},
		{"bad metadata", "POST", "/v1/sessions", `{"metadata":[1]}`, 400, "invalid_metadata", "object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, raw := e.do(t, tt.method, tt.path, tt.body)
			var got struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatalf("%d, body is not a JSON error: %.200s", resp.StatusCode, raw)
			}
			if resp.StatusCode != tt.status || got.Error.Code != tt.code || !strings.Contains(got.Error.Message, tt.contains) {
				t.Errorf("got %d %s %q; want %d %s containing %q", resp.StatusCode, got.Error.Code, got.Error.Message, tt.status, tt.code, tt.contains)
			}
		})
	}
	// Nothing was stored by the refused requests.
	_, raw := e.do(t, "GET", "/v1/sessions", "")
	if !strings.Contains(string(raw), `"sessions":[]`) {
		t.Errorf("sessions after bad requests: %s", raw)
	}
}

func TestSessionsCRUD(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	resp, raw := e.do(t, "POST", "/v1/sessions", `{"title":"First","metadata":{"team":"support"}}`)
	if resp.StatusCode != 201 {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	var s struct {
		ID, Title, Agent string
		Metadata         json.RawMessage
	}
	json.Unmarshal(raw, &s)
	if s.ID == "" || s.Title != "First" || s.Agent != "default" || string(s.Metadata) != `{"team":"support"}` {
		t.Fatalf("created %s", raw)
	}
	for i := range 3 {
		e.do(t, "POST", "/v1/sessions", fmt.Sprintf(`{"title":"s%d"}`, i))
	}
	var titles []string
	cursor := ""
	for range 5 {
		_, raw := e.do(t, "GET", "/v1/sessions?limit=3&cursor="+cursor, "")
		var page struct {
			Sessions   []struct{ Title string }
			NextCursor string `json:"next_cursor"`
		}
		json.Unmarshal(raw, &page)
		for _, s := range page.Sessions {
			titles = append(titles, s.Title)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if diff := cmp.Diff([]string{"s2", "s1", "s0", "First"}, titles); diff != "" {
		t.Errorf("newest first (-want +got):\n%s", diff)
	}
	resp, raw = e.do(t, "PATCH", "/v1/sessions/"+s.ID, `{"title":"Renamed"}`)
	if resp.StatusCode != 200 || !strings.Contains(string(raw), `"title":"Renamed"`) || !strings.Contains(string(raw), `"team":"support"`) {
		t.Errorf("patch: %d %s", resp.StatusCode, raw)
	}
	resp, raw = e.do(t, "GET", "/v1/sessions/"+s.ID, "")
	if resp.StatusCode != 200 || !strings.Contains(string(raw), `"Renamed"`) {
		t.Errorf("get: %d %s", resp.StatusCode, raw)
	}
	if resp, _ := e.do(t, "DELETE", "/v1/sessions/"+s.ID, ""); resp.StatusCode != 204 {
		t.Errorf("delete: %d", resp.StatusCode)
	}
	if resp, _ := e.do(t, "GET", "/v1/sessions/"+s.ID, ""); resp.StatusCode != 404 {
		t.Errorf("get after delete: %d", resp.StatusCode)
	}
}

func TestContinueSessionAndTitle(t *testing.T) {
	e := newEnv(t, httpapi.Options{}, llmtest.Turn{Text: "Hi!"}, llmtest.Turn{Text: "Fine."})
	_, events := e.stream(t, `{"message":"Hello there, this is a rather long first message that should be cut into a short title"}`)
	id := events[0].Data["session_id"].(string)
	e.stream(t, `{"message":"How are you?","session_id":"`+id+`"}`)
	_, raw := e.do(t, "GET", "/v1/sessions/"+id, "")
	if !strings.Contains(string(raw), `"title":"Hello there, this is a rather long first message that should…"`) {
		t.Errorf("title: %s", raw)
	}
	msgs := e.upstream.Requests()[1].Messages()
	if len(msgs) != 4 || msgs[2]["content"] != "Hi!" || msgs[3]["content"] != "How are you?" {
		t.Errorf("second request did not carry the history: %v", msgs)
	}
}

func TestBusySessionIsRefused(t *testing.T) {
	e := newEnv(t, httpapi.Options{}, llmtest.Turn{Text: "slow", Block: true})
	resp, err := http.Post(e.srv.URL+"/v1/chat/stream", "application/json", strings.NewReader(`{"message":"one"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var sessionID string
	for sc.Scan() && sessionID == "" {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(data, "session_id") {
			var d map[string]any
			json.Unmarshal([]byte(data), &d)
			sessionID = d["session_id"].(string)
		}
	}
	r2, raw := e.do(t, "POST", "/v1/chat", `{"message":"two","session_id":"`+sessionID+`"}`)
	if r2.StatusCode != 409 || !strings.Contains(string(raw), `"code":"session_busy"`) || !strings.Contains(string(raw), `"run_id"`) {
		t.Errorf("second send: %d %s", r2.StatusCode, raw)
	}
	if r3, _ := e.do(t, "DELETE", "/v1/sessions/"+sessionID, ""); r3.StatusCode != 409 {
		t.Errorf("delete during a run: %d", r3.StatusCode)
	}
}

// TestDisconnectDoesNotStopTheRun: the run belongs to the server; a client that goes away does not lose
// the answer.
func TestDisconnectDoesNotStopTheRun(t *testing.T) {
	e := newEnv(t, httpapi.Options{}, llmtest.Turn{Text: "a slow but complete answer", Delay: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/v1/chat/stream", strings.NewReader(`{"message":"hi"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sessionID, runID := resp.Header.Get("X-Session-Id"), resp.Header.Get("X-Run-Id")
	cancel()
	resp.Body.Close()
	// The run goes on without its client: wait for its end, then read what it stored.
	o, err := e.chat.Wait(t.Context(), httpapi.LocalUser, runID)
	if err != nil || o.Status != "completed" {
		t.Fatalf("the run ended %+v, %v; want completed", o, err)
	}
	if _, raw := e.do(t, "GET", "/v1/sessions/"+sessionID+"/messages", ""); !strings.Contains(string(raw), `"content":"a slow but complete answer"`) {
		t.Fatalf("the answer was not stored after the client went away: %s", raw)
	}
}

func TestPing(t *testing.T) {
	e := newEnv(t, httpapi.Options{PingInterval: 20 * time.Millisecond}, llmtest.Turn{Text: "x", Block: true})
	resp, err := http.Post(e.srv.URL+"/v1/chat/stream", "application/json", strings.NewReader(`{"message":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() == ": ping" {
			return
		}
	}
	t.Fatal("no ping before the stream ended")
}

func TestAttachmentReachesTheModel(t *testing.T) {
	e := newEnv(t, httpapi.Options{}, llmtest.Turn{Text: "A red dot."})
	png := "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
	_, events := e.stream(t, `{"message":"What is this?","attachments":[{"media_type":"image/png","name":"dot.png","data":"`+png+`"}]}`)
	if events[len(events)-1].Data["status"] != "completed" {
		t.Fatalf("events: %v", types(events))
	}
	raw := e.upstream.Requests()[0].Raw
	if !bytes.Contains(raw, []byte(`"url":"data:image/png;base64,`+png+`"`)) {
		t.Errorf("upstream request has no image: %s", raw)
	}
	_, stored := e.do(t, "GET", "/v1/sessions/"+events[0].Data["session_id"].(string)+"/messages", "")
	if !bytes.Contains(stored, []byte(`"name":"dot.png"`)) {
		t.Errorf("attachment not stored: %s", stored)
	}
}

func TestToolsAndHealth(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	resp, raw := e.do(t, "GET", "/v1/tools", "")
	if resp.StatusCode != 200 || !strings.Contains(string(raw), `"name":"current_time"`) || !strings.Contains(string(raw), `"source":"builtin"`) {
		t.Errorf("tools: %d %s", resp.StatusCode, raw)
	}
	resp, raw = e.do(t, "GET", "/healthz", "")
	if resp.StatusCode != 200 || !strings.Contains(string(raw), "ok") {
		t.Errorf("healthz: %d %s", resp.StatusCode, raw)
	}
}

func TestUpstreamErrorMidStream(t *testing.T) {
	e := newEnv(t, httpapi.Options{}, llmtest.Turn{Text: "Partial answer", InBandError: "The server had an error"})
	_, events := e.stream(t, `{"message":"hi"}`)
	checkIDs(t, events)
	n := len(events)
	if events[n-2].Type != "error" || events[n-1].Data["status"] != "failed" {
		t.Fatalf("events: %v", types(events))
	}
	if events[n-2].Data["code"] != "upstream_server" || events[n-2].Data["retryable"] != true {
		t.Errorf("error event = %v", events[n-2].Data)
	}
	_, raw := e.do(t, "GET", "/v1/sessions/"+events[0].Data["session_id"].(string)+"/messages", "")
	if !strings.Contains(string(raw), `"content":"Partial answer"`) {
		t.Errorf("partial answer not stored: %s", raw)
	}
}

// TestLocalModeRefusesOtherSites: with every caller the local user, a page on another site must not drive
// the API — neither by a cross-site POST (CSRF) nor by rebinding its own name to 127.0.0.1.
func TestLocalModeRefusesOtherSites(t *testing.T) {
	e := newEnv(t, httpapi.Options{AllowedHosts: []string{"chat.example.com"}})
	send := func(method, host string, header map[string]string, body string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), method, e.srv.URL+"/v1/sessions", strings.NewReader(body))
		req.Host = host
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	tests := []struct {
		name, method, host string
		header             map[string]string
		status             int
	}{
		{"rebound name", "GET", "attacker.example", nil, 403},
		{"rebound name writing", "POST", "attacker.example:8080", map[string]string{"Content-Type": "application/json"}, 403},
		{"cross-site form post", "POST", "127.0.0.1", map[string]string{"Content-Type": "text/plain", "Origin": "http://attacker.example", "Sec-Fetch-Site": "cross-site"}, 403},
		{"cross-site json post", "POST", "127.0.0.1", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, 403},
		{"old browser cross-origin", "POST", "127.0.0.1", map[string]string{"Content-Type": "application/json", "Origin": "http://attacker.example"}, 403},
		{"text/plain without browser headers", "POST", "127.0.0.1", map[string]string{"Content-Type": "text/plain"}, 415},
		{"same origin", "POST", "127.0.0.1", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "same-origin"}, 201},
		{"curl", "POST", "localhost:8080", map[string]string{"Content-Type": "application/json"}, 201},
		{"ipv6 loopback", "GET", "[::1]:8080", nil, 200},
		{"allowed proxy name", "GET", "chat.example.com", nil, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := ""
			if tt.method == "POST" {
				body = `{"title":"x"}`
			}
			status, raw := send(tt.method, tt.host, tt.header, body)
			if status != tt.status {
				t.Errorf("status %d, want %d: %s", status, tt.status, raw)
			}
		})
	}
	_, raw := e.do(t, "GET", "/v1/sessions", "")
	if n := strings.Count(string(raw), `"title":"x"`); n != 2 {
		t.Errorf("%d sessions were created, want 2 (same origin and curl)", n)
	}
}

func TestBadCursor(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	resp, raw := e.do(t, "GET", "/v1/sessions?cursor=not-ours", "")
	if resp.StatusCode != 400 || !strings.Contains(string(raw), "invalid_cursor") {
		t.Errorf("%d %s", resp.StatusCode, raw)
	}
}

func TestAgentBelongsToTheSession(t *testing.T) {
	e := newEnv(t, httpapi.Options{}, llmtest.Turn{Text: "hi"})
	_, events := e.stream(t, `{"message":"hi"}`)
	id := events[0].Data["session_id"].(string)
	resp, raw := e.do(t, "POST", "/v1/chat", `{"message":"again","session_id":"`+id+`","agent":"other"}`)
	if resp.StatusCode != 400 || !strings.Contains(string(raw), "agent_mismatch") {
		t.Errorf("%d %s", resp.StatusCode, raw)
	}
}
