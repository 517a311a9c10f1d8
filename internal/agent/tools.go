package agent

import (
	"cmp"
	"context"
	"fmt"

	"chatd/internal/llm"
)

// startEarly starts a read-only call whose arguments are complete while the model still streams.
func (r *runner) startEarly(t *turnState, pc *pendingCall) {
	if pc.started || pc.oversize || pc.name == "" || r.cfg.Tools == nil || pc.index >= r.cfg.MaxToolCalls || !r.cfg.Tools.ReadOnly(pc.name) {
		return
	}
	args, ok := pc.arguments()
	if !ok {
		return
	}
	if _, ask := r.approval(llm.ToolCall{Name: pc.name, Arguments: args}); ask {
		return // decided once the turn is stored
	}
	t.assignID(pc)
	r.start(t, pc)
}

// start runs the call in its own goroutine, which emits ToolComplete and sends the result on t.results.
func (r *runner) start(t *turnState, pc *pendingCall) {
	pc.started = true
	t.running++
	if t.results == nil { // made with the turn's first call: most turns make none
		t.results = make(chan toolDone, r.cfg.MaxToolCalls)
	}
	args, ok := pc.arguments()
	if !ok {
		args = emptyArgs
	}
	shown := llm.ToolCall{ID: pc.id, Name: pc.name, Arguments: args}
	r.sink.Emit(ToolStart{Call: shown})
	r.sink.Emit(StatusMessage{Message: "Running " + pc.name + "…"})
	// The tool gets the raw text: the registry repairs and validates it, and reports what is wrong.
	call := llm.ToolCall{ID: pc.id, Name: pc.name, Arguments: pc.args}
	tools, sink, ctx, i := r.cfg.Tools, r.sink, t.toolCtx, pc.index
	t.wg.Go(func() {
		res := tools.Call(ctx, call)
		sink.Emit(ToolComplete{Call: shown, Result: res})
		t.results <- toolDone{index: i, res: res}
	})
}

// runPhaseTools runs the stored turn's calls that have not started, in parallel, and stores each result
// as its call ends. reason, when set, is why no call runs now (cancel, broken stream, iteration cap).
func (r *runner) runPhaseTools(ctx context.Context, t *turnState, reason string) error {
	defer t.cancelTools()
	var err error
	store := func(pc *pendingCall) {
		if err != nil {
			return // a store failed: the others are only drained
		}
		if serr := r.rec.RecordToolResult(context.WithoutCancel(ctx), &t.Turn, t.ToolCalls[pc.index], pc.result); serr != nil {
			err = fmt.Errorf("store tool result: %w", serr)
			t.cancelTools()
		}
	}
	for _, pc := range t.calls {
		if pc.started {
			continue
		}
		pc.notRun = cmp.Or(pc.notRun, reason)
		if pc.notRun == "" && r.cfg.Tools == nil {
			pc.notRun = "No tools are available in this conversation."
		}
		if pc.notRun == "" {
			if reason, ask := r.approval(t.ToolCalls[pc.index]); ask {
				pc.waiting = true
				t.waiting = append(t.waiting, Waiting{Call: t.ToolCalls[pc.index], Reason: reason})
				r.sink.Emit(ApprovalRequired{Call: t.ToolCalls[pc.index], Reason: reason})
				continue
			}
			r.start(t, pc)
			continue
		}
		pc.started, pc.result = true, ToolResult{Content: pc.notRun}
		r.sink.Emit(ToolComplete{Call: t.ToolCalls[pc.index], Result: pc.result})
		store(pc)
	}
	for ; t.running > 0; t.running-- {
		d := <-t.results
		pc := t.calls[d.index]
		pc.result = d.res
		store(pc)
	}
	t.wg.Wait()
	if len(t.waiting) > 0 && (err != nil || ctx.Err() != nil) {
		// The run stops here instead of waiting: the calls that would have waited are closed too.
		for _, pc := range t.calls {
			if pc.waiting {
				pc.result = ToolResult{Content: cmp.Or(notRunReason(ctx, nil, false, 0), "Not run: the run failed before this call was approved.")}
				r.sink.Emit(ToolComplete{Call: t.ToolCalls[pc.index], Result: pc.result})
				store(pc)
			}
		}
		t.waiting = nil
	}
	return err
}

// approval asks the tools whether call waits for a person: never when they are no Approver.
func (r *runner) approval(call llm.ToolCall) (string, bool) {
	a, ok := r.cfg.Tools.(Approver)
	if !ok {
		return "", false
	}
	return a.NeedsApproval(call)
}
