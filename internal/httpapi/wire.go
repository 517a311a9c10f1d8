package httpapi

import (
	"encoding/json"
	"time"

	"chatd/internal/chat"
	"chatd/internal/runevent"
	"chatd/internal/store"
	"chatd/internal/tool"
)

// The API's JSON shapes of sessions, runs, cancels, diagnostics and MCP servers, each with the one
// function that makes it from chatd's own type: a change of storage or of chat's types cannot change
// what clients get without a change here (TestRouteGoldens pins the bytes). Records are
// runevent.Record: the same shape is in event data.

// sessionJSON is a session as the API shows it.
type sessionJSON struct {
	ID        string          `json:"id"`
	Title     string          `json:"title"`
	Agent     string          `json:"agent"`
	Metadata  json.RawMessage `json:"metadata"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
}

func sessionOf(s *store.Session) sessionJSON {
	return sessionJSON{ID: s.ID, Title: s.Title, Agent: s.Agent, Metadata: s.Metadata, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

// runJSON is a run as the API shows it. LastEventID is the id of its last event a reader may resume
// after.
type runJSON struct {
	ID           string         `json:"id"`
	SessionID    string         `json:"session_id"`
	Status       string         `json:"status"`
	Agent        string         `json:"agent"`
	Model        string         `json:"model"`
	FinishReason string         `json:"finish_reason,omitempty"`
	Error        string         `json:"error,omitempty"`
	Usage        runevent.Usage `json:"usage"`
	CreatedAt    time.Time      `json:"created_at"`
	StartedAt    *time.Time     `json:"started_at,omitempty"`
	EndedAt      *time.Time     `json:"ended_at,omitempty"`
	LastEventID  int64          `json:"last_event_id"`
	// Awaiting is, for a run awaiting approval, what it waits for; for a running run, the questions
	// from MCP servers its calls wait on (source mcp), when there are some.
	Awaiting *awaitingJSON `json:"awaiting,omitempty"`
}

// awaitingJSON is what a run awaiting approval waits for: its calls, and when it stops waiting.
type awaitingJSON struct {
	ExpiresAt time.Time          `json:"expires_at"`
	Calls     []awaitingCallJSON `json:"calls"`
}

type awaitingCallJSON struct {
	Kind       string          `json:"kind"` // approval, or question (ask_user: its arguments hold the questions)
	ToolCallID string          `json:"tool_call_id"`
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
	Reason     string          `json:"reason"`
	Decision   string          `json:"decision,omitempty"` // approve or deny, once decided
	// Source, Message and Fields are a question from an MCP server's (source "mcp"), as in
	// approval_required.
	Source  string           `json:"source,omitempty"`
	Message string           `json:"message,omitempty"`
	Fields  []runevent.Field `json:"fields,omitempty"`
}

// runOf is a run as the API shows it; live, when the stored run does not wait, is what it waits on
// while it runs (questions from MCP servers), or nil.
func runOf(r *store.Run, live *chat.Awaiting) runJSON {
	out := runJSON{ID: r.ID, SessionID: r.SessionID, Status: r.Status, Agent: r.Agent, Model: r.Model,
		FinishReason: r.FinishReason, Error: r.Error, Usage: runevent.UsageOf(r.Usage), CreatedAt: r.CreatedAt,
		StartedAt: r.StartedAt, EndedAt: r.EndedAt, LastEventID: r.LastEventSeq}
	a := chat.AwaitingOf(r)
	if a == nil {
		a = live
	}
	if a != nil {
		out.Awaiting = &awaitingJSON{ExpiresAt: a.ExpiresAt, Calls: []awaitingCallJSON{}}
		for _, c := range a.Calls {
			out.Awaiting.Calls = append(out.Awaiting.Calls, awaitingCallJSON{Kind: c.Kind, ToolCallID: c.ToolCallID, Name: c.Name,
				Arguments: c.Arguments, Reason: c.Reason, Decision: c.Decision, Source: c.Source, Message: c.Message, Fields: c.Fields})
		}
	}
	return out
}

// approvalRequestJSON is the body of POST /v1/runs/{id}/approvals.
type approvalRequestJSON struct {
	ToolCallID string          `json:"tool_call_id"`
	Decision   string          `json:"decision"`            // approve or deny
	Arguments  json.RawMessage `json:"arguments,omitempty"` // approve: the edited arguments to run with
	Reason     string          `json:"reason,omitempty"`    // deny: what the model is told
	Answers    []string        `json:"answers,omitempty"`   // answer: an ask_user call's answers, in order
	// Content, with answer, is the values of the fields of a question from an MCP server (source mcp).
	Content json.RawMessage `json:"content,omitempty"`
}

// approvalJSON answers POST /v1/runs/{id}/approvals.
type approvalJSON struct {
	RunID   string `json:"run_id"`
	Status  string `json:"status"`  // running (resumed) or awaiting_approval (other calls undecided)
	Pending int    `json:"pending"` // calls still undecided
}

func approvalOf(a *chat.ApprovalResult) approvalJSON {
	return approvalJSON{RunID: a.RunID, Status: a.Status, Pending: a.Pending}
}

// cancelJSON answers POST /v1/runs/{id}/cancel.
type cancelJSON struct {
	RunID        string `json:"run_id"`
	Status       string `json:"status"`
	AlreadyEnded bool   `json:"already_ended"`
	Message      string `json:"message"`
}

func cancelOf(c *chat.CancelResult) cancelJSON {
	return cancelJSON{RunID: c.RunID, Status: c.Status, AlreadyEnded: c.AlreadyEnded, Message: c.Message}
}

// diagnosticsJSON answers GET /v1/runs/{id}/diagnostics: one model call of the run, and its calls.
type diagnosticsJSON struct {
	RunID          string          `json:"run_id"`
	SessionID      string          `json:"session_id"`
	Agent          string          `json:"agent"`
	Model          string          `json:"model"`
	SystemPrompt   string          `json:"system_prompt"`
	Tools          []string        `json:"tools"`
	Temperature    *float64        `json:"temperature,omitempty"`
	MaxTokens      int             `json:"max_tokens,omitempty"`
	MaxIterations  int             `json:"max_iterations,omitempty"`
	Context        map[string]any  `json:"context,omitempty"`
	ModelCalls     int             `json:"model_calls"`
	Call           int             `json:"call"`
	Request        json.RawMessage `json:"request"`
	RequestOmitted string          `json:"request_omitted,omitempty"`
	Output         json.RawMessage `json:"output"`
	Calls          []callJSON      `json:"calls"`
}

// callJSON is one model call of a run, listed in its diagnostics.
type callJSON struct {
	Call           int       `json:"call"`
	Model          string    `json:"model"`
	CreatedAt      time.Time `json:"created_at"`
	RequestOmitted string    `json:"request_omitted,omitempty"`
	Output         bool      `json:"output"`
}

func diagnosticsOf(d *chat.Diagnostics) diagnosticsJSON {
	out := diagnosticsJSON{RunID: d.RunID, SessionID: d.SessionID, Agent: d.Agent, Model: d.Model,
		SystemPrompt: d.SystemPrompt, Tools: d.Tools, Temperature: d.Temperature, MaxTokens: d.MaxTokens,
		MaxIterations: d.MaxIterations, Context: d.Context, ModelCalls: d.ModelCalls, Call: d.Call, Request: d.Request,
		RequestOmitted: d.RequestOmitted, Output: d.Output, Calls: make([]callJSON, len(d.Calls))}
	if out.Tools == nil {
		out.Tools = []string{}
	}
	for i, c := range d.Calls {
		out.Calls[i] = callJSON{Call: c.N, Model: c.Model, CreatedAt: c.At, RequestOmitted: c.RequestOmitted, Output: c.Output}
	}
	return out
}

// MCPServer is one MCP server's state for GET /v1/mcp/servers. It holds no secret: LastError is
// redacted by whoever fills it.
type MCPServer struct {
	Name        string     `json:"name"`
	Transport   string     `json:"transport"`
	State       string     `json:"state"`
	Tools       int        `json:"tools"`
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
	ConnectedAt *time.Time `json:"connected_at,omitempty"`
	Attempts    int        `json:"attempts"`
	PID         int        `json:"pid,omitempty"`
	Protocol    string     `json:"protocol_version,omitempty"`
}

// agentJSON is one agent of GET /v1/agents.
type agentJSON struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Model       string `json:"model"`
	// Tools are names and server__* patterns as configured; null allows every tool not bound to a scope.
	Tools         []string          `json:"tools"`
	PayloadTypes  []payloadTypeJSON `json:"payload_types"`
	Suggestions   bool              `json:"suggestions"`
	ContextScopes *tool.Scopes      `json:"context_scopes"`
	Limits        agentLimitsJSON   `json:"limits"`
}

// payloadTypeJSON is a payload type an agent's answers may carry after its marker.
type payloadTypeJSON struct {
	Name         string          `json:"name"`
	Marker       string          `json:"marker"`
	Schema       json.RawMessage `json:"schema"` // null: any JSON object or array
	Instructions string          `json:"instructions,omitempty"`
	// Scope binds the type to a request context's page (and tab, subtab); null: everywhere.
	Scope *payloadScopeJSON `json:"scope"`
}

type payloadScopeJSON struct {
	Page   string `json:"page"`
	Tab    string `json:"tab,omitempty"`
	Subtab string `json:"subtab,omitempty"`
}

type agentLimitsJSON struct {
	MaxIterations     int      `json:"max_iterations"`
	MaxTokens         int      `json:"max_tokens,omitempty"`
	Temperature       *float64 `json:"temperature,omitempty"`
	ToolHistoryRounds int      `json:"tool_history_rounds"`
	ContextWindow     int      `json:"context_window,omitempty"`
	CompactAt         float64  `json:"compact_at"`
}

func agentOf(a *chat.AgentInfo) agentJSON {
	l := a.Limits
	types := make([]payloadTypeJSON, 0, len(a.PayloadTypes))
	for _, t := range a.PayloadTypes {
		pt := payloadTypeJSON{Name: t.Name, Marker: t.Marker, Schema: t.Schema, Instructions: t.Instructions}
		if t.Page != "" || t.Tab != "" || t.Subtab != "" {
			pt.Scope = &payloadScopeJSON{Page: t.Page, Tab: t.Tab, Subtab: t.Subtab}
		}
		types = append(types, pt)
	}
	return agentJSON{Name: a.Name, Description: a.Description, Model: a.Model, Tools: a.Tools,
		PayloadTypes: types, Suggestions: a.Suggestions, ContextScopes: a.Scopes,
		Limits: agentLimitsJSON{MaxIterations: l.MaxIterations, MaxTokens: l.MaxTokens, Temperature: l.Temperature,
			ToolHistoryRounds: l.ToolHistoryRounds, ContextWindow: l.ContextWindow, CompactAt: l.CompactAt}}
}
