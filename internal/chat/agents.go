package chat

import (
	"cmp"
	"slices"

	"chatd/internal/agent"
	"chatd/internal/prompt"
	"chatd/internal/tool"
)

// AgentInfo is an agent as a frontend sees it, to build its pickers: what it is for, its model, the
// tools it allows and where, and its limits with the defaults filled in.
type AgentInfo struct {
	Name        string
	Description string
	// Model is the model of its runs when a request names none: the agent's, or the service's default.
	Model string
	// Tools are its allowed tool names and patterns as configured; nil allows every tool not bound to
	// a scope.
	Tools []string
	// Scopes are the tool scopes in effect for it: its own, or the service's; nil when there are none.
	Scopes *tool.Scopes
	// PayloadTypes are the payload types the agent defines: marker, schema, instructions and scope.
	PayloadTypes []PayloadType
	// Suggestions says the model is told about SUGGESTED_VALUES and SUGGESTED_ACTIONS.
	Suggestions bool
	Limits      AgentLimits
}

// AgentLimits are an agent's limits in effect. Zero MaxTokens and a nil Temperature leave them to the
// provider; zero ContextWindow is the model's known or configured window.
type AgentLimits struct {
	MaxIterations     int
	MaxTokens         int
	Temperature       *float64
	ToolHistoryRounds int // -1: every round in full
	ContextWindow     int
	CompactAt         float64
}

// Agents lists the configured agents that allowed accepts (nil: all), sorted by name.
func (s *Service) Agents(allowed func(name string) bool) []AgentInfo {
	out := []AgentInfo{}
	for _, name := range s.AgentNames() {
		if allowed != nil && !allowed(name) {
			continue
		}
		a := s.opts.Agents[name]
		info := AgentInfo{Name: name, Description: a.Description, Model: cmp.Or(a.Model, s.opts.DefaultModel),
			Tools: slices.Clone(a.Tools), Scopes: cmp.Or(a.Scopes, s.opts.Scopes), PayloadTypes: slices.Clone(a.Payloads),
			Suggestions: a.Suggestions,
			Limits: AgentLimits{
				MaxIterations: cmp.Or(a.MaxIterations, agent.DefaultMaxIterations), MaxTokens: a.MaxTokens,
				Temperature:       a.Temperature,
				ToolHistoryRounds: cmp.Or(a.ToolHistoryRounds, s.opts.Context.ToolHistoryRounds, prompt.DefaultToolHistoryRounds),
				ContextWindow:     a.ContextWindow,
				CompactAt:         cmp.Or(a.CompactAt, s.opts.Context.CompactAt, DefaultCompactAt),
			}}
		if info.Limits.ToolHistoryRounds < 0 {
			info.Limits.ToolHistoryRounds = -1
		}
		out = append(out, info)
	}
	return out
}
