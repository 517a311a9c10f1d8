package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"chatd/internal/auth"
	"chatd/internal/chat"
	"chatd/internal/httpapi"
	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
	"chatd/internal/metrics"
	"chatd/internal/runevent"
	"chatd/internal/sse"
	"chatd/internal/store"
	"chatd/internal/store/sqlite"
	"chatd/internal/tool"
)

// limStart is where the limits' clock starts: 22:59:30 UTC, so that the day's tokens come back 3630 s
// later. It lies in the past because the store stamps each model call's usage with its own clock, the
// real one: the day and the spend period the limits count from (by this clock) hold every call a test
// makes.
var limStart = time.Date(2024, 2, 28, 22, 59, 30, 0, time.UTC) // a Wednesday, the day before a leap day

// limSetup is what a limits test configures: the users' limits, the price table, the agents, and the
// upstream's answers.
type limSetup struct {
	Defaults store.Limits
	Users    map[string]store.Limits
	Prices   map[string]chat.Price
	Agents   map[string]chat.Agent
	Respond  func(n int, req llmtest.Request) llmtest.Turn
	// Hold, when set, is released before the servers close, so that no held answer outlives the test.
	Hold *limHold
	// Metrics, when set, count the chat service's runs.
	Metrics *metrics.Metrics
}

// limEnv is chatd wired as cmd/chatd wires it with auth and limits: a SQLite file, an Authenticator
// whose keys are in it, a chat.Service with prices, the API on a real HTTP server, and the scripted
// upstream. restart replaces everything but the file and the upstream, as a new chatd process would.
type limEnv struct {
	setup    limSetup
	path     string
	clock    *stepClock
	upstream *llmtest.Server

	db    *sqlite.DB
	auth  *auth.Authenticator
	chat  *chat.Service
	tools *tool.Registry
	srv   *httptest.Server
}

func newLimEnv(t *testing.T, s limSetup) *limEnv {
	t.Helper()
	e := &limEnv{setup: s, path: filepath.Join(t.TempDir(), "chatd.db"), clock: &stepClock{now: limStart},
		upstream: llmtest.NewServer(t)}
	e.upstream.Respond = s.Respond
	e.start(t)
	t.Cleanup(func() { e.stop(t) })
	if s.Hold != nil {
		t.Cleanup(s.Hold.release) // runs first: the held answers end, then the servers close
	}
	return e
}

func (e *limEnv) start(t *testing.T) {
	t.Helper()
	db, err := sqlite.Open(t.Context(), e.path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(t.Context(), auth.Options{Store: db, DefaultLimits: e.setup.Defaults, UserLimits: e.setup.Users,
		Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	e.db, e.auth = db, a
	e.chat, e.tools = newChat(t, db, e.upstream, e.clock.Now, chat.Options{Prices: e.setup.Prices, Agents: e.setup.Agents,
		Metrics: e.setup.Metrics})
	e.srv = httptest.NewServer(httpapi.New(httpapi.Options{Chat: e.chat, Store: db, Tools: e.tools, Auth: a, Now: e.clock.Now}))
}

func (e *limEnv) stop(t *testing.T) {
	if e.srv == nil {
		return
	}
	e.srv.Close()
	closeChat(t, e.chat, e.tools)
	if err := e.db.Close(); err != nil {
		t.Errorf("close db: %v", err)
	}
	e.srv = nil
}

// restart stops chatd and starts a new one on the same database file.
func (e *limEnv) restart(t *testing.T) {
	t.Helper()
	e.stop(t)
	e.start(t)
}

// key makes an API key and returns its secret.
func (e *limEnv) key(t *testing.T, spec auth.KeySpec) string {
	t.Helper()
	secret, _, err := e.auth.CreateKey(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// keyID makes an API key and returns its secret and id.
func (e *limEnv) keyID(t *testing.T, spec auth.KeySpec) (string, string) {
	t.Helper()
	secret, k, err := e.auth.CreateKey(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return secret, k.ID
}

// limAnswer is an answer of the API: its status and headers, and either its error or its events.
type limAnswer struct {
	status     int
	header     http.Header
	code       string // the error's code
	message    string
	events     []event
	retryAfter string
}

func (a limAnswer) String() string {
	if a.status == http.StatusOK {
		return fmt.Sprintf("200 %v", types(a.events))
	}
	return fmt.Sprintf("%d %s (Retry-After %q): %s", a.status, a.code, a.retryAfter, a.message)
}

// request sends a request with the key. It returns once the status is known, with the response whose
// body the caller reads and closes.
func (e *limEnv) request(ctx context.Context, key, method, path, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return http.DefaultClient.Do(req)
}

// readAnswer finishes an answer: a stream's events to its end, or an error's code. Goroutines may call it: it
// reports what went wrong instead of failing the test.
func readAnswer(resp *http.Response) (limAnswer, error) {
	defer resp.Body.Close()
	a := limAnswer{status: resp.StatusCode, header: resp.Header, retryAfter: resp.Header.Get("Retry-After")}
	if resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for ev, err := range sse.Scan(resp.Body) {
			if err != nil {
				return a, err
			}
			var data map[string]any
			if err := json.Unmarshal(ev.Data, &data); err != nil {
				return a, fmt.Errorf("event %s %s: %s", ev.ID, ev.Type, ev.Data)
			}
			a.events = append(a.events, event{ID: ev.ID, Type: ev.Type, Data: data})
		}
		return a, nil
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return a, err
	}
	if resp.StatusCode >= 400 {
		var body struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal(raw, &body); err != nil {
			return a, fmt.Errorf("%d, not a JSON error: %s", resp.StatusCode, raw)
		}
		a.code, a.message = body.Error.Code, body.Error.Message
	}
	return a, nil
}

// send sends a request and reads its whole answer.
func (e *limEnv) send(t *testing.T, key, method, path, body string) limAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	resp, err := e.request(ctx, key, method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	a, err := readAnswer(resp)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// getJSON reads a JSON answer into v; it must be 200.
func (e *limEnv) getJSON(t *testing.T, key, path string, v any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	resp, err := e.request(ctx, key, "GET", path, "")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, raw)
	}
}

// sessions counts the caller's sessions.
func (e *limEnv) sessions(t *testing.T, key string) int {
	t.Helper()
	var page struct{ Sessions []json.RawMessage }
	e.getJSON(t, key, "/v1/sessions?limit=200", &page)
	return len(page.Sessions)
}

// limStream is a send whose status is known and whose stream is read to its end in the background.
type limStream struct {
	limAnswer
	runID string
	ended chan struct{}
	err   error
}

// open sends a streamed message and returns as soon as its status is known; a 200's events are read on.
func (e *limEnv) open(t *testing.T, key, body string) *limStream {
	t.Helper()
	s, err := e.openStream(t.Context(), key, body)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openStream is open for goroutines: it returns its error.
func (e *limEnv) openStream(ctx context.Context, key, body string) (*limStream, error) {
	ctx, cancel := context.WithTimeout(ctx, patience)
	resp, err := e.request(ctx, key, "POST", "/v1/chat/stream", body)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &limStream{runID: resp.Header.Get("X-Run-Id"), ended: make(chan struct{})}
	s.status = resp.StatusCode
	go func() {
		defer close(s.ended)
		defer cancel()
		s.limAnswer, s.err = readAnswer(resp)
	}()
	if resp.StatusCode != http.StatusOK {
		<-s.ended
	}
	return s, nil
}

// wait returns the stream's whole answer once it has ended.
func (s *limStream) wait(t *testing.T) limAnswer {
	t.Helper()
	<-s.ended // the request's context bounds it
	if s.err != nil {
		t.Fatalf("stream: %v", s.err)
	}
	return s.limAnswer
}

// limHold holds model answers before their finish until the test releases them, and tells the test
// each one that arrived.
type limHold struct {
	arrived chan struct{}
	open    chan struct{}
	once    sync.Once
}

func newLimHold() *limHold {
	return &limHold{arrived: make(chan struct{}, 1000), open: make(chan struct{})}
}

// turn is an answer held before its finish.
func (h *limHold) turn(text string, usage *llm.Usage) llmtest.Turn {
	return llmtest.Turn{Text: text, Usage: usage, BeforeFinish: func() {
		h.arrived <- struct{}{}
		<-h.open
	}}
}

// await waits until n more answers are held.
func (h *limHold) await(t *testing.T, n int) {
	t.Helper()
	deadline := time.NewTimer(patience)
	defer deadline.Stop()
	for i := range n {
		select {
		case <-h.arrived:
		case <-deadline.C:
			t.Fatalf("%d of %d model calls arrived", i, n)
		}
	}
}

func (h *limHold) release() { h.once.Do(func() { close(h.open) }) }

// checkEnd checks a stream's closing events: the outcome event, then done with status.
func checkEnd(t *testing.T, name string, a limAnswer, outcome, status string) map[string]any {
	t.Helper()
	n := len(a.events)
	if a.status != http.StatusOK || n < 2 || a.events[n-2].Type != outcome || a.events[n-1].Type != "done" ||
		a.events[n-1].Data["status"] != status {
		t.Fatalf("%s: %v; want it to end with %s and done %s", name, a, outcome, status)
	}
	checkIDs(t, a.events)
	return a.events[n-2].Data
}

// checkRefused checks a refusal by a limit: 429, the limit's code, and a Retry-After of retry seconds
// ("" any positive number).
func checkRefused(t *testing.T, name string, a limAnswer, code, retry string) {
	t.Helper()
	if a.status != http.StatusTooManyRequests || a.code != code {
		t.Errorf("%s: %v; want 429 %s", name, a, code)
		return
	}
	if n, err := strconv.Atoi(a.retryAfter); err != nil || n <= 0 || retry != "" && a.retryAfter != retry {
		want := "a positive number of seconds"
		if retry != "" {
			want = retry
		}
		t.Errorf("%s: Retry-After %q, want %s", name, a.retryAfter, want)
	}
}

// TestConcurrentRunsLimit: of 50 sends at once under a limit of 5 runs, while the model holds every
// answer, exactly 5 run and 45 are refused with 429 concurrent_runs and nothing stored; once the runs
// end, the next send runs.
func TestConcurrentRunsLimit(t *testing.T) {
	hold := newLimHold()
	e := newLimEnv(t, limSetup{Defaults: store.Limits{ConcurrentRuns: 5}, Hold: hold,
		Respond: func(int, llmtest.Request) llmtest.Turn { return hold.turn("a held answer", nil) }})
	key := e.key(t, auth.KeySpec{User: "alice"})

	const sends = 50
	streams := make([]*limStream, sends)
	var wg sync.WaitGroup
	for i := range sends {
		wg.Go(func() {
			s, err := e.openStream(t.Context(), key, `{"message":"hi"}`)
			if err != nil {
				t.Error(err)
				return
			}
			streams[i] = s
		})
	}
	wg.Wait() // every status is known; the 200s stream on
	if t.Failed() {
		t.FailNow()
	}
	var running []*limStream
	for i, s := range streams {
		switch s.status {
		case http.StatusOK:
			running = append(running, s)
		default:
			checkRefused(t, fmt.Sprintf("send %d", i), s.wait(t), store.LimitConcurrentRuns, "")
		}
	}
	if len(running) != 5 {
		t.Fatalf("%d sends run, want 5 (the limit)", len(running))
	}
	hold.await(t, 5) // the five runs are at their model calls
	if n := e.sessions(t, key); n != 5 {
		t.Errorf("%d sessions stored, want 5: a refused send stores nothing", n)
	}
	for _, s := range running {
		var run struct{ Status string }
		e.getJSON(t, key, "/v1/runs/"+s.runID, &run)
		if run.Status != store.RunRunning {
			t.Errorf("run %s is %q, want running", s.runID, run.Status)
		}
	}

	hold.release()
	for i, s := range running {
		a := s.wait(t)
		checkEnd(t, fmt.Sprintf("run %d", i), a, "complete", store.RunCompleted)
		if got := text(a.events); got != "a held answer" {
			t.Errorf("run %d streamed %q", i, got)
		}
	}
	a := e.send(t, key, "POST", "/v1/chat/stream", `{"message":"again"}`)
	checkEnd(t, "the send after the runs ended", a, "complete", store.RunCompleted)
	if n := len(e.upstream.Requests()); n != 6 {
		t.Errorf("the upstream got %d requests, want 6: refused sends call no model", n)
	}
}

// TestKeyOverridesConcurrentRuns: a key's own limit replaces its user's and counts over the key alone:
// under a user limit of 1, the key with 3 runs 3 while the user's other keys, which share the user's
// limit, run 1 between them.
func TestKeyOverridesConcurrentRuns(t *testing.T) {
	hold := newLimHold()
	e := newLimEnv(t, limSetup{Users: map[string]store.Limits{"bob": {ConcurrentRuns: 1}}, Hold: hold,
		Respond: func(int, llmtest.Request) llmtest.Turn { return hold.turn("held", nil) }})
	wide := e.key(t, auth.KeySpec{User: "bob", Name: "batch", Limits: store.Limits{ConcurrentRuns: 3}})
	plain := e.key(t, auth.KeySpec{User: "bob", Name: "laptop"})
	phone := e.key(t, auth.KeySpec{User: "bob", Name: "phone"})

	var running []*limStream
	for i := range 3 {
		s := e.open(t, wide, `{"message":"hi"}`)
		if s.status != http.StatusOK {
			t.Fatalf("the batch key's send %d: %v", i+1, s.wait(t))
		}
		running = append(running, s)
	}
	fourth := e.open(t, wide, `{"message":"hi"}`).wait(t)
	checkRefused(t, "the batch key's 4th send", fourth, store.LimitConcurrentRuns, "")
	if !strings.Contains(fourth.message, "this API key's limit of 3") {
		t.Errorf("the refusal says %q; want it to name the key's limit of 3", fourth.message)
	}

	s := e.open(t, plain, `{"message":"hi"}`)
	if s.status != http.StatusOK {
		t.Fatalf("the other key's first send, while the batch key runs 3: %v; want it to run: "+
			"the batch key's runs count over that key, not over its user", s.wait(t))
	}
	running = append(running, s)
	for _, k := range []string{plain, phone} {
		a := e.open(t, k, `{"message":"hi"}`).wait(t)
		checkRefused(t, "a send of a key without its own limit", a, store.LimitConcurrentRuns, "")
		if !strings.Contains(a.message, "your limit of 1") {
			t.Errorf("the refusal says %q; want it to name the user's limit of 1", a.message)
		}
	}

	hold.await(t, 4)
	hold.release()
	for i, s := range running {
		checkEnd(t, fmt.Sprintf("run %d", i), s.wait(t), "complete", store.RunCompleted)
	}
	for _, k := range []string{wide, plain} {
		checkEnd(t, "a send after the runs ended", e.send(t, k, "POST", "/v1/chat/stream", `{"message":"again"}`),
			"complete", store.RunCompleted)
	}
}

// TestKeyOverridesTokensPerDay: a key's own day of tokens counts over the key alone, and what it uses
// is not taken from its user's: the user's other key still has its 100.
func TestKeyOverridesTokensPerDay(t *testing.T) {
	used := map[string]int64{"big": 150, "small": 30, "large": 80}
	e := newLimEnv(t, limSetup{Users: map[string]store.Limits{"bob": {TokensPerDay: 100}},
		Respond: func(_ int, req llmtest.Request) llmtest.Turn {
			msgs := req.Messages()
			n := used[fmt.Sprint(msgs[len(msgs)-1]["content"])]
			return llmtest.Turn{Text: "ok", Usage: &llm.Usage{InputTokens: n - 5, OutputTokens: 5}}
		}})
	wide := e.key(t, auth.KeySpec{User: "bob", Name: "batch", Limits: store.Limits{TokensPerDay: 1000}})
	plain := e.key(t, auth.KeySpec{User: "bob", Name: "laptop"})
	send := func(key, msg string) limAnswer {
		return e.send(t, key, "POST", "/v1/chat/stream", `{"message":"`+msg+`"}`)
	}

	checkEnd(t, "the batch key's 150 tokens", send(wide, "big"), "complete", store.RunCompleted)
	checkEnd(t, "the other key's 30, after the batch key's 150", send(plain, "small"), "complete", store.RunCompleted)
	failed := checkEnd(t, "the other key's 80 more", send(plain, "large"), "error", store.RunFailed)
	if failed["code"] != store.LimitTokens {
		t.Errorf("the run's error = %v, want code %s", failed, store.LimitTokens)
	}
	checkRefused(t, "the other key after 110 of the user's 100", send(plain, "small"), store.LimitTokens, "3630")
	checkEnd(t, "the batch key after its 150 of 1000", send(wide, "big"), "complete", store.RunCompleted)
}

// TestRequestsPerMinute: of 50 requests at once under a limit of 5 a minute, exactly 5 pass and 45 are
// refused with 429 requests_per_minute, told to come back in 12 s; 12 s later one more passes. Another
// user's allowance is their own.
func TestRequestsPerMinute(t *testing.T) {
	e := newLimEnv(t, limSetup{Defaults: store.Limits{RequestsPerMinute: 5}})
	key := e.key(t, auth.KeySpec{User: "alice"})
	other := e.key(t, auth.KeySpec{User: "carol"})

	const requests = 50
	answers := make([]limAnswer, requests)
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			resp, err := e.request(t.Context(), key, "GET", "/v1/sessions", "")
			if err != nil {
				t.Error(err)
				return
			}
			if answers[i], err = readAnswer(resp); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	passed := 0
	for i, a := range answers {
		if a.status == http.StatusOK {
			passed++
			continue
		}
		checkRefused(t, fmt.Sprintf("request %d", i), a, auth.LimitRequests, "12")
	}
	if passed != 5 {
		t.Fatalf("%d requests passed, want 5", passed)
	}
	if a := e.send(t, other, "GET", "/v1/sessions", ""); a.status != http.StatusOK {
		t.Errorf("another user's request: %v", a)
	}

	e.clock.Advance(11 * time.Second)
	checkRefused(t, "a request 11 s later", e.send(t, key, "GET", "/v1/sessions", ""), auth.LimitRequests, "1")
	e.clock.Advance(time.Second)
	if a := e.send(t, key, "GET", "/v1/sessions", ""); a.status != http.StatusOK {
		t.Errorf("a request 12 s later: %v", a)
	}
	checkRefused(t, "the next one", e.send(t, key, "GET", "/v1/sessions", ""), auth.LimitRequests, "12")
}

// limToolTurn is a model call that asks for the time: its answer would need a second call.
func limToolTurn(usage *llm.Usage) llmtest.Turn {
	return llmtest.Turn{Text: "Let me check the time.", Usage: usage,
		ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "current_time", Arguments: `{"timezone":"UTC"}`}}}
}

// checkBudget runs the shape both budgets share. The first run's call stays under the budget and
// completes; the second run's first call (which asks for a tool) crosses it: that call's text is streamed
// and stored, the run fails with the limit's code, and the model is not called again. The next send is
// refused with 429, code, and Retry-After retry, by this chatd and by a new one on the same database.
func checkBudget(t *testing.T, e *limEnv, code, retry string) {
	key := e.key(t, auth.KeySpec{User: "carol"})
	bystander := e.key(t, auth.KeySpec{User: "dave"})

	a := e.send(t, key, "POST", "/v1/chat/stream", `{"message":"first"}`)
	checkEnd(t, "the run under the budget", a, "complete", store.RunCompleted)

	a = e.send(t, key, "POST", "/v1/chat/stream", `{"message":"what time is it?"}`)
	failed := checkEnd(t, "the run that crosses the budget", a, "error", store.RunFailed)
	if failed["code"] != code {
		t.Errorf("the run's error = %v, want code %s", failed, code)
	}
	if got := text(a.events); got != "Let me check the time." {
		t.Errorf("the run streamed %q; want its model call's whole text", got)
	}
	if n := len(e.upstream.Requests()); n != 2 {
		t.Errorf("the upstream got %d requests, want 2: the run past its budget calls the model no more", n)
	}
	sessionID := a.events[0].Data["session_id"].(string)
	var msgs struct{ Messages []runevent.Record }
	e.getJSON(t, key, "/v1/sessions/"+sessionID+"/messages", &msgs)
	if len(msgs.Messages) < 2 || msgs.Messages[1].Role != "assistant" || msgs.Messages[1].Content != "Let me check the time." {
		t.Errorf("stored: %+v; want the call's answer kept", msgs.Messages)
	}
	for _, m := range msgs.Messages[2:] {
		if m.Role == "assistant" {
			t.Errorf("a second answer was stored: %+v", m)
		}
	}

	refused := e.send(t, key, "POST", "/v1/chat/stream", `{"message":"more"}`)
	checkRefused(t, "the send after the budget is used up", refused, code, retry)
	if a := e.send(t, bystander, "POST", "/v1/chat/stream", `{"message":"hi"}`); a.status != http.StatusOK {
		t.Errorf("another user's send: %v; their budget is their own", a)
	}

	e.restart(t)
	refused = e.send(t, key, "POST", "/v1/chat/stream", `{"message":"more"}`)
	checkRefused(t, "the send after a restart", refused, code, retry)
	if n := len(e.upstream.Requests()); n != 3 {
		t.Errorf("the upstream got %d requests, want 3 (two of carol's, one of dave's)", n)
	}
}

// limBudgetRespond answers carol's "first" under the budget and her "what time is it?" with a tool
// call that crosses it (and the call after the tool, were it made, with text); anything else cheaply.
func limBudgetRespond(_ int, req llmtest.Request) llmtest.Turn {
	msgs := req.Messages()
	if last := msgs[len(msgs)-1]; last["role"] == "tool" {
		return llmtest.Turn{Text: "It is noon.", Usage: &llm.Usage{InputTokens: 80, OutputTokens: 5}}
	}
	switch msgs[len(msgs)-1]["content"] {
	case "first":
		return llmtest.Turn{Text: "Hello.", Usage: &llm.Usage{InputTokens: 30, OutputTokens: 10}}
	case "what time is it?":
		return limToolTurn(&llm.Usage{InputTokens: 50, OutputTokens: 20})
	}
	return llmtest.Turn{Text: "Hi.", Usage: &llm.Usage{InputTokens: 5, OutputTokens: 5}}
}

// TestTokensPerDay: a run that crosses the day's tokens finishes the model call it is in, keeps its
// answer and fails with tokens_per_day; the next send waits for the next UTC midnight.
func TestTokensPerDay(t *testing.T) {
	e := newLimEnv(t, limSetup{Defaults: store.Limits{TokensPerDay: 100}, Respond: limBudgetRespond})
	// 40 tokens, then 70 more: 110 of 100. Midnight is 30 s and an hour after limStart.
	checkBudget(t, e, store.LimitTokens, "3630")
}

// TestSpendLimit: the same with a spend budget, priced from the price table.
func TestSpendLimit(t *testing.T) {
	e := newLimEnv(t, limSetup{Defaults: store.Limits{SpendUSD: 0.0001, SpendPeriod: "week"}, Respond: limBudgetRespond,
		Prices: map[string]chat.Price{"openai/gpt-4o-mini": {Input: 1.0, Output: 2.0}}})
	// $0.00005 (30 + 2×10 µ$), then $0.00009 more (50 + 2×20 µ$): $0.00014 of $0.0001. The week ends on Monday
	// 2024-03-04: 4 days, 1 h and 30 s after limStart (a Wednesday, with the leap day between).
	checkBudget(t, e, store.LimitSpend, "349230")
	var got struct {
		Usage []struct {
			CostUSD float64 `json:"cost_usd"`
		}
	}
	e.getJSON(t, e.key(t, auth.KeySpec{User: "root", Admin: true}), "/v1/usage?group_by=user&user=carol", &got)
	if len(got.Usage) != 1 || got.Usage[0].CostUSD != 0.00014 {
		t.Errorf("carol's usage: %+v; want $0.00014", got.Usage)
	}
}

// TestTokenLimitEndsABatchRunWith429: POST /v1/chat, whose run the day's tokens end after its model call,
// answers as a send over a limit does — 429 tokens_per_day with Retry-After — and carries the run,
// whose answer is kept.
func TestTokenLimitEndsABatchRunWith429(t *testing.T) {
	e := newLimEnv(t, limSetup{Defaults: store.Limits{TokensPerDay: 100}, Respond: limBudgetRespond})
	key := e.key(t, auth.KeySpec{User: "carol"})
	if a := e.send(t, key, "POST", "/v1/chat", `{"message":"first"}`); a.status != http.StatusOK {
		t.Fatalf("the run under the budget: %v", a)
	}
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	resp, err := e.request(ctx, key, "POST", "/v1/chat", `{"message":"what time is it?"}`)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		RunID   string `json:"run_id"`
		Status  string
		Message runevent.Record
		Error   runevent.Error
	}
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "3630" {
		t.Errorf("%d, Retry-After %q: %s; want 429 with Retry-After 3630, as the next send gets",
			resp.StatusCode, resp.Header.Get("Retry-After"), raw)
	}
	if got.Status != store.RunFailed || got.Error.Code != store.LimitTokens || got.RunID == "" ||
		got.Message.Content != "Let me check the time." {
		t.Errorf("the answer: %s; want the failed run, its tokens_per_day error and its kept answer", raw)
	}
	checkRefused(t, "the next send", e.send(t, key, "POST", "/v1/chat", `{"message":"more"}`), store.LimitTokens, "3630")
}

// limUsage is a usage total as GET /v1/usage answers it.
type limUsage struct {
	Group            string  `json:"group"`
	Calls            int64   `json:"calls"`
	InputTokens      int64   `json:"input_tokens"`
	OutputTokens     int64   `json:"output_tokens"`
	CacheReadTokens  int64   `json:"cache_read_tokens"`
	CacheWriteTokens int64   `json:"cache_write_tokens"`
	ReasoningTokens  int64   `json:"reasoning_tokens"`
	CostUSD          float64 `json:"cost_usd"`
}

// limCall is one model call as its run streamed it, labelled with who made it and how.
type limCall struct {
	user, key, agent, model string
	usage                   runevent.Usage
}

// limNanoPrices are the test's price table in nano-dollars a token (the $/Mtok prices × 1000), so
// that the expected costs are sums of whole numbers.
var limNanoPrices = map[string]struct{ input, output, cacheRead int64 }{
	"openai/gpt-4o-mini": {1000, 2000, 1000},
	"openai/gpt-4o":      {3000, 6000, 500},
}

// limTotals sums calls by the group each belongs to, in ascending order of group, as the API sorts.
func limTotals(calls []limCall, group func(limCall) string) []limUsage {
	byGroup := map[string]*limUsage{}
	nanos := map[string]int64{}
	for _, c := range calls {
		g := group(c)
		if g == "" {
			continue
		}
		u := byGroup[g]
		if u == nil {
			u = &limUsage{Group: g}
			byGroup[g] = u
		}
		u.Calls++
		u.InputTokens += c.usage.InputTokens
		u.OutputTokens += c.usage.OutputTokens
		u.CacheReadTokens += c.usage.CacheReadTokens
		u.CacheWriteTokens += c.usage.CacheWriteTokens
		u.ReasoningTokens += c.usage.ReasoningTokens
		p := limNanoPrices[c.model]
		plain := c.usage.InputTokens - c.usage.CacheReadTokens - c.usage.CacheWriteTokens
		nanos[g] += plain*p.input + c.usage.CacheReadTokens*p.cacheRead + c.usage.CacheWriteTokens*p.input + c.usage.OutputTokens*p.output
	}
	out := []limUsage{}
	for g, u := range byGroup {
		u.CostUSD = float64(nanos[g]) / 1e9
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b limUsage) int { return strings.Compare(a.Group, b.Group) })
	return out
}

// TestUsageTotals: 3 users with 2 agents and 2 models make runs of one and two model calls; GET
// /v1/usage sums what their runs streamed per user, key, agent, model and day, with the cost from the
// price table. An admin sees everyone's or one user's; a user only their own; from and to bound the
// calls.
func TestUsageTotals(t *testing.T) {
	e := newLimEnv(t, limSetup{
		Prices: map[string]chat.Price{
			"openai/gpt-4o-mini": {Input: 1, Output: 2},
			"openai/gpt-4o":      {Input: 3, Output: 6, CacheRead: 0.5},
		},
		Agents: map[string]chat.Agent{"default": {Model: "openai/gpt-4o-mini"}, "writer": {Model: "openai/gpt-4o"}},
		Respond: func(n int, req llmtest.Request) llmtest.Turn {
			// Each call's usage differs, so that a call counted twice or in the wrong group shows.
			u := &llm.Usage{InputTokens: int64(100 + 7*n), OutputTokens: int64(10 + n%7), CacheReadTokens: int64(n % 3 * 20),
				ReasoningTokens: int64(n % 4)}
			msgs := req.Messages()
			last := msgs[len(msgs)-1]
			if last["role"] == "user" && last["content"] == "use a tool" {
				return limToolTurn(u)
			}
			return llmtest.Turn{Text: "Done.", Usage: u}
		}})
	root := e.key(t, auth.KeySpec{User: "root", Admin: true})
	type caller struct{ user, secret, id string }
	newCaller := func(user, name string) caller {
		secret, id := e.keyID(t, auth.KeySpec{User: user, Name: name})
		return caller{user, secret, id}
	}
	alice1, alice2, bob, carol := newCaller("alice", "one"), newCaller("alice", "two"), newCaller("bob", ""), newCaller("carol", "")

	var calls []limCall
	// run sends a message and keeps the usage of each model call its run streamed.
	run := func(c caller, agent, model, msg string) {
		a := e.send(t, c.secret, "POST", "/v1/chat/stream", fmt.Sprintf(`{"message":%q,"agent":%q,"model":%q}`, msg, agent, model))
		checkEnd(t, "a run", a, "complete", store.RunCompleted)
		for _, ev := range a.events {
			if ev.Type != "usage" {
				continue
			}
			raw, _ := json.Marshal(ev.Data)
			u, err := runevent.Decode[runevent.UsageEvent](raw)
			if err != nil {
				t.Fatal(err)
			}
			calls = append(calls, limCall{user: c.user, key: c.id, agent: agent, model: u.Model, usage: u.Usage})
		}
	}
	// batch runs, for each caller and agent, one run of one model call and one of two, on the model.
	batch := func(model string, callers ...caller) {
		for _, c := range callers {
			for _, agent := range []string{"default", "writer"} {
				run(c, agent, model, "say something")
				run(c, agent, model, "use a tool")
			}
		}
	}
	before := time.Now().UTC()
	batch("openai/gpt-4o-mini", alice1, bob, carol)
	// The store stamps each call with the real clock. Every call of the first batch was stored before its
	// run ended, and so before this instant; every call of the second after it. The instant divides the
	// calls by the order of events, whatever the time between them.
	between := time.Now().UTC()
	batch("openai/gpt-4o", alice2, bob, carol)
	after := time.Now().UTC()
	if len(calls) != 2*3*2*3 {
		t.Fatalf("%d model calls streamed their usage, want 36 (2 models × 3 users × 2 agents × 3 calls)", len(calls))
	}

	// Groupings of the calls; "" leaves a call out.
	users := func(c limCall) string { return c.user }
	keys := func(c limCall) string { return c.key }
	agents := func(c limCall) string { return c.agent }
	models := func(c limCall) string { return c.model }
	none := func(limCall) string { return "" }
	only := func(user string, group func(limCall) string) func(limCall) string {
		return func(c limCall) string {
			if c.user != user {
				return ""
			}
			return group(c)
		}
	}
	on := func(model string, group func(limCall) string) func(limCall) string {
		return func(c limCall) string {
			if c.model != model {
				return ""
			}
			return group(c)
		}
	}
	at := func(t time.Time) string { return url.QueryEscape(t.Format(time.RFC3339Nano)) }
	for _, tc := range []struct {
		name, key, as, query string
		want                 func(limCall) string
	}{
		{"admin by user", root, "", "group_by=user", users},
		{"admin by key", root, "", "group_by=key", keys},
		{"admin by agent", root, "", "group_by=agent", agents},
		{"admin by model", root, "", "group_by=model", models},
		{"admin by model, the default grouping", root, "", "", models},
		{"admin, one user's", root, "", "group_by=agent&user=bob", only("bob", agents)},
		{"admin as a user", root, "carol", "group_by=key", only("carol", keys)},
		{"a user by user", alice1.secret, "", "group_by=user", only("alice", users)},
		{"a user by key, with another of her keys", alice2.secret, "", "group_by=key", only("alice", keys)},
		{"a user asking for another's", alice1.secret, "", "group_by=model&user=bob", only("alice", models)},
		{"another user", bob.secret, "", "group_by=agent", only("bob", agents)},
		{"to the first batch's end", root, "", "group_by=user&to=" + at(between), on("openai/gpt-4o-mini", users)},
		{"from the second batch's start", root, "", "group_by=agent&from=" + at(between), on("openai/gpt-4o", agents)},
		{"a user's, from the second batch's start", alice1.secret, "", "group_by=key&from=" + at(between),
			on("openai/gpt-4o", only("alice", keys))},
		{"to the first call's day", root, "", "group_by=user&to=" + before.Format(time.DateOnly), none},
		{"from the day after the last call's", root, "", "group_by=user&from=" + after.AddDate(0, 0, 1).Format(time.DateOnly), none},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/v1/usage?" + tc.query
			got := e.usage(t, tc.key, tc.as, path)
			if diff := cmp.Diff(limTotals(calls, tc.want), got); diff != "" {
				t.Errorf("GET %s (-want +got):\n%s", path, diff)
			}
		})
	}

	// Days are the real clock's, in UTC: the calls' day, or two when they crossed a midnight.
	var sum limUsage
	for _, d := range e.usage(t, root, "", "/v1/usage?group_by=day") {
		if _, err := time.Parse(time.DateOnly, d.Group); err != nil || d.Group < before.Format(time.DateOnly) || d.Group > after.Format(time.DateOnly) {
			t.Errorf("day %q is not one of the calls' (%s to %s)", d.Group, before, after)
		}
		sum.Calls += d.Calls
		sum.InputTokens += d.InputTokens
		sum.OutputTokens += d.OutputTokens
		sum.CacheReadTokens += d.CacheReadTokens
		sum.CacheWriteTokens += d.CacheWriteTokens
		sum.ReasoningTokens += d.ReasoningTokens
		sum.CostUSD += d.CostUSD
	}
	total := limTotals(calls, func(limCall) string { return "all" })[0]
	total.Group = ""
	if diff := cmp.Diff(total, sum, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
		t.Errorf("the days add up to (-want +got):\n%s", diff)
	}
}

// usage reads GET /v1/usage as the key, or as user with X-Chatd-As-User when as is set.
func (e *limEnv) usage(t *testing.T, key, as, path string) []limUsage {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", e.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if as != "" {
		req.Header.Set(httpapi.AsUserHeader, as)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var got struct{ Usage []limUsage }
	if err := json.Unmarshal(raw, &got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, raw)
	}
	return got.Usage
}
