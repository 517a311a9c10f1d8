package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"chatd/internal/auth"
	"chatd/internal/chat"
	"chatd/internal/httpapi"
	"chatd/internal/llm/llmtest"
	"chatd/internal/store"
	"chatd/internal/store/sqlite"
	"chatd/internal/tool"
)

// TestApprovalsEndpoint: a run whose policy asks about current_time pauses — its stream ends with
// awaiting_approval, GET /v1/runs/{id} says what it waits for —, a bad decision is a 400, and an
// approval resumes it: its events go on from the next id and end with done completed.
func TestApprovalsEndpoint(t *testing.T) {
	up := llmtest.NewServer(t,
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "current_time", Arguments: `{}`}}},
		llmtest.Turn{Text: "It is nine."})
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "chatd.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc, tools := newChat(t, db, up, fixedNow, chat.Options{Agents: map[string]chat.Agent{"default": {
		Approvals: []tool.ApprovalRule{{Tools: []string{"current_time"}, Decision: tool.Ask, Reason: "Ask before telling the time."}}}}})
	e := &env{upstream: up, db: db, chat: svc}
	e.srv = httptest.NewServer(httpapi.New(httpapi.Options{Chat: svc, Store: db, Tools: tools}))
	t.Cleanup(func() {
		e.srv.Close()
		closeChat(t, svc, tools)
		db.Close()
	})

	resp, events := e.stream(t, `{"message":"what time is it?"}`)
	runID := resp.Header.Get("X-Run-Id")
	checkIDs(t, events)
	got := types(events)
	if !slices.Contains(got, "approval_required") || got[len(got)-1] != "awaiting_approval" || slices.Contains(got, "done") {
		t.Fatalf("paused stream: %v", got)
	}
	r, raw := e.do(t, "GET", "/v1/runs/"+runID, "")
	var run struct {
		Status   string
		Awaiting struct {
			Calls []struct {
				ToolCallID string `json:"tool_call_id"`
				Name       string
				Reason     string
			}
		}
	}
	if err := json.Unmarshal(raw, &run); err != nil || r.StatusCode != 200 || run.Status != "awaiting_approval" ||
		len(run.Awaiting.Calls) != 1 || run.Awaiting.Calls[0].ToolCallID != "call_1" || run.Awaiting.Calls[0].Reason != "Ask before telling the time." {
		t.Fatalf("run while awaiting: %d %s", r.StatusCode, raw)
	}
	for body, want := range map[string]string{
		`{"tool_call_id":"call_1","decision":"perhaps"}`:                     "invalid_decision",
		`{"tool_call_id":"call_7","decision":"approve"}`:                     "unknown_tool_call",
		`{"tool_call_id":"call_1","decision":"approve","arguments":{"x":1}}`: "invalid_arguments",
	} {
		if r, raw := e.do(t, "POST", "/v1/runs/"+runID+"/approvals", body); r.StatusCode != 400 || !strings.Contains(string(raw), want) {
			t.Errorf("%s: %d %s, want 400 %s", body, r.StatusCode, raw, want)
		}
	}
	if r, raw := e.do(t, "POST", "/v1/runs/nope/approvals", `{"tool_call_id":"call_1","decision":"approve"}`); r.StatusCode != 404 {
		t.Errorf("unknown run: %d %s", r.StatusCode, raw)
	}
	r, raw = e.do(t, "POST", "/v1/runs/"+runID+"/approvals", `{"tool_call_id":"call_1","decision":"approve"}`)
	if r.StatusCode != 200 || !strings.Contains(string(raw), `"status":"running"`) {
		t.Fatalf("approve: %d %s", r.StatusCode, raw)
	}
	rest := e.openStream(t, t.Context(), "GET", "/v1/runs/"+runID+"/events?after="+strconv.Itoa(len(events)), "", nil)
	defer rest.Body.Close()
	more := readEvents(t, rest.Body, nil)
	all := append(events, more...)
	checkIDs(t, all)
	got = types(more)
	if len(got) == 0 || got[0] != "approval_decided" || !slices.Contains(got, "tool_complete") || got[len(got)-1] != "done" ||
		more[len(more)-1].Data["status"] != "completed" {
		t.Fatalf("resumed events: %v", got)
	}
	if r, raw := e.do(t, "POST", "/v1/runs/"+runID+"/approvals", `{"tool_call_id":"call_1","decision":"approve"}`); r.StatusCode != http.StatusConflict {
		t.Errorf("a decision after the run resumed: %d %s", r.StatusCode, raw)
	}
}

// TestUIApproval: through the AI SDK UI stream, a run that waits ends its message with the call's
// input, a tool-approval-request (approvalId: the call's id) and finish, then [DONE]; the post useChat
// sends after addToolApprovalResponse (the assistant message back, its tool part approval-responded)
// resumes the run and streams the rest of the same message; a resume of the chat while it waited
// replays the request, as a reload needs.
func TestUIApproval(t *testing.T) {
	e := approvalEnv(t, `{}`)
	resp, chunks, done := uiChunks(t, e, "POST", "/v1/ui/chat",
		`{"id":"chat-approve","trigger":"submit-message","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"time?"}]}]}`)
	runID := resp.Header.Get("X-Run-Id")
	checkUIStream(t, chunks)
	got := chunkTypes(chunks)
	if !done || !slices.Contains(got, "tool-approval-request") || got[len(got)-1] != "finish" {
		t.Fatalf("paused stream: %v (done %v)", got, done)
	}
	req := chunks[slices.IndexFunc(chunks, func(c map[string]any) bool { return c["type"] == "tool-approval-request" })]
	if req["approvalId"] != "call_1" || req["toolCallId"] != "call_1" {
		t.Errorf("approval request: %v", req)
	}
	_, again, done := uiChunks(t, e, "GET", "/v1/ui/chat/chat-approve/stream?run="+runID, "")
	if got := chunkTypes(again); !done || !slices.Contains(got, "tool-approval-request") {
		t.Errorf("the resumed stream of a waiting run: %v", got)
	}

	body := `{"id":"chat-approve","trigger":"submit-message","messageId":"msg_` + runID + `","messages":[` +
		`{"id":"u1","role":"user","parts":[{"type":"text","text":"time?"}]},` +
		`{"id":"msg_` + runID + `","role":"assistant","parts":[{"type":"step-start"},{"type":"tool-current_time","toolCallId":"call_1",` +
		`"state":"approval-responded","input":{},"approval":{"id":"call_1","approved":true}}]}]}`
	_, rest, done := uiChunks(t, e, "POST", "/v1/ui/chat", body)
	// The continuation goes on inside the step that paused (its calls' input is in it): checked as if
	// that step's start and the calls' inputs came first.
	checkUIStream(t, append([]map[string]any{rest[0], {"type": "start-step"}, {"type": "tool-input-available", "toolCallId": "call_1"}}, rest[1:]...))
	got = chunkTypes(rest)
	if !done || rest[0]["messageId"] != "msg_"+runID || !slices.Contains(got, "tool-output-available") || !slices.Contains(got, "text-delta") ||
		got[len(got)-1] != "finish" {
		t.Fatalf("the rest of the message: %v (done %v)", got, done)
	}
	if slices.Contains(got, "tool-approval-request") {
		t.Errorf("the continuation repeats the approval request: %v", got)
	}
	if r := e.run(t, runID); r != "completed" {
		t.Errorf("run status %s", r)
	}
}

// run is the status of a run.
func (e *env) run(t *testing.T, id string) string {
	t.Helper()
	_, raw := e.do(t, "GET", "/v1/runs/"+id, "")
	var r struct{ Status string }
	json.Unmarshal(raw, &r)
	return r.Status
}

// approvalEnv is a test server whose default agent asks before current_time, and whose model calls it
// with args, then answers.
func approvalEnv(t *testing.T, args string) *env {
	t.Helper()
	up := llmtest.NewServer(t,
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "current_time", Arguments: args}}},
		llmtest.Turn{Text: "It is nine."})
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "chatd.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc, tools := newChat(t, db, up, fixedNow, chat.Options{Agents: map[string]chat.Agent{"default": {
		Approvals: []tool.ApprovalRule{{Tools: []string{"current_time"}, Decision: tool.Ask}}}}})
	e := &env{upstream: up, db: db, chat: svc}
	e.srv = httptest.NewServer(httpapi.New(httpapi.Options{Chat: svc, Store: db, Tools: tools}))
	t.Cleanup(func() {
		e.srv.Close()
		closeChat(t, svc, tools)
		db.Close()
	})
	return e
}

// TestUIApprovalEdited: the web UI's Edit replaces the tool part's input before it approves; chatd runs
// the call with that input, checked against the tool's schema (an input outside it is a 400), and the
// model is told the arguments were edited.
func TestUIApprovalEdited(t *testing.T) {
	e := approvalEnv(t, `{"timezone":"Europe/Paris"}`)
	resp, _, _ := uiChunks(t, e, "POST", "/v1/ui/chat",
		`{"id":"chat-edit","trigger":"submit-message","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"time?"}]}]}`)
	runID := resp.Header.Get("X-Run-Id")
	post := func(input string) (*http.Response, []byte) {
		return e.do(t, "POST", "/v1/ui/chat", `{"id":"chat-edit","trigger":"submit-message","messageId":"msg_`+runID+`","messages":[`+
			`{"id":"msg_`+runID+`","role":"assistant","parts":[{"type":"step-start"},{"type":"tool-current_time","toolCallId":"call_1",`+
			`"state":"approval-responded","input":`+input+`,"approval":{"id":"call_1","approved":true}}]}]}`)
	}
	if r, raw := post(`{"timezone":7}`); r.StatusCode != 400 || !strings.Contains(string(raw), "invalid_arguments") {
		t.Fatalf("an edit outside the schema: %d %s", r.StatusCode, raw)
	}
	if r, raw := post(`{"timezone":"Asia/Tokyo"}`); r.StatusCode != 200 {
		t.Fatalf("an edited approval: %d %s", r.StatusCode, raw)
	}
	if r := e.run(t, runID); r != "completed" {
		t.Fatalf("run status %s", r)
	}
	reqs := e.upstream.Requests()
	last := string(reqs[len(reqs)-1].Raw)
	if !strings.Contains(last, "Asia/Tokyo") || !strings.Contains(last, "edited the arguments") {
		t.Errorf("the model was not sent the edited call's result: %s", last)
	}
}

// TestUIAskUser: through the UI stream an ask_user call shows as its input (the questions), with no
// approval request; the post useChat sends after addToolOutput (the part output-available with the
// answers) answers it, and the model gets the answers.
func TestUIAskUser(t *testing.T) {
	up := llmtest.NewServer(t,
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_q", Name: "ask_user", Arguments: `{"questions":[{"question":"Which city?","choices":["Paris","Tokyo"]}]}`}}},
		llmtest.Turn{Text: "Tokyo it is."})
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "chatd.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc, tools := newChat(t, db, up, fixedNow, chat.Options{Agents: map[string]chat.Agent{"default": {AskUser: true}}})
	e := &env{upstream: up, db: db, chat: svc}
	e.srv = httptest.NewServer(httpapi.New(httpapi.Options{Chat: svc, Store: db, Tools: tools}))
	t.Cleanup(func() {
		e.srv.Close()
		closeChat(t, svc, tools)
		db.Close()
	})
	resp, chunks, done := uiChunks(t, e, "POST", "/v1/ui/chat",
		`{"id":"chat-ask","trigger":"submit-message","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"go"}]}]}`)
	runID := resp.Header.Get("X-Run-Id")
	got := chunkTypes(chunks)
	if !done || !slices.Contains(got, "tool-input-available") || slices.Contains(got, "tool-approval-request") {
		t.Fatalf("paused stream: %v", got)
	}
	r, raw := e.do(t, "POST", "/v1/ui/chat", `{"id":"chat-ask","trigger":"submit-message","messageId":"msg_`+runID+`","messages":[`+
		`{"id":"msg_`+runID+`","role":"assistant","parts":[{"type":"step-start"},{"type":"tool-ask_user","toolCallId":"call_q",`+
		`"state":"output-available","input":{},"output":{"answers":["Tokyo"]}}]}]}`)
	if r.StatusCode != 200 {
		t.Fatalf("answer: %d %s", r.StatusCode, raw)
	}
	if s := e.run(t, runID); s != "completed" {
		t.Fatalf("run status %s", s)
	}
	reqs := e.upstream.Requests()
	if last := string(reqs[len(reqs)-1].Raw); !strings.Contains(last, `\"answer\":\"Tokyo\"`) {
		t.Errorf("the model was not sent the answer: %s", last)
	}
}

// waitingKeyedEnv is a keyed chatd whose default agent asks before current_time: each send's first
// model call makes that call, and the next answers "It is nine.".
func waitingKeyedEnv(t *testing.T, authOpts auth.Options, chatOpts chat.Options) *keyedEnv {
	t.Helper()
	chatOpts.Agents = map[string]chat.Agent{"default": {Approvals: []tool.ApprovalRule{{Tools: []string{"current_time"}, Decision: tool.Ask}}}}
	var e *keyedEnv
	chatOpts.Quota = func(ctx context.Context, user, keyID string) ([]store.Limit, error) { // as cmd/chatd wires it
		return e.auth.Quota(ctx, user, keyID)
	}
	e = newKeyedEnvWith(t, httpapi.Options{}, authOpts, chatOpts)
	e.upstream.Respond = func(_ int, req llmtest.Request) llmtest.Turn {
		for _, m := range req.Messages() {
			if m["role"] == "tool" {
				return llmtest.Turn{Text: "It is nine."}
			}
		}
		return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "current_time", Arguments: `{}`}}}
	}
	return e
}

// pauseAs sends a message with key and returns the id of its run, which waits for approval.
func (e *keyedEnv) pauseAs(t *testing.T, key string) string {
	t.Helper()
	resp, raw := e.call(t, "POST", "/v1/chat", `{"message":"what time is it?"}`, e.bearer(key))
	var out struct {
		RunID  string `json:"run_id"`
		Status string
	}
	if err := json.Unmarshal(raw, &out); err != nil || resp.StatusCode != http.StatusOK || out.Status != "awaiting_approval" {
		t.Fatalf("send: %d %s; want the run awaiting approval", resp.StatusCode, raw)
	}
	return out.RunID
}

// TestAdminDecidesAsUser: an admin decides on a call another user's run waits for with
// X-Chatd-As-User, and the decision records who made it (approval_decided's decided_by); without the
// header the run is not the admin's (404), and a user who is not an admin cannot use it (403).
func TestAdminDecidesAsUser(t *testing.T) {
	e := waitingKeyedEnv(t, auth.Options{}, chat.Options{})
	bob, _ := e.key(t, auth.KeySpec{User: "bob"})
	alice, _ := e.key(t, auth.KeySpec{User: "alice"})
	admin, _ := e.key(t, auth.KeySpec{User: "root", Admin: true})
	runID := e.pauseAs(t, bob)
	path, body := "/v1/runs/"+runID+"/approvals", `{"tool_call_id":"call_1","decision":"approve"}`

	resp, raw := e.call(t, "POST", path, body, e.bearer(alice, httpapi.AsUserHeader, "bob"))
	e.wantError(t, "alice as bob", resp, raw, http.StatusForbidden, "admin_required")
	resp, raw = e.call(t, "POST", path, body, e.bearer(admin))
	e.wantError(t, "the admin as himself", resp, raw, http.StatusNotFound, "run_not_found")
	resp, raw = e.call(t, "POST", "/v1/runs/"+runID+"/cancel", "", e.bearer(admin, httpapi.AsUserHeader, "bob"))
	e.wantError(t, "the admin cancelling as bob", resp, raw, http.StatusBadRequest, "as_user_read_only")

	resp, raw = e.call(t, "POST", path, body, e.bearer(admin, httpapi.AsUserHeader, "bob"))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"status":"running"`) {
		t.Fatalf("the admin's decision as bob: %d %s", resp.StatusCode, raw)
	}
	if _, err := e.chat.Wait(t.Context(), "bob", runID); err != nil {
		t.Fatal(err)
	}
	resp, raw = e.call(t, "GET", "/v1/runs/"+runID+"/events", "", e.bearer(bob))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"decided_by":"root"`) || !strings.Contains(string(raw), `"status":"completed"`) {
		t.Errorf("bob's run after the admin's decision: %d %s", resp.StatusCode, raw)
	}
}

// TestDecisionOnRevokedKeysRun: a decision on a run whose key was revoked without its runs being
// cancelled (chatd keys revoke, with chatd stopped) is refused as a send with that key is — 403
// key_revoked —, whoever decides, and the run ends failed: its approved call never runs.
func TestDecisionOnRevokedKeysRun(t *testing.T) {
	e := waitingKeyedEnv(t, auth.Options{}, chat.Options{})
	laptop, laptopID := e.key(t, auth.KeySpec{User: "bob"})
	phone, _ := e.key(t, auth.KeySpec{User: "bob"})
	runID := e.pauseAs(t, laptop)
	if _, err := e.db.RevokeKey(t.Context(), "", laptopID); err != nil {
		t.Fatal(err)
	}
	resp, raw := e.call(t, "POST", "/v1/runs/"+runID+"/approvals", `{"tool_call_id":"call_1","decision":"approve"}`, e.bearer(phone))
	e.wantError(t, "a decision on the revoked key's run", resp, raw, http.StatusForbidden, "key_revoked")
	if r, err := e.db.Run(t.Context(), "bob", runID); err != nil || r.Status != store.RunFailed {
		t.Errorf("the revoked key's run: %+v, %v; want failed", r, err)
	}
	if n := len(e.upstream.Requests()); n != 1 {
		t.Errorf("the model was called %d times, want once (before the run paused)", n)
	}
}

// TestDecisionPastLimits: a decision that would resume a run past the limits of the key that sent it is
// refused as a send would be — 429 with the limit's code and Retry-After —, whoever decides (the owner,
// or an admin for them); the run still waits, the call undecided, and the decision can be given again.
// Waiting runs do not count: both of bob's runs pause under his limit of one run at a time, and the
// second resume is refused while the first one runs.
func TestDecisionPastLimits(t *testing.T) {
	e := waitingKeyedEnv(t, auth.Options{}, chat.Options{})
	release := make(chan struct{})
	defer close(release) // before the env's cleanup, which waits for the held stream
	respond := e.upstream.Respond
	e.upstream.Respond = func(n int, req llmtest.Request) llmtest.Turn {
		turn := respond(n, req)
		if n == 2 { // the first run's resumed model call
			turn.BeforeFinish = func() { <-release }
		}
		return turn
	}
	bob, _ := e.key(t, auth.KeySpec{User: "bob", Limits: store.Limits{ConcurrentRuns: 1}})
	admin, _ := e.key(t, auth.KeySpec{User: "root", Admin: true})
	first, second := e.pauseAs(t, bob), e.pauseAs(t, bob)
	body := `{"tool_call_id":"call_1","decision":"approve"}`
	if resp, raw := e.call(t, "POST", "/v1/runs/"+first+"/approvals", body, e.bearer(bob)); resp.StatusCode != http.StatusOK {
		t.Fatalf("the first decision: %d %s", resp.StatusCode, raw)
	}
	for who, header := range map[string]map[string]string{
		"bob":          e.bearer(bob),
		"admin as bob": e.bearer(admin, httpapi.AsUserHeader, "bob"),
	} {
		resp, raw := e.call(t, "POST", "/v1/runs/"+second+"/approvals", body, header)
		e.wantError(t, who+"'s decision past bob's concurrent runs", resp, raw, http.StatusTooManyRequests, "concurrent_runs")
		if resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s: no Retry-After", who)
		}
	}
	resp, raw := e.call(t, "GET", "/v1/runs/"+second, "", e.bearer(bob))
	var run struct {
		Status   string
		Awaiting struct{ Calls []struct{ Decision string } }
	}
	if err := json.Unmarshal(raw, &run); err != nil || resp.StatusCode != http.StatusOK || run.Status != "awaiting_approval" ||
		len(run.Awaiting.Calls) != 1 || run.Awaiting.Calls[0].Decision != "" {
		t.Errorf("the run after the refused decisions: %d %s; want it awaiting, the call undecided", resp.StatusCode, raw)
	}
}

// TestDecisionWhileShuttingDown: a decision that would resume a run on a chatd shutting down is a 503
// shutting_down that says the decision was not recorded; the run still waits.
func TestDecisionWhileShuttingDown(t *testing.T) {
	e := approvalEnv(t, `{}`)
	resp, _ := e.stream(t, `{"message":"what time is it?"}`)
	runID := resp.Header.Get("X-Run-Id")
	if err := e.chat.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	r, raw := e.do(t, "POST", "/v1/runs/"+runID+"/approvals", `{"tool_call_id":"call_1","decision":"approve"}`)
	if r.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(raw), "shutting_down") || !strings.Contains(string(raw), "not recorded") {
		t.Errorf("a decision while chatd shuts down: %d %s; want 503 shutting_down, not recorded", r.StatusCode, raw)
	}
	if s := e.run(t, runID); s != "awaiting_approval" {
		t.Errorf("the run is %s, want still awaiting_approval", s)
	}
}
