package chat_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"chatd/internal/chat"
	"chatd/internal/llm/llmtest"
	"chatd/internal/runevent"
	"chatd/internal/store"
	"chatd/internal/store/postgres/pgtest"
	"chatd/internal/tool"
)

// policyTool is a tool with the annotations a policy reads, counting its calls.
type policyTool struct {
	info  tool.Info
	calls *atomic.Int32
}

func (p policyTool) Info() tool.Info { return p.info }

func (p policyTool) Call(context.Context, json.RawMessage) (tool.Result, error) {
	p.calls.Add(1)
	return tool.Result{Content: p.info.Name + " done"}, nil
}

// toolRecord is the content of the stored tool record answering call id.
func toolRecord(t *testing.T, db store.Store, sessionID, id string) store.Record {
	t.Helper()
	for _, r := range records(t, db, sessionID) {
		if r.Role == store.RoleTool && r.ToolCallID == id {
			return r
		}
	}
	t.Fatalf("no tool record for %s", id)
	return store.Record{}
}

// TestApprovalPolicyDeny: a denied call gets a failed result saying it is not permitted, without
// running, and the model goes on; a call the policy allows runs in the same turn.
func TestApprovalPolicyDeny(t *testing.T) {
	var del, read atomic.Int32
	f := newFixture(t, setup{
		Tools: []tool.Tool{
			policyTool{info: tool.Info{Name: "fs__delete", Description: "Deletes."}, calls: &del},
			policyTool{info: tool.Info{Name: "fs__read", Description: "Reads.", ReadOnly: true}, calls: &read},
		},
		Agents: map[string]chat.Agent{"careful": {Approvals: []tool.ApprovalRule{
			{Tools: []string{"fs__delete"}, Decision: tool.Deny, Reason: "Deleting files is not allowed here."},
		}}},
		Turns: []llmtest.Turn{
			{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "fs__delete", Arguments: `{}`}, {ID: "call_2", Name: "fs__read", Arguments: `{}`}}},
			{Text: "I could not delete it."},
		}})
	st := f.send(t, chat.Request{Agent: "careful", Message: "delete it"}, chat.StartOptions{})
	if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
		t.Fatalf("run: %+v %+v", o, o.Error)
	}
	if del.Load() != 0 || read.Load() != 1 {
		t.Errorf("fs__delete ran %d times (want 0), fs__read %d (want 1)", del.Load(), read.Load())
	}
	rec := toolRecord(t, f.db, st.SessionID, "call_1")
	if rec.Success == nil || *rec.Success || !strings.Contains(rec.Content, "Not permitted: Deleting files is not allowed here.") {
		t.Errorf("denied call's record: success %v, %q", rec.Success, rec.Content)
	}
	if rec := toolRecord(t, f.db, st.SessionID, "call_2"); rec.Success == nil || !*rec.Success {
		t.Errorf("allowed call's record: %+v", rec)
	}
	if reqs := f.up.Requests(); len(reqs) != 2 || !strings.Contains(string(reqs[1].Raw), "Not permitted") {
		t.Errorf("the model was not told the call is not permitted")
	}
}

// approvalSetup is a fixture whose model makes three calls in one turn — fs__read (read-only),
// mail__send (destructive: the default policy asks) and notes__add (allowed) — then answers with
// whatever result it got for mail__send.
func approvalSetup(counts map[string]*atomic.Int32) setup {
	for _, n := range []string{"fs__read", "mail__send", "notes__add"} {
		counts[n] = &atomic.Int32{}
	}
	return setup{
		Tools: []tool.Tool{
			policyTool{info: tool.Info{Name: "fs__read", Description: "Reads.", ReadOnly: true}, calls: counts["fs__read"]},
			policyTool{info: tool.Info{Name: "mail__send", Description: "Sends mail.", Destructive: true,
				InputSchema: json.RawMessage(`{"type":"object","properties":{"to":{"type":"string"}},"required":["to"]}`)}, calls: counts["mail__send"]},
			policyTool{info: tool.Info{Name: "notes__add", Description: "Adds a note."}, calls: counts["notes__add"]},
		},
		Respond: func(n int, req llmtest.Request) llmtest.Turn {
			if n == 0 {
				return llmtest.Turn{ToolCalls: []llmtest.ToolCall{
					{ID: "call_1", Name: "fs__read", Arguments: `{}`},
					{ID: "call_2", Name: "mail__send", Arguments: `{"to":"bob@example.com"}`},
					{ID: "call_3", Name: "notes__add", Arguments: `{}`},
				}}
			}
			return llmtest.Turn{Text: "mail: " + toolResultOf(req, "call_2")}
		},
	}
}

// toolResultOf is the content of the request's tool message answering call id.
func toolResultOf(req llmtest.Request, id string) string {
	for _, m := range req.Messages() {
		if m["role"] == "tool" && m["tool_call_id"] == id {
			s, _ := m["content"].(string)
			return s
		}
	}
	return ""
}

// pause starts the approval fixture's run and waits for it to pause: it awaits approval of call_2 alone,
// the other two calls ran and have results, and the model was called once.
func pause(t *testing.T, f *fixture, counts map[string]*atomic.Int32) *chat.Started {
	t.Helper()
	st := f.send(t, chat.Request{Message: "mail bob"}, chat.StartOptions{})
	if o := f.wait(t, st.RunID); o.Status != store.RunAwaiting {
		t.Fatalf("run: %+v %+v", o, o.Error)
	}
	if counts["fs__read"].Load() != 1 || counts["notes__add"].Load() != 1 || counts["mail__send"].Load() != 0 {
		t.Fatalf("calls: read %d, add %d, send %d; want 1, 1, 0", counts["fs__read"].Load(), counts["notes__add"].Load(), counts["mail__send"].Load())
	}
	run := storedRun(t, f.db, st.RunID)
	aw := chat.AwaitingOf(run)
	if run.Status != store.RunAwaiting || aw == nil || len(aw.Calls) != 1 || aw.Calls[0].ToolCallID != "call_2" ||
		aw.Calls[0].Name != "mail__send" || !strings.Contains(aw.Calls[0].Reason, "destructive") || aw.ExpiresAt.IsZero() {
		t.Fatalf("stored run %+v waits for %+v", run, aw)
	}
	for _, r := range records(t, f.db, st.SessionID) {
		if r.Role == store.RoleTool && r.ToolCallID == "call_2" {
			t.Fatal("the waiting call has a tool record")
		}
	}
	events := f.follow(t, st.RunID, 0).all()
	if got := types(events); !strings.Contains(got, "approval_required") || !strings.HasSuffix(got, "awaiting_approval") {
		t.Fatalf("events %s: want approval_required, and awaiting_approval last", got)
	}
	if n := len(f.up.Requests()); n != 1 {
		t.Fatalf("%d model calls before the decision, want 1", n)
	}
	return st
}

// TestApprovalApprove: approving the call runs it, with the arguments edited when the person edits
// them (checked against the tool's schema), and the run goes on to its answer; the strict fake
// accepts the history.
func TestApprovalApprove(t *testing.T) {
	for _, edit := range []bool{false, true} {
		t.Run(map[bool]string{false: "as asked", true: "edited"}[edit], func(t *testing.T) {
			counts := map[string]*atomic.Int32{}
			f := newFixture(t, approvalSetup(counts))
			st := pause(t, f, counts)
			d := chat.Decision{ToolCallID: "call_2", Decision: chat.DecisionApprove}
			if edit {
				bad := d
				bad.Arguments = json.RawMessage(`{"to":7}`)
				if _, err := f.svc.Decide(t.Context(), user, st.RunID, bad); !isCode(err, "invalid_arguments") {
					t.Fatalf("edited arguments outside the schema: %v", err)
				}
				d.Arguments = json.RawMessage(`{"to":"carol@example.com"}`)
			}
			if _, err := f.svc.Decide(t.Context(), "mallory", st.RunID, d); !isCode(err, "run_not_found") {
				t.Fatalf("another user's decision: %v, want run_not_found", err)
			}
			res, err := f.svc.Decide(t.Context(), user, st.RunID, d)
			if err != nil || res.Status != store.RunRunning {
				t.Fatalf("Decide = %+v, %v", res, err)
			}
			if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
				t.Fatalf("resumed run: %+v %+v", o, o.Error)
			}
			if counts["mail__send"].Load() != 1 {
				t.Errorf("mail__send ran %d times", counts["mail__send"].Load())
			}
			rec := toolRecord(t, f.db, st.SessionID, "call_2")
			if rec.Success == nil || !*rec.Success || strings.Contains(rec.Content, "edited") != edit {
				t.Errorf("call_2's record: %+v", rec)
			}
			if _, err := f.svc.Decide(t.Context(), user, st.RunID, d); !isCode(err, "not_awaiting_approval") {
				t.Errorf("a second decision: %v", err)
			}
			events := stored(t, f.db, st.RunID)
			checkLog(t, "resumed run", events)
			if got := types(events); !strings.Contains(got, "awaiting_approval approval_decided") || !strings.HasSuffix(got, "done") {
				t.Errorf("events: %s", got)
			}
		})
	}
}

// TestApprovalDeny: a denied call gets a failed result with the person's reason, and the model goes on.
func TestApprovalDeny(t *testing.T) {
	counts := map[string]*atomic.Int32{}
	f := newFixture(t, approvalSetup(counts))
	st := pause(t, f, counts)
	if _, err := f.svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_9", Decision: chat.DecisionDeny}); !isCode(err, "unknown_tool_call") {
		t.Fatalf("a call the run does not wait for: %v", err)
	}
	if _, err := f.svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_2", Decision: "maybe"}); !isCode(err, "invalid_decision") {
		t.Fatalf("a decision that is neither: %v", err)
	}
	if _, err := f.svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_2", Decision: chat.DecisionDeny, Reason: "Bob is on leave."}); err != nil {
		t.Fatal(err)
	}
	o := f.wait(t, st.RunID)
	if o.Status != store.RunCompleted || o.Message == nil || !strings.Contains(o.Message.Content, "Bob is on leave.") {
		t.Fatalf("resumed run: %+v", o)
	}
	if counts["mail__send"].Load() != 0 {
		t.Error("a denied call ran")
	}
	if rec := toolRecord(t, f.db, st.SessionID, "call_2"); rec.Success == nil || *rec.Success || !strings.Contains(rec.Content, "denied") {
		t.Errorf("call_2's record: %+v", rec)
	}
}

// TestApprovalExpires: a run nobody decides on is denied when its wait expires, and goes on.
func TestApprovalExpires(t *testing.T) {
	counts := map[string]*atomic.Int32{}
	s := approvalSetup(counts)
	s.ApprovalTimeout = time.Millisecond
	f := newFixture(t, s)
	st := f.send(t, chat.Request{Message: "mail bob"}, chat.StartOptions{})
	eventually(t, "the run to end", func() bool {
		r, err := f.db.Run(t.Context(), user, st.RunID)
		return err == nil && r.EndedAt != nil
	})
	if o := f.wait(t, st.RunID); o.Status != store.RunCompleted || !strings.Contains(o.Message.Content, "expired") {
		t.Fatalf("run: %+v", o)
	}
	if counts["mail__send"].Load() != 0 {
		t.Error("an expired call ran")
	}
}

// TestApprovalCancel: a cancel while the run waits ends it at once, its waiting call closed with a
// failed record, and the session takes the next message.
func TestApprovalCancel(t *testing.T) {
	counts := map[string]*atomic.Int32{}
	f := newFixture(t, approvalSetup(counts))
	st := pause(t, f, counts)
	if _, err := f.svc.Start(t.Context(), user, chat.Request{SessionID: st.SessionID, Message: "again"}, chat.StartOptions{}); !isCode(err, "session_busy") {
		t.Fatalf("a send while the run waits: %v, want session_busy", err)
	}
	if _, err := f.svc.Cancel(t.Context(), "mallory", st.RunID, ""); !isCode(err, "run_not_found") {
		t.Fatalf("another user's cancel: %v", err)
	}
	res, err := f.svc.Cancel(t.Context(), user, st.RunID, "")
	if err != nil || res.Status != store.RunCancelled {
		t.Fatalf("Cancel = %+v, %v", res, err)
	}
	if r := storedRun(t, f.db, st.RunID); r.Status != store.RunCancelled {
		t.Errorf("stored status %s", r.Status)
	}
	if rec := toolRecord(t, f.db, st.SessionID, "call_2"); rec.Success == nil || *rec.Success || !strings.Contains(rec.Content, "cancelled while this call waited") {
		t.Errorf("call_2's record: %+v", rec)
	}
	events := stored(t, f.db, st.RunID)
	checkLog(t, "cancelled run", events)
	if got := types(events); !strings.HasSuffix(got, "awaiting_approval cancelled done") {
		t.Errorf("events: %s", got)
	}
	next := f.send(t, chat.Request{SessionID: st.SessionID, Message: "next"}, chat.StartOptions{})
	if o := f.wait(t, next.RunID); o.Status != store.RunCompleted {
		t.Errorf("the next run: %+v %+v", o, o.Error)
	}
}

// isCode reports whether err is a *chat.Error with this code.
func isCode(err error, code string) bool {
	e, ok := errors.AsType[*chat.Error](err)
	return ok && e.Code == code
}

// TestAskUser: an agent with ask_user offers it; a call with two questions pauses the run as a
// question, answers that do not fit are refused, and the answers become the call's result. An agent
// without ask_user does not offer it, and a call with too many questions fails without waiting.
func TestAskUser(t *testing.T) {
	ask := `{"questions":[{"question":"Which account?","choices":["checking","savings"]},{"question":"How much?"}]}`
	f := newFixture(t, setup{
		Agents: map[string]chat.Agent{"asker": {AskUser: true}, "mute": {}},
		Respond: func(n int, req llmtest.Request) llmtest.Turn {
			switch lastUserMessage(req) {
			case "too many":
				if n == 0 || toolResultOf(req, "call_q") == "" {
					return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_q", Name: "ask_user",
						Arguments: `{"questions":[{"question":"a"},{"question":"b"},{"question":"c"},{"question":"d"},{"question":"e"}]}`}}}
				}
			default:
				if toolResultOf(req, "call_q") == "" {
					return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_q", Name: "ask_user", Arguments: ask}}}
				}
			}
			return llmtest.Turn{Text: "got " + toolResultOf(req, "call_q")}
		}})
	st := f.send(t, chat.Request{Agent: "asker", Message: "move money"}, chat.StartOptions{})
	if o := f.wait(t, st.RunID); o.Status != store.RunAwaiting {
		t.Fatalf("run: %+v", o)
	}
	if !slices.ContainsFunc(offered(t, f.up.Requests()[0]), func(n string) bool { return n == "ask_user" }) {
		t.Errorf("ask_user not offered: %v", offered(t, f.up.Requests()[0]))
	}
	aw := chat.AwaitingOf(storedRun(t, f.db, st.RunID))
	if aw == nil || len(aw.Calls) != 1 || aw.Calls[0].Kind != chat.KindQuestion || string(aw.Calls[0].Arguments) != ask {
		t.Fatalf("waits for %+v", aw)
	}
	for _, d := range []chat.Decision{
		{ToolCallID: "call_q", Decision: chat.DecisionApprove},
		{ToolCallID: "call_q", Decision: chat.DecisionAnswer, Answers: []string{"savings"}},
		{ToolCallID: "call_q", Decision: chat.DecisionAnswer, Answers: []string{"brokerage", "10"}},
	} {
		if _, err := f.svc.Decide(t.Context(), user, st.RunID, d); !isCode(err, "invalid_decision") && !isCode(err, "invalid_answers") {
			t.Errorf("%+v: %v, want it refused", d, err)
		}
	}
	if _, err := f.svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_q", Decision: chat.DecisionAnswer,
		Answers: []string{"savings", "10 euros"}}); err != nil {
		t.Fatal(err)
	}
	o := f.wait(t, st.RunID)
	if o.Status != store.RunCompleted || !strings.Contains(o.Message.Content, `"answer":"savings"`) || !strings.Contains(o.Message.Content, `"answer":"10 euros"`) {
		t.Fatalf("answered run: %+v %v", o, o.Message)
	}

	mute := f.send(t, chat.Request{Agent: "mute", Message: "hello"}, chat.StartOptions{})
	f.wait(t, mute.RunID)
	reqs := f.up.Requests()
	if slices.Contains(offered(t, reqs[len(reqs)-1]), "ask_user") {
		t.Error("an agent without ask_user offers it")
	}
	many := f.send(t, chat.Request{Agent: "asker", Message: "too many"}, chat.StartOptions{})
	if o := f.wait(t, many.RunID); o.Status != store.RunCompleted || !strings.Contains(o.Message.Content, "1 to 4 questions") {
		t.Errorf("five questions: %+v", o)
	}
}

// TestApprovalEnqueue: a send with on_active_run=enqueue waits behind a run that waits, and starts once
// that run is cancelled.
func TestApprovalEnqueue(t *testing.T) {
	counts := map[string]*atomic.Int32{}
	f := newFixture(t, approvalSetup(counts))
	st := pause(t, f, counts)
	next := f.send(t, chat.Request{SessionID: st.SessionID, Message: "after that"}, chat.StartOptions{OnActiveRun: chat.OnActiveEnqueue})
	if next.Status != store.RunQueued {
		t.Fatalf("the send behind a waiting run is %s", next.Status)
	}
	if _, err := f.svc.Cancel(t.Context(), user, st.RunID, ""); err != nil {
		t.Fatal(err)
	}
	if o := f.wait(t, next.RunID); o.Status != store.RunCompleted {
		t.Errorf("the queued run: %+v %+v", o, o.Error)
	}
}

// TestApprovalInterrupt: a send with on_active_run=interrupt ends a run that waits, as a cancel does,
// and starts.
func TestApprovalInterrupt(t *testing.T) {
	counts := map[string]*atomic.Int32{}
	f := newFixture(t, approvalSetup(counts))
	st := pause(t, f, counts)
	next := f.send(t, chat.Request{SessionID: st.SessionID, Message: "never mind"}, chat.StartOptions{OnActiveRun: chat.OnActiveInterrupt})
	if r := storedRun(t, f.db, st.RunID); r.Status != store.RunCancelled {
		t.Errorf("the interrupted run is %s", r.Status)
	}
	if o := f.wait(t, next.RunID); o.Status != store.RunCompleted {
		t.Errorf("the interrupting run: %+v %+v", o, o.Error)
	}
	if rec := toolRecord(t, f.db, st.SessionID, "call_2"); rec.Success == nil || *rec.Success {
		t.Errorf("the waiting call's record: %+v", rec)
	}
}

// TestApprovalAcrossInstances: on PostgreSQL with two instances, a run that pauses on a is neither
// running nor lost for b's sweep once a's lease has long expired; a decision on b resumes it there, and
// it completes with a history the strict model accepts.
func TestApprovalAcrossInstances(t *testing.T) {
	dsn := pgtest.NewSchema(t)
	clk := newClock()
	a := newInstance(t, dsn, "a", clk, true, llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "mail__send", Arguments: `{}`}}})
	b := newInstance(t, dsn, "b", clk, true, llmtest.Turn{Text: "sent on b"})
	b.up.Strict = true
	b.up.Requests() // orders the write above before the server's first request (it reads under the lock this takes)
	var sent atomic.Int32
	for _, in := range []*instance{a, b} {
		if err := in.reg.Register(policyTool{info: tool.Info{Name: "mail__send", Description: "Sends mail.", Destructive: true}, calls: &sent}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := a.svc.Start(t.Context(), user, chat.Request{Message: "mail bob"}, chat.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if o, err := a.svc.Wait(t.Context(), user, st.RunID); err != nil || o.Status != store.RunAwaiting {
		t.Fatalf("run on a: %+v, %v", o, err)
	}
	clk.step(10 * leaseTTL)
	if err := b.svc.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r, err := b.db.Run(t.Context(), user, st.RunID); err != nil || r.Status != store.RunAwaiting {
		t.Fatalf("after b's sweep: %+v, %v; want still awaiting approval", r, err)
	}
	res, err := b.svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_1", Decision: chat.DecisionApprove})
	if err != nil || res.Status != store.RunRunning {
		t.Fatalf("decide on b: %+v, %v", res, err)
	}
	o, err := b.svc.Wait(t.Context(), user, st.RunID)
	if err != nil || o.Status != store.RunCompleted || o.Message == nil || o.Message.Content != "sent on b" || sent.Load() != 1 {
		t.Fatalf("the resumed run: %+v, %v (mail sent %d times)", o, err, sent.Load())
	}
	events := readUntil(t, a.svc, st.RunID, 0, isType(runevent.TypeDone))
	checkRunLog(t, events, 1, true, store.RunCompleted)
}

// TestApprovalAllowIfSeesRepairedArguments: allow_if is checked against the arguments as the tool would
// run with them — a nested object sent as a JSON string, which the registry repairs into the object,
// cannot pass a limit the object breaks.
func TestApprovalAllowIfSeesRepairedArguments(t *testing.T) {
	var pay atomic.Int32
	f := newFixture(t, setup{
		Tools: []tool.Tool{
			policyTool{info: tool.Info{Name: "bank__pay", Description: "Pays.", InputSchema: json.RawMessage(
				`{"type":"object","properties":{"payment":{"type":"object","properties":{"amount":{"type":"number"}},"required":["amount"]}},"required":["payment"]}`)},
				calls: &pay},
		},
		Agents: map[string]chat.Agent{"careful": {Approvals: []tool.ApprovalRule{
			{Tools: []string{"bank__pay"}, Decision: tool.Deny, AllowIf: json.RawMessage(
				`{"properties":{"payment":{"properties":{"amount":{"type":"number","maximum":100}}}}}`)},
		}}},
		Turns: []llmtest.Turn{
			{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "bank__pay", Arguments: `{"payment":"{\"amount\":5000}"}`}}},
			{Text: "I could not pay."},
		}})
	st := f.send(t, chat.Request{Agent: "careful", Message: "pay"}, chat.StartOptions{})
	if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
		t.Fatalf("run: %+v %+v", o, o.Error)
	}
	if pay.Load() != 0 {
		t.Errorf("bank__pay ran %d times: allow_if passed a string the tool runs as {\"amount\":5000}", pay.Load())
	}
}

// TestApprovalEditedArgumentsLimit: edited arguments are bounded by limits.tool_argument_bytes as the
// model's are.
func TestApprovalEditedArgumentsLimit(t *testing.T) {
	counts := map[string]*atomic.Int32{}
	su := approvalSetup(counts)
	su.Limits.Model.ArgumentBytes = 1024
	f := newFixture(t, su)
	st := pause(t, f, counts)
	big := json.RawMessage(`{"to":"` + strings.Repeat("a", 2048) + `"}`)
	_, err := f.svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_2", Decision: chat.DecisionApprove, Arguments: big})
	var ce *chat.Error
	if !errors.As(err, &ce) || ce.Code != "invalid_decision" {
		t.Fatalf("edited arguments of %d bytes under a 1 KiB limit: %v, want invalid_decision", len(big), err)
	}
}
