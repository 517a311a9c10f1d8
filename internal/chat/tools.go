package chat

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/metrics"
	"chatd/internal/store"
	"chatd/internal/tool"
	"chatd/internal/tracing"
)

// toolSet is the tools one run offers the model: those the agent offers in the request's context (see
// visibleTools), narrowed by the request's selected_tools. A call of any other tool fails without running.
type toolSet struct {
	reg     *tool.Registry
	allowed map[string]bool
	specs   []llm.ToolSpec
	// progress receives the progress reports of running calls; nil drops them.
	progress func(callID string, p tool.Progress)
	// obs, when set, asks the run's person what a running call asks (elicit.go); nil: a call's
	// questions are declined.
	obs     *observer
	now     func() time.Time // paces progress reports
	metrics *metrics.Metrics
	tracing *tracing.Tracing
	// payloads are the records whose payloads get_payload reads, when the run offers it (withPayloads).
	payloads []store.Record
	// approvals is the agent's approval policy: whether a call runs, is refused, or waits for a person.
	approvals *tool.Approvals
}

var _ agent.Tools = (*toolSet)(nil)

// toolsFor resolves the tools of a run of the agent called name, in the request context reqCtx. A nil
// selected offers every visible tool, an empty one none; a selected tool that is not visible (unknown,
// or not offered by this agent in this context) is the caller's error.
func (s *Service) toolsFor(name string, a Agent, reqCtx map[string]any, selected []string) (*toolSet, error) {
	infos := s.visibleTools(a, reqCtx)
	for _, n := range selected {
		if n == GetPayloadTool || (n == AskUserTool && a.AskUser) {
			continue // offered when the conversation has payloads (withPayloads); ask_user by withAskUser
		}
		if _, found := slices.BinarySearchFunc(infos, n, byName); !found {
			return nil, invalid("unknown_tool", "selected_tools names %q, not a tool of agent %q%s; GET /v1/tools lists them",
				n, name, where(reqCtx))
		}
	}
	if selected != nil {
		infos = slices.DeleteFunc(infos, func(info tool.Info) bool { return !slices.Contains(selected, info.Name) })
	}
	ts := &toolSet{reg: s.opts.Tools, allowed: make(map[string]bool, len(infos)), now: s.opts.Now,
		metrics: s.opts.Metrics, tracing: s.opts.Tracing, approvals: s.approvals[name]}
	if len(infos) > 0 {
		ts.specs = make([]llm.ToolSpec, 0, len(infos))
	}
	for _, info := range infos {
		ts.allowed[info.Name] = true
		ts.specs = append(ts.specs, llm.ToolSpec{Name: info.Name, Description: info.Description, InputSchema: info.InputSchema})
	}
	return ts.withAskUser(a, selected), nil
}

// visibleTools returns the registered tools agent a offers in the request context reqCtx, sorted by
// name:
//
//   - those its allow-list (Agent.Tools) names; without one, every tool not bound to a scope
//     (tool.Scopes.Bound), so that a page's tools stay on their page;
//   - and those the scope patterns active in reqCtx name (tool.Scopes.Active): global, page, tab, subtab.
//
// The agent's scopes are Agent.Scopes, or Options.Scopes when it has none. The registry changes while
// chatd runs (MCP servers come and go), so this is resolved for each request, never kept.
func (s *Service) visibleTools(a Agent, reqCtx map[string]any) []tool.Info {
	if s.opts.Tools == nil {
		return nil
	}
	scopes := a.Scopes
	if scopes == nil {
		scopes = s.opts.Scopes
	}
	active := scopes.Active(reqCtx)
	infos := s.opts.Tools.List() // a fresh copy, filtered in place
	return slices.DeleteFunc(infos, func(info tool.Info) bool {
		if tool.MatchAny(active, info.Name) {
			return false
		}
		if a.Tools == nil {
			return scopes.Bound(info.Name)
		}
		return !tool.MatchAny(a.Tools, info.Name)
	})
}

func byName(info tool.Info, name string) int { return strings.Compare(info.Name, name) }

// where describes the page, tab and subtab of a request context for a message: ` (page "reports", tab
// "table")`, or "" when it has none.
func where(reqCtx map[string]any) string {
	var b strings.Builder
	for _, key := range []string{"page", "tab", "subtab"} {
		v, ok := reqCtx[key].(string)
		if !ok {
			continue
		}
		if b.Len() == 0 {
			b.WriteString(" (")
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %q", key, v)
	}
	if b.Len() > 0 {
		b.WriteString(")")
	}
	return b.String()
}

func (ts *toolSet) ReadOnly(name string) bool {
	if !ts.allowed[name] {
		return false
	}
	info, ok := ts.reg.Info(name)
	return ok && info.ReadOnly
}

// unknownTool is the metrics' and the spans' name of calls of tools the run does not offer: the model
// named it.
const unknownTool = "unknown"

// Call runs one call in its execute_tool span, and counts it.
func (ts *toolSet) Call(ctx context.Context, call llm.ToolCall) agent.ToolResult {
	mcp := false
	if ts.tracing != nil && ts.reg != nil {
		info, _ := ts.reg.Info(call.Name)
		mcp = strings.HasPrefix(info.Source, "mcp:")
	}
	name := call.Name
	if !ts.allowed[name] {
		name = unknownTool
	}
	ctx, span := ts.tracing.Tool(ctx, name, call.ID, mcp, call.Arguments)
	t0 := time.Now()
	res := ts.call(ctx, call)
	ts.metrics.ToolCall(name, res.Success, time.Since(t0))
	ts.tracing.EndTool(span, res.Success, res.Content)
	return res
}

func (ts *toolSet) call(ctx context.Context, call llm.ToolCall) agent.ToolResult {
	if !ts.allowed[call.Name] {
		names := make([]string, 0, len(ts.allowed))
		for n := range ts.allowed {
			names = append(names, n)
		}
		slices.Sort(names)
		msg := fmt.Sprintf("unknown tool %q; the available tools are: %s", call.Name, strings.Join(names, ", "))
		if len(names) == 0 {
			msg = fmt.Sprintf("unknown tool %q; no tools are available in this conversation", call.Name)
		}
		return agent.ToolResult{Content: msg}
	}
	if call.Name == GetPayloadTool && ts.payloads != nil {
		return ts.getPayload(ctx, call)
	}
	if call.Name == AskUserTool {
		// A valid call waits for the user (NeedsApproval) and never gets here.
		if _, err := questionsOf(call.Arguments); err != nil {
			return agent.ToolResult{Arguments: call.Arguments, Content: err.Error()}
		}
		return agent.ToolResult{Arguments: call.Arguments, Content: "ask_user could not reach the user in this run."}
	}
	if msg := ts.refusal(call); msg != "" {
		return agent.ToolResult{Content: msg}
	}
	return ts.run(ctx, call)
}

// refusal is the result of a call the agent's approval policy does not let run now, or "".
func (ts *toolSet) refusal(call llm.ToolCall) string {
	return ts.policyRefusal(call, true)
}

// denial is the result of a call the agent's approval policy denies, or "": a call a person approved
// is still refused by a policy that denies it now.
func (ts *toolSet) denial(call llm.ToolCall) string {
	return ts.policyRefusal(call, false)
}

func (ts *toolSet) policyRefusal(call llm.ToolCall, ask bool) string {
	info, ok := ts.reg.Info(call.Name)
	if !ok {
		return "" // the registry reports the unknown tool
	}
	switch d, reason := ts.decide(info, call); {
	case d == tool.Deny:
		return "Not permitted: " + reason + " Do not try this call again; tell the user if it matters."
	case d == tool.Ask && ask:
		return "Not run: this call needs a person's approval. " + reason
	}
	return ""
}

// decide is the policy's decision on call, made on its arguments as the tool would run with them (the
// registry's repairs applied: a string holding a JSON object where the schema wants one is checked as
// that object), so that allow_if sees exactly what runs.
func (ts *toolSet) decide(info tool.Info, call llm.ToolCall) (tool.Decision, string) {
	args := call.Arguments
	if ts.approvals.ReadsArguments(call.Name) { // else no second pass over them before the call's own
		if prepared, err := ts.reg.CheckArguments(call.Name, args); err == nil {
			args = prepared
		}
	}
	return ts.approvals.Decide(info, args)
}

// run runs a call the policy allows, or a person approved.
func (ts *toolSet) run(ctx context.Context, call llm.ToolCall) agent.ToolResult {
	var stop func()
	if ts.progress != nil {
		ctx, stop = withProgress(ctx, call.ID, ts.now, ts.progress)
	}
	var asker *runAsker
	if ts.obs != nil && ts.asks(call.Name) {
		asker = &runAsker{o: ts.obs, call: call}
		ctx = tool.WithAsker(ctx, asker)
	}
	out := ts.reg.Call(ctx, call.Name, call.Arguments)
	if stop != nil {
		stop()
	}
	if asker != nil {
		// The SDK's goroutine that asked may not have seen the call's end yet: the questions left
		// are decided now, before the call's tool_complete.
		ts.obs.run.questions.closeCall(ts.obs.run, asker)
	}
	res := agent.ToolResult{Arguments: out.Arguments, Content: out.Content, Payload: out.Payload, Success: out.Success, Duration: out.Duration}
	for _, a := range out.Attachments {
		res.Attachments = append(res.Attachments, llm.Part{Kind: llm.PartImage, MediaType: a.MediaType, Text: a.Name, Data: a.Data})
	}
	return res
}

// asks reports whether the named tool may ask the person behind its call (tool.Info.Asks): only its
// calls carry an asker, so that the others pay nothing for it.
func (ts *toolSet) asks(name string) bool {
	info, ok := ts.reg.Info(name)
	return ok && info.Asks
}

// observed returns a copy of ts whose calls report progress to the run of obs, and ask its person.
func (ts *toolSet) observed(obs *observer) *toolSet {
	c := ts.withProgress(obs.ToolProgress)
	c.obs = obs
	return c
}

// withProgress returns a copy of ts whose calls report progress to f.
func (ts *toolSet) withProgress(f func(callID string, p tool.Progress)) *toolSet {
	c := *ts
	c.progress = f
	return &c
}

// Progress limits per call: a chatty or hostile server must not grow a run's event log without bound.
const (
	progressEvery = 200 * time.Millisecond // at most about five reports a second are passed on
	maxProgress   = 500                    // reports passed on per call
)

// withProgress gives one call a progress reporter; stop, called once the call has returned, makes it
// drop every later report (an MCP server may send progress after the result, or after a cancel).
// Reports closer together than progressEvery are dropped, except one that completes the total.
func withProgress(ctx context.Context, callID string, clock func() time.Time, f func(string, tool.Progress)) (context.Context, func()) {
	var (
		mu      sync.Mutex
		stopped bool
		last    time.Time
		sent    int
	)
	report := func(p tool.Progress) {
		mu.Lock()
		defer mu.Unlock()
		now := clock()
		final := p.Total > 0 && p.Progress >= p.Total
		if stopped || sent == maxProgress || (!final && now.Sub(last) < progressEvery) {
			return
		}
		last = now
		sent++
		f(callID, p)
	}
	return tool.WithProgress(ctx, report), func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
	}
}

// Tools lists the tools an agent ("" for the default one) offers in the request context reqCtx (whose
// "page", "tab" and "subtab" select tool scopes), sorted by name: what a run offers the model when its
// request has no selected_tools.
func (s *Service) Tools(agentName string, reqCtx map[string]any) ([]tool.Info, error) {
	if agentName == "" {
		agentName = "default"
	}
	a, ok := s.opts.Agents[agentName]
	if !ok {
		return nil, invalid("unknown_agent", "no agent %q; configured agents: %s", agentName, strings.Join(s.AgentNames(), ", "))
	}
	return s.visibleTools(a, reqCtx), nil
}
