package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"chatd/internal/auth"
	"chatd/internal/chat"
	"chatd/internal/httpapi"
	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
	"chatd/internal/runevent"
	"chatd/internal/sse"
	"chatd/internal/store"
	"chatd/internal/store/sqlite"
)

// The tests of this file pin what a hostile review of chatd found and its fixes closed: each fails when
// its fix is undone.

// watchedStream is a streamed send whose events are read as they come, so that a test can wait until
// the run has streamed its text to the client — and so until chatd has read that text from the model —
// before it cancels or revokes anything.
type watchedStream struct {
	limStream
	sessionID string
	streamed  chan struct{} // closed once the text streamed so far is the text watched for
}

// watch sends a streamed message and returns once its status is known; a 200's events are read on in
// the background. The send must run.
func (e *limEnv) watch(t *testing.T, key, body, want string) *watchedStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	resp, err := e.request(ctx, key, "POST", "/v1/chat/stream", body)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		a, err := readAnswer(resp)
		cancel()
		t.Fatalf("send %s: %v (%v); want it to run", body, a, err)
	}
	s := &watchedStream{limStream: limStream{runID: resp.Header.Get("X-Run-Id"), ended: make(chan struct{})},
		sessionID: resp.Header.Get("X-Session-Id"), streamed: make(chan struct{})}
	s.status, s.header = resp.StatusCode, resp.Header
	go func() {
		defer close(s.ended)
		defer cancel()
		defer resp.Body.Close()
		var got strings.Builder
		seen := false
		for ev, err := range sse.Scan(resp.Body) {
			if err != nil {
				s.err = err
				return
			}
			var data map[string]any
			if err := json.Unmarshal(ev.Data, &data); err != nil {
				s.err = fmt.Errorf("event %s %s: %s", ev.ID, ev.Type, ev.Data)
				return
			}
			s.events = append(s.events, event{ID: ev.ID, Type: ev.Type, Data: data})
			if ev.Type == "text_delta" {
				got.WriteString(data["text"].(string))
			}
			if !seen && got.String() == want {
				seen = true
				close(s.streamed)
			}
		}
	}()
	return s
}

// awaitText waits until the stream has carried the text watched for.
func (s *watchedStream) awaitText(t *testing.T) {
	t.Helper()
	select {
	case <-s.streamed:
	case <-s.ended:
		t.Fatalf("run %s ended before it streamed its text: %v (%v)", s.runID, s.limAnswer, s.err)
	}
}

// reviewRun is a run as GET /v1/runs/{id} answers it.
type reviewRun struct {
	ID        string
	SessionID string `json:"session_id"`
	Status    string
	Error     string
}

func (e *limEnv) run(t *testing.T, key, id string) reviewRun {
	t.Helper()
	var r reviewRun
	e.getJSON(t, key, "/v1/runs/"+id, &r)
	return r
}

// messages returns a session's stored messages.
func (e *limEnv) messages(t *testing.T, key, sessionID string) []runevent.Record {
	t.Helper()
	var page struct{ Messages []runevent.Record }
	e.getJSON(t, key, "/v1/sessions/"+sessionID+"/messages", &page)
	return page.Messages
}

// lastOf returns what a role said last among msgs ("" nothing).
func lastOf(msgs []runevent.Record, role string) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == role {
			return msgs[i].Content
		}
	}
	return ""
}

// lastContent is the content of the last message of a request to the model.
func lastContent(req llmtest.Request) string {
	msgs := req.Messages()
	return fmt.Sprint(msgs[len(msgs)-1]["content"])
}

// checkEstimate checks a usage total that holds one estimated model call which streamed text: some
// input, and about a token for every four bytes of the text.
func checkEstimate(t *testing.T, what string, got []limUsage, text string) {
	t.Helper()
	if len(got) != 1 || got[0].Calls != 1 {
		t.Fatalf("%s: usage %+v; want one call, counted by estimate", what, got)
	}
	u := got[0]
	if u.InputTokens <= 0 {
		t.Errorf("%s: input_tokens %d; want the request's estimate, more than 0", what, u.InputTokens)
	}
	if lo, hi := int64(len(text)/4), int64(len(text)/4+1); u.OutputTokens < lo || u.OutputTokens > hi {
		t.Errorf("%s: output_tokens %d; want about %d bytes / 4 = %d", what, u.OutputTokens, len(text), lo)
	}
}

// reviewText is an answer of 400 bytes: 100 tokens at four bytes a token.
var reviewText = strings.Repeat("word ", 80)

// TestReviewCancelledCallIsCounted: a model call cancelled mid-answer never gets the usage the upstream
// sends after its finish; chatd counts it by estimate — the request's tokens, and a token for every
// four bytes streamed — and a day's tokens the estimate crosses refuse the next send.
func TestReviewCancelledCallIsCounted(t *testing.T) {
	hold := newLimHold()
	e := newLimEnv(t, limSetup{Defaults: store.Limits{TokensPerDay: 50}, Hold: hold,
		Respond: func(int, llmtest.Request) llmtest.Turn {
			return hold.turn(reviewText, &llm.Usage{InputTokens: 1, OutputTokens: 1}) // never sent: cancelled first
		}})
	key := e.key(t, auth.KeySpec{User: "carol"})

	s := e.watch(t, key, `{"message":"tell me a long story"}`, reviewText)
	hold.await(t, 1)
	s.awaitText(t)
	if a := e.send(t, key, "POST", "/v1/runs/"+s.runID+"/cancel", ""); a.status != http.StatusAccepted {
		t.Fatalf("cancel: %v", a)
	}
	a := s.wait(t)
	checkEnd(t, "the cancelled run", a, "cancelled", store.RunCancelled)
	if got := text(a.events); got != reviewText {
		t.Fatalf("the run streamed %q, want the held text", got)
	}
	checkEstimate(t, "the cancelled call", e.usage(t, key, "", "/v1/usage?group_by=user"), reviewText)

	refused := e.send(t, key, "POST", "/v1/chat/stream", `{"message":"more"}`)
	checkRefused(t, "the send after the estimate crossed 50 tokens", refused, store.LimitTokens, "3630")
	if n := len(e.upstream.Requests()); n != 1 {
		t.Errorf("the upstream got %d requests, want 1", n)
	}
}

// TestReviewUnreportedUsageIsCounted: a server that reports no usage for a call (llmtest's NoUsage: a
// nil Usage would send a plausible one) is counted by estimate too.
func TestReviewUnreportedUsageIsCounted(t *testing.T) {
	e := newLimEnv(t, limSetup{Respond: func(int, llmtest.Request) llmtest.Turn {
		return llmtest.Turn{Text: reviewText, NoUsage: true}
	}})
	key := e.key(t, auth.KeySpec{User: "carol"})
	a := e.send(t, key, "POST", "/v1/chat/stream", `{"message":"tell me a long story"}`)
	checkEnd(t, "a run whose call reports no usage", a, "complete", store.RunCompleted)
	for _, ev := range a.events {
		if ev.Type == "usage" {
			t.Fatalf("the run streamed a usage event %v, though the upstream reported none", ev.Data)
		}
	}
	checkEstimate(t, "the unreported call", e.usage(t, key, "", "/v1/usage?group_by=user"), reviewText)
}

// TestReviewModelNotPriced: under a spend budget, a model the price table does not know — asked for,
// or an agent's fallback — is refused with 403 model_not_priced before anything is stored or sent
// upstream; a priced model runs, and a user without a spend budget may use any model.
func TestReviewModelNotPriced(t *testing.T) {
	e := newLimEnv(t, limSetup{
		Users:  map[string]store.Limits{"carol": {SpendUSD: 1}},
		Prices: map[string]chat.Price{"openai/gpt-4o-mini": {Input: 1, Output: 2}},
		Agents: map[string]chat.Agent{"backed": {Model: "openai/gpt-4o-mini", Fallbacks: []string{"openai/other"}}},
		Respond: func(int, llmtest.Request) llmtest.Turn {
			return llmtest.Turn{Text: "ok", Usage: &llm.Usage{InputTokens: 10, OutputTokens: 5}}
		}})
	carol := e.key(t, auth.KeySpec{User: "carol"})
	dave := e.key(t, auth.KeySpec{User: "dave"})

	for _, body := range []string{
		`{"message":"hi","model":"openai/other"}`,
		`{"message":"hi","agent":"backed"}`,
	} {
		for _, path := range []string{"/v1/chat/stream", "/v1/chat"} {
			a := e.send(t, carol, "POST", path, body)
			if a.status != http.StatusForbidden || a.code != "model_not_priced" || !strings.Contains(a.message, "openai/other") {
				t.Errorf("carol, with a spend budget, POST %s %s: %v; want 403 model_not_priced naming openai/other", path, body, a)
			}
		}
	}
	if n := e.sessions(t, carol); n != 0 {
		t.Errorf("%d sessions stored after the refused sends, want 0", n)
	}
	if n := len(e.upstream.Requests()); n != 0 {
		t.Errorf("the refused sends made %d model calls", n)
	}

	checkEnd(t, "carol on the priced default model", e.send(t, carol, "POST", "/v1/chat/stream", `{"message":"hi"}`),
		"complete", store.RunCompleted)
	checkEnd(t, "dave, without a spend budget, on openai/other",
		e.send(t, dave, "POST", "/v1/chat/stream", `{"message":"hi","model":"openai/other"}`), "complete", store.RunCompleted)
	checkEnd(t, "dave on the agent with an unpriced fallback",
		e.send(t, dave, "POST", "/v1/chat/stream", `{"message":"hi","agent":"backed"}`), "complete", store.RunCompleted)
	var models []string
	for _, r := range e.upstream.Requests() {
		models = append(models, r.Model)
	}
	if want := "gpt-4o-mini other gpt-4o-mini"; strings.Join(models, " ") != want {
		t.Errorf("the upstream was asked for %v, want %s", models, want)
	}
}

// reviewBudgetRespond holds "hold" (its usage, 10 tokens, sent after the release), answers "big" with
// 100 tokens and anything else with 2.
func reviewBudgetRespond(hold *limHold) func(int, llmtest.Request) llmtest.Turn {
	return func(_ int, req llmtest.Request) llmtest.Turn {
		switch lastContent(req) {
		case "hold":
			return hold.turn("held answer", &llm.Usage{InputTokens: 5, OutputTokens: 5})
		case "big":
			return llmtest.Turn{Text: "big answer", Usage: &llm.Usage{InputTokens: 90, OutputTokens: 10}}
		}
		return llmtest.Turn{Text: "ok", Usage: &llm.Usage{InputTokens: 1, OutputTokens: 1}}
	}
}

// TestReviewInterruptOverBudget: a send with on_active_run interrupt that its day's tokens refuse
// answers 429 and leaves the session's running run alone: it was checked before the interrupt.
func TestReviewInterruptOverBudget(t *testing.T) {
	hold := newLimHold()
	e := newLimEnv(t, limSetup{Defaults: store.Limits{TokensPerDay: 100}, Hold: hold, Respond: reviewBudgetRespond(hold)})
	key := e.key(t, auth.KeySpec{User: "carol"})

	first := e.watch(t, key, `{"message":"hold"}`, "held answer")
	hold.await(t, 1)
	// Another session's run uses the day's 100 tokens up (and so ends with tokens_per_day itself).
	used := e.send(t, key, "POST", "/v1/chat/stream", `{"message":"big"}`)
	if failed := checkEnd(t, "the run that uses the budget up", used, "error", store.RunFailed); failed["code"] != store.LimitTokens {
		t.Fatalf("the run that used the budget up ended with %v", failed)
	}

	refused := e.send(t, key, "POST", "/v1/chat/stream",
		fmt.Sprintf(`{"message":"stop that","session_id":%q,"on_active_run":"interrupt"}`, first.sessionID))
	checkRefused(t, "the interrupting send over the budget", refused, store.LimitTokens, "3630")
	if r := e.run(t, key, first.runID); r.Status != store.RunRunning {
		t.Fatalf("the session's run after the refused interrupt is %q, want running", r.Status)
	}

	hold.release()
	a := first.wait(t)
	if n := len(a.events); n == 0 || a.events[n-1].Data["status"] == store.RunCancelled {
		t.Fatalf("the held run: %v; a refused send must not cancel it", a)
	}
	// Its own call's usage ends it with the limit: it reached the budget the other run used up.
	checkEnd(t, "the held run", a, "error", store.RunFailed)
	if got := text(a.events); got != "held answer" {
		t.Errorf("the held run streamed %q", got)
	}
	if n := len(e.upstream.Requests()); n != 2 {
		t.Errorf("the upstream got %d requests, want 2: the refused send calls no model", n)
	}
}

// TestReviewQueuedRunOverBudget: a run queued behind another is checked against its budget again when
// it starts: the run before it used the budget up, so it fails with tokens_per_day without calling the
// model.
func TestReviewQueuedRunOverBudget(t *testing.T) {
	hold := newLimHold()
	e := newLimEnv(t, limSetup{Defaults: store.Limits{TokensPerDay: 100}, Hold: hold,
		Respond: func(_ int, req llmtest.Request) llmtest.Turn {
			if lastContent(req) == "hold" {
				return hold.turn("held answer", &llm.Usage{InputTokens: 90, OutputTokens: 10})
			}
			return llmtest.Turn{Text: "ok", Usage: &llm.Usage{InputTokens: 1, OutputTokens: 1}}
		}})
	key := e.key(t, auth.KeySpec{User: "carol"})

	first := e.watch(t, key, `{"message":"hold"}`, "held answer")
	hold.await(t, 1)
	queued := e.open(t, key, fmt.Sprintf(`{"message":"next","session_id":%q,"on_active_run":"enqueue"}`, first.sessionID))
	if queued.status != http.StatusOK {
		t.Fatalf("the queued send: %v", queued.wait(t))
	}
	if r := e.run(t, key, queued.runID); r.Status != store.RunQueued {
		t.Fatalf("the second run is %q, want queued", r.Status)
	}

	hold.release()
	if failed := checkEnd(t, "the first run", first.wait(t), "error", store.RunFailed); failed["code"] != store.LimitTokens {
		t.Errorf("the first run, whose 100 tokens used the budget up, ended with %v", failed)
	}
	a := queued.wait(t)
	failed := checkEnd(t, "the queued run", a, "error", store.RunFailed)
	if failed["code"] != store.LimitTokens {
		t.Errorf("the queued run ended with %v, want code %s", failed, store.LimitTokens)
	}
	if got := text(a.events); got != "" {
		t.Errorf("the queued run streamed %q", got)
	}
	if n := len(e.upstream.Requests()); n != 1 {
		t.Errorf("the upstream got %d requests, want 1: the queued run starts over its budget and calls no model", n)
	}
}

// TestReviewRevokeCancelsTheKeysRuns: revoking a key cancels what it started: its running run (whose
// answer so far is kept) and the runs queued behind it, which never call the model. A run of the same
// user's other key goes on.
func TestReviewRevokeCancelsTheKeysRuns(t *testing.T) {
	hold := newLimHold()
	e := newLimEnv(t, limSetup{Hold: hold, Respond: func(int, llmtest.Request) llmtest.Turn {
		return hold.turn("held answer", &llm.Usage{InputTokens: 5, OutputTokens: 5})
	}})
	root := e.key(t, auth.KeySpec{User: "root", Admin: true})
	laptop, laptopID := e.keyID(t, auth.KeySpec{User: "alice", Name: "laptop"})
	phone := e.key(t, auth.KeySpec{User: "alice", Name: "phone"})

	running := e.watch(t, laptop, `{"message":"hi"}`, "held answer")
	other := e.watch(t, phone, `{"message":"hi"}`, "held answer")
	hold.await(t, 2)
	running.awaitText(t)
	other.awaitText(t)
	// Many runs queue behind the running one: were the running one cancelled first, its end would start
	// the next one still queued, which calls the model before its cancel. With one queued run that shows
	// now and then; with 24, in most runs of the test.
	var queued []*limStream
	for i := range 24 {
		s := e.open(t, laptop, fmt.Sprintf(`{"message":"later %d","session_id":%q,"on_active_run":"enqueue"}`, i, running.sessionID))
		if s.status != http.StatusOK {
			t.Fatalf("queued send %d: %v", i, s.wait(t))
		}
		queued = append(queued, s)
	}

	if a := e.send(t, root, "DELETE", "/v1/keys/"+laptopID, ""); a.status != http.StatusOK {
		t.Fatalf("revoke: %v", a)
	}
	if r := e.run(t, phone, other.runID); r.Status != store.RunRunning {
		t.Fatalf("the other key's run after the revoke is %q, want running", r.Status)
	}
	// The answers may finish now: the revoke has cancelled what it cancels, and a run it did not cancel
	// completes instead of holding the test.
	hold.release()
	a := running.wait(t)
	checkEnd(t, "the revoked key's running run", a, "cancelled", store.RunCancelled)
	for i, s := range queued {
		a := s.wait(t)
		checkEnd(t, fmt.Sprintf("the revoked key's queued run %d", i), a, "cancelled", store.RunCancelled)
		if got := text(a.events); got != "" {
			t.Errorf("queued run %d streamed %q", i, got)
		}
	}
	checkEnd(t, "the other key's run", other.wait(t), "complete", store.RunCompleted)
	if n := len(e.upstream.Requests()); n != 2 {
		t.Errorf("the upstream got %d requests, want 2: a queued run of a revoked key calls no model", n)
	}
	msgs := e.messages(t, phone, running.sessionID)
	if got := lastOf(msgs, store.RoleAssistant); got != "held answer" {
		t.Errorf("the cancelled run's stored answer is %q, want its partial answer kept; messages %+v", got, msgs)
	}
	for _, m := range msgs {
		if strings.HasPrefix(m.Content, "later") {
			t.Errorf("a queued run's message was stored: %+v", m)
		}
	}
}

// TestReviewCloseCancelsQueuedRuns: chatd stopping (chat.Service.Close) cancels the runs queued behind
// its running ones instead of leaving them queued in the store for the next start, which then has
// nothing to start.
func TestReviewCloseCancelsQueuedRuns(t *testing.T) {
	hold := newLimHold()
	e := newLimEnv(t, limSetup{Hold: hold, Respond: func(int, llmtest.Request) llmtest.Turn {
		return hold.turn("held answer", nil)
	}})
	key := e.key(t, auth.KeySpec{User: "alice"})

	// The clients go away before the stop: the server's Close waits for open streams.
	ctx, leave := context.WithCancel(t.Context())
	running, err := e.openStream(ctx, key, `{"message":"hi"}`)
	if err != nil || running.status != http.StatusOK {
		t.Fatalf("send: %v %v", running, err)
	}
	hold.await(t, 1)
	session := e.run(t, key, running.runID).SessionID
	queued, err := e.openStream(ctx, key, fmt.Sprintf(`{"message":"later","session_id":%q,"on_active_run":"enqueue"}`, session))
	if err != nil || queued.status != http.StatusOK {
		t.Fatalf("queued send: %v %v", queued, err)
	}
	leave()
	<-running.ended
	<-queued.ended

	e.restart(t)
	if err := e.chat.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r := e.run(t, key, queued.runID); r.Status != store.RunCancelled {
		t.Errorf("the queued run after a stop and a start is %q, want cancelled by the stop", r.Status)
	}
	a := e.send(t, key, "GET", "/v1/runs/"+queued.runID+"/events", "")
	if got := checkEnd(t, "the queued run's log", a, "cancelled", store.RunCancelled); got["reason"] != "chatd is shutting down" {
		t.Errorf("the queued run was cancelled for %v", got)
	}
	if n := len(e.upstream.Requests()); n != 1 {
		t.Errorf("the upstream got %d requests, want 1", n)
	}
}

// TestReviewRestartFailsARevokedKeysQueuedRun: a run a killed chatd left queued, whose key was revoked
// while chatd was down, fails with key_revoked at the next start instead of running; a queued run of a
// key still valid starts.
func TestReviewRestartFailsARevokedKeysQueuedRun(t *testing.T) {
	e := newLimEnv(t, limSetup{Respond: func(int, llmtest.Request) llmtest.Turn {
		return llmtest.Turn{Text: "ok", Usage: &llm.Usage{InputTokens: 5, OutputTokens: 5}}
	}})
	_, revokedID := e.keyID(t, auth.KeySpec{User: "alice", Name: "laptop"})
	valid, validID := e.keyID(t, auth.KeySpec{User: "alice", Name: "phone"})
	e.stop(t)

	// What a killed process leaves, and what an admin does while chatd is down (chatd keys revoke).
	db, err := sqlite.Open(t.Context(), e.path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	queue := func(keyID, message string) string {
		s := &store.Session{Agent: "default", Title: message}
		if err := db.CreateSession(t.Context(), "alice", s); err != nil {
			t.Fatal(err)
		}
		req, err := json.Marshal(chat.Request{SessionID: s.ID, Message: message})
		if err != nil {
			t.Fatal(err)
		}
		r := &store.Run{SessionID: s.ID, Agent: "default", Model: "openai/gpt-4o-mini", Status: store.RunQueued,
			Request: req, KeyID: keyID}
		if err := db.CreateRun(t.Context(), "alice", r, nil); err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	ofRevoked, ofValid := queue(revokedID, "from the laptop"), queue(validID, "from the phone")
	if _, err := db.RevokeKey(t.Context(), "", revokedID); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	e.start(t)
	if err := e.chat.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	a := e.send(t, valid, "GET", "/v1/runs/"+ofValid+"/events", "")
	checkEnd(t, "the valid key's queued run", a, "complete", store.RunCompleted)
	a = e.send(t, valid, "GET", "/v1/runs/"+ofRevoked+"/events", "")
	if failed := checkEnd(t, "the revoked key's queued run", a, "error", store.RunFailed); failed["code"] != "key_revoked" {
		t.Errorf("the revoked key's queued run ended with %v, want code key_revoked", failed)
	}
	reqs := e.upstream.Requests()
	if len(reqs) != 1 || lastContent(reqs[0]) != "from the phone" {
		t.Errorf("the upstream got %d requests, want the phone's only", len(reqs))
	}
}

// TestReviewTrustedHeaderNeedsChatdsHost: a trusted proxy's header is believed only in a request for
// one of chatd's names: a page that rebinds its own name to the proxy's address sends from there too.
// An API key is not bound to a name.
func TestReviewTrustedHeaderNeedsChatdsHost(t *testing.T) {
	const header = "X-Forwarded-Email"
	e := newKeyedEnv(t, httpapi.Options{AllowedHosts: []string{"chat.example.com"}}, auth.Options{TrustedHeader: header,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	alice, _ := e.key(t, auth.KeySpec{User: "alice"})
	port := e.srv.URL[strings.LastIndex(e.srv.URL, ":"):]
	for _, host := range []string{"evil.example", "evil.example" + port, "chat.example.com.evil.example"} {
		resp, raw := e.call(t, "GET", "/v1/sessions", "", map[string]string{header: "carol@example.com", "Host": host})
		e.wantError(t, "the proxy's header for "+host, resp, raw, http.StatusForbidden, "forbidden_host")
		resp, raw = e.call(t, "POST", "/v1/sessions", `{"title":"rebound"}`, map[string]string{header: "carol@example.com", "Host": host})
		e.wantError(t, "a write with the proxy's header for "+host, resp, raw, http.StatusForbidden, "forbidden_host")
		if resp, raw := e.call(t, "GET", "/v1/sessions", "", e.bearer(alice, "Host", host)); resp.StatusCode != http.StatusOK {
			t.Errorf("a key for %s: %d %s", host, resp.StatusCode, raw)
		}
	}
	for _, host := range []string{"", "127.0.0.1" + port, "localhost" + port, "chat.example.com", "CHAT.example.com:443"} {
		h := map[string]string{header: "carol@example.com"}
		if host != "" {
			h["Host"] = host
		}
		resp, raw := e.call(t, "GET", "/v1/auth/session", "", h)
		if resp.StatusCode != http.StatusOK || e.who(t, raw).User != "carol@example.com" {
			t.Errorf("the proxy's header for %q: %d %s", host, resp.StatusCode, raw)
		}
	}
	if _, raw := e.call(t, "GET", "/v1/sessions", "", map[string]string{header: "carol@example.com"}); !strings.Contains(string(raw), `"sessions":[]`) {
		t.Errorf("carol's sessions after the refused writes: %s", raw)
	}
}

// TestReviewSignInCountsAgainstRequests: a sign-in is a request of its key: under a limit of 2 a
// minute, the third answers 429 requests_per_minute and sets no cookie.
func TestReviewSignInCountsAgainstRequests(t *testing.T) {
	e := newKeyedEnv(t, httpapi.Options{}, auth.Options{})
	alice, _ := e.key(t, auth.KeySpec{User: "alice", Limits: store.Limits{RequestsPerMinute: 2}})
	for range 2 {
		e.signIn(t, alice)
	}
	resp, raw := e.call(t, "POST", "/v1/auth/session", `{"key":"`+alice+`"}`, nil)
	e.wantError(t, "the third sign-in in a minute", resp, raw, http.StatusTooManyRequests, auth.LimitRequests)
	if resp.Header.Get("Retry-After") == "" {
		t.Errorf("the refused sign-in has no Retry-After")
	}
	if len(resp.Cookies()) != 0 {
		t.Errorf("the refused sign-in set %v", resp.Header.Values("Set-Cookie"))
	}
}

// TestReviewCookieSecureBehindHTTPSProxy: the sign-in cookie (and the sign-out's clearing one) is
// Secure when a proxy says the browser came over HTTPS, and not over plain HTTP.
func TestReviewCookieSecureBehindHTTPSProxy(t *testing.T) {
	e := newKeyedEnv(t, httpapi.Options{}, auth.Options{})
	alice, _ := e.key(t, auth.KeySpec{User: "alice"})
	for _, tt := range []struct {
		name   string
		header map[string]string
		secure bool
	}{
		{"plain HTTP", nil, false},
		{"behind an HTTPS proxy", map[string]string{"X-Forwarded-Proto": "https"}, true},
		{"behind an HTTPS proxy, in capitals", map[string]string{"X-Forwarded-Proto": "HTTPS"}, true},
		{"behind an HTTP proxy", map[string]string{"X-Forwarded-Proto": "http"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, raw := e.call(t, "POST", "/v1/auth/session", `{"key":"`+alice+`"}`, tt.header)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("sign in: %d %s", resp.StatusCode, raw)
			}
			cookies := resp.Cookies()
			if len(cookies) != 1 || cookies[0].Secure != tt.secure {
				t.Fatalf("Set-Cookie %v; want Secure %v", resp.Header.Values("Set-Cookie"), tt.secure)
			}
			out := map[string]string{"Cookie": auth.CookieName + "=" + cookies[0].Value}
			for k, v := range tt.header {
				out[k] = v
			}
			resp, raw = e.call(t, "DELETE", "/v1/auth/session", "", out)
			if resp.StatusCode != http.StatusNoContent {
				t.Fatalf("sign out: %d %s", resp.StatusCode, raw)
			}
			if cleared := resp.Cookies(); len(cleared) != 1 || cleared[0].Secure != tt.secure {
				t.Errorf("sign out's Set-Cookie %v; want Secure %v", resp.Header.Values("Set-Cookie"), tt.secure)
			}
		})
	}
}

// TestReviewCreateKeyInputLimits: POST /v1/keys refuses, with 400 invalid_key_spec and nothing made, a
// name a terminal would read as commands, more agents than a key may name, and a spend budget outside
// what chatd counts.
func TestReviewCreateKeyInputLimits(t *testing.T) {
	e := newKeyedEnv(t, httpapi.Options{}, auth.Options{})
	admin, _ := e.key(t, auth.KeySpec{User: "root", Admin: true})
	many := `"support"` + strings.Repeat(`,"support"`, auth.MaxKeyAgents)
	for _, tt := range []struct{ name, body string }{
		{"a name with ESC", `{"user":"dave","name":"laptop\u001b[2J"}`},
		{"a name with a newline", `{"user":"dave","name":"laptop\nINFO forged log line"}`},
		{"a name with C1 CSI", `{"user":"dave","name":"laptop\u009b2J"}`},
		{"101 agents", `{"user":"dave","agents":[` + many + `]}`},
		{"spend under a micro-dollar", `{"user":"dave","limits":{"spend_usd":1e-7}}`},
		{"spend over a billion", `{"user":"dave","limits":{"spend_usd":1e10}}`},
		{"spend of 1e308", `{"user":"dave","limits":{"spend_usd":1e308}}`},
	} {
		resp, raw := e.call(t, "POST", "/v1/keys", tt.body, e.bearer(admin))
		e.wantError(t, tt.name, resp, raw, http.StatusBadRequest, "invalid_key_spec")
	}
	resp, raw := e.call(t, "GET", "/v1/keys?user=dave", "", e.bearer(admin))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"keys":[]`) {
		t.Errorf("dave's keys after the refusals: %d %s", resp.StatusCode, raw)
	}
	for _, body := range []string{
		`{"user":"dave","name":"laptop – Zoë's"}`,
		`{"user":"dave","agents":[` + strings.TrimPrefix(strings.Repeat(`,"support"`, auth.MaxKeyAgents), ",") + `]}`,
		`{"user":"dave","limits":{"spend_usd":1e-6}}`,
		`{"user":"dave","limits":{"spend_usd":1e9}}`,
	} {
		if resp, raw := e.call(t, "POST", "/v1/keys", body, e.bearer(admin)); resp.StatusCode != http.StatusCreated {
			t.Errorf("POST /v1/keys %.80s: %d %s", body, resp.StatusCode, raw)
		}
	}
}
