package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"chatd/internal/auth"
	"chatd/internal/httpapi"
	"chatd/internal/llm/llmtest"
)

// isoCase is how TestIsolation exercises one route as alice against bob's things: twin probes, each
// sent with bob's ids and again with missing ones, and a check of its own for what twins cannot say.
type isoCase struct {
	twins []isoProbe
	check func(x *isoFixture, t *testing.T)
}

// isoProbe is a request alice makes. Its path and body name ids by placeholder: {session}, {run},
// {record}, {key}, {live_session} and {live_run} are bob's (or missing ones, in the twin), and
// {own_session} is alice's own session.
type isoProbe struct {
	method, path, body string
	header             []string // name, value pairs, besides alice's key
	// status is alice's answer, for bob's ids and missing ones alike.
	status int
	// owner, when set, is bob's answer to the same request: the proof that the ids are his things.
	owner int
}

// isolationCases has a case for every route of the API: TestIsolation fails on a route without one.
func isolationCases() map[string]isoCase {
	byID := func(method, path, body string, status, owner int) isoProbe {
		return isoProbe{method: method, path: path, body: body, status: status, owner: owner}
	}
	return map[string]isoCase{
		"POST /v1/chat/stream": {twins: []isoProbe{
			byID("POST", "/v1/chat/stream", `{"message":"alice: hi","session_id":"{session}"}`, 404, 0),
			byID("POST", "/v1/chat/stream", `{"message":"alice: hi","session_id":"{live_session}","on_active_run":"interrupt"}`, 404, 0),
		}},
		"POST /v1/chat": {twins: []isoProbe{
			byID("POST", "/v1/chat", `{"message":"alice: hi","session_id":"{session}"}`, 404, 0),
			byID("POST", "/v1/chat", `{"message":"alice: hi","session_id":"{live_session}","on_active_run":"enqueue"}`, 404, 0),
			byID("POST", "/v1/chat", `{"session_id":"{session}","regenerate":true}`, 404, 0),
		}, check: (*isoFixture).idempotencyKey},
		"POST /v1/sessions/{id}/actions": {twins: []isoProbe{
			byID("POST", "/v1/sessions/{session}/actions", `{"action":"current_time","handler":"server","data":{"timezone":"UTC"}}`, 404, 0),
		}},
		"GET /v1/runs/{id}": {twins: []isoProbe{
			byID("GET", "/v1/runs/{run}", ``, 404, 200),
			byID("GET", "/v1/runs/{live_run}", ``, 404, 200),
		}},
		"GET /v1/runs/{id}/events": {twins: []isoProbe{
			byID("GET", "/v1/runs/{run}/events", ``, 404, 200),
			byID("GET", "/v1/runs/{run}/events?after=2", ``, 404, 200),
			byID("GET", "/v1/runs/{live_run}/events", ``, 404, 200),
		}},
		"GET /v1/runs/{id}/diagnostics": {twins: []isoProbe{
			byID("GET", "/v1/runs/{run}/diagnostics", ``, 404, 200),
			byID("GET", "/v1/runs/{live_run}/diagnostics", ``, 404, 0),
		}},
		"POST /v1/runs/{id}/cancel": {twins: []isoProbe{
			byID("POST", "/v1/runs/{run}/cancel", ``, 404, 0),
			byID("POST", "/v1/runs/{live_run}/cancel", ``, 404, 0),
		}},
		"POST /v1/runs/{id}/approvals": {twins: []isoProbe{
			byID("POST", "/v1/runs/{run}/approvals", `{"tool_call_id":"call_1","decision":"approve"}`, 404, 409),
			byID("POST", "/v1/runs/{live_run}/approvals", `{"tool_call_id":"call_1","decision":"deny"}`, 404, 409),
		}},
		"POST /v1/sessions": {check: (*isoFixture).createSession},
		"GET /v1/sessions":  {check: (*isoFixture).listSessions},
		"GET /v1/sessions/{id}": {twins: []isoProbe{
			byID("GET", "/v1/sessions/{session}", ``, 404, 200),
			byID("GET", "/v1/sessions/{live_session}", ``, 404, 200),
		}},
		"PATCH /v1/sessions/{id}": {twins: []isoProbe{
			byID("PATCH", "/v1/sessions/{session}", `{"title":"alice was here"}`, 404, 0),
			byID("PATCH", "/v1/sessions/{live_session}", `{"metadata":{"by":"alice"}}`, 404, 0),
		}},
		"DELETE /v1/sessions/{id}": {twins: []isoProbe{
			byID("DELETE", "/v1/sessions/{session}", ``, 404, 0),
			byID("DELETE", "/v1/sessions/{live_session}", ``, 404, 0),
		}},
		"GET /v1/sessions/{id}/messages": {twins: []isoProbe{
			byID("GET", "/v1/sessions/{session}/messages", ``, 404, 200),
			byID("GET", "/v1/sessions/{live_session}/messages", ``, 404, 200),
		}},
		"GET /v1/sessions/{id}/records/{record}/attachments/{n}": {twins: []isoProbe{
			byID("GET", "/v1/sessions/{session}/records/{record}/attachments/0", ``, 404, 200),
			// bob's record under alice's own session
			byID("GET", "/v1/sessions/{own_session}/records/{record}/attachments/0", ``, 404, 0),
		}},
		"GET /v1/tools":       {check: sameForEveryone("/v1/tools?agent=default", "/v1/tools?agent=support&page=reports")},
		"GET /v1/mcp/servers": {check: sameForEveryone("/v1/mcp/servers")},
		"POST /v1/ui/chat": {twins: []isoProbe{
			byID("POST", "/v1/ui/chat", `{"id":"{session}","trigger":"regenerate-message","messageId":"msg_{run}","messages":[]}`, 404, 0),
		}, check: (*isoFixture).uiSend},
		"GET /v1/ui/chat/{id}/stream": {twins: []isoProbe{
			// No active run of alice's: 204, as for any chat id she has no run in.
			byID("GET", "/v1/ui/chat/{session}/stream", ``, 204, 204),
			byID("GET", "/v1/ui/chat/{live_session}/stream", ``, 204, 200),
			byID("GET", "/v1/ui/chat/{session}/stream?run={run}", ``, 404, 200),
			byID("GET", "/v1/ui/chat/{own_session}/stream?run={live_run}", ``, 404, 404),
		}},
		"GET /v1/ui/chat/{id}": {twins: []isoProbe{
			byID("GET", "/v1/ui/chat/{session}", ``, 404, 200),
			byID("GET", "/v1/ui/chat/{live_session}", ``, 404, 200),
		}},
		"GET /v1/models":          {check: sameForEveryone("/v1/models")},
		"GET /v1/agents":          {check: sameForEveryone("/v1/agents")},
		"GET /v1/auth/session":    {check: (*isoFixture).whoAmI},
		"POST /v1/auth/session":   {check: (*isoFixture).signIn},
		"DELETE /v1/auth/session": {check: (*isoFixture).signOut},
		"POST /v1/keys":           {check: (*isoFixture).createKey},
		"GET /v1/keys":            {check: (*isoFixture).listKeys},
		"DELETE /v1/keys/{id}": {twins: []isoProbe{
			// Not an admin: refused before the id is looked at, for bob's key as for a missing one.
			byID("DELETE", "/v1/keys/{key}", ``, 403, 0),
		}},
		"GET /v1/usage": {check: (*isoFixture).usage},
		"GET /healthz":  {check: sameForEveryone("/healthz")},
		"GET /readyz":   {check: sameForEveryone("/readyz")},
	}
}

// isoFixture is what TestIsolation works on: alice, and bob with a finished run and a live one.
type isoFixture struct {
	e                 *keyedEnv
	alice, bob, admin string // keys
	aliceKeyID        string
	bobCookie         *http.Cookie
	own               string            // alice's own session
	bobIDs, missing   map[string]string // placeholder → bob's id, or an id nobody has
	idemKey, idemBody string            // bob's send with an Idempotency-Key
	// secrets are what no answer to alice may hold: bob's ids, key, cookie, and what he wrote.
	secrets []string
}

// TestIsolation: every route of the API, called by alice with bob's ids, answers exactly as it does for
// ids that do not exist, and no answer to alice holds anything of bob's; only an admin reads bob's
// things, with X-Chatd-As-User, and only by GET. Every route must have a case: a new route cannot be
// added without one.
func TestIsolation(t *testing.T) {
	cases := isolationCases()
	var missingCase []string
	for _, p := range httpapi.RoutePatterns() {
		if _, ok := cases[p]; !ok {
			missingCase = append(missingCase, p)
		}
	}
	if len(missingCase) > 0 {
		t.Fatalf("routes without an isolation case (add one to isolationCases): %v", missingCase)
	}
	for p := range cases {
		if !slices.Contains(httpapi.RoutePatterns(), p) {
			t.Errorf("isolationCases has %q, which is not a route", p)
		}
	}
	t.Logf("routes covered: %s", strings.Join(httpapi.RoutePatterns(), "; "))

	x, release := newIsoFixture(t)
	bobLive := x.e.openKeyed(t, "POST", "/v1/chat/stream", `{"message":"bob-secret: hold on"}`, x.e.bearer(x.bob))
	defer bobLive.Body.Close()
	x.bobIDs["{live_session}"], x.bobIDs["{live_run}"] = bobLive.Header.Get("X-Session-Id"), bobLive.Header.Get("X-Run-Id")
	x.secrets = append(x.secrets, x.bobIDs["{live_session}"], x.bobIDs["{live_run}"])
	before := x.bobsView(t)

	for _, p := range httpapi.RoutePatterns() {
		t.Run(p, func(t *testing.T) {
			c := cases[p]
			for _, probe := range c.twins {
				x.twin(t, probe)
			}
			if c.check != nil {
				c.check(x, t)
			}
		})
	}
	t.Run("as another user", x.asUser)

	// Nothing of bob's changed, and his live run was neither cancelled nor interrupted.
	if diff := cmp.Diff(before, x.bobsView(t)); diff != "" {
		t.Errorf("bob's things changed while alice probed them (-before +after):\n%s", diff)
	}
	close(release)
	evs := readEvents(t, bobLive.Body, nil)
	if len(evs) == 0 || evs[len(evs)-1].Type != "done" || evs[len(evs)-1].Data["status"] != "completed" {
		t.Errorf("bob's live run ended with %v", types(evs))
	}
}

// newIsoFixture makes alice, bob and an admin, and bob's finished run: a message with an image, a tool
// call, its result and an answer, sent with an Idempotency-Key. The model holds an answer to a message
// with "hold" until release is closed.
func newIsoFixture(t *testing.T) (*isoFixture, chan struct{}) {
	t.Helper()
	e := newKeyedEnv(t, httpapi.Options{}, auth.Options{})
	release := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	e.upstream.Respond = func(_ int, req llmtest.Request) llmtest.Turn {
		msgs := req.Messages()
		last := msgs[len(msgs)-1]
		if last["role"] == "tool" {
			return llmtest.Turn{Text: "bob-secret answer: it is 10:00 in Paris."}
		}
		switch text := fmt.Sprint(last["content"]); {
		case strings.Contains(text, "clock"):
			return llmtest.Turn{Text: "Let me look.", ToolCalls: []llmtest.ToolCall{
				{ID: "call_clock", Name: "current_time", Arguments: `{"timezone":"Europe/Paris"}`}}}
		case strings.Contains(text, "hold"):
			return llmtest.Turn{Text: "Held.", BeforeFinish: func() { <-release }}
		}
		return llmtest.Turn{Text: "ok"}
	}
	x := &isoFixture{e: e, bobIDs: map[string]string{}, missing: map[string]string{}, idemKey: "bob-retry-1"}
	x.alice, x.aliceKeyID = e.key(t, auth.KeySpec{User: "alice"})
	var bobKeyID string
	x.bob, bobKeyID = e.key(t, auth.KeySpec{User: "bob"})
	x.admin, _ = e.key(t, auth.KeySpec{User: "root", Admin: true})
	x.bobCookie = e.signIn(t, x.bob)

	png := "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
	x.idemBody = `{"message":"bob-secret: what does the clock say?","attachments":[{"media_type":"image/png","name":"bob-dot.png","data":"` + png + `"}]}`
	resp, raw := e.call(t, "POST", "/v1/chat", x.idemBody, e.bearer(x.bob, "Idempotency-Key", x.idemKey))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("bob's send: %d %s", resp.StatusCode, raw)
	}
	var sent struct {
		SessionID string `json:"session_id"`
		RunID     string `json:"run_id"`
		Status    string
	}
	if err := json.Unmarshal(raw, &sent); err != nil || sent.Status != "completed" {
		t.Fatalf("bob's send: %v %s", err, raw)
	}
	_, raw = e.call(t, "GET", "/v1/sessions/"+sent.SessionID+"/messages", "", e.bearer(x.bob))
	var stored struct {
		Messages []struct {
			ID, Role    string
			Attachments []json.RawMessage
		}
	}
	if err := json.Unmarshal(raw, &stored); err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range stored.Messages {
		roles = append(roles, m.Role)
		x.secrets = append(x.secrets, m.ID)
	}
	if !slices.Equal(roles, []string{"user", "assistant", "tool", "assistant"}) || len(stored.Messages[0].Attachments) != 1 {
		t.Fatalf("bob's records: %s", raw)
	}
	x.bobIDs["{session}"], x.bobIDs["{run}"], x.bobIDs["{record}"], x.bobIDs["{key}"] =
		sent.SessionID, sent.RunID, stored.Messages[0].ID, bobKeyID
	for _, p := range []string{"{session}", "{run}", "{record}", "{key}", "{live_session}", "{live_run}"} {
		x.missing[p] = uuid.NewString()
	}
	x.secrets = append(x.secrets, sent.SessionID, sent.RunID, bobKeyID, x.bob, x.bobCookie.Value,
		"bob-secret", "bob-dot.png", png[:40], "call_clock")

	resp, raw = e.call(t, "POST", "/v1/sessions", `{"title":"alice's own"}`, e.bearer(x.alice))
	var own struct{ ID string }
	if err := json.Unmarshal(raw, &own); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("alice's session: %d %s", resp.StatusCode, raw)
	}
	x.own = own.ID
	// and a model call, so that she has usage of her own
	if resp, raw := e.call(t, "POST", "/v1/chat", `{"message":"alice: hello","session_id":"`+x.own+`"}`, e.bearer(x.alice)); resp.StatusCode != http.StatusOK {
		t.Fatalf("alice's send: %d %s", resp.StatusCode, raw)
	}
	return x, release
}

// openKeyed starts a request and returns its answer unread, for streams.
func (e *keyedEnv) openKeyed(t *testing.T, method, path, body string, header map[string]string) *http.Response {
	t.Helper()
	return openOK(t, t.Context(), method, e.srv.URL+path, body, header)
}

// isoAnswer is an answer as the test compares it: the status, the headers but Date and
// Content-Length, and the body — or "<stream>" for an event stream, which is not read — with the ids
// the request named put back as their placeholders.
type isoAnswer struct {
	status int
	text   string
}

// answer sends p with key, naming ids, and returns the answer.
func (x *isoFixture) answer(t *testing.T, key string, p isoProbe, ids map[string]string) isoAnswer {
	t.Helper()
	var pairs []string
	for ph, id := range ids {
		pairs = append(pairs, ph, id)
	}
	pairs = append(pairs, "{own_session}", x.own)
	fill := strings.NewReplacer(pairs...)
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, p.method, x.e.srv.URL+fill.Replace(p.path), strings.NewReader(fill.Replace(p.body)))
	if err != nil {
		t.Fatal(err)
	}
	if p.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(p.header); i += 2 {
		req.Header.Set(p.header[i], p.header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := []byte("<stream>")
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		if body, err = io.ReadAll(resp.Body); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d\n", resp.StatusCode)
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range resp.Header {
			if k != "Date" && k != "Content-Length" && !yield(k) {
				return
			}
		}
	}) {
		fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(resp.Header[k], ", "))
	}
	b.WriteString("\n")
	b.Write(body)
	text := b.String()
	for ph, id := range ids {
		text = strings.ReplaceAll(text, id, ph)
	}
	return isoAnswer{resp.StatusCode, strings.ReplaceAll(text, x.own, "{own_session}")}
}

// twin sends p as alice with bob's ids and with missing ones: the answers must be the same, byte for
// byte, and hold nothing of bob's. Bob's own answer proves the ids are his.
func (x *isoFixture) twin(t *testing.T, p isoProbe) {
	t.Helper()
	what := p.method + " " + p.path
	got := x.answer(t, x.alice, p, x.bobIDs)
	want := x.answer(t, x.alice, p, x.missing)
	if diff := cmp.Diff(want.text, got.text); diff != "" {
		t.Errorf("%s: alice's answer for bob's ids is not the one for missing ids (-missing +bob's):\n%s", what, diff)
	}
	if got.status != p.status {
		t.Errorf("%s: alice got %d, want %d:\n%s", what, got.status, p.status, got.text)
	}
	x.noneOfBobs(t, what, got.text)
	if p.owner != 0 {
		if own := x.answer(t, x.bob, p, x.bobIDs); own.status != p.owner {
			t.Errorf("%s: bob got %d, want %d — are these his ids?\n%s", what, own.status, p.owner, own.text)
		}
	}
}

// noneOfBobs fails when an answer to alice holds anything of bob's.
func (x *isoFixture) noneOfBobs(t *testing.T, what, answer string) {
	t.Helper()
	for _, s := range x.secrets {
		if s != "" && strings.Contains(answer, s) {
			t.Errorf("%s: alice's answer holds bob's %q:\n%.2000s", what, s, answer)
		}
	}
}

// get is a GET as alice whose answer holds nothing of bob's.
func (x *isoFixture) get(t *testing.T, path string, header ...string) (*http.Response, []byte) {
	t.Helper()
	resp, raw := x.e.call(t, "GET", path, "", x.e.bearer(x.alice, header...))
	x.noneOfBobs(t, "GET "+path, string(raw))
	return resp, raw
}

// bobsView is what bob sees of his things: his sessions, their records, his runs, his keys.
func (x *isoFixture) bobsView(t *testing.T) map[string]string {
	t.Helper()
	view := map[string]string{}
	for _, path := range []string{
		"/v1/sessions/" + x.bobIDs["{session}"],
		"/v1/sessions/" + x.bobIDs["{session}"] + "/messages",
		"/v1/runs/" + x.bobIDs["{run}"],
		"/v1/sessions/" + x.bobIDs["{live_session}"] + "/messages",
		"/v1/ui/chat/" + x.bobIDs["{session}"],
		"/v1/auth/session",
	} {
		resp, raw := x.e.call(t, "GET", path, "", x.e.bearer(x.bob))
		view[path] = fmt.Sprintf("%d %s", resp.StatusCode, raw)
	}
	_, raw := x.e.call(t, "GET", "/v1/keys?user=bob", "", x.e.bearer(x.admin))
	view["keys"] = string(raw)
	_, raw = x.e.call(t, "GET", "/v1/auth/session", "", x.e.withCookie(x.bobCookie))
	view["cookie"] = string(raw)
	return view
}

// idempotencyKey: alice sending bob's Idempotency-Key with bob's very request starts a run of her own;
// it does not return bob's run, nor say the key is taken.
func (x *isoFixture) idempotencyKey(t *testing.T) {
	send := func() (*http.Response, []byte) {
		return x.e.call(t, "POST", "/v1/chat", x.idemBody, x.e.bearer(x.alice, "Idempotency-Key", x.idemKey))
	}
	resp, raw := send()
	var got struct {
		SessionID string `json:"session_id"`
		RunID     string `json:"run_id"`
		Status    string
	}
	if err := json.Unmarshal(raw, &got); err != nil || resp.StatusCode != http.StatusOK || got.Status != "completed" {
		t.Fatalf("alice's send with bob's Idempotency-Key: %d %s", resp.StatusCode, raw)
	}
	if resp.Header.Get("Idempotent-Replayed") != "" || got.RunID == x.bobIDs["{run}"] || got.SessionID == x.bobIDs["{session}"] {
		t.Errorf("alice's send with bob's Idempotency-Key replayed bob's run: %s", raw)
	}
	for _, id := range []string{x.bobIDs["{run}"], x.bobIDs["{session}"], x.bob} {
		if strings.Contains(string(raw), id) {
			t.Errorf("alice's send with bob's Idempotency-Key answered bob's %q: %s", id, raw)
		}
	}
	// The key is now hers too: her retry returns her run.
	resp, raw = send()
	if resp.Header.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(raw), `"run_id":"`+got.RunID+`"`) {
		t.Errorf("alice's retry: %d %v %s", resp.StatusCode, resp.Header, raw)
	}
	// Her copy of bob's message is hers, but it holds his words: it goes, so that the other cases can
	// look for them.
	if resp, raw := x.e.call(t, "DELETE", "/v1/sessions/"+got.SessionID, "", x.e.bearer(x.alice)); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete alice's copy: %d %s", resp.StatusCode, raw)
	}
}

// createSession: a session alice makes is hers, with an id of its own.
func (x *isoFixture) createSession(t *testing.T) {
	resp, raw := x.e.call(t, "POST", "/v1/sessions", `{"title":"alice's second"}`, x.e.bearer(x.alice))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	x.noneOfBobs(t, "POST /v1/sessions", string(raw))
}

// listSessions: alice's list holds her sessions only — also from a cursor of bob's list.
func (x *isoFixture) listSessions(t *testing.T) {
	_, raw := x.get(t, "/v1/sessions")
	if !strings.Contains(string(raw), x.own) {
		t.Errorf("alice's list lacks her session: %s", raw)
	}
	_, raw = x.e.call(t, "GET", "/v1/sessions?limit=1", "", x.e.bearer(x.bob))
	var page struct {
		Cursor string `json:"next_cursor"`
	}
	if err := json.Unmarshal(raw, &page); err != nil || page.Cursor == "" {
		t.Fatalf("bob's first page: %s", raw)
	}
	x.get(t, "/v1/sessions?limit=200&cursor="+page.Cursor)
}

// sameForEveryone: what the paths answer depends on no user: alice gets bob's answer exactly.
func sameForEveryone(paths ...string) func(x *isoFixture, t *testing.T) {
	return func(x *isoFixture, t *testing.T) {
		for _, path := range paths {
			p := isoProbe{method: "GET", path: path}
			hers, his := x.answer(t, x.alice, p, nil), x.answer(t, x.bob, p, nil)
			if hers.status != http.StatusOK || hers.text != his.text {
				t.Errorf("GET %s: alice got\n%s\nbob got\n%s", path, hers.text, his.text)
			}
			x.noneOfBobs(t, "GET "+path, hers.text)
		}
	}
}

// uiSend: a useChat send naming bob's session does not reach it. For an id no session has, the send
// starts a session of alice's under it; an id that is bob's is taken, and the send answers 404 — it
// tells alice only that the id is not free, not what is behind it.
func (x *isoFixture) uiSend(t *testing.T) {
	for _, ph := range []string{"{session}", "{live_session}"} {
		body := `{"id":"` + x.bobIDs[ph] + `","trigger":"submit-message","messages":[{"id":"m1","role":"user","parts":[{"type":"text","text":"alice: hi"}]}]}`
		resp, raw := x.e.call(t, "POST", "/v1/ui/chat", body, x.e.bearer(x.alice))
		x.e.wantError(t, "useChat send to bob's "+ph, resp, raw, http.StatusNotFound, "session_not_found")
		x.noneOfBobs(t, "useChat send to bob's "+ph, strings.ReplaceAll(string(raw), x.bobIDs[ph], ph))
	}
}

// whoAmI: alice is alice.
func (x *isoFixture) whoAmI(t *testing.T) {
	resp, raw := x.get(t, "/v1/auth/session")
	if who := x.e.who(t, raw); resp.StatusCode != http.StatusOK || who.User != "alice" {
		t.Errorf("%d %s", resp.StatusCode, raw)
	}
}

// signIn: alice's sign-in is hers: her cookie sees her sessions, none of bob's.
func (x *isoFixture) signIn(t *testing.T) {
	c := x.e.signIn(t, x.alice)
	resp, raw := x.e.call(t, "GET", "/v1/sessions", "", x.e.withCookie(c))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), x.own) {
		t.Errorf("alice's cookie: %d %s", resp.StatusCode, raw)
	}
	x.noneOfBobs(t, "alice's cookie", string(raw))
}

// signOut: alice signing out, with her cookie or none, ends only her sign-in.
func (x *isoFixture) signOut(t *testing.T) {
	c := x.e.signIn(t, x.alice)
	for _, h := range []map[string]string{x.e.withCookie(c), nil, x.e.bearer(x.alice)} {
		if resp, raw := x.e.call(t, "DELETE", "/v1/auth/session", "", h); resp.StatusCode != http.StatusNoContent {
			t.Errorf("sign out: %d %s", resp.StatusCode, raw)
		}
	}
	resp, raw := x.e.call(t, "GET", "/v1/auth/session", "", x.e.withCookie(x.bobCookie))
	if who := x.e.who(t, raw); resp.StatusCode != http.StatusOK || who.User != "bob" {
		t.Errorf("bob's cookie after alice signed out: %d %s", resp.StatusCode, raw)
	}
}

// createKey: alice cannot make a key, for bob or anyone.
func (x *isoFixture) createKey(t *testing.T) {
	for _, body := range []string{`{"user":"bob"}`, `{"user":"alice","admin":true}`} {
		resp, raw := x.e.call(t, "POST", "/v1/keys", body, x.e.bearer(x.alice))
		x.e.wantError(t, "POST /v1/keys "+body, resp, raw, http.StatusForbidden, "admin_required")
	}
}

// listKeys: alice cannot list keys, bob's or anyone's.
func (x *isoFixture) listKeys(t *testing.T) {
	for _, path := range []string{"/v1/keys", "/v1/keys?user=bob", "/v1/keys?user=alice"} {
		resp, raw := x.get(t, path)
		x.e.wantError(t, "GET "+path, resp, raw, http.StatusForbidden, "admin_required")
	}
}

// usage: alice's totals are hers, whatever she asks for.
func (x *isoFixture) usage(t *testing.T) {
	groups := func(query string) []string {
		t.Helper()
		resp, raw := x.get(t, "/v1/usage?"+query)
		var got struct {
			Usage []struct{ Group string }
		}
		if err := json.Unmarshal(raw, &got); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("usage?%s: %d %s", query, resp.StatusCode, raw)
		}
		var out []string
		for _, u := range got.Usage {
			out = append(out, u.Group)
		}
		return out
	}
	for _, tt := range []struct {
		query string
		want  []string
	}{
		{"group_by=user", []string{"alice"}},
		{"group_by=user&user=bob", []string{"alice"}},
		{"group_by=user&user=", []string{"alice"}},
		{"group_by=key", []string{x.aliceKeyID}},
		{"group_by=key&user=bob", []string{x.aliceKeyID}},
	} {
		if got := groups(tt.query); !slices.Equal(got, tt.want) {
			t.Errorf("usage?%s: groups %v, want %v", tt.query, got, tt.want)
		}
	}
}

// asUser: an admin reads bob's things with X-Chatd-As-User: bob, and only reads them; alice cannot.
func (x *isoFixture) asUser(t *testing.T) {
	e, session := x.e, x.bobIDs["{session}"]
	as := func(key string) map[string]string { return e.bearer(key, httpapi.AsUserHeader, "bob") }
	for _, path := range []string{"/v1/sessions/" + session, "/v1/sessions/" + session + "/messages", "/v1/runs/" + x.bobIDs["{run}"]} {
		resp, raw := e.call(t, "GET", path, "", as(x.admin))
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), session) {
			t.Errorf("admin as bob, GET %s: %d %s", path, resp.StatusCode, raw)
		}
	}
	resp, raw := e.call(t, "GET", "/v1/sessions/"+session, "", e.bearer(x.admin))
	e.wantError(t, "admin as himself, bob's session", resp, raw, http.StatusNotFound, "session_not_found")

	for _, path := range []string{"/v1/sessions/" + session, "/v1/sessions/" + x.own, "/v1/sessions"} {
		resp, raw := e.call(t, "GET", path, "", as(x.alice))
		e.wantError(t, "alice as bob, GET "+path, resp, raw, http.StatusForbidden, "admin_required")
		x.noneOfBobs(t, "alice as bob, GET "+path, string(raw))
	}
	for _, w := range []struct{ method, path, body string }{
		{"POST", "/v1/sessions", `{"title":"made as bob"}`},
		{"PATCH", "/v1/sessions/" + session, `{"title":"renamed as bob"}`},
		{"DELETE", "/v1/sessions/" + session, ``},
		{"POST", "/v1/runs/" + x.bobIDs["{live_run}"] + "/cancel", ``},
		{"POST", "/v1/chat", `{"message":"sent as bob"}`},
	} {
		resp, raw := e.call(t, w.method, w.path, w.body, as(x.admin))
		e.wantError(t, "admin as bob, "+w.method+" "+w.path, resp, raw, http.StatusBadRequest, "as_user_read_only")
	}
}
