package chat_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/chat"
	"chatd/internal/llm/llmtest"
	"chatd/internal/runevent"
	"chatd/internal/store"
	"chatd/internal/store/postgres/pgtest"
	"chatd/internal/tool"
)

// signupSchema is what askingTool asks for, as an MCP server's requested schema.
const signupSchema = `{"type":"object","required":["name"],"properties":{` +
	`"name":{"type":"string","title":"Name","maxLength":20},` +
	`"age":{"type":"integer","minimum":0,"maximum":150,"default":42},` +
	`"agree":{"type":"boolean"},` +
	`"plan":{"type":"string","oneOf":[{"const":"p1","title":"Basic"},{"const":"p2","title":"Pro"}]},` +
	`"pets":{"type":"array","maxItems":2,"items":{"type":"string","enum":["cat","dog","fish"]}}}}`

// askingTool asks the person behind its call, as an MCP tool's elicitation does, and returns the answer
// as JSON; ended, when set, is closed once a wait has ended with the call's context.
type askingTool struct {
	ended chan struct{}
}

func (askingTool) Info() tool.Info {
	return tool.Info{Name: "crm__signup", Description: "Signs the user up.", Asks: true}
}

func (a askingTool) Call(ctx context.Context, _ json.RawMessage) (tool.Result, error) {
	asker, ok := tool.AskerFrom(ctx)
	if !ok {
		return tool.Result{Content: "no asker"}, nil
	}
	ans, err := asker.Ask(ctx, tool.Question{Message: "Who are you?", Schema: json.RawMessage(signupSchema)})
	if err != nil {
		if a.ended != nil && ctx.Err() != nil {
			close(a.ended)
		}
		return tool.Result{}, err
	}
	b, _ := json.Marshal(map[string]any{"action": ans.Action, "content": ans.Content})
	return tool.Result{Content: string(b)}, nil
}

// elicitFixture is a service whose model calls crm__signup, then answers with what the tool returned.
func elicitFixture(t *testing.T, tl askingTool) *fixture {
	return newFixture(t, setup{Tools: []tool.Tool{tl}, Respond: func(n int, req llmtest.Request) llmtest.Turn {
		if n == 0 {
			return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "crm__signup", Arguments: `{}`}}}
		}
		return llmtest.Turn{Text: "Done."}
	}})
}

// questionOf waits for the run's approval_required and decodes it.
func questionOf(t *testing.T, fl *follower) runevent.ApprovalRequired {
	t.Helper()
	events := fl.until(func(evs []chat.Event) bool {
		return slices.ContainsFunc(evs, func(e chat.Event) bool { return e.Type == runevent.TypeApprovalRequired })
	})
	i := slices.IndexFunc(events, func(e chat.Event) bool { return e.Type == runevent.TypeApprovalRequired })
	if i < 0 {
		t.Fatalf("no approval_required: %s", types(events))
	}
	q, err := runevent.Decode[runevent.ApprovalRequired](events[i].Data)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// decideErr is the code of a decision's error, or "".
func decideErr(err error) string {
	var e *chat.Error
	if errors.As(err, &e) {
		return e.Code
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

// TestElicitationAnswered: a running tool's question becomes approval_required (kind question, source
// mcp) with the schema's fields in order; GET /v1/runs says the run waits on it while it stays running;
// another user cannot answer it, an answer that does not fit its fields is refused naming the field,
// and the right answer reaches the tool, after approval_decided.
func TestElicitationAnswered(t *testing.T) {
	f := elicitFixture(t, askingTool{})
	st := f.send(t, chat.Request{Message: "sign me up"}, chat.StartOptions{})
	fl := f.follow(t, st.RunID, 0)
	q := questionOf(t, fl)

	lo, hi, twenty, two := 0.0, 150.0, 20, 2
	want := []runevent.Field{
		{Name: "name", Title: "Name", Type: "string", Required: true, MaxLength: &twenty},
		{Name: "age", Type: "integer", Minimum: &lo, Maximum: &hi, Default: json.RawMessage(`42`)},
		{Name: "agree", Type: "boolean"},
		{Name: "plan", Type: "string", Choices: []runevent.Choice{{Value: "p1", Label: "Basic"}, {Value: "p2", Label: "Pro"}}},
		{Name: "pets", Type: "array", Multiple: true, MaxItems: &two,
			Choices: []runevent.Choice{{Value: "cat", Label: "cat"}, {Value: "dog", Label: "dog"}, {Value: "fish", Label: "fish"}}},
	}
	if diff := cmp.Diff(want, q.Fields); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
	if q.Kind != chat.KindQuestion || q.Source != chat.SourceMCP || q.ToolCallID != "call_1" || q.Name != "crm__signup" ||
		q.Message != "Who are you?" || q.ExpiresAt == nil {
		t.Errorf("approval_required: %+v", q)
	}
	aw := f.svc.LiveAwaiting(user, st.RunID)
	if aw == nil || len(aw.Calls) != 1 || aw.Calls[0].ToolCallID != "call_1" || aw.Calls[0].Source != chat.SourceMCP || len(aw.Calls[0].Fields) != 5 {
		t.Errorf("LiveAwaiting: %+v", aw)
	}
	if r := storedRun(t, f.db, st.RunID); r.Status != store.RunRunning {
		t.Errorf("the run is %s while its call waits, want running", r.Status)
	}

	answer := func(who, content string) error {
		_, err := f.svc.Decide(t.Context(), who, st.RunID, chat.Decision{ToolCallID: "call_1", Decision: chat.DecisionAnswer, Content: json.RawMessage(content)})
		return err
	}
	if err := answer("someone-else", `{"name":"Eve"}`); !errors.Is(err, store.ErrNotFound) && decideErr(err) != "run_not_found" {
		t.Errorf("another user's answer: %v, want not found", err)
	}
	for content, field := range map[string]string{
		`{"age":3}`:                        `"name"`,
		`{"name":"Ada","age":3.5}`:         `"age"`,
		`{"name":"Ada","age":200}`:         `"age"`,
		`{"name":"Ada","plan":"p9"}`:       `"plan"`,
		`{"name":"Ada","pets":["cow"]}`:    `"pets"`,
		`{"name":"Ada","agree":"yes"}`:     `"agree"`,
		`{"name":"Ada","color":"red"}`:     `"color"`,
		`{"name":"Ada Lovelace Byron XX"}`: `"name"`,
	} {
		err := answer(user, content)
		if decideErr(err) != "invalid_answer" || !strings.Contains(err.Error(), field) {
			t.Errorf("answer %s: %v, want invalid_answer naming %s", content, err, field)
		}
	}
	if _, err := f.svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_1", Decision: chat.DecisionApprove}); decideErr(err) != "invalid_decision" {
		t.Errorf("approve: %v, want invalid_decision", err)
	}
	res, err := f.svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_1", Decision: chat.DecisionAnswer,
		Content: json.RawMessage(`{"name":"Ada","age":36,"agree":true,"plan":"p2","pets":["cat"]}`)})
	if err != nil || res.Status != store.RunRunning {
		t.Fatalf("answer: %+v, %v", res, err)
	}
	if err := answer(user, `{"name":"Ada"}`); decideErr(err) != "not_awaiting_approval" {
		t.Errorf("a second answer: %v, want not_awaiting_approval", err)
	}
	if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
		t.Fatalf("run: %+v", o)
	}
	rec := toolRecord(t, f.db, st.SessionID, "call_1")
	if wantContent := `{"action":"accept","content":{"age":36,"agree":true,"name":"Ada","pets":["cat"],"plan":"p2"}}`; rec.Content != wantContent {
		t.Errorf("the tool got %s, want %s", rec.Content, wantContent)
	}
	events := stored(t, f.db, st.RunID)
	i := slices.IndexFunc(events, func(e chat.Event) bool { return e.Type == runevent.TypeApprovalDecided })
	j := slices.IndexFunc(events, func(e chat.Event) bool { return e.Type == runevent.TypeToolComplete })
	if i < 0 || j < i {
		t.Fatalf("approval_decided is not before tool_complete: %s", types(events))
	}
	d, _ := runevent.Decode[runevent.ApprovalDecided](events[i].Data)
	if d.Decision != chat.DecisionAnswer || d.Source != chat.SourceMCP || !strings.Contains(string(d.Content), `"name":"Ada"`) {
		t.Errorf("approval_decided: %+v", d)
	}
	if aw := f.svc.LiveAwaiting(user, st.RunID); aw != nil {
		t.Errorf("LiveAwaiting after the run: %+v", aw)
	}
	checkLog(t, "run", events)
}

// TestElicitationDenied: deny declines the question.
func TestElicitationDenied(t *testing.T) {
	f := elicitFixture(t, askingTool{})
	st := f.send(t, chat.Request{Message: "sign me up"}, chat.StartOptions{})
	questionOf(t, f.follow(t, st.RunID, 0))
	if _, err := f.svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_1", Decision: chat.DecisionDeny}); err != nil {
		t.Fatal(err)
	}
	f.wait(t, st.RunID)
	if rec := toolRecord(t, f.db, st.SessionID, "call_1"); rec.Content != `{"action":"decline","content":null}` {
		t.Errorf("the tool got %s", rec.Content)
	}
}

// TestElicitationCancelled: cancelling the run while a question waits ends the call's wait, and the run
// ends cancelled with approval_decided cancel in its log.
func TestElicitationCancelled(t *testing.T) {
	tl := askingTool{ended: make(chan struct{})}
	f := elicitFixture(t, tl)
	st := f.send(t, chat.Request{Message: "sign me up"}, chat.StartOptions{})
	questionOf(t, f.follow(t, st.RunID, 0))
	if _, err := f.svc.Cancel(t.Context(), user, st.RunID, ""); err != nil {
		t.Fatal(err)
	}
	if o := f.wait(t, st.RunID); o.Status != store.RunCancelled {
		t.Errorf("run: %+v", o)
	}
	// The registry returns on the cancel without waiting for the tool's goroutine, which may see its
	// wait end after the run has: wait for it.
	receive(t, tl.ended, "the tool's wait did not end with the run's cancel")
	events := stored(t, f.db, st.RunID)
	i := slices.IndexFunc(events, func(e chat.Event) bool { return e.Type == runevent.TypeApprovalDecided })
	if i < 0 {
		t.Fatalf("no approval_decided: %s", types(events))
	}
	if d, _ := runevent.Decode[runevent.ApprovalDecided](events[i].Data); d.Decision != chat.DecisionCancel {
		t.Errorf("approval_decided: %+v, want cancel", d)
	}
}

// TestElicitationOnAnotherInstance: with two instances on one PostgreSQL database, an answer sent to
// the instance that does not run the run is refused with run_not_here (the question is in the other's
// memory), and the one that runs it takes it.
func TestElicitationOnAnotherInstance(t *testing.T) {
	dsn := pgtest.NewSchema(t)
	clk := newClock()
	a := newInstance(t, dsn, "a", clk, true,
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "crm__signup", Arguments: `{}`}}}, llmtest.Turn{Text: "Done."})
	b := newInstance(t, dsn, "b", clk, true)
	for _, in := range []*instance{a, b} {
		if err := in.reg.Register(askingTool{}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := a.svc.Start(t.Context(), user, chat.Request{Message: "sign me up"}, chat.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, a.svc, st.RunID, 0, isType(runevent.TypeApprovalRequired))
	answer := chat.Decision{ToolCallID: "call_1", Decision: chat.DecisionAnswer, Content: json.RawMessage(`{"name":"Ada"}`)}
	if _, err := b.svc.Decide(t.Context(), user, st.RunID, answer); decideErr(err) != "run_not_here" {
		t.Errorf("the answer on b: %v, want run_not_here", err)
	}
	if aw := b.svc.LiveAwaiting(user, st.RunID); aw != nil {
		t.Errorf("b says the run waits on %+v", aw)
	}
	if _, err := a.svc.Decide(t.Context(), user, st.RunID, answer); err != nil {
		t.Fatalf("the answer on a: %v", err)
	}
	if o, err := a.svc.Wait(t.Context(), user, st.RunID); err != nil || o.Status != store.RunCompleted {
		t.Fatalf("the run: %+v, %v", o, err)
	}
}

// strayTool asks from a goroutine of its own that does not see the call's end, as the SDK's goroutine
// that handles a server's request may not yet, and returns once released, its question unanswered.
type strayTool struct {
	release chan struct{}
	got     chan tool.Answer
}

func (strayTool) Info() tool.Info {
	return tool.Info{Name: "crm__signup", Description: "Signs the user up.", Asks: true}
}

func (s strayTool) Call(ctx context.Context, _ json.RawMessage) (tool.Result, error) {
	asker, ok := tool.AskerFrom(ctx)
	if !ok {
		return tool.Result{Content: "no asker"}, nil
	}
	go func() {
		ans, _ := asker.Ask(context.WithoutCancel(ctx), tool.Question{Message: "Who are you?", Schema: json.RawMessage(signupSchema)})
		s.got <- ans
	}()
	<-s.release
	return tool.Result{Content: "returned"}, nil
}

// TestElicitationClosedWithItsCall: a question still open when its call returns gets its decision,
// cancel, before the call's tool_complete, and its asker the cancel; the stored log leaves no question
// undecided.
func TestElicitationClosedWithItsCall(t *testing.T) {
	tl := strayTool{release: make(chan struct{}), got: make(chan tool.Answer, 1)}
	f := newFixture(t, setup{Tools: []tool.Tool{tl}, Respond: func(n int, req llmtest.Request) llmtest.Turn {
		if n == 0 {
			return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "crm__signup", Arguments: `{}`}}}
		}
		return llmtest.Turn{Text: "Done."}
	}})
	st := f.send(t, chat.Request{Message: "sign me up"}, chat.StartOptions{})
	questionOf(t, f.follow(t, st.RunID, 0))
	close(tl.release)
	if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
		t.Fatalf("run: %+v", o)
	}
	if ans := receive(t, tl.got, "the stray question's wait did not end"); ans.Action != tool.ActionCancel {
		t.Errorf("the asker got %+v, want cancel", ans)
	}
	events := stored(t, f.db, st.RunID)
	i := slices.IndexFunc(events, func(e chat.Event) bool { return e.Type == runevent.TypeApprovalDecided })
	j := slices.IndexFunc(events, func(e chat.Event) bool { return e.Type == runevent.TypeToolComplete })
	if i < 0 || j < i {
		t.Fatalf("no approval_decided before tool_complete: %s", types(events))
	}
	if d, _ := runevent.Decode[runevent.ApprovalDecided](events[i].Data); d.Decision != chat.DecisionCancel {
		t.Errorf("approval_decided: %+v, want cancel", d)
	}
	if aw := f.svc.LiveAwaiting(user, st.RunID); aw != nil {
		t.Errorf("LiveAwaiting after the run: %+v", aw)
	}
}

// askerCheck reports whether its call's context carries an asker.
type askerCheck struct{ asks bool }

func (a askerCheck) Info() tool.Info {
	return tool.Info{Name: "check", Description: "Says whether it could ask.", Asks: a.asks}
}

func (askerCheck) Call(ctx context.Context, _ json.RawMessage) (tool.Result, error) {
	_, ok := tool.AskerFrom(ctx)
	return tool.Result{Content: strconv.FormatBool(ok)}, nil
}

// TestElicitationOnlyForToolsThatAsk: only the calls of a tool that may ask (tool.Info.Asks: MCP
// tools) carry an asker; the others pay nothing for it.
func TestElicitationOnlyForToolsThatAsk(t *testing.T) {
	for _, asks := range []bool{false, true} {
		f := newFixture(t, setup{Tools: []tool.Tool{askerCheck{asks: asks}}, Turns: []llmtest.Turn{
			{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "check", Arguments: `{}`}}}, {Text: "Done."}}})
		st := f.send(t, chat.Request{Message: "go"}, chat.StartOptions{})
		f.wait(t, st.RunID)
		if got := toolRecord(t, f.db, st.SessionID, "call_1").Content; got != strconv.FormatBool(asks) {
			t.Errorf("a tool with Asks %v: asker in its context: %s", asks, got)
		}
	}
}

// TestAdminAnswersLiveQuestion: an admin's answer to a question a live run waits on says who answered
// in approval_decided, as an admin's decision on a stored call does.
func TestAdminAnswersLiveQuestion(t *testing.T) {
	f := elicitFixture(t, askingTool{})
	st := f.send(t, chat.Request{Message: "sign me up"}, chat.StartOptions{})
	questionOf(t, f.follow(t, st.RunID, 0))
	if _, err := f.svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_1", Decision: chat.DecisionAnswer,
		Content: json.RawMessage(`{"name":"Ada"}`), DecidedBy: "root"}); err != nil {
		t.Fatal(err)
	}
	f.wait(t, st.RunID)
	n := 0
	for _, e := range stored(t, f.db, st.RunID) {
		if e.Type == runevent.TypeApprovalDecided {
			n++
			if d, _ := runevent.Decode[runevent.ApprovalDecided](e.Data); d.DecidedBy != "root" {
				t.Errorf("approval_decided of the admin's answer: %s; want decided_by root", e.Data)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d approval_decided events, want 1", n)
	}
}
