package mcpclient

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"chatd/internal/tool"
)

// asked is one question a fakeAsker got, with the way to answer it.
type asked struct {
	ctx    context.Context
	q      tool.Question
	answer chan tool.Answer
}

// fakeAsker hands each question to the test, and waits for its answer or for its context to end.
type fakeAsker struct {
	questions chan asked
}

func newAsker() *fakeAsker { return &fakeAsker{questions: make(chan asked, 4)} }

func (a *fakeAsker) Ask(ctx context.Context, q tool.Question) (tool.Answer, error) {
	x := asked{ctx: ctx, q: q, answer: make(chan tool.Answer, 1)}
	a.questions <- x
	select {
	case ans := <-x.answer:
		return ans, nil
	case <-ctx.Done():
		return tool.Answer{}, ctx.Err()
	}
}

// elicited reads what the test server's elicit tool got back.
func elicited(t *testing.T, out tool.Outcome) map[string]any {
	t.Helper()
	var got map[string]any
	if err := json.Unmarshal([]byte(out.Content), &got); err != nil {
		t.Fatalf("srv__elicit: %q: %v", out.Content, err)
	}
	return got
}

// elicitTransports runs f over every transport, and over HTTP with a server that speaks no later
// protocol than 2025-11-25, which sends elicitation/create on its own rather than as an input request
// of the call's result.
func elicitTransports(t *testing.T, f func(t *testing.T, m *Manager, reg *tool.Registry)) {
	transports(t, "", f)
	t.Run("http-2025-11-25", func(t *testing.T) {
		srv := httpServer(t, legacyServer(), nil)
		m, reg := startManager(t, httpConfig("srv", srv.URL, ""), nil, testOptions())
		f(t, m, reg)
	})
}

// legacyServer is the test server on protocol 2025-11-25 at the latest.
func legacyServer() *testServer {
	return newTestServer(&mcp.ServerOptions{PageSize: 2, SupportedProtocolVersions: []string{"2025-11-25", "2025-06-18"}})
}

// TestElicitation: a server's elicitation during a call reaches the asker in the call's context, with
// its message and schema, and the answer — accept with content, or decline — reaches the server.
func TestElicitation(t *testing.T) {
	elicitTransports(t, func(t *testing.T, m *Manager, reg *tool.Registry) {
		for _, tc := range []struct {
			answer tool.Answer
			want   string
		}{
			{tool.Answer{Action: tool.ActionAccept, Content: map[string]any{"name": "Ada", "age": 36}}, `{"action":"accept","content":{"age":36,"name":"Ada"}}`},
			{tool.Answer{Action: tool.ActionDecline}, `{"action":"decline","content":null}`},
		} {
			a := newAsker()
			done := make(chan tool.Outcome, 1)
			go func() { done <- reg.Call(tool.WithAsker(t.Context(), a), "srv__elicit", json.RawMessage(`{}`)) }()
			x := receive(t, a.questions, "the elicitation did not reach the asker")
			if _, ok := x.ctx.Deadline(); !ok {
				t.Error("the asker's context has no deadline: the call's timeout does not bound the wait")
			}
			if x.q.Message != "Who are you?" || !strings.Contains(string(x.q.Schema), `"name":{"title":"Name","type":"string"}`) {
				t.Errorf("question: %q %s", x.q.Message, x.q.Schema)
			}
			x.answer <- tc.answer
			out := receive(t, done, "srv__elicit did not return")
			if got := out.Content; got != tc.want {
				t.Errorf("the server got %s, want %s", got, tc.want)
			}
		}
	})
}

// TestElicitationCancelled: a call cancelled while its question waits ends the asker's wait, and the
// call returns.
func TestElicitationCancelled(t *testing.T) {
	elicitTransports(t, func(t *testing.T, m *Manager, reg *tool.Registry) {
		a := newAsker()
		ctx, cancel := context.WithCancel(tool.WithAsker(t.Context(), a))
		defer cancel()
		done := make(chan tool.Outcome, 1)
		go func() { done <- reg.Call(ctx, "srv__elicit", json.RawMessage(`{}`)) }()
		x := receive(t, a.questions, "the elicitation did not reach the asker")
		cancel()
		receive(t, x.ctx.Done(), "the asker's wait did not end with the call")
		if out := receive(t, done, "srv__elicit did not return once cancelled"); out.Success {
			t.Errorf("a cancelled call succeeded: %+v", out)
		}
		mustCall(t, reg, "srv__echo", `{"text":"after"}`)
	})
}

// TestElicitationDeclined: an elicitation chatd cannot tie to one person's call is declined without
// asking anyone: one during a call without an asker, and one sent on its own (protocol 2025-11-25)
// while several calls are in flight on the session.
func TestElicitationDeclined(t *testing.T) {
	elicitTransports(t, func(t *testing.T, m *Manager, reg *tool.Registry) {
		if got := elicited(t, mustCall(t, reg, "srv__elicit", `{}`)); got["action"] != "decline" {
			t.Errorf("without an asker: %v, want decline", got)
		}
	})
	srv := httpServer(t, legacyServer(), nil)
	_, reg := startManager(t, httpConfig("srv", srv.URL, ""), nil, testOptions())
	a := newAsker()
	// A second call in flight: block reports progress once it runs.
	r := newReporter()
	ctx, cancel := context.WithCancel(tool.WithProgress(t.Context(), r.report))
	defer cancel()
	blocked := make(chan tool.Outcome, 1)
	go func() { blocked <- reg.Call(ctx, "srv__block", json.RawMessage(`{}`)) }()
	r.waitReports(t, 1)
	if got := elicited(t, reg.Call(tool.WithAsker(t.Context(), a), "srv__elicit", json.RawMessage(`{}`))); got["action"] != "decline" {
		t.Errorf("with another call in flight: %v, want decline", got)
	}
	cancel()
	receive(t, blocked, "srv__block did not return once cancelled")
	select {
	case x := <-a.questions:
		t.Errorf("the asker was asked %q", x.q.Message)
	default:
	}
}

// TestElicitationURL: a URL-mode elicitation is refused, saying so, and nobody is asked.
func TestElicitationURL(t *testing.T) {
	elicitTransports(t, func(t *testing.T, m *Manager, reg *tool.Registry) {
		a := newAsker()
		out := reg.Call(tool.WithAsker(t.Context(), a), "srv__elicit_url", json.RawMessage(`{}`))
		// The server's SDK may refuse it itself (chatd does not offer URL mode); else chatd does.
		if out.Success || !strings.Contains(out.Content, "chatd supports form elicitation only") &&
			!strings.Contains(out.Content, `client does not support "url" elicitation`) {
			t.Errorf("srv__elicit_url: %+v, want a failure saying URL mode is not supported", out)
		}
		select {
		case x := <-a.questions:
			t.Errorf("the asker was asked %q", x.q.Message)
		default:
		}
	})
}

// elicitedAsked calls srv__elicit with args and returns the question the asker got, declining it.
func elicitedAsked(t *testing.T, reg *tool.Registry, a *fakeAsker, args string) asked {
	t.Helper()
	done := make(chan tool.Outcome, 1)
	go func() { done <- reg.Call(tool.WithAsker(t.Context(), a), "srv__elicit", json.RawMessage(args)) }()
	x := receive(t, a.questions, "the elicitation did not reach the asker")
	x.answer <- tool.Answer{Action: tool.ActionDecline}
	receive(t, done, "srv__elicit did not return")
	return x
}

// TestElicitationTooBig: a requested schema over chatd's limits (fields, choices) is refused with an error that says so,
// and nobody is asked.
func TestElicitationTooBig(t *testing.T) {
	elicitTransports(t, func(t *testing.T, m *Manager, reg *tool.Registry) {
		a := newAsker()
		for args, limit := range map[string]string{
			`{"fields":33}`:   "asks for 33 fields; chatd takes at most 32",
			`{"choices":101}`: `field "pick" has 101 choices; chatd takes at most 100`,
		} {
			out := reg.Call(tool.WithAsker(t.Context(), a), "srv__elicit", json.RawMessage(args))
			if out.Success || !strings.Contains(out.Content, limit) {
				t.Errorf("srv__elicit %s: %+v, want a failure naming the limit", args, out)
			}
		}
		if got := elicitedAsked(t, reg, a, `{"choices":100}`); got.q.Message == "" {
			t.Error("a question of 100 choices was not asked")
		}
		select {
		case x := <-a.questions:
			t.Errorf("the asker was asked %q", x.q.Message)
		default:
		}
	})
}

// clock is a test clock that moves only when told; its timers fire when it moves past them.
type clock struct {
	mu     sync.Mutex
	t      time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at   time.Time
	f    func()
	done bool // fired or stopped
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) afterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.t.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		stopped := !t.done
		t.done = true
		return stopped
	}
}

// advance moves the clock, and fires the timers now due, in the caller's goroutine.
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	var due []func()
	for _, t := range c.timers {
		if !t.done && !t.at.After(c.t) {
			t.done = true
			due = append(due, t.f)
		}
	}
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}

// options are testOptions on c.
func (c *clock) options() Options {
	opts := testOptions()
	opts.Now, opts.AfterFunc = c.now, c.afterFunc
	return opts
}

// TestElicitationOfAbandonedCall: a server still at work on a call chatd abandoned (Bob cancelled it)
// asks its question on its own (protocol 2025-11-25) once another person's call (Alice's) is the only
// one in flight. While the abandoned call lingers the question is declined and Alice is not asked;
// once its time is up, its place is free.
func TestElicitationOfAbandonedCall(t *testing.T) {
	ts := legacyServer()
	started := make(chan struct{}, 1)
	ask := make(chan struct{})  // the test lets the abandoned call's server side ask
	got := make(chan string, 2) // what the server got back
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(ask)
	ts.raw("transfer", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ss := req.Session
		started <- struct{}{}
		<-ctx.Done() // Bob cancelled: the server goes on with its work anyway
		wg.Go(func() {
			for range ask {
				res, err := ss.Elicit(context.Background(), &mcp.ElicitParams{Message: "Bob: type your PIN to confirm the transfer",
					RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"pin": map[string]any{"type": "string"}}}})
				if err != nil {
					got <- "error: " + err.Error()
					continue
				}
				got <- res.Action
			}
		})
		return nil, ctx.Err()
	})
	srv := httpServer(t, ts, nil)
	clk := newClock()
	_, reg := startManager(t, httpConfig("srv", srv.URL, ""), nil, clk.options())

	bob, alice := newAsker(), newAsker()
	bctx, bcancel := context.WithCancel(tool.WithAsker(t.Context(), bob))
	bdone := make(chan tool.Outcome, 1)
	go func() { bdone <- reg.Call(bctx, "srv__transfer", json.RawMessage(`{}`)) }()
	receive(t, started, "srv__transfer did not start")
	bcancel()
	receive(t, bdone, "Bob's call did not return once cancelled")

	r := newReporter()
	actx, acancel := context.WithCancel(tool.WithAsker(tool.WithProgress(t.Context(), r.report), alice))
	defer acancel()
	adone := make(chan tool.Outcome, 1)
	go func() { adone <- reg.Call(actx, "srv__block", json.RawMessage(`{}`)) }()
	r.waitReports(t, 1)

	ask <- struct{}{}
	if a := receive(t, got, "the server got no answer to its question"); a != tool.ActionDecline {
		t.Errorf("while Bob's abandoned call lingers, the server got %q, want decline", a)
	}
	select {
	case x := <-alice.questions:
		t.Fatalf("Alice was asked Bob's question %q", x.q.Message)
	default:
	}

	// A minute later (the server's longest timeout is the registry's 10s) the abandoned call is
	// forgotten: Alice's call is the only one in flight again.
	clk.advance(time.Minute + time.Second)
	ask <- struct{}{}
	x := receive(t, alice.questions, "with Bob's call forgotten, the only call in flight was not asked")
	x.answer <- tool.Answer{Action: tool.ActionDecline}
	if a := receive(t, got, "the server got no answer to its second question"); a != tool.ActionDecline {
		t.Errorf("the server got %q, want decline", a)
	}
	acancel()
	receive(t, adone, "Alice's call did not return once cancelled")
}

// TestLinger: an abandoned call counts as in flight for the server's longest configured timeout, at
// least a minute.
func TestLinger(t *testing.T) {
	for _, tc := range []struct {
		config string
		want   time.Duration
	}{
		{`{"url":"http://x"}`, time.Minute},
		{`{"url":"http://x","timeout":"5m"}`, 5 * time.Minute},
		{`{"url":"http://x","timeout":"10s","tools":{"book":{"timeout":"20m"}}}`, 20 * time.Minute},
	} {
		servers, err := ParseConfig([]byte(`{"mcpServers":{"s":`+tc.config+`}}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		reg := tool.NewRegistry(tool.Options{DefaultTimeout: 30 * time.Second})
		m := New(servers, Options{Registry: reg})
		if got := m.servers[0].linger(); got != tc.want {
			t.Errorf("%s: linger %s, want %s", tc.config, got, tc.want)
		}
	}
}

// TestElicitationOutsideForm: a requested schema outside MCP's flat form subset is refused with an
// error to the server that names what chatd does not take, and nobody is asked. The SDK lets the $ref
// cycles through; an answer checked against one (chatd's check, or the SDK's after it) recursed until
// the stack overflowed, which killed the process.
func TestElicitationOutsideForm(t *testing.T) {
	str := `{"type":"string"}`
	for _, tc := range []struct{ name, schema, want string }{
		{"root $ref cycle", `{"$ref":"#","type":"object","properties":{"a":` + str + `}}`, `requestedSchema has "$ref"`},
		{"allOf of itself", `{"type":"object","allOf":[{"$ref":"#"}],"properties":{"a":` + str + `}}`, `requestedSchema has "allOf"`},
		{"$defs cycle", `{"type":"object","$defs":{"x":{"$ref":"#/$defs/y"},"y":{"$ref":"#/$defs/x"}},"properties":{"a":{"type":"string","$ref":"#/$defs/x"}}}`, `requestedSchema has "$defs"`},
		{"definitions", `{"type":"object","definitions":{},"properties":{}}`, `has "definitions"`},
		{"property $ref", `{"type":"object","properties":{"a":{"type":"string","$ref":"#"}}}`, `field "a" has "$ref"`},
		{"property not", `{"type":"object","properties":{"a":{"type":"string","not":{"$ref":"#"}}}}`, `field "a" has "not"`},
		{"if then else", `{"type":"object","properties":{"a":{"type":"string","if":{},"then":{},"else":{}}}}`, `field "a" has "else"`},
		{"$dynamicRef", `{"type":"object","properties":{"a":{"type":"string","$dynamicRef":"#"}}}`, `field "a" has "$dynamicRef"`},
		{"dependentSchemas", `{"type":"object","dependentSchemas":{},"properties":{}}`, `has "dependentSchemas"`},
		{"nested object", `{"type":"object","properties":{"a":{"type":"object","properties":{"b":` + str + `}}}}`, `field "a" has "properties"`},
		{"object type", `{"type":"object","properties":{"a":{"type":"object"}}}`, `field "a" has type "object"`},
		{"titled choice with $ref", `{"type":"object","properties":{"a":{"type":"string","oneOf":[{"const":"x","title":"X","$ref":"#"}]}}}`, `oneOf has "$ref"`},
		{"items with $ref", `{"type":"object","properties":{"a":{"type":"array","items":{"$ref":"#"}}}}`, `items has "$ref"`},
		{"unknown keyword", `{"type":"object","properties":{"a":{"type":"string","x-widget":"pin"}}}`, `field "a" has "x-widget"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var schema any
			if err := json.Unmarshal([]byte(tc.schema), &schema); err != nil {
				t.Fatal(err)
			}
			_, err := questionOf(&mcp.ElicitParams{Message: "Code?", RequestedSchema: schema})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "flat form") {
				t.Errorf("questionOf: %v, want a refusal naming %s", err, tc.want)
			}
		})
	}
	elicitTransports(t, func(t *testing.T, m *Manager, reg *tool.Registry) {
		a := newAsker()
		out := reg.Call(tool.WithAsker(t.Context(), a), "srv__elicit", json.RawMessage(`{"schema":{"$ref":"#","type":"object","properties":{"a":{"type":"string"}}}}`))
		if out.Success || !strings.Contains(out.Content, `has "$ref", which chatd does not take`) {
			t.Errorf("srv__elicit with a $ref cycle: %+v, want a failure naming $ref", out)
		}
		select {
		case x := <-a.questions:
			t.Errorf("the asker was asked %q", x.q.Message)
		default:
		}
	})
}

// TestElicitationForm: every keyword of the flat form subset is taken, and an answer is checked with
// the schema chatd builds of them: the server's pattern, enum, bounds and defaults.
func TestElicitationForm(t *testing.T) {
	schema := map[string]any{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "title": "PIN", "description": "d",
		"required": []string{"pin"}, "properties": map[string]any{
			"pin":   map[string]any{"type": "string", "title": "PIN", "description": "4 digits", "pattern": `^\d{4}$`, "minLength": 4, "maxLength": 4, "format": "email"},
			"n":     map[string]any{"type": "integer", "minimum": 1, "maximum": 9, "multipleOf": 1, "default": 3},
			"x":     map[string]any{"type": "number"},
			"ok":    map[string]any{"type": "boolean", "default": true},
			"size":  map[string]any{"type": "string", "enum": []string{"s", "m"}, "enumNames": []string{"Small", "Medium"}},
			"tone":  map[string]any{"type": "string", "oneOf": []any{map[string]any{"const": "a", "title": "A"}}},
			"tags":  map[string]any{"type": "array", "items": map[string]any{"type": "string", "enum": []string{"x", "y"}}, "minItems": 1, "maxItems": 2, "uniqueItems": true},
			"ttags": map[string]any{"type": "array", "items": map[string]any{"anyOf": []any{map[string]any{"const": "x", "title": "X"}}}},
		}}
	q, err := questionOf(&mcp.ElicitParams{Message: "PIN?", RequestedSchema: schema})
	if err != nil {
		t.Fatalf("questionOf: %v", err)
	}
	if _, err := q.Check(map[string]any{"pin": "12a4"}); err == nil || !strings.Contains(err.Error(), `field "pin"`) {
		t.Errorf("a PIN off its pattern: %v, want an error on pin", err)
	}
	got, err := q.Check(map[string]any{"pin": "1234"})
	if err != nil {
		t.Fatalf("a good answer: %v", err)
	}
	if got["n"] != json.Number("3") && got["n"] != float64(3) || got["ok"] != true {
		t.Errorf("defaults not filled in: %v", got)
	}
}

// TestElicitationPatternLimits: a pattern over 512 bytes, with a repeat over 100, or unrolling to
// more than chatd compiles, is refused before anything is compiled; one within the limits is taken.
func TestElicitationPatternLimits(t *testing.T) {
	for _, tc := range []struct {
		pattern, want string
	}{
		{strings.Repeat("a", maxPattern+1), "pattern is 513 bytes; chatd takes at most 512"},
		{`^\d{101}$`, "unrolls to about"},
		{"(a{10}b{10}c{10}d{10}){60}", "unrolls to about"},
		{strings.Repeat("[a-z]{100}", 30), "unrolls to about"},
		{"(a", "not a regular expression"},
	} {
		schema := map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "string", "pattern": tc.pattern}}}
		if _, err := questionOf(&mcp.ElicitParams{RequestedSchema: schema}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("pattern %.40q: %v, want %q", tc.pattern, err, tc.want)
		}
	}
	// Asking costs little even at the limits: nothing is compiled until a person answers. (Compiling
	// the 16 KiB of "[a-z]{1000}" the limits refuse took hundreds of MB.)
	props := map[string]any{}
	for i := range tool.MaxQuestionFields {
		props["f"+strconv.Itoa(i)] = map[string]any{"type": "string", "pattern": strings.Repeat("[a-z]{100}", 19)}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	q, err := questionOf(&mcp.ElicitParams{RequestedSchema: map[string]any{"type": "object", "properties": props}})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatalf("32 patterns at the limits: %v", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 8<<20 {
		t.Errorf("asking a question of 32 patterns at the limits allocated %d MB, want little", n>>20)
	}
	if _, err := q.Check(map[string]any{"f0": strings.Repeat("a", 1900)}); err != nil {
		t.Errorf("an answer fitting a pattern at the limits: %v", err)
	}
	for _, ok := range []string{`^\d{4}$`, `^[A-Z]{2}\d{2}[A-Z0-9]{1,30}$`, strings.Repeat("a", maxPattern)} {
		schema := map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "string", "pattern": ok}}}
		if _, err := questionOf(&mcp.ElicitParams{RequestedSchema: schema}); err != nil {
			t.Errorf("pattern %.40q: %v", ok, err)
		}
	}
}

// TestElicitationAfterGatewayTimeout: a gateway in front of the server answers Bob's call 504 after
// forwarding it, and the server goes on with the call. The call's error is not the server's answer, so
// the call lingers as an abandoned one: the server's later question is declined, not put to Alice,
// whose call is then the only one in flight. Bob is told the call may or may not have run.
func TestElicitationAfterGatewayTimeout(t *testing.T) {
	ts := legacyServer()
	started := make(chan struct{}, 1)
	release := make(chan struct{}) // ends the server's side of Bob's call
	ask := make(chan struct{})     // the test lets it ask its question
	got := make(chan string, 1)    // what the server got back
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(release)
	ts.raw("transfer", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		started <- struct{}{}
		select {
		case <-ask:
		case <-release:
			return text("released"), nil
		}
		res, err := req.Session.Elicit(context.Background(), &mcp.ElicitParams{Message: "Bob: type your PIN to confirm the transfer",
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"pin": map[string]any{"type": "string"}}}})
		if err != nil {
			got <- "error: " + err.Error()
		} else {
			got <- res.Action
		}
		<-release
		return text("done"), nil
	})
	gateway := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if !bytes.Contains(body, []byte(`"name":"transfer"`)) {
				h.ServeHTTP(w, r)
				return
			}
			// Forwarded upstream, where it runs on; the gateway gives up on it.
			up := r.Clone(context.WithoutCancel(r.Context()))
			up.Body = io.NopCloser(bytes.NewReader(body))
			wg.Go(func() { h.ServeHTTP(httptest.NewRecorder(), up) })
			<-started
			http.Error(w, "upstream timed out", http.StatusGatewayTimeout)
		})
	}
	srv := httpServer(t, ts, gateway)
	clk := newClock()
	_, reg := startManager(t, httpConfig("srv", srv.URL, ""), nil, clk.options())

	bob, alice := newAsker(), newAsker()
	out := reg.Call(tool.WithAsker(t.Context(), bob), "srv__transfer", json.RawMessage(`{}`))
	if out.Success || !strings.Contains(out.Content, "HTTP 504 Gateway Timeout") || !strings.Contains(out.Content, "may or may not have run") {
		t.Errorf("Bob's call: %+v, want a failure saying the 504 and that it may or may not have run", out)
	}

	r := newReporter()
	actx, acancel := context.WithCancel(tool.WithAsker(tool.WithProgress(t.Context(), r.report), alice))
	defer acancel()
	adone := make(chan tool.Outcome, 1)
	go func() { adone <- reg.Call(actx, "srv__block", json.RawMessage(`{}`)) }()
	r.waitReports(t, 1)

	close(ask) // no clock advance: well within the linger
	select {
	case x := <-alice.questions:
		t.Errorf("Alice was asked Bob's question %q", x.q.Message)
		x.answer <- tool.Answer{Action: tool.ActionDecline}
		receive(t, got, "the server got no answer to its question")
	case a := <-got:
		if a != tool.ActionDecline {
			t.Errorf("while Bob's call lingers, the server got %q, want decline", a)
		}
	case <-time.After(patience):
		t.Fatal("the server got no answer to its question")
	}
	acancel()
	receive(t, adone, "Alice's call did not return once cancelled")
}

// TestAbandonedCallsForgotten: a call abandoned before its response keeps only its session and until
// when it counts, not its context (the run's) — three of them end up held without one — and is
// forgotten once its time is up even when the server gets no other call nor question.
func TestAbandonedCallsForgotten(t *testing.T) {
	clk := newClock()
	srv := httpServer(t, legacyServer(), nil)
	m, reg := startManager(t, httpConfig("srv", srv.URL, ""), nil, clk.options())
	held := func() (n, withCtx int) {
		m.servers[0].calls.Range(func(_, v any) bool {
			n++
			if v.(*inFlight).ctx != nil {
				withCtx++
			}
			return true
		})
		return n, withCtx
	}
	for range 3 {
		r := newReporter()
		ctx, cancel := context.WithCancel(tool.WithAsker(tool.WithProgress(t.Context(), r.report), newAsker()))
		done := make(chan tool.Outcome, 1)
		go func() { done <- reg.Call(ctx, "srv__block", json.RawMessage(`{}`)) }()
		r.waitReports(t, 1)
		cancel()
		receive(t, done, "srv__block did not return once cancelled")
	}
	// The registry returns on the cancel at once; the SDK's call returns when it has seen it.
	eventually(t, func() bool { n, withCtx := held(); return n == 3 && withCtx == 0 })
	clk.advance(time.Minute - time.Second)
	if n, _ := held(); n != 3 {
		t.Errorf("within their linger: %d held, want 3", n)
	}
	clk.advance(2 * time.Second)
	if n, _ := held(); n != 0 {
		t.Errorf("past their linger, the server idle: %d held, want none", n)
	}
}
