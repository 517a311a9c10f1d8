package mcpclient

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"chatd/internal/tool"
)

// A server's elicitation (form mode) becomes a question to the person whose run made the call: the
// call's context carries their tool.Asker. On protocol 2026-07-28 and later the elicitation comes back
// as an input request in the call's own result (multi round-trip, SEP-2322), which the SDK fulfils
// with the call's context: it is that call's. On earlier versions the server sends elicitation/create
// on its own, and the request names no call (the SDK hands it over without the request it belongs to,
// over stdio and over HTTP alike): it is taken to belong to the one call in flight on its session.
// With none or several in flight it is declined: a question raised by one person's call must never
// reach another person.
//
// A call chatd abandoned before its response (cancelled, or timed out) may still be at work on the
// server, which may ask its question later, when another person's call is the only one in flight: so
// an abandoned call keeps counting as in flight for a while (linger), and its question, or anyone's,
// is declined meanwhile. A call that got its response frees its place at once.

// callKey marks the context of a call, for a handler to tell it from a server's own request.
type callKey struct{}

// inFlight is one call in flight: its context (the run's asker, its progress reporter) and the session
// it went out on. A call abandoned before its response keeps only what ties a question to it — its
// session, and until when it counts — not its context, which would hold the run; a timer forgets it
// then, whether or not the server gets another call.
type inFlight struct {
	ctx   context.Context // nil once abandoned
	sess  *mcp.ClientSession
	until time.Time   // zero while the call runs
	stop  func() bool // stops the timer that forgets an abandoned call
}

// minLinger is the shortest time an abandoned call counts as in flight.
const minLinger = time.Minute

// linger is how long a call abandoned before its response counts as in flight: the longest a call of
// the server may run (its longest configured timeout), at least minLinger — a server that honours its
// timeouts has given up on the call by then.
func (s *server) linger() time.Duration {
	d := max(minLinger, s.cfg.Timeout)
	if s.cfg.Timeout <= 0 && s.m.opts.Registry != nil {
		d = max(d, s.m.opts.Registry.DefaultTimeout())
	}
	for _, t := range s.cfg.ToolTimeouts {
		d = max(d, t)
	}
	return d
}

// returned takes a call out of flight: at once when it got its response, after linger when it was
// abandoned before it.
func (s *server) returned(token string, abandoned bool) {
	v, ok := s.calls.Load(token)
	if !ok || !abandoned {
		s.calls.Delete(token)
		return
	}
	linger := s.linger()
	c := &inFlight{sess: v.(*inFlight).sess, until: s.m.opts.Now().Add(linger)}
	c.stop = s.m.opts.AfterFunc(linger, func() { s.calls.CompareAndDelete(token, c) })
	s.calls.Store(token, c)
}

// forgetAll stops the timers of the abandoned calls, and forgets them: the manager is closing.
func (s *server) forgetAll() {
	s.calls.Range(func(k, v any) bool {
		if c := v.(*inFlight); c.stop != nil {
			c.stop()
			s.calls.Delete(k)
		}
		return true
	})
}

// declined is the answer to an elicitation chatd cannot put to a person.
var declined = &mcp.ElicitResult{Action: tool.ActionDecline}

// elicit handles elicitation/create. The SDK has checked the requested schema's type and properties
// before, and checks the accepted content against it after; chatd takes only MCP's flat form subset
// (form.go), so that no schema it answers can crash that check.
func (s *server) elicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	log := s.m.log.With("mcp_server", s.cfg.Name)
	p := req.Params
	if p.Mode == "url" || p.URL != "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
			Message: "chatd supports form elicitation only: it cannot send its user to a URL"}
	}
	call := ctx
	if _, own := ctx.Value(callKey{}).(string); !own {
		var running, abandoned int
		if call, running, abandoned = s.onlyCall(req.Session); running+abandoned != 1 || call == nil {
			log.Warn("MCP server asked an elicitation that chatd cannot tie to one call; declined",
				"calls_in_flight", running, "calls_abandoned", abandoned)
			return declined, nil
		}
	}
	asker, ok := tool.AskerFrom(call)
	if !ok {
		log.Warn("MCP server asked an elicitation during a call no person waits on; declined")
		return declined, nil
	}
	// Only now, tied to a call someone waits on, is the schema read: a request nobody would be asked
	// costs nothing more; and it is refused, when outside the form subset, before the SDK's own check
	// of an answer could run on it.
	q, err := questionOf(p)
	if err != nil {
		log.Warn("MCP server asked an elicitation chatd refuses", "err", err)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	// The wait ends with the server's request (its cancel, the session's end) or with the call (its
	// timeout, the run's cancel), whichever is first; it has the call's deadline, for the asker to
	// tell the person.
	var cancel context.CancelFunc
	if d, ok := call.Deadline(); ok {
		ctx, cancel = context.WithDeadline(ctx, d)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	defer context.AfterFunc(call, cancel)()
	a, err := asker.Ask(ctx, q)
	if err != nil {
		if ctx.Err() != nil {
			return &mcp.ElicitResult{Action: tool.ActionCancel}, nil
		}
		log.Warn("an MCP server's elicitation could not be asked; declined", "err", err)
		return declined, nil
	}
	switch a.Action {
	case tool.ActionAccept:
		content := a.Content
		if content == nil {
			content = map[string]any{}
		}
		return &mcp.ElicitResult{Action: tool.ActionAccept, Content: content}, nil
	case tool.ActionCancel:
		return &mcp.ElicitResult{Action: tool.ActionCancel}, nil
	default:
		return declined, nil
	}
}

// questionOf checks an elicitation's size and form (formOf) and returns it as a question. It compiles
// nothing: the question's Check builds and resolves its schema when a person answers.
func questionOf(p *mcp.ElicitParams) (tool.Question, error) {
	if len(p.Message) > tool.MaxQuestionMessage {
		return tool.Question{}, fmt.Errorf("the elicitation's message is %d bytes; chatd takes at most %d", len(p.Message), tool.MaxQuestionMessage)
	}
	schema, err := json.Marshal(p.RequestedSchema)
	if err != nil {
		return tool.Question{}, fmt.Errorf("the elicitation's requestedSchema: %w", err)
	}
	if string(schema) == "null" {
		schema = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	if len(schema) > tool.MaxQuestionSchema {
		return tool.Question{}, fmt.Errorf("the elicitation's requestedSchema is %d bytes; chatd takes at most %d", len(schema), tool.MaxQuestionSchema)
	}
	if _, err := formOf(schema); err != nil {
		return tool.Question{}, err
	}
	return tool.Question{Message: p.Message, Schema: schema, Check: checker(schema)}, nil
}

// checker returns the check the SDK makes of accepted content (mcp.Client's elicit): the requested
// schema, resolved, validates the content, then fills in its defaults. Content the person sends is
// checked with it before the server's request gets it, so that an answer chatd takes is one the SDK
// passes on, and what chatd records is what the server receives. The schema it resolves is the one
// formOf builds of the keywords it takes — which the server's, for the SDK, holds no more than — and
// it is built for each answer, so that a question waiting holds no compiled pattern.
func checker(schema json.RawMessage) func(map[string]any) (map[string]any, error) {
	return func(content map[string]any) (map[string]any, error) {
		s, err := formOf(schema)
		if err != nil {
			return nil, &tool.AnswerError{Problem: err.Error()}
		}
		resolved, err := s.Resolve(nil)
		if err != nil {
			return nil, &tool.AnswerError{Problem: "the question's schema does not resolve: " + err.Error()}
		}
		out := maps.Clone(content)
		if out == nil {
			out = map[string]any{}
		}
		if err := resolved.Validate(out); err != nil {
			return nil, answerError(slices.Sorted(maps.Keys(s.Properties)), err)
		}
		if err := resolved.ApplyDefaults(&out); err != nil {
			return nil, &tool.AnswerError{Problem: err.Error()}
		}
		return out, nil
	}
}

// answerError names the field a validation error of jsonschema-go is about ("validating root:
// validating /properties/code: pattern: …"), and keeps its last words as the problem.
func answerError(names []string, err error) *tool.AnswerError {
	msg := err.Error()
	e := &tool.AnswerError{}
	for _, name := range names {
		ptr := "validating /properties/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(name) + ":"
		if strings.Contains(msg, ptr) && len(name) >= len(e.Field) {
			e.Field = name
		}
	}
	for strings.HasPrefix(msg, "validating ") {
		i := strings.Index(msg, ": ")
		if i < 0 {
			break
		}
		msg = msg[i+2:]
	}
	e.Problem = msg
	return e
}

// onlyCall returns the context of the call running on sess when it is the only call in flight there,
// with the number of calls running and of calls abandoned that still count (linger). A call whose
// context has ended counts as running until it returns: the request may be its own.
func (s *server) onlyCall(sess *mcp.ClientSession) (only context.Context, running, abandoned int) {
	now := s.m.opts.Now()
	s.calls.Range(func(_, v any) bool {
		c := v.(*inFlight)
		switch {
		case c.sess != sess, !c.until.IsZero() && now.After(c.until): // its timer is due
		case c.until.IsZero():
			only = c.ctx
			running++
		default:
			abandoned++
		}
		return true
	})
	return only, running, abandoned
}
