package chat

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/runevent"
	"chatd/internal/store"
	"chatd/internal/tool"
)

// A run whose agent's approval policy asks about a call ends its execution awaiting approval: the store
// holds it (store.RunAwaiting) with what it waits for, its request and its whole event log, and no
// process runs it — no goroutine, no model connection, no lease; this process keeps one timer for its
// expiry. A decision on every call it waits for resumes it as a new execution of the same run, on
// whichever instance receives the last decision: the decided calls run (or get their denial) and the
// agent loop goes on from the stored history. A cancel ends it; its expiry denies what is undecided.

// DefaultApprovalTimeout is how long a run waits for a decision before its open calls are denied.
const DefaultApprovalTimeout = 24 * time.Hour

// maxDecisionReason bounds the reason a person gives with a decision: it becomes the model's input.
const maxDecisionReason = 4 << 10

// Decisions on a call that waits.
const (
	DecisionApprove = "approve"
	DecisionDeny    = "deny"
	DecisionAnswer  = "answer" // an ask_user call's answers
)

// Kinds of a waiting call.
const (
	KindApproval = "approval"
	KindQuestion = "question"
)

// awaiting is what a run awaiting approval waits for, as the store keeps it (store.Run.Awaiting).
type awaiting struct {
	// Request is the run's request, to plan the rest of the run with.
	Request   json.RawMessage `json:"request"`
	Turn      string          `json:"turn"` // the assistant record whose calls wait
	ExpiresAt time.Time       `json:"expires_at"`
	Calls     []waitingCall   `json:"calls"`
}

// waitingCall is one call that waits, with its decision once made.
type waitingCall struct {
	Kind       string          `json:"kind"`
	ToolCallID string          `json:"tool_call_id"`
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
	Reason     string          `json:"reason"`
	Decision   string          `json:"decision,omitempty"`
	Edited     json.RawMessage `json:"edited,omitempty"`  // approve: the arguments it runs with instead
	Note       string          `json:"note,omitempty"`    // deny: the person's reason
	Answers    []string        `json:"answers,omitempty"` // answer: one per question
	DecidedBy  string          `json:"decided_by,omitempty"`
}

func (a *awaiting) undecided() int {
	n := 0
	for _, c := range a.Calls {
		if c.Decision == "" {
			n++
		}
	}
	return n
}

func decodeAwaiting(b []byte) (*awaiting, error) {
	var a awaiting
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("%w: %w", errUnreadableAwaiting, err)
	}
	return &a, nil
}

// errUnreadableAwaiting: what a run waits for cannot be decoded. No decision can resume it; its expiry
// ends it.
var errUnreadableAwaiting = errors.New("what the run waits for is unreadable")

// Decision is a person's answer to a call that waits for approval.
type Decision struct {
	ToolCallID string
	Decision   string // DecisionApprove or DecisionDeny
	// Arguments, with approve, are the arguments the call runs with instead of the model's: they must
	// fit the tool's input schema.
	Arguments json.RawMessage
	// Reason, with deny, is what the model is told (at most 4 KiB).
	Reason string
	// Answers, with answer (an ask_user call), are the answers to its questions, in order.
	Answers []string
	// Content, with answer to a question from an MCP server, is the value of each of its fields, as a
	// JSON object.
	Content json.RawMessage
	// DecidedBy is who decided when it is not the run's owner: an admin deciding for them.
	DecidedBy string
}

// Awaiting is what a run awaiting approval waits for.
type Awaiting struct {
	ExpiresAt time.Time
	Calls     []AwaitingCall
}

// AwaitingCall is one call a run waits on; Decision is set once it is decided.
type AwaitingCall struct {
	Kind       string // KindApproval or KindQuestion
	ToolCallID string
	Name       string
	Arguments  json.RawMessage
	Reason     string
	Decision   string
	// Source, Message and Fields are a question from an MCP server's (Source SourceMCP): the run is
	// running, and its call waits for the answer.
	Source  string
	Message string
	Fields  []runevent.Field
}

// AwaitingOf returns what a stored run awaiting approval waits for; nil for any other run.
func AwaitingOf(r *store.Run) *Awaiting {
	if r.Status != store.RunAwaiting || len(r.Awaiting) == 0 {
		return nil
	}
	a, err := decodeAwaiting(r.Awaiting)
	if err != nil {
		return nil
	}
	out := &Awaiting{ExpiresAt: a.ExpiresAt}
	for _, c := range a.Calls {
		out.Calls = append(out.Calls, AwaitingCall{Kind: c.Kind, ToolCallID: c.ToolCallID, Name: c.Name, Arguments: c.Arguments,
			Reason: c.Reason, Decision: c.Decision})
	}
	return out
}

// ApprovalResult says what a decision did: the run is running again (every call it waited for is
// decided), or still awaits the others.
type ApprovalResult struct {
	RunID   string
	Status  string // store.RunRunning or store.RunAwaiting
	Pending int    // calls still undecided
}

// NeedsApproval reports whether the agent's policy asks a person before call runs: the agent loop's
// Approver.
func (ts *toolSet) NeedsApproval(call llm.ToolCall) (string, bool) {
	if !ts.allowed[call.Name] || ts.reg == nil {
		return "", false
	}
	if call.Name == AskUserTool {
		if _, err := questionsOf(call.Arguments); err != nil {
			return "", false // its result says what is wrong
		}
		return "The assistant has questions for you.", true
	}
	info, ok := ts.reg.Info(call.Name)
	if !ok {
		return "", false
	}
	d, reason := ts.decide(info, call)
	return reason, d == tool.Ask
}

// kindOf is the kind of a waiting call: a question (ask_user) or an approval.
func kindOf(name string) string {
	if name == AskUserTool {
		return KindQuestion
	}
	return KindApproval
}

// await stores the end of a run's execution that waits for a person, and reports whether it could:
// its events up to the pause and what it waits for, in one transaction. The run's readers get the
// awaiting_approval event last; the run is then forgotten here but for its expiry timer.
func (o *observer) await(res agent.Result) bool {
	run := o.run
	parent := o.parents[res.Final]
	if parent == nil || len(res.Waiting) == 0 {
		o.log.Error("a run awaits approval without a stored turn")
		return false
	}
	req := o.p.req
	req.SessionID, req.CreateSession, req.Regenerate = o.run.SessionID, false, false
	// The rest of the run is planned from the request, but its message is stored already: its images
	// are not kept twice (a message of images alone keeps a stand-in text, for the request's checks).
	if req.Attachments = nil; req.Message == "" {
		req.Message = "(images)"
	}
	reqJSON, err := json.Marshal(req)
	if err != nil {
		return false
	}
	aw := awaiting{Request: reqJSON, Turn: parent.ID, ExpiresAt: o.now().Add(o.approvalTimeout).UTC().Truncate(time.Second)}
	ev := runevent.AwaitingApproval{ExpiresAt: aw.ExpiresAt}
	for _, w := range res.Waiting {
		aw.Calls = append(aw.Calls, waitingCall{Kind: kindOf(w.Call.Name), ToolCallID: w.Call.ID, Name: w.Call.Name, Arguments: w.Call.Arguments, Reason: w.Reason})
		ev.Calls = append(ev.Calls, runevent.ApprovalRequired{Kind: kindOf(w.Call.Name), ToolCallID: w.Call.ID, Name: w.Call.Name, Arguments: w.Call.Arguments, Reason: w.Reason})
	}
	awJSON, err := json.Marshal(aw)
	if err != nil {
		return false
	}
	o.storePending()
	run.flushMu.Lock()
	defer run.flushMu.Unlock()
	pending, seq := run.pending()
	last := []Event{{Seq: seq + 1, Type: runevent.TypeAwaitingApproval, Data: runevent.Encode(ev)}}
	a := store.Await{Awaiting: awJSON, ExpiresAt: aw.ExpiresAt}
	if run.log != nil {
		a.Events = append(pending, store.Event{RunID: run.ID, Seq: last[0].Seq, Type: last[0].Type, Data: last[0].Data})
	}
	if err := o.store.AwaitRun(o.ctx, o.p.user, run.ID, a); err != nil {
		if _, ok := errors.AsType[*store.CancelRequestedError](err); ok {
			// Another instance asked a cancel as the run paused: an expected race, not a failure.
			o.log.Info("a run was cancelled as it paused for approval", "err", err)
		} else {
			o.log.Error("store a run awaiting approval", "err", err)
		}
		return false
	}
	if o.conv != nil {
		o.conv.release()
	}
	out := Outcome{Status: store.RunAwaiting, FinishReason: res.FinishReason, Message: runevent.RecordOf(o.last),
		ToolHistory: o.history, Usage: storeUsage(res.Usage)}
	if out.ToolHistory == nil {
		out.ToolHistory = []runevent.ToolHistory{}
	}
	if o.awaited != nil {
		// Its expiry is kept before the run is seen waiting (its end): whoever sees it waiting finds the
		// timer set, measured from when it paused.
		o.awaited(o.p.user, run.ID, aw.ExpiresAt, "")
	}
	run.end(last, true, out)
	o.retire(run)
	if reason := run.reason(); o.awaited != nil && reason != "" {
		o.awaited(o.p.user, run.ID, aw.ExpiresAt, reason) // cancelled as it paused: ended now
	}
	return true
}

// Decide records a person's decision on a call one of the user's runs waits for. Once every call it
// waits for is decided, the run resumes here. Another user's run is not found; a run that does not
// wait, a call it does not wait for or one decided already is refused.
func (s *Service) Decide(ctx context.Context, user, runID string, d Decision) (*ApprovalResult, error) {
	if err := checkDecision(d, cmp.Or(s.opts.Limits.Model.ArgumentBytes, agent.DefaultArgumentBytes)); err != nil {
		return nil, err
	}
	if d.DecidedBy != "" {
		s.log.Info("a decision on another user's run", "run_id", runID, "user", user, "decided_by", d.DecidedBy,
			"tool_call_id", d.ToolCallID, "decision", d.Decision)
	}
	if live := s.live(user, runID); live != nil {
		if res, ok, err := s.answerLive(live, d); ok {
			return res, err
		}
	}
	if d.Content != nil {
		return nil, s.notAsking(ctx, user, runID, d.ToolCallID)
	}
	return s.decide(ctx, user, runID, true, func(aw *awaiting) error {
		i := slices.IndexFunc(aw.Calls, func(c waitingCall) bool { return c.ToolCallID == d.ToolCallID })
		if i < 0 {
			return invalid("unknown_tool_call", "run %s does not wait for a decision on tool call %q", runID, d.ToolCallID)
		}
		c := &aw.Calls[i]
		if c.Decision != "" {
			return &Error{Kind: ErrBusy, Code: "already_decided", RunID: runID,
				Message: fmt.Sprintf("tool call %q was already decided (%s)", d.ToolCallID, c.Decision)}
		}
		switch {
		case c.Kind == KindQuestion && d.Decision == DecisionApprove:
			return invalid("invalid_decision", "tool call %q asks questions: answer them (decision answer, with answers) or deny", d.ToolCallID)
		case c.Kind != KindQuestion && d.Decision == DecisionAnswer:
			return invalid("invalid_decision", "tool call %q waits for approval: approve or deny it", d.ToolCallID)
		case d.Decision == DecisionAnswer:
			if err := checkAnswers(c, d.Answers); err != nil {
				return err
			}
			c.Answers = d.Answers
		}
		c.Decision, c.DecidedBy = d.Decision, d.DecidedBy
		switch {
		case d.Decision == DecisionDeny:
			c.Note = d.Reason
		case len(d.Arguments) > 0:
			args, err := s.checkEdited(c.Name, d.Arguments)
			if err != nil {
				return err
			}
			c.Edited = args
		}
		return nil
	})
}

// checkDecision checks what a decision says, before the run is read.
func checkDecision(d Decision, argumentBytes int) error {
	switch {
	case d.ToolCallID == "":
		return invalid("invalid_decision", "tool_call_id is required: the id of the call to decide (approval_required names it)")
	case d.Decision != DecisionApprove && d.Decision != DecisionDeny && d.Decision != DecisionAnswer:
		return invalid("invalid_decision", "decision is %q; it must be approve, deny, or answer (ask_user)", d.Decision)
	case d.Decision != DecisionAnswer && d.Answers != nil:
		return invalid("invalid_decision", "answers go with answer, for an ask_user call")
	case d.Decision != DecisionAnswer && d.Content != nil:
		return invalid("invalid_decision", "content goes with answer, for a question from an MCP server")
	case len(d.Content) > argumentBytes:
		return invalid("invalid_answer", "content is %d bytes; the limit is %d (limits.tool_argument_bytes)", len(d.Content), argumentBytes)
	case d.Decision == DecisionDeny && len(d.Arguments) > 0:
		return invalid("invalid_decision", "arguments go with approve: a denied call does not run")
	case len(d.Reason) > maxDecisionReason:
		return invalid("invalid_decision", "reason is %d bytes; the limit is %d", len(d.Reason), maxDecisionReason)
	case len(d.Arguments) > argumentBytes:
		return invalid("invalid_decision", "arguments are %d bytes; the limit is %d (limits.tool_argument_bytes)", len(d.Arguments), argumentBytes)
	}
	return nil
}

// checkEdited checks arguments a person edited against the tool's input schema, and returns them as
// the call runs with them.
func (s *Service) checkEdited(name string, args json.RawMessage) (json.RawMessage, error) {
	if s.opts.Tools == nil {
		return nil, invalid("invalid_arguments", "no tool %q to check the arguments against", name)
	}
	out, err := s.opts.Tools.CheckArguments(name, args)
	if err != nil {
		return nil, invalid("invalid_arguments", "%s", err.Error())
	}
	return out, nil
}

// decide applies change to what the run waits for, and stores it: as the new state of a run that still
// waits, or, once nothing is undecided, by resuming the run. A write that another decision beat reads
// the run again and tries once more.
//
// A decision that resumes the run is admitted as a send is (admit): refused with the *store.LimitError of
// the key's limit it would pass, the run left waiting and the decision not recorded. An expiry resumes
// it whatever the limits, to end the wait.
func (s *Service) decide(ctx context.Context, user, runID string, admit bool, change func(*awaiting) error) (*ApprovalResult, error) {
	for attempt := 0; ; attempt++ {
		r, err := s.opts.Store.Run(ctx, user, runID)
		if errors.Is(err, store.ErrNotFound) {
			return nil, notFound(runID)
		}
		if err != nil {
			return nil, err
		}
		if r.Status != store.RunAwaiting {
			return nil, &Error{Kind: ErrBusy, Code: "not_awaiting_approval", RunID: runID,
				Message: fmt.Sprintf("run %s is %s: it waits for no decision", runID, r.Status)}
		}
		aw, err := decodeAwaiting(r.Awaiting)
		if err != nil {
			return nil, err
		}
		if err := change(aw); err != nil {
			return nil, err
		}
		if n := aw.undecided(); n > 0 {
			after, err := json.Marshal(aw)
			if err != nil {
				return nil, err
			}
			err = s.opts.Store.UpdateAwaiting(ctx, user, runID, r.Awaiting, after)
			if err == nil {
				return &ApprovalResult{RunID: runID, Status: store.RunAwaiting, Pending: n}, nil
			}
			if !errors.Is(err, store.ErrConflict) || attempt == 3 {
				return nil, err
			}
			continue
		}
		err = s.resume(ctx, user, r, aw, admit)
		if err == nil {
			return &ApprovalResult{RunID: runID, Status: store.RunRunning}, nil
		}
		if !errors.Is(err, store.ErrConflict) || attempt == 3 {
			return nil, err
		}
	}
}

// resume starts a new execution of an awaiting run whose every call is decided: the store makes it
// running (when what it waited for is still r.Awaiting: ErrConflict when another decision, a cancel or
// its expiry came first), and its goroutine runs the approved calls, stores the denials, and goes on
// with the agent loop.
func (s *Service) resume(ctx context.Context, user string, r *store.Run, aw *awaiting, admit bool) error {
	p, err := s.resumePlan(ctx, user, r, aw)
	if err != nil {
		return s.cannotResume(ctx, user, r, err)
	}
	p.decided = aw
	if s.opts.Quota != nil {
		// The run goes on under its key's limits, as it started: its budgets are checked after each
		// model call, and the resume itself as a new run would be.
		if p.account.Quota, err = s.opts.Quota(ctx, user, r.KeyID); err != nil {
			return fmt.Errorf("the limits of the run's key: %w", err)
		}
	}
	var quota []store.Limit
	if admit {
		quota = p.account.Quota
	}
	run := s.newRun(r.ID, user, p)
	continueLog(run, r.LastEventSeq)
	if s.isClosing() {
		// Refused before anything is stored: the decision is not recorded and the run still waits, for
		// the person to decide again on the next process.
		return errClosingDecision()
	}
	reserve := run.reservation()
	if err := s.opts.Store.ResumeRun(ctx, user, r.ID, r.Awaiting, reserve, quota); errors.Is(err, store.ErrKeyRevoked) {
		return s.cannotResume(ctx, user, r, errKeyRevoked())
	} else if err != nil {
		return err
	}
	s.stopExpiry(r.ID)
	run.granted(reserve)
	if err := s.admit(run); err != nil {
		s.unresume(ctx, user, r, aw.ExpiresAt)
		return errClosingDecision()
	}
	s.recheckKey(ctx, run)
	s.start(run, nil, func(ctx context.Context) ([]store.Record, error) {
		return s.opts.Store.Records(ctx, user, run.SessionID)
	})
	return nil
}

// cannotResume ends an awaiting run that cannot go on as it was asked (its agent is gone, its request no
// longer fits, its key was revoked): failed, its calls closed. A run whose key no longer works also
// refuses the decision, with the code a send with that key gets.
func (s *Service) cannotResume(ctx context.Context, user string, r *store.Run, cause error) error {
	s.log.Warn("an awaiting run cannot resume", append(storedRunAttrs(r), "err", cause)...)
	if err := s.endAwaiting(ctx, user, r, store.RunFailed, "The run could not resume after its approval: "+cause.Error()); err != nil {
		return err
	}
	if e, ok := errors.AsType[*Error](cause); ok && e.Code == "key_revoked" {
		return &Error{Kind: ErrForbidden, Code: e.Code, RunID: r.ID,
			Message: "the API key that sent this run was revoked or has expired: the run has ended, and the decision was not carried out"}
	}
	return nil
}

// recheckKey cancels a live run whose API key was revoked, or has expired, since it was last checked:
// it reads the key from the store, not from a cache of verified keys. A revoke cancels the key's live
// runs, then those the store lists (CancelKey): a run made live or stored after those reads is in
// neither set. Read once the run is live and stored, either the key is seen revoked here, or the revoke
// came after this read and its cancel finds the run. The run ends cancelled, for the reason a revoke
// gives. A failed read lets the run go on: its key was checked moments ago, as its request came in.
//
// A resumed run is read again before it starts (resume): the cancel, asked then, ends it before the
// approved calls run. Any other run reads it on its own goroutine, once stored (observer.keyChecked).
func (s *Service) recheckKey(ctx context.Context, run *Run) {
	r := &store.Run{ID: run.ID, SessionID: run.SessionID, UserID: run.user, KeyID: run.plan.account.KeyID}
	refused, err := s.keyRefused(ctx, r)
	if err != nil {
		s.log.Error("check again the key of a run", append(storedRunAttrs(r), "err", err)...)
		return
	}
	if refused != nil {
		run.requestCancel(keyRevokedReason)
	}
}

// errClosingDecision refuses a decision that would resume a run on a service shutting down.
func errClosingDecision() error {
	return &Error{Kind: ErrClosed, Code: "shutting_down",
		Message: "chatd is shutting down: the decision was not recorded and the run still waits; decide again once chatd is back"}
}

// unresume puts back to wait a run the store resumed but this closing service could not admit (Close
// began since resume checked): it waits as before the decision, which is refused and can be given again
// on the next process. Waiting again, rather than ending it, keeps the person's choice theirs; a run left
// running in the store with no one running it would only be ended as interrupted at the next start,
// which is what happens should this write fail too.
//
// A cancel asked meanwhile on another instance (the store refuses to put the run back to wait) ends it
// cancelled instead: waiting, nothing would carry the cancel out.
func (s *Service) unresume(ctx context.Context, user string, r *store.Run, expires time.Time) {
	ctx = context.WithoutCancel(ctx)
	err := s.opts.Store.AwaitRun(ctx, user, r.ID, store.Await{Awaiting: r.Awaiting, ExpiresAt: expires})
	if c, ok := errors.AsType[*store.CancelRequestedError](err); ok {
		err = s.endStored(ctx, user, r, store.RunCancelled, "The run was cancelled while this call waited for approval ("+c.Reason+")", false)
	}
	if err != nil {
		s.log.Error("put back to wait a run the closing service could not resume", append(storedRunAttrs(r), "err", err)...)
	}
}

// resumePlan plans the rest of an awaiting run from its stored request, as a queued run is planned.
func (s *Service) resumePlan(ctx context.Context, user string, r *store.Run, aw *awaiting) (*plan, error) {
	var req Request
	if err := json.Unmarshal(aw.Request, &req); err != nil {
		return nil, fmt.Errorf("its stored request is unreadable: %w", err)
	}
	req.SessionID, req.CreateSession, req.Regenerate = r.SessionID, false, false
	if refused, err := s.keyRefused(ctx, r); err != nil {
		return nil, err
	} else if refused != nil {
		return nil, refused
	}
	return s.plan(ctx, user, req, Account{KeyID: r.KeyID})
}

// continueLog makes a run made again from the store go on from its stored log, whose last event is
// last: new events follow it without a gap, and a reader reads the stored ones from the store, as it
// reads those a live run dropped once stored (Run.trim) — none is loaded here. Without a durable log
// nothing of the run was stored, and its events begin again at 1.
func continueLog(run *Run, last int64) {
	if run.log == nil {
		return
	}
	run.trimmed, run.persisted, run.reserved, run.next = last, last, last, last+1
}

// runDecided runs, at the start of a resumed execution, the calls a person approved and stores the
// denials, each answering its call of the stored turn as the loop's own results do.
func (s *Service) runDecided(ctx context.Context, p *plan, obs *observer) {
	aw := p.decided
	tools := p.tools.observed(obs)
	obs.open += len(aw.Calls)
	for _, c := range aw.Calls {
		obs.run.emit(runevent.TypeApprovalDecided, runevent.Encode(runevent.ApprovalDecided{ToolCallID: c.ToolCallID,
			Decision: c.Decision, Arguments: c.Edited, Reason: c.Note, Answers: c.Answers, DecidedBy: c.DecidedBy}))
		call := llm.ToolCall{ID: c.ToolCallID, Name: c.Name, Arguments: c.Arguments}
		if len(c.Edited) > 0 {
			call.Arguments = c.Edited
		}
		var res agent.ToolResult
		var denied string // the policy may have changed (and chatd restarted) while the call waited
		if c.Kind != KindQuestion && c.Decision == DecisionApprove && tools.allowed[c.Name] {
			denied = tools.denial(call)
		}
		switch {
		case ctx.Err() != nil:
			res.Content = "The run was cancelled before this call ran."
		case c.Kind == KindQuestion:
			res = askUserResult(c)
		case c.Decision == DecisionApprove && !tools.allowed[c.Name]:
			res.Content = "Not run: the tool " + c.Name + " is no longer offered to this agent."
		case denied != "":
			res.Content = denied
		case c.Decision == DecisionApprove:
			obs.Emit(agent.ToolStart{Call: call})
			obs.Status("Running " + c.Name + "…")
			res = tools.run(ctx, call)
			if len(c.Edited) > 0 {
				res.Content = "(A person edited the arguments before approving; the call ran with " + string(c.Edited) + ".)\n" + res.Content
			}
		default:
			res.Content = "A person denied this call, so it did not run."
			if c.Note != "" {
				res.Content += " Their reason: " + c.Note
			}
		}
		obs.Emit(agent.ToolComplete{Call: call, Result: res})
		if err := obs.recordResult(context.WithoutCancel(ctx), aw.Turn, call, res); err != nil {
			obs.log.Error("store the result of a decided call", "call", c.ToolCallID, "err", err)
		}
	}
}

// endAwaiting ends a run awaiting approval with status (cancelled, failed), its open calls closed with
// reason, and its last events. It reports store.ErrConflict when the run no longer waits.
func (s *Service) endAwaiting(ctx context.Context, user string, r *store.Run, status, reason string) error {
	return s.endStored(ctx, user, r, status, reason, true)
}

// endStored ends a run no process runs — awaiting approval (whileAwaiting), or resumed in the store but
// never started — as endAwaiting does.
func (s *Service) endStored(ctx context.Context, user string, r *store.Run, status, reason string, whileAwaiting bool) error {
	seq := r.LastEventSeq
	var evs []store.Event
	add := func(typ string, data []byte) {
		seq++
		evs = append(evs, store.Event{RunID: r.ID, Seq: seq, Type: typ, Data: data})
	}
	finish := "cancelled"
	if status == store.RunCancelled {
		add(runevent.TypeCancelled, runevent.Encode(runevent.Cancelled{Reason: reason}))
	} else {
		finish = "error"
		add(runevent.TypeError, runevent.Encode(runevent.Error{Code: "resume_failed", Message: reason}))
	}
	add(runevent.TypeDone, runevent.Encode(runevent.Done{Status: status}))
	end := store.RunEnd{Status: status, FinishReason: finish, UsageFromEntries: true, Events: evs,
		Reason: "Not run: " + strings.TrimSuffix(reason, ".") + ".", WhileAwaiting: whileAwaiting}
	if status == store.RunFailed {
		end.Error = reason
	}
	if s.events == nil {
		end.Events = nil
	}
	if _, err := s.opts.Store.FinishRun(ctx, user, r.ID, end); err != nil {
		return err
	}
	s.stopExpiry(r.ID)
	s.queues.kick(r.SessionID) // a run queued behind it starts now
	return nil
}

// cancelAwaiting cancels a run awaiting approval.
func (s *Service) cancelAwaiting(ctx context.Context, user string, r *store.Run, reason string) (*CancelResult, error) {
	err := s.endAwaiting(ctx, user, r, store.RunCancelled, "The run was cancelled while this call waited for approval ("+reason+")")
	if errors.Is(err, store.ErrConflict) {
		return nil, &Error{Kind: ErrBusy, Code: "run_resumed", RunID: r.ID,
			Message: "the run was resumed or ended while the cancel was asked; cancel it again"}
	}
	if err != nil {
		return nil, err
	}
	return &CancelResult{RunID: r.ID, Status: store.RunCancelled, Message: "the run was waiting for approval and is cancelled; its open calls are closed"}, nil
}

// awaited keeps the expiry of a run that now awaits approval: at its time, every call still undecided
// is denied, and the run goes on. A cancel asked while the run was pausing (cancelReason) ends it now.
func (s *Service) awaited(user, runID string, expires time.Time, cancelReason string) {
	if cancelReason != "" {
		ctx := context.WithoutCancel(s.base)
		r, err := s.opts.Store.Run(ctx, user, runID)
		if err == nil && r.Status == store.RunAwaiting {
			_, err = s.cancelAwaiting(ctx, user, r, cancelReason)
		}
		if err != nil {
			s.log.Error("cancel a run as it paused for approval", "run", runID, "err", err)
		}
		return
	}
	s.keepExpiry(user, runID, expires)
}

// keepExpiry sets the timer that expires an awaiting run.
func (s *Service) keepExpiry(user, runID string, expires time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return
	}
	if t := s.expiries[runID]; t != nil {
		t.Stop()
	}
	s.expiries[runID] = time.AfterFunc(expires.Sub(s.opts.Now()), func() { s.expire(user, runID) })
}

// stopExpiry forgets the expiry of a run that no longer waits.
func (s *Service) stopExpiry(runID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.expiries[runID]; t != nil {
		t.Stop()
		delete(s.expiries, runID)
	}
}

// expire denies every undecided call of a run whose wait has expired, which resumes it.
func (s *Service) expire(user, runID string) {
	s.mu.Lock()
	delete(s.expiries, runID)
	closing := s.closing
	s.mu.Unlock()
	if closing {
		return // the next start of chatd keeps the expiry again
	}
	ctx := context.WithoutCancel(s.base)
	_, err := s.decide(ctx, user, runID, false, func(aw *awaiting) error {
		if s.opts.Now().Before(aw.ExpiresAt) {
			return errNotExpired
		}
		for i := range aw.Calls {
			if aw.Calls[i].Decision == "" {
				aw.Calls[i].Decision, aw.Calls[i].Note = DecisionDeny, "nobody decided in time (the approval expired)"
			}
		}
		return nil
	})
	var e *Error
	switch {
	case err == nil, errors.Is(err, errNotExpired):
	case errors.As(err, &e) && (e.Code == "not_awaiting_approval" || e.Code == "run_not_found" || e.Code == "key_revoked"):
		// Decided, cancelled or deleted meanwhile; or ended, its key revoked.
	case errors.Is(err, errUnreadableAwaiting):
		// Nothing can resume it: waiting on, it would be found again by every sweep, the oldest
		// first, and enough of them would keep the sweep from the others.
		s.endUnreadable(ctx, user, runID, err)
	default:
		s.log.Error("expire a run awaiting approval", "run", runID, "err", err)
	}
}

// endUnreadable ends failed, its calls closed, a run awaiting approval whose state is unreadable: no
// decision can resume it, and its expiry is unknown.
func (s *Service) endUnreadable(ctx context.Context, user, runID string, cause error) {
	r, err := s.opts.Store.Run(ctx, user, runID)
	if err == nil && r.Status == store.RunAwaiting {
		s.log.Error("an awaiting run's state is unreadable: it ends failed", append(storedRunAttrs(r), "err", cause)...)
		err = s.endAwaiting(ctx, user, r, store.RunFailed, "The run could not go on: "+cause.Error())
	}
	if err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
		s.log.Error("end a run awaiting approval whose state is unreadable", "run", runID, "err", err)
	}
}

var errNotExpired = errors.New("not expired yet")

// keepExpiries keeps the expiry of every run awaiting approval in the store: at start-up, for the
// runs a previous process left waiting. One whose state is unreadable ends failed.
func (s *Service) keepExpiries(ctx context.Context) error {
	runs, err := s.opts.Store.AwaitingRuns(ctx, "")
	if err != nil {
		return fmt.Errorf("awaiting runs: %w", err)
	}
	for i := range runs {
		aw, err := decodeAwaiting(runs[i].Awaiting)
		if err != nil {
			// Its expiry is unknown, and no decision can resume it: it ends now.
			s.endUnreadable(ctx, runs[i].UserID, runs[i].ID, err)
			continue
		}
		s.keepExpiry(runs[i].UserID, runs[i].ID, aw.ExpiresAt)
	}
	return nil
}
