package chat

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/tool"
)

// toolSet is the tools one run offers the model: the agent's allow-list narrowed by the request's
// selected_tools. A call of any other tool fails without running.
type toolSet struct {
	reg     *tool.Registry
	allowed map[string]bool
	specs   []llm.ToolSpec
	// progress receives the progress reports of running calls; nil drops them.
	progress func(callID string, p tool.Progress)
}

var _ agent.Tools = (*toolSet)(nil)

// toolsFor resolves the tools of a run. An unknown name in selected_tools is the caller's error; an
// unknown name in the agent's list is skipped (the tool may come from a server that is down).
func (s *Service) toolsFor(a Agent, selected []string) (*toolSet, error) {
	ts := &toolSet{reg: s.opts.Tools, allowed: map[string]bool{}}
	if ts.reg == nil {
		if len(selected) > 0 {
			return nil, invalid("unknown_tool", "selected_tools names %q, but no tools are available", selected[0])
		}
		return ts, nil
	}
	infos := ts.reg.List()
	for _, name := range selected {
		if _, ok := ts.reg.Info(name); !ok || (a.Tools != nil && !slices.Contains(a.Tools, name)) {
			return nil, invalid("unknown_tool", "selected_tools names %q, which is not a tool of this agent; GET /v1/tools lists them", name)
		}
	}
	for _, info := range infos {
		if a.Tools != nil && !slices.Contains(a.Tools, info.Name) {
			continue
		}
		if selected != nil && !slices.Contains(selected, info.Name) {
			continue
		}
		ts.allowed[info.Name] = true
		ts.specs = append(ts.specs, llm.ToolSpec{Name: info.Name, Description: info.Description, InputSchema: info.InputSchema})
	}
	return ts, nil
}

func (ts *toolSet) ReadOnly(name string) bool {
	if !ts.allowed[name] {
		return false
	}
	info, ok := ts.reg.Info(name)
	return ok && info.ReadOnly
}

func (ts *toolSet) Call(ctx context.Context, call llm.ToolCall) agent.ToolResult {
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
	var stop func()
	if ts.progress != nil {
		ctx, stop = withProgress(ctx, call.ID, ts.progress)
	}
	out := ts.reg.Call(ctx, call.Name, call.Arguments)
	if stop != nil {
		stop()
	}
	res := agent.ToolResult{Arguments: out.Arguments, Content: out.Content, Payload: out.Payload, Success: out.Success, Duration: out.Duration}
	for _, a := range out.Attachments {
		res.Attachments = append(res.Attachments, llm.Part{Kind: llm.PartImage, MediaType: a.MediaType, Text: a.Name, Data: a.Data})
	}
	return res
}

// withProgress returns a copy of ts whose calls report progress to f.
func (ts *toolSet) withProgress(f func(callID string, p tool.Progress)) *toolSet {
	c := *ts
	c.progress = f
	return &c
}

// withProgress gives one call a progress reporter; stop, called once the call has returned, makes it
// drop every later report (an MCP server may send progress after the result, or after a cancel).
func withProgress(ctx context.Context, callID string, f func(string, tool.Progress)) (context.Context, func()) {
	var mu sync.Mutex
	stopped := false
	report := func(p tool.Progress) {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			f(callID, p)
		}
	}
	return tool.WithProgress(ctx, report), func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
	}
}

// Tools lists the tools an agent ("" for the default one) offers.
func (s *Service) Tools(agentName string) ([]tool.Info, error) {
	if agentName == "" {
		agentName = "default"
	}
	a, ok := s.opts.Agents[agentName]
	if !ok {
		return nil, invalid("unknown_agent", "no agent %q; configured agents: %s", agentName, strings.Join(s.AgentNames(), ", "))
	}
	if s.opts.Tools == nil {
		return nil, nil
	}
	var out []tool.Info
	for _, info := range s.opts.Tools.List() {
		if a.Tools == nil || slices.Contains(a.Tools, info.Name) {
			out = append(out, info)
		}
	}
	return out, nil
}
