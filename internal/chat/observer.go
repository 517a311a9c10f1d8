package chat

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/logging"
	"chatd/internal/marker"
	"chatd/internal/metrics"
	"chatd/internal/runevent"
	"chatd/internal/store"
	"chatd/internal/tool"
	"chatd/internal/tracing"

	"go.opentelemetry.io/otel/trace"
)

// observer stores what the agent loop produces (it is the loop's agent.Recorder) and turns the loop's
// events into run events (its agent.Sink). The loop calls it from one goroutine, except for the
// ToolComplete events of calls that end while it streams.
type observer struct {
	// deltas is the buffer the data of text and reasoning deltas is encoded into (deltaData).
	deltas []byte
	store  runStore
	log    *slog.Logger
	prices map[string]Price
	// retire forgets the run once it has ended.
	retire func(*Run)
	// closing is closed when the service shuts down: a failed end of the run is not retried past it.
	closing <-chan struct{}
	p       *plan
	run     *Run
	// ctx is for store writes: they must finish even when the run is cancelled.
	ctx      context.Context
	parents  map[*agent.Turn]*store.Record
	last     *store.Record
	history  []runevent.ToolHistory
	finished bool
	// conv is the run's context: it gets every record stored, and the usage that calibrates it.
	conv *conversation
	// gate, until the loop first passes it, holds back the events and writes of a run started before
	// its commit (see gate.go); abandoned says the commit failed and the run is dropped.
	gate      *gate
	abandoned bool
	// kept and stored are the session's records as the run knows them: kept, all it started with (its
	// history's array, shared and never appended to, so that a run of a long session holds no second
	// copy of it), then stored, each it stored (keep); both nil once one is missing. created is the
	// session's CreatedAt, which names them. The run's end joins them for remember, for the session's
	// next run here, which may then start early.
	kept   []store.Record
	stored []store.Record
	// own is kept's array with its spare room when the run made that array itself (a run started
	// early: earlyHistory appended the message to the kept records) and no one else writes it: the
	// run's end appends stored there instead of copying the history once more.
	own      []store.Record
	created  time.Time
	remember func(user, session string, created time.Time, records []store.Record)
	// checkKey, until the loop first passes ready, reads the run's API key again from the store and
	// cancels the run if it was revoked (Service.recheckKey); nil for a run without a key, or one
	// whose key was read again already.
	checkKey func()
	// open counts the calls of stored turns without a stored result: none, and the run's end need not
	// look for calls to close.
	open int
	// pending are usage entries that go into the store with the turn they paid for, in its transaction:
	// a sender with no token or spend budget needs none of them counted before.
	pending []store.UsageEntry
	// parser and split take the marked blocks out of the answers: split while they stream, parser from
	// each stored turn's whole text (the same result, the splitter holding for any split).
	parser *answerParser
	split  *marker.Splitter
	// payloads name the run's payloads so far, for complete: tool payloads and answers' marker payloads.
	payloads []runevent.Payload

	// What the run's end reports (metrics, its span, its log line): when it started, the time to its
	// first token (0 until then), and the model last called (a fallback is counted against it).
	metrics   *metrics.Run
	tracing   *tracing.Tracing
	span      trace.Span
	started   time.Time
	ttft      time.Duration
	ttftHeld  bool // ttft is of a token held before the commit was known: not reported yet
	lastModel agent.Model
	meter     *metrics.Metrics
	// unstored are the diagnostics of calls whose turn could not be stored: they go with the run's end.
	unstored []store.ModelCall
	// keepRequests is limits.diagnostics_runs: the run's end drops the requests of older runs.
	keepRequests int
	// completed, when set, is called with the answer of a run that completed, once its end is stored
	// and before its readers have it (the session's title is made from the first one).
	completed func(answer string)
	// approvalTimeout and now set when a run that pauses for approval expires; awaited is told once it
	// has paused (with a cancel asked meanwhile).
	approvalTimeout time.Duration
	now             func() time.Time
	awaited         func(user, runID string, expires time.Time, cancelReason string)
}

var (
	_ agent.Sink     = (*observer)(nil)
	_ agent.Recorder = (*observer)(nil)
)

// runStore is what a run writes to the store as it goes and when it ends.
type runStore interface {
	recordStore
	AppendTurn(ctx context.Context, user string, r *store.Record, usage []store.UsageEntry, calls []store.ModelCall) error
	AddUsage(ctx context.Context, user string, u store.UsageEntry) error
	UsageSince(ctx context.Context, user, keyID string, since time.Time) (tokens, costNanoUSD int64, err error)
	CloseCalls(ctx context.Context, user, runID, reason string) ([]store.Record, error)
	Run(ctx context.Context, user, id string) (*store.Run, error)
	FinishRun(ctx context.Context, user, runID string, end store.RunEnd) ([]store.Record, error)
	AwaitRun(ctx context.Context, user, runID string, a store.Await) error
}

func (s *Service) newObserver(p *plan, run *Run) *observer {
	parser := p.parser
	if parser == nil {
		parser = newAnswerParser(nil, s.opts.Limits.MarkerBytes)
	}
	// The run's lines carry its ids; start adds its trace's.
	log := s.log.With(logging.RunAttrs(logging.WithRun(context.Background(), logging.RunIdentity{RunID: run.ID, SessionID: run.SessionID, User: run.user}))...)
	o := &observer{store: timedStore{runStore: s.opts.Store, m: s.opts.Metrics}, log: log, prices: s.opts.Prices, retire: s.retire,
		closing: s.base.Done(), p: p, run: run, ctx: context.WithoutCancel(s.base), parents: map[*agent.Turn]*store.Record{},
		parser: parser, split: parser.splitter(), keepRequests: s.opts.Limits.DiagnosticsRuns,
		tracing: s.opts.Tracing, meter: s.opts.Metrics, span: trace.SpanFromContext(context.Background()), started: time.Now(),
		approvalTimeout: s.opts.ApprovalTimeout, now: s.opts.Now, awaited: s.awaited, remember: s.hist.put}
	if p.account.KeyID != "" && p.decided == nil { // a resumed run's key was read again as it resumed
		o.checkKey = func() { s.recheckKey(o.ctx, run) }
	}
	return o
}

// ready waits, for a run started early, until its commit is known, and reports whether the run may
// go on. The loop's goroutine calls it before anything it sends or stores; a run whose commit failed is
// stopped and reports false ever after. The first time, the run stored, it reads the run's key again.
func (o *observer) ready() bool {
	if o.gate == nil {
		if o.checkKey != nil {
			o.keyChecked()
		}
		return !o.abandoned
	}
	g := o.gate
	o.gate = nil
	if !g.committed() {
		o.abandon()
		return false
	}
	if o.checkKey != nil {
		defer o.keyChecked() // after the held first tokens' time is counted
	}
	if o.conv != nil {
		o.conv.stored(&g.first)
	}
	if n := len(o.kept); n > 0 && o.kept[n-1].ID == g.first.ID {
		o.kept[n-1] = g.first
	}
	o.created = g.created
	if o.ttftHeld {
		// The first token was held unseen until the commit: a client had it no sooner than the gate
		// opened.
		o.ttftHeld = false
		o.ttft = max(o.ttft, g.at.Sub(o.started))
		o.metrics.FirstToken(o.ttft)
	}
	return true
}

// keyChecked reads the run's key again, once, unless the run is ending anyway.
//
// The sender's key was checked when its request was authenticated, which may be long before the run is
// stored (a slow request body; an instance's cache of verified keys): a revoke can commit in between,
// and list the key's runs (CancelKey) before this one is stored. Read once the run is stored, either the
// key is seen revoked here, or the revoke came after this read and its listing finds the run. For a run
// started early the model is called already, its first tokens shown as the commit ended: the read
// delays neither; a stored run reads it before its first model call (the loop's first event).
func (o *observer) keyChecked() {
	check := o.checkKey
	o.checkKey = nil
	if !o.finished {
		check()
	}
}

// abandon ends a run whose first commit failed, before any of its events is seen.
func (o *observer) abandon() {
	o.abandoned = true
	o.run.stop(errAbandoned)
	// Ended, the run takes no more events: a tool the loop started before it noticed cannot put
	// events of a run the store does not have into the event log.
	o.run.end(nil, false, Outcome{Status: store.RunFailed, FinishReason: "error",
		Error: &runevent.Error{Code: "internal", Message: "the run could not be stored"}})
}

// Emit sends an event of the loop to the run's readers.
func (o *observer) Emit(e agent.Event) {
	if (o.gate != nil || o.abandoned || o.checkKey != nil) && !o.pass(e) {
		return
	}
	switch e := e.(type) {
	case *agent.TextDelta:
		o.TextDelta(e.Text)
	case *agent.ReasoningDelta:
		o.ReasoningDelta(e.Text)
	default:
		o.emitOther(e)
	}
}

// pass is Emit's gate, for a run started before its commit: while the commit is not known, the
// model's stream (its deltas, and the loop's status notes) goes to the run, which holds it unseen
// (Run.hold), so that the loop reads on and the first tokens are there when the commit ends. Anything
// else — a tool about to start, usage to store — waits for the commit; from then on no event is held.
// pass reports whether e may be emitted.
func (o *observer) pass(e agent.Event) bool {
	if o.gate != nil && !o.gate.known() {
		switch e.(type) {
		case *agent.TextDelta, *agent.ReasoningDelta, *agent.ToolCallDelta, agent.StatusMessage:
			return true
		}
	}
	return o.ready()
}

// emitOther is Emit for the events that are not a token's. It is apart from Emit so that Emit's frame,
// on every token's path, stays small: the run's goroutine calls it deep in its stack, reading the
// model's stream, and a larger frame there grows that stack past 8 KB for the rest of the run.
func (o *observer) emitOther(e agent.Event) {
	switch e := e.(type) {
	case agent.StatusMessage:
		o.Status(e.Message)
	case *agent.ToolCallDelta:
		o.ToolCallDelta(e.Index, e.ID, e.Name, e.ArgumentsDelta)
	case agent.ToolStart:
		o.ToolStart(e.Call)
	case agent.ToolComplete:
		o.ToolComplete(e.Call, e.Result)
	case agent.Usage:
		o.Usage(e.Model, e.Usage)
	case agent.ApprovalRequired:
		o.run.emit(runevent.TypeApprovalRequired, runevent.Encode(runevent.ApprovalRequired{Kind: kindOf(e.Call.Name), ToolCallID: e.Call.ID,
			Name: e.Call.Name, Arguments: e.Call.Arguments, Reason: e.Reason}))
	default:
		o.log.Error("unknown agent event", "type", fmt.Sprintf("%T", e))
	}
}

func (o *observer) Status(message string) {
	o.run.emit(runevent.TypeStatus, runevent.EncodeStatus(message))
}

// TextDelta sends the part of a piece of the answer that is not a marked block, as soon as it is known
// not to be one.
func (o *observer) TextDelta(text string) {
	if o.ttft == 0 {
		o.firstToken()
	}
	if text = o.split.Write(text); text != "" {
		o.run.emit(runevent.TypeTextDelta, o.deltaData(text))
	}
	// The blocks are kept from the stored turn, parsed whole: the stream's are dropped as they come,
	// so an answer of many blocks holds none of them while it streams.
	o.split.Take()
}

// endText sends what the splitter held of a turn's text that ended, and readies it for the next turn.
func (o *observer) endText() {
	if text := o.split.Flush(); text != "" {
		o.run.emit(runevent.TypeTextDelta, runevent.EncodeText(text))
	}
	o.split.Take() // the stored turn is parsed whole, with the notes logged once
}

func (o *observer) ReasoningDelta(text string) {
	if o.ttft == 0 {
		o.firstToken()
	}
	o.run.emit(runevent.TypeReasoningDelta, o.deltaData(text))
}

// deltaSlab is the size of the buffers a run's text and reasoning deltas are encoded into: a token's
// delta takes 20-40 bytes, and a short answer should not hold much more than it uses.
const deltaSlab = 512

// deltaData returns runevent.EncodeText(text), encoded into the run's current delta buffer: one
// allocation for many tokens, not one each. Each delta's data is a full slice of the buffer, which is
// only ever appended to, so that data never changes; a buffer lives as long as any event whose data it
// holds is kept (by the run until stored and given to its readers, or by a reader).
func (o *observer) deltaData(text string) []byte {
	if n := runevent.TextSize(text); cap(o.deltas)-len(o.deltas) < n {
		if n > deltaSlab/4 {
			return runevent.EncodeText(text) // a large delta gets its own
		}
		o.deltas = make([]byte, 0, deltaSlab)
	}
	start := len(o.deltas)
	o.deltas = runevent.AppendText(o.deltas, text) // text that needs escapes may move the buffer: its copy is unused
	return o.deltas[start:len(o.deltas):len(o.deltas)]
}

// firstToken records the run's time to its first token: text, reasoning or a tool call.
// A token held while the run's commit is not known is reported once the commit succeeded (ready), and
// never for a run abandoned because it failed.
func (o *observer) firstToken() {
	o.ttft = max(time.Since(o.started), 1)
	if o.gate != nil {
		o.ttftHeld = true
		return
	}
	o.metrics.FirstToken(o.ttft)
}

func (o *observer) ToolCallDelta(index int, id, name, args string) {
	if o.ttft == 0 {
		o.firstToken()
	}
	o.run.emit(runevent.TypeToolCallDelta, runevent.Encode(runevent.ToolCallDelta{Index: index, ID: id, Name: name, ArgumentsDelta: args}))
}

func (o *observer) ToolStart(call llm.ToolCall) {
	o.run.emit(runevent.TypeToolStart, runevent.Encode(runevent.ToolStart{ToolCallID: call.ID, Name: call.Name, Arguments: call.Arguments}))
}

// ToolComplete runs on the call's goroutine; emitting is safe there.
func (o *observer) ToolComplete(call llm.ToolCall, res agent.ToolResult) {
	o.run.emit(runevent.TypeToolComplete, runevent.Encode(runevent.ToolComplete{ToolCallID: call.ID, Name: call.Name,
		Success: res.Success, Content: res.Content, DurationMS: res.Duration.Milliseconds(), Payload: res.Payload}))
}

// ToolProgress runs on whatever goroutine the tool reports from (an MCP client's reader); emit locks.
func (o *observer) ToolProgress(callID string, p tool.Progress) {
	o.run.emit(runevent.TypeToolProgress, runevent.Encode(runevent.ToolProgress{ToolCallID: callID, Progress: p.Progress, Total: p.Total, Message: p.Message}))
}

func (o *observer) Usage(m agent.Model, u llm.Usage) {
	model := llm.Origin(m.ProviderName, m.Name)
	if o.conv != nil && model == o.conv.model {
		o.conv.observe(u.InputTokens)
	}
	o.recordUsage(model, u)
}

// recordUsage sends and stores the usage of one model call, with its cost, and stops the run when it
// used up one of the sender's token or spend limits.
func (o *observer) recordUsage(model string, u llm.Usage) {
	if !o.ready() {
		return
	}
	su := storeUsage(u)
	o.run.emit(runevent.TypeUsage, runevent.Encode(runevent.UsageEvent{Model: model, Usage: runevent.UsageOf(su)}))
	o.meter.Tokens(model, metrics.Usage{Input: su.InputTokens, Output: su.OutputTokens, CacheRead: su.CacheReadTokens,
		CacheWrite: su.CacheWriteTokens, Reasoning: su.ReasoningTokens, CostUSD: float64(o.prices[model].cost(su)) / 1e9})
	o.account(model, su, false)
}

// account stores a model call's usage in the ledger, priced, and stops the run when the sender's
// token or spend budget is used up.
func (o *observer) account(model string, u store.Usage, estimated bool) {
	entry := store.UsageEntry{RunID: o.run.ID, SessionID: o.run.SessionID, KeyID: o.p.account.KeyID, Agent: o.p.agentNm,
		Model: model, Usage: u, CostNanoUSD: o.prices[model].cost(u), Estimated: estimated}
	if !estimated && len(o.p.account.Quota) == 0 {
		o.pending = append(o.pending, entry) // stored with the turn (or at the run's end)
		return
	}
	if err := o.store.AddUsage(o.ctx, o.p.user, entry); err != nil {
		o.log.Error("store usage", "estimated", estimated, "err", err)
		return
	}
	if err := o.overBudget(); err != nil {
		o.run.stop(err)
	}
}

// overBudget returns the limit of the sender's token and spend budgets that its usage has reached, as
// the run's failure, or nil.
func (o *observer) overBudget() error {
	e, err := budgetReached(o.ctx, o.store, o.p.user, o.p.account.Quota)
	if err != nil {
		o.log.Error("read usage for the run's budget", "err", err)
		return nil
	}
	if e == nil {
		return nil
	}
	return budgetError(e)
}

// RecordTurn stores a turn of the loop.
func (o *observer) RecordTurn(ctx context.Context, t *agent.Turn) error {
	if !o.ready() {
		return errAbandoned
	}
	o.endText()
	u := storeUsage(t.Usage)
	rec := &store.Record{
		SessionID: o.run.SessionID, RunID: o.run.ID, Role: store.RoleAssistant,
		Reasoning: t.Reasoning, Model: t.Origin,
		FinishReason: t.FinishReason, Usage: &u, Replay: replayOf(t),
	}
	o.parser.parse(t.Text, rec, func(m, reason string) {
		o.log.Warn("dropped a marked block of the answer", "marker", m, "reason", reason)
	})
	for _, c := range t.ToolCalls {
		rec.ToolCalls = append(rec.ToolCalls, store.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	calls := o.run.calls.take(outputOf(t))
	err := o.store.AppendTurn(ctx, o.p.user, rec, o.pending, calls)
	if err != nil && len(calls) > 0 {
		// Diagnostics never cost a turn: stored without its calls, the turn stands.
		o.log.Error("store a turn with its model calls' diagnostics; storing it without them", "calls", len(calls), "err", err)
		err = o.store.AppendTurn(ctx, o.p.user, rec, o.pending, nil)
	}
	o.run.calls.stored()
	if err != nil {
		o.unstored = append(o.unstored, calls...)
		return err
	}
	o.pending = nil
	o.parents[t], o.last = rec, rec
	o.open += len(rec.ToolCalls)
	if u == (store.Usage{}) {
		o.estimateUsage(t)
	}
	o.added(rec)
	o.payloads = append(o.payloads, runevent.PayloadRefs(rec)...)
	o.run.emit(runevent.TypeRecord, runevent.Encode(runevent.RecordEvent{Message: runevent.RecordOf(rec)}))
	return nil
}

// estimateUsage stores, for a turn whose provider reported no usage — a call cut short by a cancel
// before its last chunk, or a server that does not report —, the usage chatd counts: the request as
// estimated when it was built, and about a token for every four bytes streamed. Without it a caller
// could stop every answer just before its end and never be counted.
func (o *observer) estimateUsage(t *agent.Turn) {
	out := len(t.Text) + len(t.Reasoning)
	for _, c := range t.ToolCalls {
		out += len(c.Name) + len(c.Arguments)
	}
	var in int64
	if o.conv != nil && o.conv.estimate > 0 {
		in = int64(o.conv.est.calibrated(o.conv.model, o.conv.estimate))
	}
	u := store.Usage{InputTokens: in, OutputTokens: int64((out + 3) / 4)}
	if u == (store.Usage{}) {
		return
	}
	o.account(t.Origin, u, true)
}

// RecordToolResult stores the result of a call of a stored turn.
func (o *observer) RecordToolResult(ctx context.Context, t *agent.Turn, call llm.ToolCall, res agent.ToolResult) error {
	parent := o.parents[t]
	if parent == nil {
		return errors.New("tool result for a turn that was not stored")
	}
	return o.recordResult(ctx, parent.ID, call, res)
}

// recordResult stores the result of a call of the assistant record parentID.
func (o *observer) recordResult(ctx context.Context, parentID string, call llm.ToolCall, res agent.ToolResult) error {
	ok, ms := res.Success, res.Duration.Milliseconds()
	rec := &store.Record{
		SessionID: o.run.SessionID, RunID: o.run.ID, Role: store.RoleTool, ParentID: parentID,
		ToolCallID: call.ID, Name: call.Name, Content: res.Content, Success: &ok, DurationMS: &ms, Payload: res.Payload,
	}
	for _, a := range res.Attachments {
		rec.Attachments = append(rec.Attachments, store.Attachment{MediaType: a.MediaType, Name: a.Text, Data: a.Data})
	}
	if err := o.store.AppendRecord(ctx, o.p.user, rec); err != nil {
		return err
	}
	o.open--
	o.added(rec)
	o.payloads = append(o.payloads, runevent.PayloadRefs(rec)...)
	o.run.emit(runevent.TypeRecord, runevent.Encode(runevent.RecordEvent{Message: runevent.RecordOf(rec)}))
	args := res.Arguments
	if args == nil {
		args = call.Arguments
	}
	o.history = append(o.history, runevent.ToolHistory{ToolCallID: call.ID, Name: call.Name, Arguments: args,
		Success: ok, Content: res.Content, DurationMS: ms, Payload: res.Payload})
	return nil
}

// added hands a stored record to the run's context, and keeps it.
func (o *observer) added(rec *store.Record) {
	o.keep(*rec)
	if o.conv != nil {
		o.conv.add(rec)
	}
}

// rememberKept hands the session's records, as the run leaves them, to the session's next run here,
// unless the run lost track of them: before the readers learn of the end, since a client's next message
// may start early on them.
func (o *observer) rememberKept() {
	if o.kept == nil || o.created.IsZero() {
		return
	}
	all, n := o.kept, len(o.kept)
	switch {
	case len(o.stored) == 0:
	case cap(o.own)-n >= len(o.stored):
		// The run's own array, which only the run's history reads, and up to n only (clipped): what
		// it stored goes in its spare room.
		all = append(o.own[:n], o.stored...)
	default:
		all = make([]store.Record, 0, n+len(o.stored))
		all = append(append(all, o.kept...), o.stored...)
	}
	o.remember(o.p.user, o.run.SessionID, o.created, all)
}

// keep adds records the run stored to the session's records as it knows them. A record whose Seq is
// not the next one (another was stored that the run did not see, or none are known) leaves the run
// knowing them no longer, and keeping nothing.
func (o *observer) keep(recs ...store.Record) {
	for _, r := range recs {
		last := o.kept
		if len(o.stored) > 0 {
			last = o.stored
		}
		if n := len(last); n == 0 || r.Seq != last[n-1].Seq+1 {
			o.kept, o.stored = nil, nil
			return
		}
		o.stored = append(o.stored, r)
	}
}

// finish ends the run: it closes any call left open, then writes the rest of the run's event log with
// its last events and its final state in one transaction, so that a run is terminal in the store if and
// only if its log ends with done. Then it hands the last events to the readers.
func (o *observer) finish(res agent.Result) {
	o.finished = true
	if !o.ready() {
		// The run was never stored: the sender reports the failure, and nothing of the run is kept —
		// nor counted or logged as a run that ended (it was not counted as started). Its span ends.
		// The token estimates it took of an existing session go back, for the send's next attempt.
		if o.conv != nil && o.p.session != nil {
			o.conv.release()
		}
		o.retire(o.run)
		tracing.EndRun(o.span, store.RunFailed, "internal")
		return
	}
	o.endText() // a turn that was not stored may have left text held
	o.run.setFinishing()
	o.run.questions.closeAll(o.run) // every question shown has its decision before done
	if res.Status == agent.StatusAwaitingApproval {
		if o.await(res) {
			return
		}
		// It could not pause: it fails, its waiting calls closed as any open call is.
		res = agent.Result{Status: agent.StatusFailed, FinishReason: "error", Usage: res.Usage, Final: res.Final,
			Err: errors.New("the run could not be stored as waiting for approval")}
	}
	if o.conv != nil {
		o.conv.release()
	}
	run := o.run
	o.storePending()
	out := Outcome{Status: string(res.Status), FinishReason: res.FinishReason, Message: runevent.RecordOf(o.last),
		ToolHistory: o.history, Usage: storeUsage(res.Usage)}
	if out.ToolHistory == nil {
		out.ToolHistory = []runevent.ToolHistory{}
	}
	end := store.RunEnd{Status: out.Status, FinishReason: out.FinishReason, Usage: out.Usage, Reason: closeReason(res.Status),
		Calls: append(o.unstored, o.run.calls.take(nil)...), KeepRequests: o.keepRequests,
		RequestsDropped: fmt.Sprintf("dropped: a session keeps the requests of its latest %d runs (limits.diagnostics_runs)", o.keepRequests)}
	if res.Err != nil {
		out.Error = errorInfo(res.Err)
		end.Error = out.Error.Message
		o.log.Warn("run failed", "err", res.Err)
	}
	if run.Status() == store.RunRunning && o.open > 0 {
		// The loop closes the calls it made; this catches a call whose result could not be stored.
		closed, err := o.store.CloseCalls(o.ctx, o.p.user, run.ID, end.Reason)
		if err != nil {
			o.log.Error("close open calls", "err", err)
		}
		o.keep(closed...)
		for i := range closed {
			run.emit(runevent.TypeRecord, runevent.Encode(runevent.RecordEvent{Message: runevent.RecordOf(&closed[i])}))
		}
	}
	run.flushMu.Lock()
	pending, seq := run.pending()
	last := o.lastEvents(res, &out, seq)
	if run.log != nil { // without a durable log the store gets the run's state only; readers still get last
		end.Events = pending
		for _, e := range last {
			end.Events = append(end.Events, store.Event{RunID: run.ID, Seq: e.Seq, Type: e.Type, Data: e.Data})
		}
	}
	stored := true
	closed, err := o.store.FinishRun(o.ctx, o.p.user, run.ID, end)
	if err == nil {
		o.keep(closed...)
		o.rememberKept()
	}
	if err != nil && len(end.Calls) > 0 && !o.endStored() {
		// Diagnostics never cost a run its end: stored without its calls, the run ends.
		o.log.Error("finish run with its model calls' diagnostics; finishing it without them", "calls", len(end.Calls), "err", err)
		end.Calls = nil
		_, err = o.store.FinishRun(o.ctx, o.p.user, run.ID, end)
	}
	if err != nil && run.Status() == store.RunRunning {
		// A run the store still says is running keeps its session busy: try again, until the store
		// takes it or chatd stops.
		o.log.Error("finish run; trying again", "err", err)
		err = o.finishRetrying(end)
	}
	o.run.calls.stored()
	if err != nil {
		// The store still says running (or queued): the next start of chatd recovers the run.
		o.log.Error("finish run", "err", err)
		stored = false
		if out.Error == nil {
			out.Status, out.Error = store.RunFailed, &runevent.Error{Code: "internal", Message: "chatd could not store the end of the run; see the server log"}
			last = o.lastEvents(res, &out, seq)
		}
	}
	o.ended(out) // before the readers learn of the end: a client that saw done finds the run counted
	// The title call starts (on its own goroutine) before the readers learn of the end, so a drain
	// that follows a done waits for it rather than finding it not yet started.
	if o.completed != nil && stored && out.Status == store.RunCompleted && o.last != nil {
		o.completed(o.last.Content)
	}
	run.end(last, stored, out)
	run.flushMu.Unlock()
	o.retire(run)
}

// ended reports the run's end: its metrics, its span, and one log line with what an operator looks
// for first (never what was said).
func (o *observer) ended(out Outcome) {
	d := time.Since(o.started)
	o.metrics.Ended(out.Status, d)
	code := ""
	if out.Error != nil {
		code = out.Error.Code
	}
	tracing.EndRun(o.span, out.Status, code)
	attrs := []any{"status", out.Status, "agent", o.run.Agent, "model", o.run.Model,
		"input_tokens", out.Usage.InputTokens, "output_tokens", out.Usage.OutputTokens,
		"duration_ms", d.Milliseconds(), "tool_calls", len(out.ToolHistory)}
	if o.ttft > 0 {
		attrs = append(attrs, "ttft_ms", o.ttft.Milliseconds())
	}
	if code != "" {
		attrs = append(attrs, "error", code)
	}
	o.log.Info("run ended", attrs...)
}

// CallStart is told of every model call attempt (agent.Calls): it counts retries and fallbacks, starts
// the call's span, and returns what counts and ends it.
func (o *observer) CallStart(ctx context.Context, m agent.Model, req *llm.Request, retry, fallback bool) (context.Context, func(agent.CallEnd)) {
	model := llm.Origin(m.ProviderName, m.Name)
	if retry {
		o.meter.ModelRetry(m.ProviderName, model)
	}
	if fallback && o.lastModel.Name != "" {
		o.meter.ModelFallback(o.lastModel.ProviderName, llm.Origin(o.lastModel.ProviderName, o.lastModel.Name))
	}
	o.lastModel = m
	ctx, span := o.tracing.Chat(ctx, tracing.ModelCall{Provider: m.ProviderName, Model: m.Name, MaxTokens: req.MaxTokens,
		Temp: req.Temperature, Retry: retry, Fallback: fallback})
	t0 := time.Now()
	return ctx, func(e agent.CallEnd) {
		kind := errorKind(e.Err)
		o.meter.ModelCall(m.ProviderName, model, time.Since(t0), kind)
		o.tracing.EndChat(span, tracing.ChatEnd{Model: m.Name, InputTokens: e.Usage.InputTokens, OutputTokens: e.Usage.OutputTokens,
			CacheReadTokens: e.Usage.CacheReadTokens, CacheWriteTokens: e.Usage.CacheWriteTokens,
			FinishReason: string(e.FinishReason), ErrKind: kind})
	}
}

// errorKind names a model call's failure for metrics and traces: the provider error's kind, a limit's
// code, timeout or cancelled; "" when it succeeded.
func errorKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	if e, ok := errors.AsType[*llm.Error](err); ok {
		return string(e.Kind)
	}
	if e, ok := errors.AsType[*agent.LimitError](err); ok {
		return e.Code
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return "other"
}

// timedStore is the run's store with the latency of each write measured.
type timedStore struct {
	runStore
	m *metrics.Metrics
}

func (s timedStore) AppendTurn(ctx context.Context, user string, r *store.Record, usage []store.UsageEntry, calls []store.ModelCall) error {
	t0 := time.Now()
	err := s.runStore.AppendTurn(ctx, user, r, usage, calls)
	s.m.StoreOp("append_turn", time.Since(t0))
	return err
}

func (s timedStore) AppendRecord(ctx context.Context, user string, r *store.Record) error {
	t0 := time.Now()
	err := s.runStore.AppendRecord(ctx, user, r)
	s.m.StoreOp("append_record", time.Since(t0))
	return err
}

func (s timedStore) FinishRun(ctx context.Context, user, runID string, end store.RunEnd) ([]store.Record, error) {
	t0 := time.Now()
	recs, err := s.runStore.FinishRun(ctx, user, runID, end)
	s.m.StoreOp("finish_run", time.Since(t0))
	return recs, err
}

// storePending stores the usage of model calls whose turn was not stored (the call failed, or storing
// the turn did).
func (o *observer) storePending() {
	for _, e := range o.pending {
		if err := o.store.AddUsage(o.ctx, o.p.user, e); err != nil {
			o.log.Error("store usage", "err", err)
		}
	}
	o.pending = nil
}

// finishRetrying writes the end of a running run whose first write failed, again and again with a
// backoff up to 5s, until the store takes it or the service closes (then the next start recovers the
// run). The run's goroutine waits here, so the run stays live — its readers wait, a cancel or an
// interrupting send waits for its end — and Drain and Close still wait for it.
func (o *observer) finishRetrying(end store.RunEnd) error {
	wait := 100 * time.Millisecond
	for {
		t := time.NewTimer(wait)
		select {
		case <-o.closing:
			t.Stop()
			return errors.New("chatd is shutting down")
		case <-t.C:
		}
		_, err := o.store.FinishRun(o.ctx, o.p.user, o.run.ID, end)
		if errors.Is(err, store.ErrConflict) && o.endStored() {
			// It has ended: an earlier attempt was stored after all. (A conflict is also how a store
			// refuses what it cannot hold: that is not taken for an end.)
			o.log.Warn("finish run: the store had taken an earlier attempt")
			return nil
		}
		if err != nil && len(end.Calls) > 0 {
			o.log.Error("finish run: trying again without the model calls' diagnostics", "calls", len(end.Calls), "err", err)
			end.Calls = nil
		}
		if err == nil {
			o.log.Info("finish run: stored after retrying")
			return nil
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// endStored reports whether the store holds the run as ended: an attempt to write its end that
// reported a failure may have been committed.
func (o *observer) endStored() bool {
	r, err := o.store.Run(o.ctx, o.p.user, o.run.ID)
	if err != nil {
		o.log.Error("read the run's stored status", "err", err)
		return false
	}
	return r.Status != store.RunRunning && r.Status != store.RunQueued
}

// lastEvents are the run's closing events, numbered after seq: the outcome (complete, error or
// cancelled), then done.
func (o *observer) lastEvents(res agent.Result, out *Outcome, seq int64) []Event {
	var evs []Event
	add := func(typ string, data []byte) {
		seq++
		evs = append(evs, Event{Seq: seq, Type: typ, Data: data})
	}
	switch {
	case out.Error != nil:
		add(runevent.TypeError, runevent.Encode(*out.Error))
	case res.Status == agent.StatusCancelled:
		add(runevent.TypeCancelled, runevent.Encode(runevent.Cancelled{Reason: cmp.Or(o.run.reason(), "the run was cancelled")}))
	default:
		c := runevent.Complete{Message: out.Message, FinishReason: out.FinishReason,
			Usage: runevent.UsageOf(out.Usage), ToolHistory: out.ToolHistory,
			SuggestedValues: []runevent.SuggestedValue{}, SuggestedActions: []runevent.SuggestedAction{}, Payloads: o.payloads}
		if m := out.Message; m != nil && m.Role == store.RoleAssistant {
			if m.SuggestedValues != nil {
				c.SuggestedValues = m.SuggestedValues
			}
			if m.SuggestedActions != nil {
				c.SuggestedActions = m.SuggestedActions
			}
		}
		if c.Payloads == nil {
			c.Payloads = []runevent.Payload{}
		}
		add(runevent.TypeComplete, runevent.Encode(c))
	}
	add(runevent.TypeDone, runevent.Encode(runevent.Done{Status: out.Status}))
	return evs
}

func closeReason(s agent.Status) string {
	if s == agent.StatusCancelled {
		return "The run was cancelled before this call finished."
	}
	return "The run ended before this call finished."
}

// errorInfo describes a run's failure for clients: what happened, safely, and whether retrying may help.
func errorInfo(err error) *runevent.Error {
	if e, ok := errors.AsType[*agent.LimitError](err); ok {
		return &runevent.Error{Code: e.Code, Message: e.Message}
	}
	if e, ok := errors.AsType[*llm.Error](err); ok {
		return &runevent.Error{Code: "upstream_" + string(e.Kind), Message: e.Public(), Retryable: e.Retryable()}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &runevent.Error{Code: "timeout", Message: "the model call timed out", Retryable: true}
	}
	return &runevent.Error{Code: "internal", Message: "chatd could not complete the run; see the server log"}
}

func storeUsage(u llm.Usage) store.Usage {
	return store.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheReadTokens: u.CacheReadTokens,
		CacheWriteTokens: u.CacheWriteTokens, ReasoningTokens: u.ReasoningTokens}
}
