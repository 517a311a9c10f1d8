package runevent

import (
	"encoding/json"
	"time"

	"chatd/internal/store"
)

// Record is the API's shape of a stored record: a user message, an assistant turn, a tool result or a
// system note. What providers need back verbatim (replay parts), the parent of a tool record and the
// order within the session are storage matters and are not part of it.
type Record struct {
	ID           string          `json:"id"`
	SessionID    string          `json:"session_id"`
	RunID        string          `json:"run_id,omitempty"`
	Role         string          `json:"role"`
	Content      string          `json:"content"`
	Attachments  []Attachment    `json:"attachments,omitempty"`
	Reasoning    string          `json:"reasoning,omitempty"`
	ToolCalls    []ToolCall      `json:"tool_calls,omitempty"`
	ToolCallID   string          `json:"tool_call_id,omitempty"`
	Name         string          `json:"name,omitempty"`
	Success      *bool           `json:"success,omitempty"`
	DurationMS   *int64          `json:"duration_ms,omitempty"`
	Payload      json.RawMessage `json:"payload,omitempty"`
	Model        string          `json:"model,omitempty"`
	FinishReason string          `json:"finish_reason,omitempty"`
	Usage        *Usage          `json:"usage,omitempty"`
	CreatedAt    time.Time       `json:"created_at"`
	// SummaryThrough: of a summary, the id of the last record it replaces in what models are sent.
	SummaryThrough string `json:"summary_through,omitempty"`
	// Retracts: of a regeneration marker, the id of the user record whose answer it retracts.
	Retracts string `json:"retracts,omitempty"`
	// Of an assistant record whose text ended with marked blocks: what they held, and the text as the
	// model wrote it (RawContent, when it differs from Content).
	SuggestedValues  []SuggestedValue  `json:"suggested_values,omitempty"`
	SuggestedActions []SuggestedAction `json:"suggested_actions,omitempty"`
	Payloads         []Payload         `json:"payloads,omitempty"`
	RawContent       string            `json:"raw_content,omitempty"`
	// PayloadID is, for a tool record with a payload, the payload's id (as complete.payloads and the
	// payload manifest name it).
	PayloadID string `json:"payload_id,omitempty"`
}

// SuggestedValue is a button that sends Value as the user's next message.
type SuggestedValue struct {
	Label string `json:"label"`
	Value string `json:"value"`
}

// SuggestedAction is a button that does Action: the client acts on a "client" one; a "server" one names
// a tool that POST /v1/sessions/{id}/actions runs with Data as its arguments.
type SuggestedAction struct {
	Label   string          `json:"label"`
	Action  string          `json:"action"`
	Handler string          `json:"handler"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// Payload is structured data for the user: a tool's payload or an answer's marked block, with the id
// the model names it by and a one-line summary of its shape. Data is left out where the payload is
// only named (complete's payloads): the record that carries it has it.
type Payload struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	Source     string          `json:"source"` // tool or marker
	Summary    string          `json:"summary"`
	Data       json.RawMessage `json:"data,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	RecordID   string          `json:"record_id"`
}

// PayloadsOf returns the API's shape of the payloads a record carries (store.RecordPayloads).
func PayloadsOf(r *store.Record) []Payload {
	ps := store.RecordPayloads(r)
	if len(ps) == 0 {
		return nil
	}
	out := make([]Payload, len(ps))
	for i, p := range ps {
		out[i] = Payload{ID: p.ID, Type: p.Type, Source: p.Source, Summary: p.Summary, Data: p.Data,
			ToolCallID: p.ToolCallID, RecordID: r.ID}
	}
	return out
}

// PayloadRefs is PayloadsOf without the data: what names the payloads of a record.
func PayloadRefs(r *store.Record) []Payload {
	out := PayloadsOf(r)
	for i := range out {
		out[i].Data = nil
	}
	return out
}

// PayloadList returns the payloads an API record carries, with their data: a tool record's payload,
// or an answer's marker payloads (as PayloadsOf returns those of the stored record).
func (r *Record) PayloadList() []Payload {
	if r.Role == store.RoleTool && len(r.Payload) > 0 && r.PayloadID != "" {
		return []Payload{{ID: r.PayloadID, Type: r.Name, Source: store.PayloadTool, Summary: store.ToolPayloadSummary(r.Name, r.Payload),
			Data: r.Payload, ToolCallID: r.ToolCallID, RecordID: r.ID}}
	}
	return r.Payloads
}

// Suggestions returns the API's shape of an assistant record's suggested values and actions. Stored
// suggestions were checked when their answer was parsed; ones that do not decode are left out.
func Suggestions(r *store.Record) ([]SuggestedValue, []SuggestedAction) {
	var vs []SuggestedValue
	var as []SuggestedAction
	if r.SuggestedValues != nil && json.Unmarshal(r.SuggestedValues, &vs) != nil {
		vs = nil
	}
	if r.SuggestedActions != nil && json.Unmarshal(r.SuggestedActions, &as) != nil {
		as = nil
	}
	return vs, as
}

// Attachment is binary content of a record; Data is base64 in JSON.
type Attachment struct {
	MediaType string `json:"media_type"`
	Name      string `json:"name,omitempty"`
	Data      []byte `json:"data"`
}

// ToolCall is one call an assistant record made. Arguments is a JSON object.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Usage counts tokens: of one model call, of a record's call, or a run's sum.
type Usage struct {
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	ReasoningTokens  int64 `json:"reasoning_tokens"`
}

// Add adds v to u.
func (u *Usage) Add(v Usage) {
	u.InputTokens += v.InputTokens
	u.OutputTokens += v.OutputTokens
	u.CacheReadTokens += v.CacheReadTokens
	u.CacheWriteTokens += v.CacheWriteTokens
	u.ReasoningTokens += v.ReasoningTokens
}

// UsageOf returns the API's shape of store usage.
func UsageOf(u store.Usage) Usage {
	return Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheReadTokens: u.CacheReadTokens,
		CacheWriteTokens: u.CacheWriteTokens, ReasoningTokens: u.ReasoningTokens}
}

// RecordOf returns the API's shape of a stored record; nil for nil. Slices and bytes are shared with r,
// which must not change afterwards.
func RecordOf(r *store.Record) *Record {
	if r == nil {
		return nil
	}
	out := &Record{
		ID: r.ID, SessionID: r.SessionID, RunID: r.RunID, Role: r.Role, Content: r.Content, Reasoning: r.Reasoning,
		ToolCallID: r.ToolCallID, Name: r.Name, Success: r.Success, DurationMS: r.DurationMS, Payload: r.Payload,
		Model: r.Model, FinishReason: r.FinishReason, CreatedAt: r.CreatedAt, SummaryThrough: r.SummaryThrough,
		Retracts: r.Retracts, RawContent: r.RawContent,
	}
	out.SuggestedValues, out.SuggestedActions = Suggestions(r)
	switch {
	case r.Role == store.RoleTool && len(r.Payload) > 0:
		out.PayloadID = store.PayloadID(r.ID, 0)
	case len(r.Payloads) > 0:
		out.Payloads = PayloadsOf(r)
	}
	if len(r.Attachments) > 0 {
		out.Attachments = make([]Attachment, len(r.Attachments))
		for i, a := range r.Attachments {
			out.Attachments[i] = Attachment{MediaType: a.MediaType, Name: a.Name, Data: a.Data}
		}
	}
	if len(r.ToolCalls) > 0 {
		out.ToolCalls = make([]ToolCall, len(r.ToolCalls))
		for i, c := range r.ToolCalls {
			out.ToolCalls[i] = ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments}
		}
	}
	if r.Usage != nil {
		u := UsageOf(*r.Usage)
		out.Usage = &u
	}
	return out
}

// Records returns the API's shape of stored records.
func Records(rs []store.Record) []Record {
	out := make([]Record, len(rs))
	for i := range rs {
		out[i] = *RecordOf(&rs[i])
	}
	return out
}
