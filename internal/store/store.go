// Package store defines chatd's persistent records — sessions, the records of a conversation, runs and
// per-call usage — and the Store contract every database implements (store/sqlite; store/postgres later).
//
// The pairing invariant lives here and is enforced by each implementation, not patched afterwards: every
// tool call of an assistant record gets exactly one tool record, stored right after the assistant record
// and before any other record of the session; FinishRun closes every call still open with a failed tool
// record. Pairing is by (assistant record, tool call id), never by the tool call id alone: providers repeat
// ids across turns, and some send none.
//
// Every method takes the caller's identity (user); a row of another user is reported as ErrNotFound.
// This package imports only the standard library.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Errors callers test for with errors.Is.
var (
	// ErrNotFound: no such row for this user (also when it belongs to another user).
	ErrNotFound = errors.New("not found")
	// ErrConflict: the write would break an invariant (a duplicate tool record, a record appended while
	// tool calls are open, a call id the assistant record does not hold, a finished run).
	ErrConflict = errors.New("conflict")
)

// Roles of a record.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
	RoleSystem    = "system"
)

// Run statuses. Running is the only non-terminal one.
const (
	RunRunning       = "running"
	RunCompleted     = "completed"
	RunFailed        = "failed"
	RunCancelled     = "cancelled"
	RunMaxIterations = "max_iterations"
	RunInterrupted   = "interrupted"
)

// Session is one conversation.
type Session struct {
	ID        string          `json:"id"`
	Title     string          `json:"title"`
	Agent     string          `json:"agent"`
	Metadata  json.RawMessage `json:"metadata"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// SessionPatch changes the non-nil fields of a session.
type SessionPatch struct {
	Title    *string
	Metadata json.RawMessage // nil: unchanged
}

// Page selects a slice of a newest-first list. Cursor is the opaque NextCursor of the previous page.
type Page struct {
	Limit  int // 0 means 50; at most 200
	Cursor string
}

// Attachment is binary content carried by a record (an image a user sent, an image a tool returned).
type Attachment struct {
	MediaType string `json:"media_type"`
	Name      string `json:"name,omitempty"`
	Data      []byte `json:"data"` // base64 in JSON
}

// ToolCall is one call the model made. Arguments is always a JSON object.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Usage counts the tokens of one model call, or the sum of several.
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

// Record is one stored message of a session: a user message, an assistant turn (text, reasoning, tool
// calls), the result of one tool call, or a system note. Its JSON is the API's record shape.
type Record struct {
	ID          string          `json:"id"`
	SessionID   string          `json:"session_id"`
	RunID       string          `json:"run_id,omitempty"`
	Role        string          `json:"role"`
	Content     string          `json:"content"`
	Attachments []Attachment    `json:"attachments,omitempty"`
	Reasoning   string          `json:"reasoning,omitempty"`
	ToolCalls   []ToolCall      `json:"tool_calls,omitempty"`
	ToolCallID  string          `json:"tool_call_id,omitempty"`
	Name        string          `json:"name,omitempty"`
	Success     *bool           `json:"success,omitempty"`
	DurationMS  *int64          `json:"duration_ms,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	Model       string          `json:"model,omitempty"`
	// FinishReason of an assistant record: stop, tool_calls, length, content_filter, cancelled, error.
	FinishReason string    `json:"finish_reason,omitempty"`
	Usage        *Usage    `json:"usage,omitempty"`
	CreatedAt    time.Time `json:"created_at"`

	// ParentID is, for a tool record, the id of the assistant record holding the call it answers.
	ParentID string `json:"-"`
	// Seq orders the records of a session: 1, 2, 3 … assigned by AppendRecord.
	Seq int64 `json:"-"`
}

// Run is one execution of the agent loop for one user message.
type Run struct {
	ID           string     `json:"id"`
	SessionID    string     `json:"session_id"`
	Status       string     `json:"status"`
	Agent        string     `json:"agent"`
	Model        string     `json:"model"`
	FinishReason string     `json:"finish_reason,omitempty"`
	Error        string     `json:"error,omitempty"`
	Usage        Usage      `json:"usage"`
	CreatedAt    time.Time  `json:"created_at"`
	EndedAt      *time.Time `json:"ended_at,omitempty"`
}

// RunEnd is how a run ended.
type RunEnd struct {
	Status       string // a terminal status
	FinishReason string
	Error        string // a short, safe description; never a secret
	Usage        Usage  // run totals
	// Reason is the content of the failed tool records FinishRun adds for calls still open,
	// e.g. "the run was cancelled before this call finished".
	Reason string
}

// UsageEntry is the usage of one model call.
type UsageEntry struct {
	RunID     string
	SessionID string
	Agent     string
	Model     string
	Usage
	CreatedAt time.Time // zero: now
}

// Store is the persistence contract. Implementations are safe for concurrent use.
type Store interface {
	// CreateSession stores s, assigning ID (when empty), CreatedAt and UpdatedAt.
	CreateSession(ctx context.Context, user string, s *Session) error
	Session(ctx context.Context, user, id string) (*Session, error)
	// Sessions lists the user's sessions, most recently updated first, and the cursor of the next page
	// ("" on the last page).
	Sessions(ctx context.Context, user string, p Page) ([]Session, string, error)
	UpdateSession(ctx context.Context, user, id string, p SessionPatch) (*Session, error)
	// DeleteSession deletes a session with its records and runs.
	DeleteSession(ctx context.Context, user, id string) error

	// Records returns the session's records, oldest first.
	Records(ctx context.Context, user, sessionID string) ([]Record, error)
	// AppendRecord stores r at the end of its session, assigning ID (when empty), Seq and CreatedAt, and
	// touches the session's UpdatedAt. A tool record must name its ParentID and a ToolCallID that record
	// holds and has not answered; any other record is refused while a tool call of the session is open.
	// Both refusals are ErrConflict.
	AppendRecord(ctx context.Context, user string, r *Record) error

	// CreateRun stores r with status running, assigning ID (when empty) and CreatedAt.
	CreateRun(ctx context.Context, user string, r *Run) error
	Run(ctx context.Context, user, id string) (*Run, error)
	// FinishRun ends a running run: in one transaction it appends a failed tool record (content
	// end.Reason) for every tool call of the run that has none, and sets the run's status, finish reason,
	// error, usage and EndedAt. It returns the tool records it appended. A run that already ended is
	// ErrConflict.
	FinishRun(ctx context.Context, user, runID string, end RunEnd) ([]Record, error)

	// InterruptRunning ends, for every user, the runs still marked running — the runs of a process that
	// died — as interrupted: each open tool call gets a failed tool record (content reason) and the run's
	// usage is the sum of its stored usage entries. It returns the runs it ended. It is for start-up, when
	// no live process owns a run.
	InterruptRunning(ctx context.Context, reason string) ([]Run, error)

	// AddUsage stores the usage of one model call.
	AddUsage(ctx context.Context, user string, u UsageEntry) error

	Close() error
}
