package chat_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"chatd/internal/chat"
	"chatd/internal/llm/llmtest"
	"chatd/internal/mcpclient"
	"chatd/internal/runevent"
	"chatd/internal/store"
	"chatd/internal/tool"
)

// The tests of this file put questions of a real MCP server (the Go SDK's, over streamable HTTP) to
// the person behind a run, through chatd's MCP client.

// proxy is one tool of a real MCP server, as mcpclient registers it, in the fixture's registry. With
// asked set, it says on asked each time the server's question reaches the run's asker.
type proxy struct {
	reg   *tool.Registry
	info  tool.Info
	asked chan struct{}
}

func (p proxy) Info() tool.Info { return p.info }

func (p proxy) Call(ctx context.Context, args json.RawMessage) (tool.Result, error) {
	if a, ok := tool.AskerFrom(ctx); ok && p.asked != nil {
		ctx = tool.WithAsker(ctx, signallingAsker{Asker: a, asked: p.asked})
	}
	out := p.reg.Call(ctx, p.info.Name, args)
	return tool.Result{Content: out.Content, IsError: !out.Success}, nil
}

// signallingAsker says on asked that a question has come, then asks it.
type signallingAsker struct {
	tool.Asker
	asked chan<- struct{}
}

func (a signallingAsker) Ask(ctx context.Context, q tool.Question) (tool.Answer, error) {
	a.asked <- struct{}{}
	return a.Asker.Ask(ctx, q)
}

// mcpFixture serves srv over streamable HTTP, connects chatd's MCP client to it as "srv", and runs a
// service whose model calls srv__<toolName> once, then says Done.
func mcpFixture(t *testing.T, srv *mcp.Server, toolName string, asked chan struct{}) *fixture {
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	servers, err := mcpclient.ParseConfig([]byte(`{"mcpServers":{"srv":{"url":"`+hs.URL+`"}}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	inner := tool.NewRegistry(tool.Options{DefaultTimeout: 10 * time.Minute})
	m := mcpclient.New(servers, mcpclient.Options{Registry: inner, ConnectTimeout: patience})
	m.Start(context.Background())
	t.Cleanup(inner.Close)
	t.Cleanup(m.Close)
	info, ok := inner.Info("srv__" + toolName)
	if !ok {
		t.Fatalf("no srv__%s", toolName)
	}
	return newFixture(t, setup{Tools: []tool.Tool{proxy{reg: inner, info: info, asked: asked}}, Respond: func(n int, req llmtest.Request) llmtest.Turn {
		if n == 0 {
			return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: info.Name, Arguments: `{}`}}}
		}
		return llmtest.Turn{Text: "Done."}
	}})
}

// mcpServer is an MCP server speaking protocols up to 2025-11-25 (legacy: questions come as
// elicitation/create) or the latest (questions come as input requests of the call's result).
func mcpServer(legacy bool) *mcp.Server {
	var opts *mcp.ServerOptions
	if legacy {
		opts = &mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25", "2025-06-18"}}
	}
	return mcp.NewServer(&mcp.Implementation{Name: "test", Version: "v1"}, opts)
}

func rawTool(srv *mcp.Server, name string, h mcp.ToolHandler) {
	srv.AddTool(&mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)}, h)
}

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// answerOf is what an elicitation got, as a tool's result: {"action":…,"content":…}, or the error.
func answerOf(res *mcp.ElicitResult, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	b, _ := json.Marshal(map[string]any{"action": res.Action, "content": res.Content})
	return string(b)
}

// decided returns the run's approval_decided events.
func decided(t *testing.T, events []chat.Event) []runevent.ApprovalDecided {
	t.Helper()
	var out []runevent.ApprovalDecided
	for _, e := range events {
		if e.Type == runevent.TypeApprovalDecided {
			d, err := runevent.Decode[runevent.ApprovalDecided](e.Data)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
	}
	return out
}

// TestElicitationAnswerAsTheServerChecksIt: an answer the SDK would refuse against the requested schema
// (a pattern, uniqueItems: more than chatd's fields say) is refused with invalid_answer naming the
// field, and the question still waits; the answer taken is recorded as the server receives it, with
// the schema's defaults filled in.
func TestElicitationAnswerAsTheServerChecksIt(t *testing.T) {
	srv := mcpServer(true)
	rawTool(srv, "pin", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult(answerOf(req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Your 4-digit code?", RequestedSchema: map[string]any{
			"type": "object", "required": []string{"code"}, "properties": map[string]any{
				"code":  map[string]any{"type": "string", "pattern": "^[0-9]{4}$"},
				"pets":  map[string]any{"type": "array", "uniqueItems": true, "items": map[string]any{"type": "string", "enum": []string{"cat", "dog"}}},
				"note":  map[string]any{"type": "string", "default": "none"},
				"count": map[string]any{"type": "integer", "multipleOf": 2},
			}}}))), nil
	})
	f := mcpFixture(t, srv, "pin", nil)
	st := f.send(t, chat.Request{Message: "go"}, chat.StartOptions{})
	questionOf(t, f.follow(t, st.RunID, 0))
	answer := func(content string) error {
		_, err := f.svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_1", Decision: chat.DecisionAnswer, Content: json.RawMessage(content)})
		return err
	}
	for content, field := range map[string]string{
		`{"code":"abcd"}`:                      `field "code"`,
		`{"code":"1234","pets":["cat","cat"]}`: `field "pets"`,
		`{"code":"1234","count":3}`:            `field "count"`,
	} {
		if err := answer(content); decideErr(err) != "invalid_answer" || !strings.Contains(err.Error(), field) {
			t.Errorf("answer %s: %v, want invalid_answer naming %s", content, err, field)
		}
		if aw := f.svc.LiveAwaiting(user, st.RunID); aw == nil || len(aw.Calls) != 1 {
			t.Fatalf("after a refused answer the question no longer waits: %+v", aw)
		}
	}
	if err := answer(`{"code":"1234","pets":["cat"]}`); err != nil {
		t.Fatalf("a fitting answer: %v", err)
	}
	if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
		t.Fatalf("run: %+v", o)
	}
	const want = `{"code":"1234","note":"none","pets":["cat"]}`
	if got := toolRecord(t, f.db, st.SessionID, "call_1").Content; got != `{"action":"accept","content":`+want+`}` {
		t.Errorf("the server got %s, want the answer with its default: %s", got, want)
	}
	ds := decided(t, stored(t, f.db, st.RunID))
	if len(ds) != 1 || string(ds[0].Content) != want {
		t.Errorf("approval_decided: %+v, want content %s (what the server got)", ds, want)
	}
}

// TestElicitationRefCycleRefused: a server's question whose schema is a $ref cycle (which the SDK lets
// through) is refused before anyone is asked, with an error the server gets; nobody's answer runs the
// validator on it, which recursed until the stack overflowed and killed the process.
func TestElicitationRefCycleRefused(t *testing.T) {
	srv := mcpServer(true)
	rawTool(srv, "pin", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult(answerOf(req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Code?", RequestedSchema: map[string]any{
			"$ref": "#", "type": "object", "properties": map[string]any{"code": map[string]any{"type": "string"}}}}))), nil
	})
	f := mcpFixture(t, srv, "pin", nil)
	st := f.send(t, chat.Request{Message: "go"}, chat.StartOptions{})
	if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
		t.Fatalf("run: %+v", o)
	}
	if n := count(stored(t, f.db, st.RunID), runevent.TypeApprovalRequired); n != 0 {
		t.Errorf("%d questions shown, want none", n)
	}
	if got := toolRecord(t, f.db, st.SessionID, "call_1").Content; !strings.Contains(got, `has "$ref", which chatd does not take`) {
		t.Errorf("the server got %s, want an error naming $ref", got)
	}
}

// count returns how many events of typ events has.
func count(events []chat.Event, typ string) int {
	n := 0
	for _, e := range events {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// TestElicitationFlood: a server that asks again and again within one call gets three questions shown
// (each denied here), and declines without anyone being asked for the rest: a bounded number of
// events per call. The reason of each is fixed, not a second copy of the message.
func TestElicitationFlood(t *testing.T) {
	const asks = 10
	srv := mcpServer(true)
	message := strings.Repeat("M", 4000)
	rawTool(srv, "flood", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var got []string
		for range asks {
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: message,
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "string"}}}})
			if err != nil {
				return nil, err
			}
			got = append(got, res.Action)
		}
		return textResult(strings.Join(got, ",")), nil
	})
	f := mcpFixture(t, srv, "flood", nil)
	st := f.send(t, chat.Request{Message: "go"}, chat.StartOptions{})
	fl := f.follow(t, st.RunID, 0)
	for shown := 1; ; shown++ {
		events := fl.until(func(evs []chat.Event) bool {
			return count(evs, runevent.TypeApprovalRequired) == shown || count(evs, runevent.TypeToolComplete) > 0
		})
		if count(events, runevent.TypeToolComplete) > 0 {
			break
		}
		if _, err := f.svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_1", Decision: chat.DecisionDeny}); err != nil {
			t.Fatalf("deny question %d: %v", shown, err)
		}
	}
	if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
		t.Fatalf("run: %+v", o)
	}
	events := stored(t, f.db, st.RunID)
	if n, d := count(events, runevent.TypeApprovalRequired), count(events, runevent.TypeApprovalDecided); n != 3 || d != 3 {
		t.Errorf("%d approval_required and %d approval_decided for one call, want 3 of each: %s", n, d, types(events))
	}
	for _, e := range events {
		if e.Type == runevent.TypeApprovalRequired && strings.Count(string(e.Data), message) != 1 {
			t.Errorf("approval_required carries the message %d times, want once", strings.Count(string(e.Data), message))
		}
	}
	if got, want := toolRecord(t, f.db, st.SessionID, "call_1").Content, strings.Repeat("decline,", asks-1)+"decline"; got != want {
		t.Errorf("the server got %s, want %s", got, want)
	}
}

// TestElicitationTwoInOneRound: a server on protocol 2026-07-28 asks two questions in one round (two
// input requests of its result, which the SDK asks in parallel with the same call): the second is shown
// once the first is decided, and both answers reach the server.
func TestElicitationTwoInOneRound(t *testing.T) {
	srv := mcpServer(false)
	schema := map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "string"}}}
	rawTool(srv, "two", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if r := req.Params.InputResponses; r != nil {
			b, _ := json.Marshal(r)
			return textResult(string(b)), nil
		}
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{
			"first":  &mcp.ElicitParams{Message: "First?", RequestedSchema: schema},
			"second": &mcp.ElicitParams{Message: "Second?", RequestedSchema: schema}}}, nil
	})
	asked := make(chan struct{}, 2)
	f := mcpFixture(t, srv, "two", asked)
	st := f.send(t, chat.Request{Message: "go"}, chat.StartOptions{})
	fl := f.follow(t, st.RunID, 0)
	// Both questions reach the run before the first is answered.
	receive(t, asked, "the first question did not come")
	receive(t, asked, "the second question did not come")
	answers := map[string]string{}
	for shown := 1; shown <= 2; shown++ {
		events := fl.until(func(evs []chat.Event) bool {
			return count(evs, runevent.TypeApprovalRequired) == shown || count(evs, runevent.TypeToolComplete) > 0
		})
		if count(events, runevent.TypeToolComplete) > 0 {
			t.Fatalf("the call ended with %d questions shown, want 2: %s", shown-1, types(events))
		}
		if aw := f.svc.LiveAwaiting(user, st.RunID); aw == nil || len(aw.Calls) != 1 {
			t.Fatalf("LiveAwaiting with question %d shown: %+v", shown, aw)
		} else {
			answers[aw.Calls[0].Message] = "answer " + aw.Calls[0].Message
			content, _ := json.Marshal(map[string]string{"x": answers[aw.Calls[0].Message]})
			if _, err := f.svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_1", Decision: chat.DecisionAnswer, Content: content}); err != nil {
				t.Fatalf("answer question %d: %v", shown, err)
			}
		}
	}
	if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
		t.Fatalf("run: %+v", o)
	}
	got := toolRecord(t, f.db, st.SessionID, "call_1").Content
	for _, want := range []string{`"first":{"action":"accept","content":{"x":"answer First?"}}`, `"second":{"action":"accept","content":{"x":"answer Second?"}}`} {
		if !strings.Contains(got, want) {
			t.Errorf("the server got %s, want %s in it", got, want)
		}
	}
	var seq []string
	for _, e := range stored(t, f.db, st.RunID) {
		switch e.Type {
		case runevent.TypeApprovalRequired, runevent.TypeApprovalDecided, runevent.TypeToolComplete:
			seq = append(seq, e.Type)
		}
	}
	want := []string{runevent.TypeApprovalRequired, runevent.TypeApprovalDecided, runevent.TypeApprovalRequired, runevent.TypeApprovalDecided, runevent.TypeToolComplete}
	if !slices.Equal(seq, want) {
		t.Errorf("events %v, want %v", seq, want)
	}
}

// receive waits for a value from ch, and fails t with what when none comes within patience.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(patience):
		t.Fatalf("%s (waited %s)", what, patience)
		var zero T
		return zero
	}
}

// TestElicitationCallIDReusedInLaterTurn: a provider that reuses a call id in the run's next turn (ids
// are unique within a turn only) gets the second call's question shown too: the first call's entry
// went when it returned.
func TestElicitationCallIDReusedInLaterTurn(t *testing.T) {
	srv := mcpServer(true)
	rawTool(srv, "pin", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult(answerOf(req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Code?", RequestedSchema: map[string]any{
			"type": "object", "properties": map[string]any{"code": map[string]any{"type": "string"}}}}))), nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	servers, err := mcpclient.ParseConfig([]byte(`{"mcpServers":{"srv":{"url":"`+hs.URL+`"}}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	inner := tool.NewRegistry(tool.Options{DefaultTimeout: 10 * time.Minute})
	m := mcpclient.New(servers, mcpclient.Options{Registry: inner, ConnectTimeout: patience})
	m.Start(context.Background())
	t.Cleanup(inner.Close)
	t.Cleanup(m.Close)
	info, ok := inner.Info("srv__pin")
	if !ok {
		t.Fatal("no srv__pin")
	}
	f := newFixture(t, setup{Lenient: true, Tools: []tool.Tool{proxy{reg: inner, info: info}}, Respond: func(n int, req llmtest.Request) llmtest.Turn {
		if n < 2 {
			return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: info.Name, Arguments: `{}`}}}
		}
		return llmtest.Turn{Text: "Done."}
	}})
	st := f.send(t, chat.Request{Message: "go"}, chat.StartOptions{})
	fl := f.follow(t, st.RunID, 0)
	for turn := range 2 {
		fl.until(func(evs []chat.Event) bool { return count(evs, runevent.TypeApprovalRequired) > turn })
		if _, err := f.svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_1", Decision: chat.DecisionDeny}); err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
	}
	if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
		t.Fatalf("run: %+v", o)
	}
	if n := count(stored(t, f.db, st.RunID), runevent.TypeApprovalRequired); n != 2 {
		t.Errorf("%d questions shown, want 2 (one a turn)", n)
	}
}
