package e2e

// TestProvidersAgainstAimock runs one chatd with the Anthropic, Gemini and OpenAI Responses providers
// configured against one @copilotkit/aimock, which speaks each provider's own wire format, and checks a
// tool round trip through each: the run's events, the stored records, and what chatd sent upstream.
//
// aimock's journal keeps each request only after converting it to the Chat Completions shape (that is
// what its fixtures match on): an Anthropic thinking block, its signature and the `thinking` setting
// are gone from it, and so is each provider's own shape of a tool result. So chatd talks to aimock
// through a small recording proxy (upstreamRecorder) that keeps the raw request bodies, headers and
// answers; the journal is checked too, for what it does keep.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/sse"
)

// One key per provider; none may appear in chatd's log, database or events.
const (
	anthropicKey = "sk-ant-e2e-secret-8d2f61"
	geminiKey    = "AIza-e2e-secret-3b7c90"
	reasonerKey  = "sk-resp-e2e-secret-5e14aa"
)

// What testdata/aimock-providers.json makes the thinking turn say.
const (
	thinkerReasoning = "The user wants the time in Paris; I should call current_time with Europe/Paris."
	thinkerSignature = "sig-e2e-thinker-5b2e9d1c"
)

// providerCase is one provider's tool round trip, as the fixtures script it.
type providerCase struct {
	name    string
	message string // the user's message; the fixtures match on it
	body    map[string]any
	model   string // provider/model: on run_start, usage events and the records
	agent   string
	path    string // the upstream path of a model call (a prefix: Gemini's carries ?alt=sse)
	callID  string // the call's id as aimock sends it; "" when the provider sends none
	answer  string
	// usage is what the fixtures report for the two calls: {input, output}.
	usage     [2][2]int
	reasoning string // the thinking streamed on the first call, if any
	// checkRaw checks the raw bodies of the two upstream requests; callID is the call's id as stored.
	checkRaw func(t *testing.T, calls []*upstreamCall, callID string)
}

func TestProvidersAgainstAimock(t *testing.T) {
	t.Parallel() // each test has its own processes, ports and files
	// --strict: a request no fixture matches is an error, and so is a thinking turn continued without
	// its signed thinking block first (aimock checks Anthropic's rule for that).
	mockPort := startAimock(t, "testdata/aimock-providers.json", "--strict")
	mock := fmt.Sprintf("http://127.0.0.1:%d", mockPort)
	up := newUpstreamRecorder(t, mock)

	dir := t.TempDir()
	cfg := filepath.Join(dir, "chatd.yaml")
	yaml := fmt.Sprintf(`providers:
  reasoner:
    type: openai-responses
    base_url: %s/v1
    api_key_env: REASONER_KEY
agents:
  thinker:
    model: anthropic/claude-sonnet-4-5
    reasoning: {budget_tokens: 1024}
`, up.URL)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	chatd, chatdLog := start(t, "chatd", port, []string{
		"ANTHROPIC_API_KEY=" + anthropicKey,
		"ANTHROPIC_BASE_URL=" + up.URL,
		"GEMINI_API_KEY=" + geminiKey,
		"GEMINI_BASE_URL=" + up.URL,
		"REASONER_KEY=" + reasonerKey,
		// Only the three providers under test, whatever the machine's environment says.
		"OPENAI_API_KEY=", "OPENAI_BASE_URL=", "OLLAMA_HOST=",
		// The test counts each chat's model calls: no title call after a session's first answer.
		"CHATD_TITLE_MODEL=none",
		"CHATD_CONFIG=" + cfg,
		"CHATD_DB=sqlite:" + filepath.Join(dir, "chatd.db"),
		"CHATD_ADDR=127.0.0.1:" + strconv.Itoa(port),
		"CHATD_LOG_LEVEL=debug",
	}, buildChatd(t), "serve")

	cases := []providerCase{
		{
			name:    "anthropic",
			message: "anthropic: what time is it in Paris?",
			model:   "anthropic/claude-sonnet-4-5", agent: "default",
			path:   "/v1/messages",
			callID: "toolu_e2e_paris",
			answer: "In Paris it is 10:00, says Claude.",
			usage:  [2][2]int{{101, 11}, {131, 13}},
			checkRaw: func(t *testing.T, calls []*upstreamCall, callID string) {
				checkAnthropicRaw(t, calls, callID, false)
			},
		},
		{
			name:    "gemini",
			message: "gemini: what time is it in Paris?",
			model:   "gemini/gemini-2.5-flash", agent: "default",
			path:     "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
			answer:   "In Paris it is 10:00, says Gemini.",
			usage:    [2][2]int{{102, 12}, {132, 14}},
			checkRaw: checkGeminiRaw,
		},
		{
			name:    "reasoner",
			message: "reasoner: what time is it in Paris?",
			model:   "reasoner/gpt-5-mini", agent: "default",
			path:     "/v1/responses",
			callID:   "call_e2e_reasoner",
			answer:   "In Paris it is 10:00, says the reasoner.",
			usage:    [2][2]int{{103, 10}, {133, 15}},
			checkRaw: checkResponsesRaw,
		},
		{
			name:    "anthropic-thinking",
			message: "thinker: think, then tell me the time in Paris",
			model:   "anthropic/claude-sonnet-4-5", agent: "thinker",
			path:      "/v1/messages",
			callID:    "toolu_e2e_thinker",
			answer:    "Having thought about it: in Paris it is 10:00.",
			usage:     [2][2]int{{111, 41}, {151, 17}},
			reasoning: thinkerReasoning,
			checkRaw: func(t *testing.T, calls []*upstreamCall, callID string) {
				checkAnthropicRaw(t, calls, callID, true)
			},
		},
	}
	var allEvents []event
	for _, c := range cases {
		c.body = map[string]any{"message": c.message}
		if c.agent != "default" {
			c.body["agent"] = c.agent
		} else {
			c.body["model"] = c.model
		}
		t.Run(c.name, func(t *testing.T) {
			raw, _ := json.Marshal(c.body)
			events := stream(t, base, string(raw))
			allEvents = append(allEvents, events...)
			sessionID := checkProviderEvents(t, c, events)
			callID := checkProviderRecords(t, base, c, sessionID)
			calls := up.modelCalls(c.path, c.message)
			if len(calls) != 2 {
				t.Fatalf("chatd made %d model calls upstream for %q, want 2: %v", len(calls), c.message, calls)
			}
			c.checkRaw(t, calls, callID)
			checkJournal(t, mock, c, callID)
		})
	}

	t.Run("models", func(t *testing.T) {
		checkModels(t, base)
	})

	// The keys reach the providers, and nothing else.
	for _, ev := range allEvents {
		raw, _ := json.Marshal(ev.Data)
		for _, key := range []string{anthropicKey, geminiKey, reasonerKey} {
			if bytes.Contains(raw, []byte(key)) {
				t.Errorf("an API key appears in event %v", ev)
			}
		}
	}
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
	for _, key := range []string{anthropicKey, geminiKey, reasonerKey} {
		if strings.Contains(chatdLog.String(), key) {
			t.Errorf("the API key %s… appears in chatd's log", key[:8])
		}
		for _, f := range []string{"chatd.db", "chatd.db-wal"} {
			raw, _ := os.ReadFile(filepath.Join(dir, f))
			if bytes.Contains(raw, []byte(key)) {
				t.Errorf("the API key %s… appears in %s", key[:8], f)
			}
		}
	}
}

// checkProviderEvents checks the events of one tool round trip and returns the session's id.
func checkProviderEvents(t *testing.T, c providerCase, events []event) string {
	t.Helper()
	if len(events) < 3 {
		t.Fatalf("%d events: %v", len(events), events)
	}
	for i, ev := range events {
		if ev.ID != strconv.Itoa(i+1) {
			t.Fatalf("event %d (%s) has id %q: ids must run 1, 2, 3 … without gaps", i, ev.Type, ev.ID)
		}
	}
	head, last := events[0], events[len(events)-1]
	if head.Type != "run_start" || head.Data["model"] != c.model || head.Data["agent"] != c.agent {
		t.Errorf("first event %v, want run_start with model %s and agent %s", head, c.model, c.agent)
	}
	if last.Type != "done" || last.Data["status"] != "completed" {
		t.Fatalf("last event %v, want done with status completed; events:\n%s", last, eventLines(events))
	}

	var (
		text, reasoning             strings.Builder
		starts, completes, usages   []event
		firstText, firstReasoning   = -1, -1
		toolStartAt, toolCompleteAt = -1, -1
	)
	for i, ev := range events {
		switch ev.Type {
		case "text_delta":
			text.WriteString(str(ev.Data["text"]))
			if firstText < 0 {
				firstText = i
			}
		case "reasoning_delta":
			reasoning.WriteString(str(ev.Data["text"]))
			if firstReasoning < 0 {
				firstReasoning = i
			}
		case "tool_start":
			starts = append(starts, ev)
			toolStartAt = i
		case "tool_complete":
			completes = append(completes, ev)
			toolCompleteAt = i
		case "usage":
			usages = append(usages, ev)
		case "error":
			t.Errorf("error event %v", ev)
		}
	}
	if len(starts) != 1 || len(completes) != 1 {
		t.Fatalf("%d tool_start and %d tool_complete events, want 1 each:\n%s", len(starts), len(completes), eventLines(events))
	}
	st, co := starts[0].Data, completes[0].Data
	id := str(st["tool_call_id"])
	if id == "" || (c.callID != "" && id != c.callID) {
		t.Errorf("tool_start tool_call_id = %q, want %q (non-empty)", id, c.callID)
	}
	if st["name"] != "current_time" || obj(st["arguments"])["timezone"] != "Europe/Paris" {
		t.Errorf("tool_start = %v", starts[0])
	}
	if str(co["tool_call_id"]) != id || co["name"] != "current_time" || co["success"] != true ||
		!strings.Contains(str(co["content"]), `"time"`) {
		t.Errorf("tool_complete = %v, want a success for %s", completes[0], id)
	}
	if text.String() != c.answer {
		t.Errorf("text_delta events join to %q, want %q", text.String(), c.answer)
	}
	if firstText >= 0 && (toolCompleteAt > firstText || toolStartAt > toolCompleteAt) {
		t.Errorf("order: tool_start at %d, tool_complete at %d, first text_delta at %d", toolStartAt, toolCompleteAt, firstText)
	}
	if c.reasoning != "" {
		if reasoning.String() != c.reasoning {
			t.Errorf("reasoning_delta events join to %q, want %q", reasoning.String(), c.reasoning)
		}
		if firstReasoning < 0 || firstReasoning > toolStartAt {
			t.Errorf("the first reasoning_delta is at %d, the tool_start at %d", firstReasoning, toolStartAt)
		}
	} else if reasoning.Len() > 0 {
		t.Errorf("reasoning_delta events %q for a turn without thinking", reasoning.String())
	}

	// One usage event per model call, with what aimock reported for it.
	var got [][2]int
	for _, u := range usages {
		if u.Data["model"] != c.model {
			t.Errorf("usage event %v: model is not %s", u, c.model)
		}
		got = append(got, [2]int{num(u.Data["input_tokens"]), num(u.Data["output_tokens"])})
	}
	if diff := cmp.Diff(c.usage[:], got); diff != "" {
		t.Errorf("usage events {input_tokens, output_tokens} (-want +got):\n%s", diff)
	}

	complete := events[len(events)-2]
	if complete.Type != "complete" {
		t.Fatalf("the event before done is %v, want complete", complete)
	}
	cd := complete.Data
	totals := obj(cd["usage"])
	wantIn, wantOut := c.usage[0][0]+c.usage[1][0], c.usage[0][1]+c.usage[1][1]
	if cd["finish_reason"] != "stop" || str(obj(cd["message"])["content"]) != c.answer ||
		num(totals["input_tokens"]) != wantIn || num(totals["output_tokens"]) != wantOut {
		t.Errorf("complete = %v; want finish_reason stop, the answer, usage %d in / %d out", cd, wantIn, wantOut)
	}
	return str(head.Data["session_id"])
}

// providerRecord is a stored record with the fields this test reads beyond record's.
type providerRecord struct {
	record
	Reasoning string
}

// checkProviderRecords checks the session's stored records and returns the call's id.
func checkProviderRecords(t *testing.T, base string, c providerCase, sessionID string) string {
	t.Helper()
	var got struct{ Messages []providerRecord }
	getJSON(t, base+"/v1/sessions/"+sessionID+"/messages", &got)
	var roles []string
	for _, r := range got.Messages {
		roles = append(roles, r.Role)
	}
	if diff := cmp.Diff([]string{"user", "assistant", "tool", "assistant"}, roles); diff != "" {
		t.Fatalf("stored roles (-want +got):\n%s", diff)
	}
	user, call, result, answer := got.Messages[0], got.Messages[1], got.Messages[2], got.Messages[3]
	if user.Content != c.message {
		t.Errorf("user record content = %q", user.Content)
	}
	if len(call.ToolCalls) != 1 {
		t.Fatalf("assistant record has %d tool calls, want 1: %+v", len(call.ToolCalls), call)
	}
	tc := call.ToolCalls[0]
	if tc.ID == "" || (c.callID != "" && tc.ID != c.callID) || tc.Name != "current_time" ||
		tc.Arguments["timezone"] != "Europe/Paris" || call.FinishReason != "tool_calls" || call.Model != c.model {
		t.Errorf("assistant record = %+v; want one current_time call {timezone: Europe/Paris} with id %q, finish_reason tool_calls, model %s",
			call, c.callID, c.model)
	}
	if call.Reasoning != c.reasoning {
		t.Errorf("assistant record reasoning = %q, want %q", call.Reasoning, c.reasoning)
	}
	if result.ToolCallID != tc.ID || result.Name != "current_time" || result.Success == nil || !*result.Success ||
		!strings.Contains(result.Content, `"time"`) || !strings.Contains(result.Content, `"timezone":"Europe/Paris"`) {
		t.Errorf("tool record = %+v; want a success for %s", result, tc.ID)
	}
	if answer.Content != c.answer || answer.Model != c.model || answer.FinishReason != "stop" || len(answer.ToolCalls) != 0 {
		t.Errorf("final record = %+v; want %q from %s, finish_reason stop", answer, c.answer, c.model)
	}
	return tc.ID
}

// checkAnthropicRaw checks the two Messages API requests: the second sends the call back as a tool_use
// block and its result as a tool_result block; with thinking on, the signed thinking block goes back
// first, with the signature aimock streamed.
func checkAnthropicRaw(t *testing.T, calls []*upstreamCall, callID string, thinking bool) {
	t.Helper()
	for i, call := range calls {
		if call.Header.Get("x-api-key") != anthropicKey || call.Header.Get("anthropic-version") == "" {
			t.Errorf("request %d: x-api-key sent %v, anthropic-version %q", i+1,
				call.Header.Get("x-api-key") == anthropicKey, call.Header.Get("anthropic-version"))
		}
		b := call.body(t)
		if b["model"] != "claude-sonnet-4-5" || b["stream"] != true || !hasTool(b["tools"], "name", "current_time") {
			t.Errorf("request %d: model %v, stream %v, tools %v", i+1, b["model"], b["stream"], b["tools"])
		}
		cfg, has := b["thinking"]
		switch {
		case thinking && (obj(cfg)["type"] != "enabled" || num(obj(cfg)["budget_tokens"]) != 1024 || num(b["max_tokens"]) <= 1024):
			t.Errorf("request %d: thinking %v, max_tokens %v; want enabled with budget_tokens 1024 and max_tokens above it", i+1, cfg, b["max_tokens"])
		case !thinking && has:
			t.Errorf("request %d: thinking %v for an agent without reasoning", i+1, cfg)
		}
	}

	// What aimock gave on the first call: the signature, read from its stream.
	signature := ""
	for ev, err := range sse.Scan(bytes.NewReader([]byte(calls[0].Response.String()))) {
		if err != nil {
			t.Fatalf("aimock's first answer: %v", err)
		}
		var data struct {
			Delta struct{ Type, Signature string }
		}
		json.Unmarshal(ev.Data, &data)
		if data.Delta.Type == "signature_delta" {
			signature = data.Delta.Signature
		}
	}
	if thinking && signature != thinkerSignature {
		t.Errorf("aimock streamed the signature %q, want the fixture's %q", signature, thinkerSignature)
	}

	msgs := arr(calls[1].body(t)["messages"])
	if len(msgs) < 3 {
		t.Fatalf("second request: %d messages, want user, assistant, user: %v", len(msgs), msgs)
	}
	asst, res := obj(msgs[len(msgs)-2]), obj(msgs[len(msgs)-1])
	if asst["role"] != "assistant" || res["role"] != "user" {
		t.Fatalf("second request: the last two messages are %v and %v, want assistant then user", asst["role"], res["role"])
	}
	blocks := arr(asst["content"])
	useAt := -1
	for i, b := range blocks {
		if b := obj(b); b["type"] == "tool_use" && b["id"] == callID && b["name"] == "current_time" &&
			obj(b["input"])["timezone"] == "Europe/Paris" {
			useAt = i
		}
	}
	if useAt < 0 {
		t.Errorf("second request: the assistant message has no tool_use block {id %s, current_time, Europe/Paris}: %v", callID, blocks)
	}
	if thinking {
		lead := obj(first(blocks))
		if lead["type"] != "thinking" || lead["signature"] != signature || lead["thinking"] != thinkerReasoning || useAt < 1 {
			t.Errorf("second request: the assistant content must start with the thinking block "+
				"{thinking %q, signature %q} before the tool_use block (at %d): %v", thinkerReasoning, signature, useAt, blocks)
		}
	} else {
		for _, b := range blocks {
			if typ := obj(b)["type"]; typ == "thinking" || typ == "redacted_thinking" {
				t.Errorf("second request: a %v block without thinking on: %v", typ, blocks)
			}
		}
	}
	found := false
	for _, b := range arr(res["content"]) {
		b := obj(b)
		if b["type"] != "tool_result" {
			continue
		}
		found = b["tool_use_id"] == callID && b["is_error"] != true && strings.Contains(fmt.Sprint(b["content"]), "time")
		if !found {
			t.Errorf("second request: tool_result %v, want tool_use_id %s with the time", b, callID)
		}
	}
	if !found {
		t.Errorf("second request: the last user message has no tool_result block: %v", res["content"])
	}
}

// checkGeminiRaw checks the two generateContent requests: the second sends the model's functionCall back,
// then a functionResponse named current_time.
func checkGeminiRaw(t *testing.T, calls []*upstreamCall, _ string) {
	t.Helper()
	for i, call := range calls {
		if call.Header.Get("x-goog-api-key") != geminiKey || !strings.Contains(call.URI, "alt=sse") {
			t.Errorf("request %d: %s, x-goog-api-key sent %v", i+1, call.URI, call.Header.Get("x-goog-api-key") == geminiKey)
		}
		if strings.Contains(call.URI, geminiKey) {
			t.Errorf("request %d: the key is in the URL %s", i+1, call.URI)
		}
		var decls []any
		for _, tool := range arr(call.body(t)["tools"]) {
			decls = append(decls, arr(obj(tool)["functionDeclarations"])...)
		}
		if !hasTool(decls, "name", "current_time") {
			t.Errorf("request %d: tools %v", i+1, call.body(t)["tools"])
		}
	}
	contents := arr(calls[1].body(t)["contents"])
	if len(contents) < 3 {
		t.Fatalf("second request: %d contents, want user, model, user: %v", len(contents), contents)
	}
	model, resp := obj(contents[len(contents)-2]), obj(contents[len(contents)-1])
	var fc, fr map[string]any
	for _, p := range arr(model["parts"]) {
		if c := obj(obj(p)["functionCall"]); c != nil {
			fc = c
		}
	}
	for _, p := range arr(resp["parts"]) {
		if r := obj(obj(p)["functionResponse"]); r != nil {
			fr = r
		}
	}
	if model["role"] != "model" || fc["name"] != "current_time" || obj(fc["args"])["timezone"] != "Europe/Paris" {
		t.Errorf("second request: the next-to-last content %v, want the model's functionCall current_time {timezone: Europe/Paris}", model)
	}
	if resp["role"] != "user" || fr["name"] != "current_time" || fr["response"] == nil ||
		!strings.Contains(fmt.Sprint(fr["response"]), "time") {
		t.Errorf("second request: the last content %v, want a user functionResponse named current_time with the time", resp)
	}
	if fc["id"] != nil && fr["id"] != fc["id"] {
		t.Errorf("second request: functionCall id %v, functionResponse id %v", fc["id"], fr["id"])
	}
}

// checkResponsesRaw checks the two Responses API requests: the second carries a function_call item and a
// function_call_output item with the same call_id.
func checkResponsesRaw(t *testing.T, calls []*upstreamCall, callID string) {
	t.Helper()
	for i, call := range calls {
		b := call.body(t)
		if call.Header.Get("Authorization") != "Bearer "+reasonerKey || b["model"] != "gpt-5-mini" || b["stream"] != true ||
			!hasTool(b["tools"], "name", "current_time") {
			t.Errorf("request %d: bearer key sent %v, model %v, stream %v, tools %v", i+1,
				call.Header.Get("Authorization") == "Bearer "+reasonerKey, b["model"], b["stream"], b["tools"])
		}
	}
	// aimock answers a request that includes reasoning.encrypted_content with a reasoning item carrying
	// a blob; chatd asks for it (it keeps no state upstream: store false), so it must send it back.
	var reasoningItem map[string]any
	for ev, err := range sse.Scan(bytes.NewReader([]byte(calls[0].Response.String()))) {
		if err != nil {
			t.Fatalf("aimock's first answer: %v", err)
		}
		var data map[string]any
		json.Unmarshal(ev.Data, &data)
		if it := obj(data["item"]); data["type"] == "response.output_item.done" && it["type"] == "reasoning" {
			reasoningItem = it
		}
	}
	callAt, outputAt, reasoningAt := -1, -1, -1
	items := arr(calls[1].body(t)["input"])
	for i, it := range items {
		it := obj(it)
		switch it["type"] {
		case "reasoning":
			if reasoningItem != nil && it["id"] == reasoningItem["id"] && it["encrypted_content"] == reasoningItem["encrypted_content"] {
				reasoningAt = i
			}
		case "function_call":
			var args map[string]any
			json.Unmarshal([]byte(str(it["arguments"])), &args)
			if it["call_id"] == callID && it["name"] == "current_time" && args["timezone"] == "Europe/Paris" {
				callAt = i
			}
		case "function_call_output":
			if it["call_id"] == callID && strings.Contains(str(it["output"]), `"time"`) {
				outputAt = i
			}
		}
	}
	if callAt < 0 || outputAt < callAt {
		t.Errorf("second request: function_call at %d, function_call_output at %d (call_id %s); input: %v", callAt, outputAt, callID, items)
	}
	if reasoningItem != nil && (reasoningAt < 0 || reasoningAt > callAt) {
		t.Errorf("second request: aimock's reasoning item %v is not sent back before the function_call (at %d, call at %d); input: %v",
			reasoningItem, reasoningAt, callAt, items)
	}
}

// journalEntry is a request as aimock's journal keeps it: converted to the Chat Completions shape.
type journalEntry struct {
	Method, Path string
	Headers      map[string]string
	Body         struct {
		Model    string
		Messages []struct {
			Role       string
			Content    any
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string
				Function struct{ Name, Arguments string }
			} `json:"tool_calls"`
		}
	}
	Response struct{ Status int }
}

// checkJournal checks what aimock itself says it received for the case: two requests on the provider's
// path, both answered from a fixture, the second with the call and then its result.
func checkJournal(t *testing.T, mock string, c providerCase, callID string) {
	t.Helper()
	var journal []journalEntry
	getJSON(t, mock+"/__aimock/journal", &journal)
	var mine []journalEntry
	for _, e := range journal {
		for _, m := range e.Body.Messages {
			if m.Role == "user" && fmt.Sprint(m.Content) == c.message {
				mine = append(mine, e)
				break
			}
		}
	}
	if len(mine) != 2 {
		t.Fatalf("aimock's journal has %d requests with %q, want 2", len(mine), c.message)
	}
	for i, e := range mine {
		if e.Method != "POST" || !strings.HasPrefix(e.Path, c.path) || e.Response.Status != 200 {
			t.Errorf("journal entry %d: %s %s answered %d, want POST %s… answered 200", i+1, e.Method, e.Path, e.Response.Status, c.path)
		}
	}
	msgs := mine[1].Body.Messages
	n := len(msgs)
	if n < 3 || msgs[n-1].Role != "tool" || msgs[n-2].Role != "assistant" || len(msgs[n-2].ToolCalls) != 1 {
		t.Fatalf("journal: the second request ends with %+v, want the assistant's call then its tool result", msgs)
	}
	call, result := msgs[n-2].ToolCalls[0], msgs[n-1]
	if call.Function.Name != "current_time" || result.ToolCallID != call.ID || !strings.Contains(fmt.Sprint(result.Content), "time") {
		t.Errorf("journal: call %+v, result %+v", call, result)
	}
	// Gemini carries no ids: aimock names the call itself, so only the others carry chatd's id.
	if c.callID != "" && call.ID != callID {
		t.Errorf("journal: the call's id is %q, want %q", call.ID, callID)
	}
}

// checkModels checks GET /v1/models: every configured provider is listed, with models or an error.
func checkModels(t *testing.T, base string) {
	t.Helper()
	var got struct {
		Data []struct {
			ID, Object, Provider string
		}
		Providers []struct {
			Provider, Type, Source, Error string
			Models                        []string
		}
	}
	getJSON(t, base+"/v1/models", &got)
	if got.Data == nil || got.Providers == nil {
		t.Fatalf("GET /v1/models: data %v, providers %v; want both arrays", got.Data, got.Providers)
	}
	types := map[string]string{}
	listed := map[string]bool{}
	for _, p := range got.Providers {
		types[p.Provider] = p.Type
		if len(p.Models) == 0 && p.Error == "" {
			t.Errorf("provider %s lists no models and no error", p.Provider)
		}
		for _, m := range p.Models {
			if !strings.HasPrefix(m, p.Provider+"/") {
				t.Errorf("provider %s lists %q", p.Provider, m)
			}
			listed[m] = true
		}
	}
	want := map[string]string{"anthropic": "anthropic", "gemini": "gemini", "reasoner": "openai-responses"}
	if diff := cmp.Diff(want, types); diff != "" {
		t.Errorf("providers and their types (-want +got):\n%s", diff)
	}
	for _, d := range got.Data {
		if !listed[d.ID] || d.Object != "model" || !strings.HasPrefix(d.ID, d.Provider+"/") {
			t.Errorf("data entry %+v is not one of its provider's models", d)
		}
		delete(listed, d.ID)
	}
	if len(listed) > 0 {
		t.Errorf("models of providers missing from data: %v", listed)
	}
}

// upstreamCall is one request chatd sent upstream, as the recording proxy saw it, and aimock's answer.
type upstreamCall struct {
	Method, URI string
	Header      http.Header
	Body        []byte
	Response    *logBuffer // filled as the answer streams through
}

func (c *upstreamCall) String() string { return c.Method + " " + c.URI }

func (c *upstreamCall) body(t *testing.T) map[string]any {
	t.Helper()
	var b map[string]any
	if err := json.Unmarshal(c.Body, &b); err != nil {
		t.Fatalf("%s: body is not a JSON object: %v: %s", c, err, c.Body)
	}
	return b
}

// upstreamRecorder is a reverse proxy to aimock that keeps every request as chatd sent it.
type upstreamRecorder struct {
	URL   string
	mu    sync.Mutex
	calls []*upstreamCall
}

type upstreamCallKey struct{}

func newUpstreamRecorder(t *testing.T, target string) *upstreamRecorder {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rec := &upstreamRecorder{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.FlushInterval = -1 // pass each streamed chunk on at once
	proxy.ModifyResponse = func(resp *http.Response) error {
		if c, ok := resp.Request.Context().Value(upstreamCallKey{}).(*upstreamCall); ok {
			resp.Body = struct {
				io.Reader
				io.Closer
			}{io.TeeReader(resp.Body, c.Response), resp.Body}
		}
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c := &upstreamCall{Method: r.Method, URI: r.URL.RequestURI(), Header: r.Header.Clone(), Body: body, Response: &logBuffer{}}
		rec.mu.Lock()
		rec.calls = append(rec.calls, c)
		rec.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), upstreamCallKey{}, c)))
	}))
	t.Cleanup(srv.Close)
	rec.URL = srv.URL
	return rec
}

// modelCalls returns the POSTs on a path (prefix) whose body holds message, in the order sent.
func (r *upstreamRecorder) modelCalls(path, message string) []*upstreamCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*upstreamCall
	for _, c := range r.calls {
		if c.Method == "POST" && strings.HasPrefix(c.URI, path) && bytes.Contains(c.Body, []byte(message)) {
			out = append(out, c)
		}
	}
	return out
}

// hasTool reports whether a list of tool definitions has one whose key is name.
func hasTool(tools any, key, name string) bool {
	return slices.ContainsFunc(arr(tools), func(tool any) bool { return obj(tool)[key] == name })
}

func obj(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func arr(v any) []any {
	a, _ := v.([]any)
	return a
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func num(v any) int {
	f, _ := v.(float64)
	return int(f)
}

func first(a []any) any {
	if len(a) == 0 {
		return nil
	}
	return a[0]
}

func eventLines(events []event) string {
	var b strings.Builder
	for _, ev := range events {
		b.WriteString(ev.String())
		b.WriteByte('\n')
	}
	return b.String()
}
