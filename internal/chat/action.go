package chat

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/marker"
	"chatd/internal/runevent"
	"chatd/internal/store"
)

// Action is a suggested action whose handler is the server, as the user pressed it: the tool it names
// (Action), run with Data as its arguments.
type Action struct {
	Label  string          `json:"label,omitempty"`
	Action string          `json:"action"`
	Data   json.RawMessage `json:"data,omitempty"`
}

// planAction checks a server action of a request for its session. The action must be one the
// session's latest answer suggested: its name and data (compared as canonical JSON) match a
// handler "server" entry of the suggested actions of the last current assistant record a model wrote
// (an earlier action's run does not count, so each button of that answer can be pressed). Its agent
// must tell the model about suggestions, and its tool must be one the agent offers in the request's
// context and selected_tools (get_payload aside), with data within limits.tool_argument_bytes that
// do for the tool. The run then runs the suggested data as the model wrote it: no model is called.
func (s *Service) planAction(ctx context.Context, p *plan) error {
	a := p.req.Action
	maxData := cmp.Or(s.opts.Limits.Model.ArgumentBytes, agent.DefaultArgumentBytes)
	switch {
	case p.session == nil:
		return invalid("missing_session", "a server action runs in an existing session: send its session_id")
	case !p.agent.Suggestions:
		return invalid("suggestions_off", "agent %q does not suggest actions (suggestions is off in its config), so it has no server action to run", p.agentNm)
	case len(a.Data) > maxData:
		return invalid("action_data_too_large", "the action's data is %d bytes; the limit (limits.tool_argument_bytes) is %d", len(a.Data), maxData)
	case a.Action == "" || a.Action == GetPayloadTool || !p.tools.allowed[a.Action]:
		return invalid("unknown_tool", "action %q names no tool agent %q offers%s; GET /v1/tools lists them", a.Action, p.agentNm, where(p.req.Context))
	}
	recs, err := s.opts.Store.Records(ctx, p.user, p.session.ID)
	if err != nil {
		return err
	}
	data, ok := suggestedAction(store.Current(recs), a)
	if !ok {
		return &Error{Kind: ErrConflict, Code: "action_not_suggested",
			Message: fmt.Sprintf("the last answer in session %s suggests no server action %q with this data; only an action the last answer suggested runs, as it suggested it", p.session.ID, a.Action)}
	}
	args, err := s.opts.Tools.CheckArguments(a.Action, data)
	if err != nil {
		return invalid("invalid_action_data", "action %q: %v", a.Action, err)
	}
	p.actionArgs = args
	return nil
}

// suggestedAction finds a among the server actions the last answer of records suggested, and returns
// the data the answer gave it ({} for none).
func suggestedAction(records []store.Record, a *Action) (json.RawMessage, bool) {
	i := len(records) - 1
	for i >= 0 && (records[i].Role != store.RoleAssistant || store.IsAction(&records[i])) {
		i--
	}
	if i < 0 {
		return nil, false
	}
	_, suggested := runevent.Suggestions(&records[i])
	want, ok := canonicalData(a.Data)
	if !ok {
		return nil, false
	}
	for _, sa := range suggested {
		if sa.Handler != marker.HandlerServer || sa.Action != a.Action {
			continue
		}
		if got, ok := canonicalData(sa.Data); ok && got == want {
			if len(sa.Data) == 0 || string(sa.Data) == "null" {
				return json.RawMessage(`{}`), true
			}
			return sa.Data, true
		}
	}
	return nil, false
}

// canonicalData is an action's data as canonical JSON: object keys sorted, numbers as float64 and
// strings as encoding/json writes them, absent or null as {}. The client sends back what it decoded and
// encoded again, so its bytes differ from the answer's.
func canonicalData(data json.RawMessage) (string, bool) {
	if len(bytes.TrimSpace(data)) == 0 {
		data = json.RawMessage(`null`)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return "", false
	}
	if v == nil {
		v = map[string]any{}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// actionRecord is the first record of an action's run: an assistant turn holding the action's call.
func (p *plan) actionRecord(sessionID string) *store.Record {
	return &store.Record{SessionID: sessionID, Role: store.RoleAssistant, FinishReason: "tool_calls",
		ToolCalls: []store.ToolCall{{ID: newActionCallID(), Name: p.req.Action.Action, Arguments: p.actionArgs}}}
}

// newActionCallID is the id of an action's call: store.ActionCallPrefix and 20 hex digits.
func newActionCallID() string {
	var b [10]byte
	rand.Read(b[:])
	return store.ActionCallPrefix + hex.EncodeToString(b[:])
}

// executeAction runs the call of an action's run, whose first record (last among records) holds it,
// and ends the run — as the loop would end a turn whose calls ran, with the events a client knows.
func (s *Service) executeAction(ctx context.Context, p *plan, run *Run, records []store.Record, obs *observer) {
	defer func() {
		if v := recover(); v != nil {
			obs.log.Error("action run panicked", "panic", v)
			if !obs.finished {
				obs.finish(agent.Result{Status: agent.StatusFailed, Err: errPanic})
			}
		}
	}()
	first := &records[len(records)-1]
	if first.Role != store.RoleAssistant || len(first.ToolCalls) != 1 {
		obs.finish(agent.Result{Status: agent.StatusFailed, FinishReason: "error", Err: errors.New("chat: an action's run lost its call")})
		return
	}
	c := first.ToolCalls[0]
	call := llm.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments}
	t := &agent.Turn{ToolCalls: []llm.ToolCall{call}, FinishReason: "tool_calls"}
	obs.parents[t], obs.last, obs.open = first, first, 1
	obs.Emit(agent.StatusMessage{Message: fmt.Sprintf("Running %s…", call.Name)})
	obs.Emit(agent.ToolStart{Call: call})
	res := p.tools.observed(obs).Call(ctx, call)
	obs.Emit(agent.ToolComplete{Call: call, Result: res})
	end := agent.Result{Status: agent.StatusCompleted, FinishReason: "stop", Final: t}
	if err := obs.RecordToolResult(context.WithoutCancel(ctx), t, call, res); err != nil {
		end = agent.Result{Status: agent.StatusFailed, FinishReason: "error", Final: t, Err: err}
	} else if ctx.Err() != nil {
		end.Status, end.FinishReason = agent.StatusCancelled, "cancelled"
		if e := limitCause(ctx); e != nil {
			end = agent.Result{Status: agent.StatusFailed, FinishReason: "error", Final: t, Err: e}
		}
	}
	obs.finish(end)
}

// limitCause returns the limit that cancelled ctx, or nil.
func limitCause(ctx context.Context) *agent.LimitError {
	e, _ := errors.AsType[*agent.LimitError](context.Cause(ctx))
	return e
}
