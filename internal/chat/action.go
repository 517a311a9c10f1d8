package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/store"
)

// Action is a suggested action whose handler is the server, as the user pressed it: the tool it names
// (Action), run with Data as its arguments.
type Action struct {
	Label  string          `json:"label,omitempty"`
	Action string          `json:"action"`
	Data   json.RawMessage `json:"data,omitempty"`
}

// actionCallPrefix begins the id of an action's tool call.
const actionCallPrefix = "action_"

// planAction checks a server action of a request for its session: the tool must be one the session's
// agent offers in the request's context (get_payload aside), and its arguments must do for the tool.
// The run stores an assistant record with the call, runs it, and stores its result: no model is called.
func (s *Service) planAction(p *plan) error {
	a := p.req.Action
	switch {
	case p.session == nil:
		return invalid("missing_session", "a server action runs in an existing session: send its session_id")
	case a.Action == "" || a.Action == GetPayloadTool || !p.tools.allowed[a.Action]:
		return invalid("unknown_tool", "action %q names no tool agent %q offers%s; GET /v1/tools lists them", a.Action, p.agentNm, where(p.req.Context))
	}
	data := a.Data
	if len(data) == 0 || string(data) == "null" {
		data = json.RawMessage(`{}`)
	}
	args, err := s.opts.Tools.CheckArguments(a.Action, data)
	if err != nil {
		return invalid("invalid_action_data", "action %q: %v", a.Action, err)
	}
	p.actionArgs = args
	return nil
}

// actionRecord is the first record of an action's run: an assistant turn holding the action's call.
func (p *plan) actionRecord(sessionID string) *store.Record {
	return &store.Record{SessionID: sessionID, Role: store.RoleAssistant, FinishReason: "tool_calls",
		ToolCalls: []store.ToolCall{{ID: actionCallPrefix + newID(), Name: p.req.Action.Action, Arguments: p.actionArgs}}}
}

// executeAction runs the call of an action's run, whose first record (last among records) holds it,
// and ends the run — as the loop would end a turn whose calls ran, with the events a client knows.
func (s *Service) executeAction(ctx context.Context, p *plan, run *Run, records []store.Record, obs *observer) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("action run panicked", "run", run.ID, "panic", v)
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
	res := p.tools.withProgress(obs.ToolProgress).Call(ctx, call)
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
