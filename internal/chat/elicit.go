package chat

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/mail"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"chatd/internal/llm"
	"chatd/internal/runevent"
	"chatd/internal/store"
	"chatd/internal/tool"
)

// A tool may ask the person behind the run while it runs: an MCP server's elicitation (form mode)
// reaches the call's tool.Asker, which shows it as approval_required (kind question, source mcp) with
// the fields of the requested schema, and waits for POST /v1/runs/{id}/approvals. Unlike the model's
// calls that wait (approvals, ask_user), the run does not pause: its status stays running, the call
// stays open, and the question lives in this process's memory only — it is the server's live request.
// It ends with the answer, the call's end (its timeout, the run's cancel), or the approval timeout,
// and does not survive a restart (the run is then interrupted, as any running run is). Only the
// instance that runs the run can answer it: another one answers 409 run_not_here.

// SourceMCP is the Source of a question an MCP server asks while its tool runs.
const SourceMCP = "mcp"

// DecisionCancel is the decision on a question from an MCP server that nobody answered before its
// call ended or its wait expired (MCP's action cancel).
const DecisionCancel = "cancel"

// Limits of the questions of one call: a server is not trusted to be reasonable, and each question is
// two events the run keeps.
const maxQuestionsPerCall = 3

// Reasons of an approval_decided cancel.
const (
	reasonCallEnded = "The call ended before anyone answered."
	reasonWithdrawn = "The server withdrew the question, or its call ended, before anyone answered."
	reasonExpired   = "Nobody answered in time (the question expired)."
)

// questionReason is the reason of every question from an MCP server: its message says the rest.
const questionReason = "A tool's MCP server asks you for information."

// liveQuestion is a question a running call waits on. Whoever decides it (the person, its call's end,
// its expiry) sends the answer on answer, once.
type liveQuestion struct {
	ev       runevent.ApprovalRequired
	check    func(map[string]any) (map[string]any, error) // tool.Question's Check
	deadline time.Time                                    // the call's; zero: none
	timeout  time.Duration                                // the approval timeout
	now      func() time.Time
	answer   chan tool.Answer
	shown    chan struct{} // closed once approval_required is out: its wait starts then
	wait     time.Duration // how long it waits once shown
}

// runAsker is the tool.Asker of one call of a run. A later call with the same id (a provider may
// reuse ids across turns) has an asker of its own.
type runAsker struct {
	o        *observer
	call     llm.ToolCall
	returned bool // its call has returned: it asks nothing more; guarded by the question board's mu
}

// Ask shows the question to the run's readers — once the call's questions before it are decided — and
// waits for the answer, the end of ctx, or the approval timeout. A call that has asked
// maxQuestionsPerCall questions, or has returned, gets a decline without anyone being asked.
func (a *runAsker) Ask(ctx context.Context, q tool.Question) (tool.Answer, error) {
	o, run := a.o, a.o.run
	fields, err := fieldsOf(q.Schema)
	if err != nil {
		return tool.Answer{}, err
	}
	args := a.call.Arguments
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	lq := &liveQuestion{check: q.Check, timeout: o.approvalTimeout, now: o.now, answer: make(chan tool.Answer, 1), shown: make(chan struct{}),
		ev: runevent.ApprovalRequired{Kind: KindQuestion, ToolCallID: a.call.ID, Name: a.call.Name, Arguments: args,
			Reason: questionReason, Source: SourceMCP, Message: q.Message, Fields: fields}}
	lq.deadline, _ = ctx.Deadline()
	switch run.questions.ask(run, a, lq) {
	case askedTooMany:
		o.log.Warn("an MCP server asked more questions in one call than chatd puts to a person; declined",
			"tool_call_id", a.call.ID, "tool", a.call.Name, "limit", maxQuestionsPerCall)
		return tool.Answer{Action: tool.ActionDecline}, nil
	case askedLate:
		o.log.Warn("an MCP server asked a question after its call returned, or as the run finished; declined",
			"tool_call_id", a.call.ID, "tool", a.call.Name)
		return tool.Answer{Action: tool.ActionDecline}, nil
	}
	var expired <-chan time.Time
	shown, done := lq.shown, ctx.Done()
	for {
		select {
		case ans := <-lq.answer:
			if ans.Action == tool.ActionCancel && ctx.Err() != nil {
				return ans, ctx.Err()
			}
			return ans, nil
		case <-shown:
			shown = nil
			timer := time.NewTimer(lq.wait)
			defer timer.Stop()
			expired = timer.C
		case <-done:
			done = nil
			run.questions.decide(run, lq, tool.Answer{Action: tool.ActionCancel}, reasonWithdrawn, "")
		case <-expired:
			expired = nil
			run.questions.decide(run, lq, tool.Answer{Action: tool.ActionCancel}, reasonExpired, "")
		}
	}
}

// questionBoard holds the questions from MCP servers a run's calls wait on. A call shows one at a
// time, keyed by its id as the approvals API is: those it asks meanwhile (a server on protocol
// 2026-07-28 may ask several in one round) wait their turn behind it. Every question shown gets its
// decision before its call's tool_complete — the call's end decides those left — and before the run's
// done. Its lock is taken before the run's (it emits while it holds it), never after.
type questionBoard struct {
	mu     sync.Mutex
	closed bool // the run is finishing: no call asks any more
	calls  map[string]*callQuestions
}

// callQuestions are one call's questions, from its asker; the entry goes once the call has returned,
// so that a later call with the same id starts afresh.
type callQuestions struct {
	asker *runAsker
	asked int // how many it has asked
	queue []*liveQuestion
}

// Outcomes of questionBoard.ask.
const (
	askedQueued  = iota // shown, or waiting its turn
	askedTooMany        // the call has asked maxQuestionsPerCall already
	askedLate           // the call has returned, or the run is finishing
)

// ask adds a question a's call asks, and shows it when the call shows no other.
func (b *questionBoard) ask(run *Run, a *runAsker, q *liveQuestion) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || a.returned {
		return askedLate
	}
	id := q.ev.ToolCallID
	c := b.calls[id]
	if c == nil {
		c = &callQuestions{asker: a}
		if b.calls == nil {
			b.calls = map[string]*callQuestions{}
		}
		b.calls[id] = c
	}
	switch {
	case c.asker != a: // another call of that id, still running: the approvals API could not tell them apart
		return askedLate
	case c.asked >= maxQuestionsPerCall:
		return askedTooMany
	}
	c.asked++
	c.queue = append(c.queue, q)
	if len(c.queue) == 1 {
		b.show(run, q)
	}
	return askedQueued
}

// show emits q's approval_required, with when it expires: at the approval timeout, and no later than
// its call's deadline; b.mu is held.
func (b *questionBoard) show(run *Run, q *liveQuestion) {
	q.wait = q.timeout
	if !q.deadline.IsZero() {
		q.wait = min(q.wait, q.deadline.Sub(q.now()))
	}
	expires := q.now().Add(q.wait).UTC().Truncate(time.Second)
	q.ev.ExpiresAt = &expires
	run.emit(runevent.TypeApprovalRequired, runevent.Encode(q.ev))
	close(q.shown)
}

// decide gives q its answer, and reports whether it was still waiting (the one who decides it first
// wins). A question shown gets its approval_decided, and the next of its call is shown; one still
// waiting its turn leaves unseen.
func (b *questionBoard) decide(run *Run, q *liveQuestion, ans tool.Answer, reason, by string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.calls[q.ev.ToolCallID]
	if c == nil {
		return false
	}
	i := slices.Index(c.queue, q)
	if i < 0 {
		return false
	}
	c.queue = slices.Delete(c.queue, i, i+1)
	if i == 0 {
		decided(run, q, ans, reason, by)
		if len(c.queue) > 0 {
			b.show(run, c.queue[0])
		}
	}
	q.answer <- ans
	return true
}

// decided emits the decision on a question shown, by an admin for the run's owner when by is set; the
// board's lock is held.
func decided(run *Run, q *liveQuestion, ans tool.Answer, reason, by string) {
	d := runevent.ApprovalDecided{ToolCallID: q.ev.ToolCallID, Source: SourceMCP, DecidedBy: by}
	switch ans.Action {
	case tool.ActionAccept:
		d.Decision = DecisionAnswer
		d.Content, _ = json.Marshal(ans.Content)
	case tool.ActionDecline:
		d.Decision = DecisionDeny
	default:
		d.Decision, d.Reason = DecisionCancel, reason
	}
	run.emit(runevent.TypeApprovalDecided, runevent.Encode(d))
}

// closeCall decides, cancel, the questions of a's call, which has returned, and refuses those it
// would still ask: its tool_complete comes next. Its entry goes: a later call with its id asks afresh.
func (b *questionBoard) closeCall(run *Run, a *runAsker) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a.returned = true
	if c := b.calls[a.call.ID]; c != nil && c.asker == a {
		b.cancel(run, c)
		delete(b.calls, a.call.ID)
	}
}

// closeAll decides, cancel, every question of the run, which is finishing, and refuses any later one:
// its done comes next.
func (b *questionBoard) closeAll(run *Run) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for _, id := range slices.Sorted(maps.Keys(b.calls)) { // decided in call id order, as open lists them
		b.cancel(run, b.calls[id])
	}
}

// cancel decides c's questions cancel; b.mu is held.
func (b *questionBoard) cancel(run *Run, c *callQuestions) {
	for i, q := range c.queue {
		ans := tool.Answer{Action: tool.ActionCancel}
		if i == 0 {
			decided(run, q, ans, reasonCallEnded, "")
		}
		q.answer <- ans
	}
	c.queue = nil
}

// shown returns the question the call shows, or nil.
func (b *questionBoard) shown(callID string) *liveQuestion {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c := b.calls[callID]; c != nil && len(c.queue) > 0 {
		return c.queue[0]
	}
	return nil
}

// open returns the questions the run's calls show, in call id order.
func (b *questionBoard) open() []*liveQuestion {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*liveQuestion
	for _, c := range b.calls {
		if len(c.queue) > 0 {
			out = append(out, c.queue[0])
		}
	}
	slices.SortFunc(out, func(a, b *liveQuestion) int { return strings.Compare(a.ev.ToolCallID, b.ev.ToolCallID) })
	return out
}

// LiveAwaiting returns the questions from MCP servers that one of the user's runs, live on this
// instance, waits on; nil when it waits on none.
func (s *Service) LiveAwaiting(user, runID string) *Awaiting {
	live := s.live(user, runID)
	if live == nil {
		return nil
	}
	qs := live.questions.open()
	if len(qs) == 0 {
		return nil
	}
	out := &Awaiting{}
	for _, q := range qs {
		if out.ExpiresAt.IsZero() || q.ev.ExpiresAt.Before(out.ExpiresAt) {
			out.ExpiresAt = *q.ev.ExpiresAt
		}
		out.Calls = append(out.Calls, AwaitingCall{Kind: q.ev.Kind, ToolCallID: q.ev.ToolCallID, Name: q.ev.Name, Arguments: q.ev.Arguments,
			Reason: q.ev.Reason, Source: q.ev.Source, Message: q.ev.Message, Fields: q.ev.Fields})
	}
	return out
}

// answerLive delivers a decision on a question a live run's call waits on. It reports false when the
// run has no such question: the decision is for a call the store keeps.
func (s *Service) answerLive(run *Run, d Decision) (*ApprovalResult, bool, error) {
	q := run.questions.shown(d.ToolCallID)
	if q == nil {
		return nil, false, nil
	}
	var ans tool.Answer
	switch d.Decision {
	case DecisionApprove:
		return nil, true, invalid("invalid_decision", "tool call %q asks for information: answer it (decision answer, with content) or deny it", d.ToolCallID)
	case DecisionDeny:
		ans.Action = tool.ActionDecline
	case DecisionAnswer:
		if d.Answers != nil {
			return nil, true, invalid("invalid_decision", "tool call %q asks for the values of fields: send them as content, not answers", d.ToolCallID)
		}
		content, err := checkContent(q.ev.Fields, d.Content)
		if err != nil {
			return nil, true, err
		}
		if q.check != nil {
			// As the server's side will check it (its schema whole: pattern, uniqueItems …), with the
			// defaults it will fill in: the content decided is the content the server receives.
			if content, err = q.check(content); err != nil {
				return nil, true, invalid("invalid_answer", "%s", err.Error())
			}
		}
		ans = tool.Answer{Action: tool.ActionAccept, Content: content}
	}
	if !run.questions.decide(run, q, ans, "", d.DecidedBy) {
		return nil, true, &Error{Kind: ErrBusy, Code: "already_decided", RunID: run.ID,
			Message: fmt.Sprintf("tool call %q no longer waits: it was answered, or its call ended", d.ToolCallID)}
	}
	return &ApprovalResult{RunID: run.ID, Status: store.RunRunning, Pending: len(run.questions.open())}, true, nil
}

// notAsking is the error of an answer (content) to a question from an MCP server that no live run of
// the user's on this instance asks: the run is another user's or none (404), another instance runs it
// (409 run_not_here: the question is in that instance's memory), or it asks nothing on that call.
func (s *Service) notAsking(ctx context.Context, user, runID, callID string) error {
	r, err := s.opts.Store.Run(ctx, user, runID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFound(runID)
	case err != nil:
		return err
	case (r.Status == store.RunRunning || r.Status == store.RunQueued) && s.live(user, runID) == nil:
		return &Error{Kind: ErrBusy, Code: "run_not_here", RunID: runID, Message: fmt.Sprintf("run %s runs on another chatd instance, "+
			"and a question from an MCP server can be answered only on the instance that runs it; send the answer again (it may reach that instance)", runID)}
	}
	return &Error{Kind: ErrBusy, Code: "not_awaiting_approval", RunID: runID,
		Message: fmt.Sprintf("run %s (%s) waits for no answer on tool call %q: content answers a question from an MCP server", runID, r.Status, callID)}
}

// fieldsOf reads the fields of a requested schema, in the order of its properties.
func fieldsOf(schema json.RawMessage) ([]runevent.Field, error) {
	var root struct {
		Type       string          `json:"type"`
		Properties json.RawMessage `json:"properties"`
		Required   []string        `json:"required"`
	}
	if err := json.Unmarshal(schema, &root); err != nil {
		return nil, fmt.Errorf("the requested schema is not a JSON object: %w", err)
	}
	if root.Type != "" && root.Type != "object" {
		return nil, fmt.Errorf("the requested schema is of type %q, not object", root.Type)
	}
	names, props, err := orderedProperties(root.Properties)
	if err != nil {
		return nil, err
	}
	if len(names) > tool.MaxQuestionFields {
		return nil, fmt.Errorf("the requested schema has %d fields; at most %d", len(names), tool.MaxQuestionFields)
	}
	fields := make([]runevent.Field, 0, len(names))
	for i, name := range names {
		f, err := fieldOf(name, props[i])
		if err != nil {
			return nil, err
		}
		f.Required = slices.Contains(root.Required, name)
		fields = append(fields, f)
	}
	return fields, nil
}

// orderedProperties reads a JSON object's members in order.
func orderedProperties(obj json.RawMessage) ([]string, []json.RawMessage, error) {
	if len(bytes.TrimSpace(obj)) == 0 || string(bytes.TrimSpace(obj)) == "null" {
		return nil, nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(obj))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil, errors.New("the requested schema's properties are not an object")
	}
	var names []string
	var values []json.RawMessage
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("the requested schema's properties: %w", err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, fmt.Errorf("the requested schema's properties: %w", err)
		}
		names = append(names, t.(string))
		values = append(values, v)
	}
	return names, values, nil
}

// property is what chatd reads of one property of a requested schema.
type property struct {
	Type        string          `json:"type"`
	Title       string          `json:"title"`
	Description string          `json:"description"`
	Format      string          `json:"format"`
	Default     json.RawMessage `json:"default"`
	Enum        []string        `json:"enum"`
	EnumNames   []string        `json:"enumNames"`
	OneOf       []titled        `json:"oneOf"`
	AnyOf       []titled        `json:"anyOf"`
	Minimum     *float64        `json:"minimum"`
	Maximum     *float64        `json:"maximum"`
	MinLength   *int            `json:"minLength"`
	MaxLength   *int            `json:"maxLength"`
	MinItems    *int            `json:"minItems"`
	MaxItems    *int            `json:"maxItems"`
	Items       *property       `json:"items"`
}

// titled is one choice of a titled enum: {"const": value, "title": label}.
type titled struct {
	Const string `json:"const"`
	Title string `json:"title"`
}

func fieldOf(name string, raw json.RawMessage) (runevent.Field, error) {
	var p property
	if err := json.Unmarshal(raw, &p); err != nil {
		return runevent.Field{}, fmt.Errorf("field %q of the requested schema: %w", name, err)
	}
	f := runevent.Field{Name: name, Title: p.Title, Description: p.Description, Type: p.Type, Format: p.Format,
		Default: p.Default, Minimum: p.Minimum, Maximum: p.Maximum, MinLength: p.MinLength, MaxLength: p.MaxLength}
	switch p.Type {
	case "string", "":
		f.Type = "string"
		f.Choices = choicesOf(p)
	case "number", "integer", "boolean":
	case "array":
		if p.Items == nil {
			return runevent.Field{}, fmt.Errorf("field %q of the requested schema is an array without items", name)
		}
		f.Multiple, f.MinItems, f.MaxItems = true, p.MinItems, p.MaxItems
		f.Choices = choicesOf(*p.Items)
		if len(f.Choices) == 0 {
			return runevent.Field{}, fmt.Errorf("field %q of the requested schema is an array without choices", name)
		}
	default:
		return runevent.Field{}, fmt.Errorf("field %q of the requested schema has type %q", name, p.Type)
	}
	if n := len(f.Choices); n > tool.MaxQuestionChoices {
		return runevent.Field{}, fmt.Errorf("field %q of the requested schema has %d choices; at most %d", name, n, tool.MaxQuestionChoices)
	}
	return f, nil
}

// choicesOf reads a property's choices: enum (labelled by enumNames), or oneOf / anyOf of titled
// constants.
func choicesOf(p property) []runevent.Choice {
	var out []runevent.Choice
	for i, v := range p.Enum {
		label := v
		if i < len(p.EnumNames) && p.EnumNames[i] != "" {
			label = p.EnumNames[i]
		}
		out = append(out, runevent.Choice{Value: v, Label: label})
	}
	for _, c := range append(p.OneOf, p.AnyOf...) {
		out = append(out, runevent.Choice{Value: c.Const, Label: cmp.Or(c.Title, c.Const)})
	}
	return out
}

// checkContent checks a person's answer to a question against its fields, and returns it as the
// values sent to the server.
func checkContent(fields []runevent.Field, content json.RawMessage) (map[string]any, error) {
	var in map[string]json.RawMessage
	if len(bytes.TrimSpace(content)) == 0 {
		content = json.RawMessage(`{}`)
	}
	if err := json.Unmarshal(content, &in); err != nil || in == nil {
		return nil, invalid("invalid_answer", "content must be a JSON object with a value for each field")
	}
	out := make(map[string]any, len(in))
	for name := range in {
		if !slices.ContainsFunc(fields, func(f runevent.Field) bool { return f.Name == name }) {
			return nil, invalid("invalid_answer", "field %q: the question asks for no such field", name)
		}
	}
	for _, f := range fields {
		raw, ok := in[f.Name]
		if !ok || string(raw) == "null" {
			if f.Required {
				return nil, invalid("invalid_answer", "field %q is required", f.Name)
			}
			continue
		}
		v, err := checkValue(f, raw)
		if err != nil {
			return nil, invalid("invalid_answer", "field %q: %s", f.Name, err.Error())
		}
		out[f.Name] = v
	}
	return out, nil
}

// checkValue checks one field's value.
func checkValue(f runevent.Field, raw json.RawMessage) (any, error) {
	switch f.Type {
	case "boolean":
		var b bool
		if json.Unmarshal(raw, &b) != nil {
			return nil, errors.New("must be true or false")
		}
		return b, nil
	case "number", "integer":
		var n float64
		if json.Unmarshal(raw, &n) != nil {
			return nil, errors.New("must be a number")
		}
		if f.Type == "integer" && n != math.Trunc(n) {
			return nil, errors.New("must be a whole number")
		}
		if f.Minimum != nil && n < *f.Minimum || f.Maximum != nil && n > *f.Maximum {
			return nil, fmt.Errorf("must be between %s and %s", bound(f.Minimum, "-∞"), bound(f.Maximum, "∞"))
		}
		return n, nil
	case "array":
		var vs []string
		if json.Unmarshal(raw, &vs) != nil {
			return nil, errors.New("must be a list of choices")
		}
		if f.MinItems != nil && len(vs) < *f.MinItems || f.MaxItems != nil && len(vs) > *f.MaxItems {
			return nil, fmt.Errorf("pick between %d and %d choices", deref(f.MinItems, 0), deref(f.MaxItems, len(f.Choices)))
		}
		out := make([]any, 0, len(vs))
		for _, v := range vs {
			if !isChoice(f.Choices, v) {
				return nil, fmt.Errorf("%q is not one of the choices", v)
			}
			out = append(out, v)
		}
		return out, nil
	default:
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, errors.New("must be text")
		}
		return s, checkString(f, s)
	}
}

func checkString(f runevent.Field, s string) error {
	n := utf8.RuneCountInString(s)
	switch {
	case len(f.Choices) > 0 && !isChoice(f.Choices, s):
		return fmt.Errorf("%q is not one of the choices", s)
	case f.MinLength != nil && n < *f.MinLength:
		return fmt.Errorf("must have at least %d characters", *f.MinLength)
	case f.MaxLength != nil && n > *f.MaxLength:
		return fmt.Errorf("must have at most %d characters", *f.MaxLength)
	}
	var err error
	switch f.Format {
	case "email":
		_, err = mail.ParseAddress(s)
	case "uri":
		var u *url.URL
		if u, err = url.Parse(s); err == nil && u.Scheme == "" {
			err = errors.New("no scheme")
		}
	case "date":
		_, err = time.Parse(time.DateOnly, s)
	case "date-time":
		_, err = time.Parse(time.RFC3339, s)
	}
	if err != nil {
		return fmt.Errorf("must be a valid %s", f.Format)
	}
	return nil
}

func isChoice(cs []runevent.Choice, v string) bool {
	return slices.ContainsFunc(cs, func(c runevent.Choice) bool { return c.Value == v })
}

func bound(p *float64, none string) string {
	if p == nil {
		return none
	}
	return fmt.Sprint(*p)
}

func deref(p *int, none int) int {
	if p == nil {
		return none
	}
	return *p
}
