package chat

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/mail"
	"net/url"
	"slices"
	"strings"
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

// liveQuestion is a question a running call waits on; its answer comes through answer, once.
type liveQuestion struct {
	ev     runevent.ApprovalRequired
	check  func(map[string]any) (map[string]any, error) // tool.Question's Check
	answer chan tool.Answer
}

// runAsker is the tool.Asker of one call of a run.
type runAsker struct {
	o    *observer
	call llm.ToolCall
}

// Ask shows the question to the run's readers and waits for the answer, the end of ctx, or the
// approval timeout.
func (a runAsker) Ask(ctx context.Context, q tool.Question) (tool.Answer, error) {
	o, run := a.o, a.o.run
	fields, err := fieldsOf(q.Schema)
	if err != nil {
		return tool.Answer{}, err
	}
	// It waits for the approval timeout at most, and no longer than the call may run.
	wait := o.approvalTimeout
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d))
	}
	expires := o.now().Add(wait).UTC().Truncate(time.Second)
	args := a.call.Arguments
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	lq := &liveQuestion{answer: make(chan tool.Answer, 1), check: q.Check, ev: runevent.ApprovalRequired{Kind: KindQuestion, ToolCallID: a.call.ID,
		Name: a.call.Name, Arguments: args, Reason: q.Message, Source: SourceMCP, Message: q.Message, Fields: fields, ExpiresAt: &expires}}
	if !run.addQuestion(lq) {
		return tool.Answer{}, fmt.Errorf("tool call %s already waits for an answer", a.call.ID)
	}
	run.emit(runevent.TypeApprovalRequired, runevent.Encode(lq.ev))
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var ans tool.Answer
	reason := ""
	select {
	case ans = <-lq.answer:
	case <-ctx.Done():
		reason = "The call ended before anyone answered."
	case <-timer.C:
		reason = "Nobody answered in time (the question expired)."
	}
	if reason != "" {
		if run.takeQuestion(a.call.ID, lq) {
			ans = tool.Answer{Action: tool.ActionCancel}
		} else {
			ans = <-lq.answer // answered meanwhile
			reason = ""
		}
	}
	d := runevent.ApprovalDecided{ToolCallID: a.call.ID, Source: SourceMCP, Reason: reason}
	switch ans.Action {
	case tool.ActionAccept:
		d.Decision = DecisionAnswer
		d.Content, _ = json.Marshal(ans.Content)
	case tool.ActionDecline:
		d.Decision = DecisionDeny
	default:
		d.Decision = DecisionCancel
	}
	run.emit(runevent.TypeApprovalDecided, runevent.Encode(d))
	if ans.Action == tool.ActionCancel && ctx.Err() != nil {
		return ans, ctx.Err()
	}
	return ans, nil
}

// addQuestion keeps a question the run waits on; false when its call waits on one already.
func (r *Run) addQuestion(q *liveQuestion) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended || r.questions[q.ev.ToolCallID] != nil {
		return false
	}
	if r.questions == nil {
		r.questions = map[string]*liveQuestion{}
	}
	r.questions[q.ev.ToolCallID] = q
	return true
}

// takeQuestion forgets q, and reports whether it was still waiting: the one who takes it answers it.
func (r *Run) takeQuestion(callID string, q *liveQuestion) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.questions[callID] != q {
		return false
	}
	delete(r.questions, callID)
	return true
}

// question returns the question the call waits on, or nil.
func (r *Run) question(callID string) *liveQuestion {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.questions[callID]
}

// openQuestions returns the questions the run waits on, in call id order.
func (r *Run) openQuestions() []*liveQuestion {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*liveQuestion, 0, len(r.questions))
	for _, q := range r.questions {
		out = append(out, q)
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
	qs := live.openQuestions()
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
	q := run.question(d.ToolCallID)
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
	if !run.takeQuestion(d.ToolCallID, q) {
		return nil, true, &Error{Kind: ErrBusy, Code: "already_decided", RunID: run.ID,
			Message: fmt.Sprintf("tool call %q no longer waits: it was answered, or its call ended", d.ToolCallID)}
	}
	q.answer <- ans
	return &ApprovalResult{RunID: run.ID, Status: store.RunRunning, Pending: len(run.openQuestions())}, true, nil
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
