package agent

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"chatd/internal/llm"
)

// continuePrompt asks for the rest of an answer the token limit cut. It is sent, never stored.
const continuePrompt = "Your previous message was cut off by the output token limit. Continue exactly where it stopped, without repeating anything."

var emptyArgs = json.RawMessage("{}")

// turnState is a model turn in progress, with the tool calls it has started.
type turnState struct {
	Turn
	parts  llm.Collector // text and reasoning, with their part boundaries and signatures
	model  Model         // the model that answered
	finish llm.FinishReason
	output bool // something reached the sink
	// compacted: the conversation was compacted after a context-length error; another such error
	// goes to the fallbacks.
	compacted bool
	calls     []*pendingCall
	ids       map[string]bool
	argBytes  int // the arguments the turn's calls hold
	dropped   int // calls past maxTurnCalls, left out of the turn

	toolCtx     context.Context
	cancelTools context.CancelFunc
	wg          sync.WaitGroup
	results     chan toolDone // buffered for every call that can start, made with the first: senders never block
	running     int           // calls started whose results have not been received
	// waiting are the calls that wait for a person (Approver), with no result.
	waiting []Waiting
}

type pendingCall struct {
	index   int
	id      string
	name    string
	idFixed bool
	args    []byte
	sig     string
	started bool
	result  ToolResult
	notRun  string // why the call will not run
	waiting bool   // the call waits for a person's decision
	// oversize: the arguments passed a limit; they were dropped and the call will not run.
	oversize bool
}

// maxTurnCalls bounds the calls one turn stores: the deltas of any further call are dropped (a model
// that makes this many has lost its way; the context builder would not send more).
const maxTurnCalls = 128

// maxCallName bounds a call's id and tool name as they accumulate from fragments.
const maxCallName = 256

type toolDone struct {
	index int
	res   ToolResult
}

func (r *runner) newTurn(ctx context.Context) *turnState {
	t := &turnState{ids: map[string]bool{}}
	t.toolCtx, t.cancelTools = context.WithCancel(ctx)
	return t
}

// runPhaseModel streams one model turn, continuing it while the token limit cuts a plain answer, and
// stores it. It returns nil when nothing was stored: the call failed before any output, or storing failed.
func (r *runner) runPhaseModel(ctx context.Context, noTools bool) (*turnState, error) {
	if err := r.refresh(ctx, false); err != nil {
		return nil, err
	}
	t := r.newTurn(ctx)
	req := r.request(noTools)
	r.sink.Emit(StatusMessage{Message: "Thinking…"})
	var err error
	for n := 0; ; n++ {
		err = r.stream(ctx, req, t, noTools)
		if !t.compacted && !t.output && r.tooLong(ctx, err) {
			// One compaction and one retry: a request still too long after it goes to the fallbacks,
			// then fails the run.
			t.compacted = true
			r.cfg.Logger.Warn("the request does not fit the model's context window; compacting and retrying", "err", err)
			if cerr := r.refresh(ctx, true); cerr != nil {
				t.abandon()
				return nil, cerr
			}
			req, t.model = r.request(noTools), Model{}
			r.sink.Emit(StatusMessage{Message: "Thinking…"})
			n--
			continue
		}
		cut := t.finish == llm.FinishLength || t.finish == llm.FinishPause
		if err != nil || ctx.Err() != nil || !cut || len(t.calls) > 0 || n >= r.cfg.MaxContinuations {
			break
		}
		r.sink.Emit(StatusMessage{Message: "Continuing the answer…"})
		req = r.continuation(req, t)
	}
	if !t.output && (err != nil || ctx.Err() != nil) {
		t.abandon()
		return nil, err
	}
	r.finishTurn(ctx, t, err)
	if perr := r.rec.RecordTurn(context.WithoutCancel(ctx), &t.Turn); perr != nil {
		t.abandon()
		return nil, fmt.Errorf("store turn: %w", perr)
	}
	return t, err
}

// refresh rebuilds the conversation from what is stored.
func (r *runner) refresh(ctx context.Context, compact bool) error {
	msgs, err := r.cfg.Context.Messages(ctx, compact)
	if err != nil {
		return fmt.Errorf("build the conversation: %w", err)
	}
	r.messages = msgs
	return nil
}

// tooLong reports whether err is the provider's answer that the request does not fit its window: the
// Context can compact the conversation.
func (r *runner) tooLong(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	e, ok := errors.AsType[*llm.Error](err)
	return ok && e.Kind == llm.KindContextLength
}

func (r *runner) request(noTools bool) *llm.Request {
	req := &llm.Request{
		Model:       r.cfg.Models[0].Name,
		System:      r.cfg.System,
		Messages:    r.messages,
		Tools:       r.cfg.ToolSpecs,
		Temperature: r.cfg.Temperature,
		MaxTokens:   r.cfg.MaxTokens,
		Reasoning:   r.cfg.Reasoning,
		CacheSystem: r.cfg.Cache,
		CacheTools:  r.cfg.Cache,
	}
	if noTools && len(req.Tools) > 0 {
		// The tools stay declared (the history holds tool calls, which some providers only accept with
		// their tools declared) but the model may not call them.
		req.ToolChoice = llm.ToolChoiceNone
	}
	return req
}

// continuation asks for the rest of a turn the token limit cut or the provider paused. The partial
// answer goes back with its parts and signatures; a pause needs nothing else, a cut answer a prompt.
func (r *runner) continuation(req *llm.Request, t *turnState) *llm.Request {
	next := *req
	partial := llm.Message{Role: llm.RoleAssistant, Parts: t.parts.Parts(), Origin: t.model.origin()}
	next.Messages = append(r.messages[:len(r.messages):len(r.messages)], partial)
	if t.finish != llm.FinishPause {
		next.Messages = append(next.Messages, llm.TextMessage(llm.RoleUser, continuePrompt))
	}
	// A continuation stays with the model that wrote the beginning.
	next.Model = t.model.Name
	return &next
}

// origin is what the messages m writes carry as their Origin.
func (m Model) origin() string { return llm.Origin(m.ProviderName, m.Name) }

// stream runs one model call into t. A call that fails before any output is retried, then handed to
// the next fallback model; once a model has streamed output, the turn stays with it.
func (r *runner) stream(ctx context.Context, req *llm.Request, t *turnState, noTools bool) error {
	models := r.cfg.Models
	if t.model.Provider != nil {
		models = []Model{t.model} // a continuation
	}
	var err error
	for i, m := range models {
		if i > 0 {
			r.cfg.Logger.Warn("model failed; trying a fallback", "model", models[i-1].Name, "fallback", m.Name, "err", err)
			r.sink.Emit(StatusMessage{Message: fmt.Sprintf("%s is unavailable; trying %s…", models[i-1].Name, m.Name)})
		}
		t.model = m
		call := *req
		call.Model = m.Name
		err = r.streamRetrying(ctx, &call, t, noTools, i > 0)
		if err == nil || t.output || ctx.Err() != nil {
			return err
		}
		if _, ok := errors.AsType[*llm.Error](err); !ok {
			return err // not the provider's failure: another provider would fail the same way
		}
		if r.tooLong(ctx, err) && !t.compacted {
			return err // compacting comes before another model
		}
	}
	return err
}

// streamRetrying runs one model call into t, retrying a call that failed before any output, a bounded
// number of times within the retry window.
func (r *runner) streamRetrying(ctx context.Context, req *llm.Request, t *turnState, noTools, fallback bool) error {
	deadline := time.Now().Add(r.cfg.RetryWindow)
	for attempt := 0; ; attempt++ {
		t.finish = ""
		if r.cfg.Sending != nil {
			r.cfg.Sending(t.model, req) // each attempt is a call of its own, as the upstream counts them
		}
		output, err := r.streamObserved(ctx, req, t, noTools, attempt > 0, fallback && attempt == 0)
		if err == nil || output || ctx.Err() != nil || attempt >= r.cfg.Retries {
			return err
		}
		wait, ok := r.backoff(err, attempt)
		if !ok || time.Now().Add(wait).After(deadline) {
			return err
		}
		r.cfg.Logger.Warn("model call failed; retrying", "model", req.Model, "attempt", attempt+1, "wait", wait, "err", err)
		r.sink.Emit(StatusMessage{Message: fmt.Sprintf("The model is unavailable; retrying in %s…", wait.Round(100*time.Millisecond))})
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// streamObserved is streamOnce told to the Calls observer, when there is one.
func (r *runner) streamObserved(ctx context.Context, req *llm.Request, t *turnState, noTools, retry, fallback bool) (bool, error) {
	if r.cfg.Calls == nil {
		return r.streamOnce(ctx, req, t, noTools)
	}
	callCtx, end := r.cfg.Calls.CallStart(ctx, t.model, req, retry, fallback)
	before := t.Usage
	output, err := r.streamOnce(callCtx, req, t, noTools)
	u := t.Usage
	u.InputTokens -= before.InputTokens
	u.OutputTokens -= before.OutputTokens
	u.CacheReadTokens -= before.CacheReadTokens
	u.CacheWriteTokens -= before.CacheWriteTokens
	u.ReasoningTokens -= before.ReasoningTokens
	end(CallEnd{Usage: u, FinishReason: t.finish, Err: err})
	return output, err
}

// streamOnce consumes one stream. output reports whether any event reached the sink.
// A retry or a continuation starts with no calls accumulated (it follows a call without output, or an
// answer without calls), so the stream's indexes are the turn's. The call fails when the model streams
// more than the output limits allow, or goes quiet for longer than the idle limit.
func (r *runner) streamOnce(ctx context.Context, req *llm.Request, t *turnState, noTools bool) (output bool, err error) {
	lim := &r.cfg.Limits
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	quiet := llm.NewWatchdog(r.idleTime(t.model), func() { cancel(errQuiet) })
	defer quiet.Stop()
	callOutput := 0
	// count adds n bytes of output, or fails when they pass a limit.
	count := func(n int) error {
		callOutput += n
		r.output += n
		if callOutput > lim.OutputBytes || r.output > lim.RunOutputBytes {
			return outputLimit(callOutput > lim.OutputBytes, lim)
		}
		return nil
	}
	// The loop's body runs for every token, deep in the run's goroutine, which keeps its stack at 8 KB
	// only while the frames on that path are small: what is not a token's text is handled apart.
	for ev, err := range t.model.Provider.Stream(callCtx, req) {
		if err != nil {
			if quiet.Fired() && ctx.Err() == nil {
				return output, r.quietError(t)
			}
			return output, err
		}
		// Every byte the model sends is counted: text, reasoning, and the opaque data providers send
		// back later (signatures, redacted thinking, encrypted reasoning). Only an event that brings
		// something keeps the idle watchdog quiet.
		n := len(ev.Text) + len(ev.Signature) + len(ev.ID)
		switch ev.Kind {
		case llm.EventToolCallDelta:
			n = len(ev.Text) + len(ev.Signature) + t.newNameBytes(ev)
		case llm.EventUsage, llm.EventFinish:
			n = 1
		}
		if n > 0 {
			quiet.Poke()
			if err := count(n); err != nil {
				return output, err
			}
		}
		switch ev.Kind {
		case llm.EventText, llm.EventReasoning:
			output, t.output = true, true
			t.parts.Add(ev)
			if ev.Text == "" {
				break
			}
			if ev.Kind == llm.EventText {
				r.text.Text = ev.Text
				r.sink.Emit(&r.text)
			} else {
				r.reasoning.Text = ev.Text
				r.sink.Emit(&r.reasoning)
			}
		default:
			if r.streamEvent(t, &ev, lim, noTools) {
				output = true
			}
		}
	}
	if quiet.Fired() && ctx.Err() == nil {
		return output, r.quietError(t)
	}
	return output, ctx.Err()
}

// streamEvent handles an event of the model's stream that is not text or reasoning; it reports whether
// the event is output.
func (r *runner) streamEvent(t *turnState, ev *llm.Event, lim *Limits, noTools bool) (output bool) {
	switch ev.Kind {
	case llm.EventReasoningEnd:
		t.output = true
		t.parts.Add(*ev)
		return true
	case llm.EventToolCallDelta:
		t.output = true
		if ev.Index >= maxTurnCalls {
			t.dropped = max(t.dropped, ev.Index-maxTurnCalls+1)
			return true
		}
		pc := t.call(ev.Index)
		if pc.oversize {
			return true
		}
		t.add(pc, *ev, lim)
		if pc.oversize {
			return true // the arguments so far are dropped; no more of them is shown
		}
		r.callDelta = ToolCallDelta{Index: pc.index, ID: pc.id, Name: pc.name, ArgumentsDelta: ev.Text}
		r.sink.Emit(&r.callDelta)
		if !noTools && endsObject(ev.Text) {
			r.startEarly(t, pc)
		}
		return true
	case llm.EventToolCallEnd:
		if !noTools && ev.Index < len(t.calls) {
			r.startEarly(t, t.calls[ev.Index])
		}
	case llm.EventUsage:
		t.Usage.Add(ev.Usage)
		r.usage.Add(ev.Usage)
		r.sink.Emit(Usage{Model: t.model, Usage: ev.Usage})
	case llm.EventFinish:
		t.finish = ev.FinishReason
	}
	return false
}

// outputLimit is the error of a model call whose output passed its limit (perCall) or the run's.
func outputLimit(perCall bool, lim *Limits) error {
	if perCall {
		return &LimitError{Code: "output_limit", Message: fmt.Sprintf("the model's answer passed chatd's limit of %s for one model call; the answer is kept up to it", byteSize(lim.OutputBytes))}
	}
	return &LimitError{Code: "output_limit", Message: fmt.Sprintf("the run's model calls passed chatd's limit of %s of output; the answer is kept up to it", byteSize(lim.RunOutputBytes))}
}

// idleTime is how long a call to m may go without an event: the idle limit, or longer when the
// provider is configured to wait longer for its model (llm.Patient) — the limit must not undercut a
// slow local server an operator gave ten minutes.
func (r *runner) idleTime(m Model) time.Duration {
	idle := r.cfg.Limits.IdleTime
	if p, ok := m.Provider.(llm.Patient); ok {
		idle = max(idle, p.Patience())
	}
	return idle
}

// errQuiet cancels a model call whose stream went quiet for longer than the idle limit.
var errQuiet = errors.New("the model stream went quiet")

// quietError is the failure of a model call that went quiet: a transport failure, retried like one.
func (r *runner) quietError(t *turnState) error {
	return &llm.Error{Provider: t.model.ProviderName, Kind: llm.KindTransport,
		Message: fmt.Sprintf("the model sent nothing for %s", r.idleTime(t.model))}
}

// byteSize writes n bytes for a person: 4 MiB, 256 KiB, 100 bytes.
func byteSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + " KiB"
	}
	return strconv.Itoa(n) + " bytes"
}

func (r *runner) backoff(err error, attempt int) (time.Duration, bool) {
	e, ok := errors.AsType[*llm.Error](err)
	if !ok || !e.Retryable() {
		return 0, false
	}
	wait := r.cfg.RetryBase << attempt
	wait += rand.N(wait/5 + 1) // jitter, so that clients rate-limited together do not retry together
	if e.RetryAfter > 0 {
		wait = e.RetryAfter
	}
	return wait, wait <= r.cfg.MaxRetryWait
}

// call returns the pending call at index i, creating the calls up to it.
func (t *turnState) call(i int) *pendingCall {
	for len(t.calls) <= i {
		t.calls = append(t.calls, &pendingCall{index: len(t.calls)})
	}
	return t.calls[i]
}

// newNameBytes is what a tool-call delta adds to its call's id and name: servers that repeat them on
// every fragment send nothing new.
func (t *turnState) newNameBytes(ev llm.Event) int {
	var id, name string
	if ev.Index < len(t.calls) {
		id, name = t.calls[ev.Index].id, t.calls[ev.Index].name
	}
	n := 0
	if ev.ID != id {
		n += len(ev.ID)
	}
	if ev.Name != name {
		n += len(ev.Name)
	}
	return n
}

// add accumulates a delta into pc within the argument limits. Ids and names usually come once; a few
// servers repeat them on every delta and a few split them into fragments, so a repeat is ignored and
// anything else appended, up to maxCallName. Arguments past a limit are dropped, with the call's
// arguments so far: the call will not run.
func (t *turnState) add(pc *pendingCall, ev llm.Event, lim *Limits) {
	if ev.ID != "" && ev.ID != pc.id && !pc.idFixed && len(pc.id)+len(ev.ID) <= maxCallName {
		pc.id += ev.ID
	}
	if ev.Name != "" && ev.Name != pc.name && len(pc.name)+len(ev.Name) <= maxCallName {
		pc.name += ev.Name
	}
	if ev.Signature != "" {
		pc.sig = ev.Signature
	}
	if len(pc.args)+len(ev.Text) > lim.ArgumentBytes || t.argBytes+len(ev.Text) > lim.TurnArgumentBytes {
		t.argBytes -= len(pc.args)
		pc.args, pc.oversize = nil, true
		pc.notRun = fmt.Sprintf("Not run: the call's arguments passed chatd's limit of %s (for one call; %s for all the "+
			"calls of one answer), so they were dropped. Call the tool again with smaller arguments.",
			byteSize(lim.ArgumentBytes), byteSize(lim.TurnArgumentBytes))
		return
	}
	t.argBytes += len(ev.Text)
	pc.args = append(pc.args, ev.Text...)
}

// endsObject reports whether an arguments fragment may close the JSON object, a cheap test done before
// the full validity check.
func endsObject(fragment string) bool {
	s := strings.TrimRight(fragment, " \t\r\n")
	return s != "" && s[len(s)-1] == '}'
}

// arguments returns the call's arguments when they are a complete JSON object. A JSON string holding
// an object (the whole arguments double-encoded) is unwrapped. Empty arguments are not complete: the
// stream may have been cut right after the call's name.
func (pc *pendingCall) arguments() (json.RawMessage, bool) {
	a := bytes.TrimSpace(pc.args)
	if len(a) > 0 && a[0] == '"' {
		var inner string
		if json.Unmarshal(a, &inner) != nil {
			return nil, false
		}
		a = bytes.TrimSpace([]byte(inner))
	}
	if len(a) == 0 || a[0] != '{' || !json.Valid(a) {
		return nil, false
	}
	return json.RawMessage(a), true
}

// finishTurn fixes the turn's text, ids, arguments and finish reason once its stream has ended.
func (r *runner) finishTurn(ctx context.Context, t *turnState, streamErr error) {
	t.Parts = t.parts.Parts()
	t.Text, t.Reasoning = t.parts.Text(), t.parts.Reasoning()
	if t.model.Provider == nil { // no call was made
		t.model = r.cfg.Models[0]
	}
	t.Model, t.Origin = t.model.Name, t.model.origin()
	switch {
	case limitCause(ctx) != nil:
		t.FinishReason = "error"
	case ctx.Err() != nil:
		t.FinishReason = "cancelled"
	case streamErr != nil:
		t.FinishReason = "error"
	default:
		t.FinishReason = string(t.finish)
	}
	if t.dropped > 0 {
		r.cfg.Logger.Warn("the model made more tool calls in one answer than chatd keeps; the rest were dropped",
			"kept", maxTurnCalls, "dropped", t.dropped)
	}
	for _, pc := range t.calls {
		t.assignID(pc)
		args, ok := pc.arguments()
		if !ok && len(bytes.TrimSpace(pc.args)) == 0 && t.finish != llm.FinishLength {
			args, ok = emptyArgs, true // a call without arguments, from a server that sends none
		}
		switch {
		case pc.oversize: // notRun says why
		case pc.name == "":
			pc.notRun = "The call did not name a tool."
		case !ok && t.finish == llm.FinishLength:
			pc.notRun = "The call was cut off by the output token limit before its arguments were complete, so it was not run. Call the tool again with complete arguments."
		case pc.index >= r.cfg.MaxToolCalls:
			pc.notRun = "Not run: more than " + strconv.Itoa(r.cfg.MaxToolCalls) + " tool calls in one turn."
		}
		if !ok {
			args = emptyArgs // stored calls always hold an object; the raw text still goes to the tool
		}
		t.ToolCalls = append(t.ToolCalls, llm.ToolCall{ID: pc.id, Name: pc.name, Arguments: args, Signature: pc.sig})
	}
}

// assignID gives a call an id unique within the turn: some servers send none, or repeat one.
func (t *turnState) assignID(pc *pendingCall) {
	if pc.idFixed {
		return
	}
	if pc.id == "" || t.ids[pc.id] {
		pc.id = "call_" + strings.ToLower(crand.Text())
	}
	t.ids[pc.id] = true
	pc.idFixed = true
}

// abandon stops the turn's running tools and waits for them; their results are dropped.
func (t *turnState) abandon() {
	t.cancelTools()
	t.wg.Wait()
}
