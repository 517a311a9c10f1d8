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
	output bool // something reached the observer
	// compacted: the conversation was compacted after a context-length error; another such error
	// goes to the fallbacks.
	compacted bool
	calls     []*pendingCall
	ids       map[string]bool

	toolCtx     context.Context
	cancelTools context.CancelFunc
	wg          sync.WaitGroup
	results     chan toolDone // buffered for every call that can start: senders never block
	running     int           // calls started whose results have not been received
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
}

type toolDone struct {
	index int
	res   ToolResult
}

func (r *runner) newTurn(ctx context.Context) *turnState {
	t := &turnState{ids: map[string]bool{}, results: make(chan toolDone, r.cfg.MaxToolCalls)}
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
	r.obs.Status("Thinking…")
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
			r.obs.Status("Thinking…")
			n--
			continue
		}
		cut := t.finish == llm.FinishLength || t.finish == llm.FinishPause
		if err != nil || ctx.Err() != nil || !cut || len(t.calls) > 0 || n >= r.cfg.MaxContinuations {
			break
		}
		r.obs.Status("Continuing the answer…")
		req = r.continuation(req, t)
	}
	if !t.output && (err != nil || ctx.Err() != nil) {
		t.abandon()
		return nil, err
	}
	r.finishTurn(ctx, t, err)
	if perr := r.obs.Turn(context.WithoutCancel(ctx), &t.Turn); perr != nil {
		t.abandon()
		return nil, fmt.Errorf("store turn: %w", perr)
	}
	r.messages = append(r.messages, assistantMessage(&t.Turn))
	return t, err
}

// refresh rebuilds the conversation from what is stored, when a Context builds it.
func (r *runner) refresh(ctx context.Context, compact bool) error {
	if r.cfg.Context == nil {
		return nil
	}
	msgs, err := r.cfg.Context.Messages(ctx, compact)
	if err != nil {
		return fmt.Errorf("build the conversation: %w", err)
	}
	r.messages = msgs
	return nil
}

// tooLong reports whether err is the provider's answer that the request does not fit its window, and
// a Context can compact the conversation.
func (r *runner) tooLong(ctx context.Context, err error) bool {
	if r.cfg.Context == nil || err == nil || ctx.Err() != nil {
		return false
	}
	e, ok := errors.AsType[*llm.Error](err)
	return ok && e.Kind == llm.KindContextLength
}

func (r *runner) request(noTools bool) *llm.Request {
	req := &llm.Request{
		Model:       r.cfg.Model,
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

// models lists the models a call may use, in order: the primary, then the fallbacks.
func (r *runner) models() []Model {
	return append([]Model{{Provider: r.cfg.Provider, Name: r.cfg.Model, ProviderName: r.cfg.ProviderName}}, r.cfg.Fallbacks...)
}

// stream runs one model call into t. A call that fails before any output is retried, then handed to
// the next fallback model; once a model has streamed output, the turn stays with it.
func (r *runner) stream(ctx context.Context, req *llm.Request, t *turnState, noTools bool) error {
	models := r.models()
	if t.model.Provider != nil {
		models = []Model{t.model} // a continuation
	}
	var err error
	for i, m := range models {
		if i > 0 {
			r.cfg.Logger.Warn("model failed; trying a fallback", "model", models[i-1].Name, "fallback", m.Name, "err", err)
			r.obs.Status(fmt.Sprintf("%s is unavailable; trying %s…", models[i-1].Name, m.Name))
		}
		t.model = m
		call := *req
		call.Model = m.Name
		if r.cfg.Sending != nil {
			r.cfg.Sending(m, &call)
		}
		err = r.streamRetrying(ctx, &call, t, noTools)
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
func (r *runner) streamRetrying(ctx context.Context, req *llm.Request, t *turnState, noTools bool) error {
	deadline := time.Now().Add(r.cfg.RetryWindow)
	for attempt := 0; ; attempt++ {
		t.finish = ""
		output, err := r.streamOnce(ctx, req, t, noTools)
		if err == nil || output || ctx.Err() != nil || attempt >= r.cfg.Retries {
			return err
		}
		wait, ok := r.backoff(err, attempt)
		if !ok || time.Now().Add(wait).After(deadline) {
			return err
		}
		r.cfg.Logger.Warn("model call failed; retrying", "model", req.Model, "attempt", attempt+1, "wait", wait, "err", err)
		r.obs.Status(fmt.Sprintf("The model is unavailable; retrying in %s…", wait.Round(100*time.Millisecond)))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// streamOnce consumes one stream. output reports whether any event reached the observer.
// A retry or a continuation starts with no calls accumulated (it follows a call without output, or an
// answer without calls), so the stream's indexes are the turn's.
func (r *runner) streamOnce(ctx context.Context, req *llm.Request, t *turnState, noTools bool) (output bool, err error) {
	for ev, err := range t.model.Provider.Stream(ctx, req) {
		if err != nil {
			return output, err
		}
		switch ev.Kind {
		case llm.EventText:
			output, t.output = true, true
			t.parts.Add(ev)
			if ev.Text != "" {
				r.obs.TextDelta(ev.Text)
			}
		case llm.EventReasoning:
			output, t.output = true, true
			t.parts.Add(ev)
			if ev.Text != "" {
				r.obs.ReasoningDelta(ev.Text)
			}
		case llm.EventReasoningEnd:
			output, t.output = true, true
			t.parts.Add(ev)
		case llm.EventToolCallDelta:
			output, t.output = true, true
			pc := t.call(ev.Index)
			pc.add(ev)
			r.obs.ToolCallDelta(pc.index, pc.id, pc.name, ev.Text)
			if !noTools && endsObject(ev.Text) {
				r.startEarly(t, pc)
			}
		case llm.EventToolCallEnd:
			if !noTools && ev.Index < len(t.calls) {
				r.startEarly(t, t.calls[ev.Index])
			}
		case llm.EventUsage:
			t.Usage.Add(ev.Usage)
			r.usage.Add(ev.Usage)
			r.obs.Usage(t.model, ev.Usage)
		case llm.EventFinish:
			t.finish = ev.FinishReason
		}
	}
	return output, ctx.Err()
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

// add accumulates a delta. Ids and names usually come once; a few servers repeat them on every delta
// and a few split them into fragments, so a repeat is ignored and anything else appended.
func (pc *pendingCall) add(ev llm.Event) {
	if ev.ID != "" && ev.ID != pc.id && !pc.idFixed {
		pc.id += ev.ID
	}
	if ev.Name != "" && ev.Name != pc.name {
		pc.name += ev.Name
	}
	if ev.Signature != "" {
		pc.sig = ev.Signature
	}
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
		t.model = r.models()[0]
	}
	t.Model, t.Origin = t.model.Name, t.model.origin()
	switch {
	case ctx.Err() != nil:
		t.FinishReason = "cancelled"
	case streamErr != nil:
		t.FinishReason = "error"
	default:
		t.FinishReason = string(t.finish)
	}
	for _, pc := range t.calls {
		t.assignID(pc)
		args, ok := pc.arguments()
		if !ok && len(bytes.TrimSpace(pc.args)) == 0 && t.finish != llm.FinishLength {
			args, ok = emptyArgs, true // a call without arguments, from a server that sends none
		}
		switch {
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

func assistantMessage(t *Turn) llm.Message {
	return llm.Message{Role: llm.RoleAssistant, Parts: t.Parts, ToolCalls: t.ToolCalls, Origin: t.Origin}
}
