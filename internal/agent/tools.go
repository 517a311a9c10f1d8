package agent

import (
	"context"
	"fmt"

	"chatd/internal/llm"
)

// startEarly starts a read-only call whose arguments are complete while the model still streams.
func (r *runner) startEarly(t *turnState, pc *pendingCall) {
	if pc.started || pc.name == "" || r.cfg.Tools == nil || pc.index >= r.cfg.MaxToolCalls || !r.cfg.Tools.ReadOnly(pc.name) {
		return
	}
	if _, ok := pc.arguments(); !ok {
		return
	}
	t.assignID(pc)
	r.start(t, pc)
}

// start runs the call in its own goroutine; its result arrives on t.results.
func (r *runner) start(t *turnState, pc *pendingCall) {
	pc.started = true
	args, ok := pc.arguments()
	if !ok {
		args = emptyArgs
	}
	r.obs.ToolStart(llm.ToolCall{ID: pc.id, Name: pc.name, Arguments: args})
	r.obs.Status("Running " + pc.name + "…")
	call := llm.ToolCall{ID: pc.id, Name: pc.name, Arguments: pc.args}
	tools, ctx, i := r.cfg.Tools, t.toolCtx, pc.index
	t.wg.Go(func() {
		t.results <- toolDone{index: i, res: tools.Call(ctx, call)}
	})
}

// poll takes the results that have arrived without waiting, and reports them.
func (t *turnState) poll(obs Observer) {
	for {
		select {
		case d := <-t.results:
			t.arrived(obs, d)
		default:
			return
		}
	}
}

func (t *turnState) arrived(obs Observer, d toolDone) {
	pc := t.calls[d.index]
	pc.done, pc.result = true, d.res
	t.doneOrder = append(t.doneOrder, d.index)
	if !pc.completed {
		pc.completed = true
		obs.ToolComplete(t.reported(pc), d.res)
	}
}

// reported is the call as the observer sees it: its stored form once the turn has ended.
func (t *turnState) reported(pc *pendingCall) llm.ToolCall {
	if pc.index < len(t.ToolCalls) {
		return t.ToolCalls[pc.index]
	}
	args, ok := pc.arguments()
	if !ok {
		args = emptyArgs
	}
	return llm.ToolCall{ID: pc.id, Name: pc.name, Arguments: args}
}

// runPhaseTools runs the stored turn's calls that have not started, in parallel, and stores each result
// as it arrives. reason, when set, is why no call runs now (cancel, broken stream, iteration cap).
func (r *runner) runPhaseTools(ctx context.Context, t *turnState, reason string) error {
	defer t.cancelTools()
	for _, pc := range t.calls {
		if pc.started {
			continue
		}
		if pc.notRun == "" {
			pc.notRun = reason
		}
		if pc.notRun == "" && r.cfg.Tools == nil {
			pc.notRun = "No tools are available in this conversation."
		}
		if pc.notRun != "" {
			pc.started = true
			t.arrived(r.obs, toolDone{index: pc.index, res: ToolResult{Content: pc.notRun}})
			continue
		}
		r.start(t, pc)
	}
	var err error
	for stored := 0; stored < len(t.calls); stored++ {
		if t.persisted == len(t.doneOrder) {
			t.arrived(r.obs, <-t.results)
		}
		pc := t.calls[t.doneOrder[t.persisted]]
		t.persisted++
		if err != nil {
			continue // drain the rest so every goroutine ends
		}
		if perr := r.obs.ToolResult(context.WithoutCancel(ctx), &t.Turn, t.ToolCalls[pc.index], pc.result); perr != nil {
			err = fmt.Errorf("store tool result: %w", perr)
			t.cancelTools()
		}
	}
	t.wg.Wait()
	for _, pc := range t.calls {
		r.messages = append(r.messages, toolMessage(t.ToolCalls[pc.index], pc.result))
	}
	return err
}

func toolMessage(call llm.ToolCall, res ToolResult) llm.Message {
	m := llm.TextMessage(llm.RoleTool, res.Content)
	m.ToolCallID, m.ToolName, m.IsError = call.ID, call.Name, !res.Success
	return m
}
