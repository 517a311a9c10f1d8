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
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Errors callers test for with errors.Is.
var (
	// ErrNotFound: no such row for this user (also when it belongs to another user).
	ErrNotFound = errors.New("not found")
	// ErrConflict: the write would break an invariant (a duplicate tool record, a record appended while
	// tool calls are open, a call id the assistant record does not hold, a finished run).
	ErrConflict = errors.New("conflict")
	// ErrBusy: the session already has a running run (CreateRun, StartRun). The database enforces it.
	ErrBusy = errors.New("session has a running run")
	// ErrDuplicate: the user already has a run with this idempotency key (CreateRun).
	ErrDuplicate = errors.New("idempotency key already used")
	// ErrStale: a record was appended to the session since the Seq the write was given as its last
	// (CreateRun with Run.AfterSeq), and nothing was stored.
	ErrStale = errors.New("the session has records the write did not expect")
	// ErrKeyRevoked: the API key that started the run was revoked or has expired (ResumeRun).
	ErrKeyRevoked = errors.New("the run's API key was revoked or has expired")
)

// CancelRequestedError refuses to put to wait a run a cancel was asked of (AwaitRun): waiting, no
// instance would carry the cancel out; and to start a queued one (StartRun): its owner ends it instead.
type CancelRequestedError struct {
	Reason string // the cancel's
}

func (e *CancelRequestedError) Error() string { return "a cancel was asked of the run: " + e.Reason }

func (e *CancelRequestedError) Is(target error) bool { return target == ErrConflict }

// Roles of a record.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
	RoleSystem    = "system"
)

// Run statuses. Queued, running and awaiting approval are the non-terminal ones.
const (
	RunQueued  = "queued"
	RunRunning = "running"
	// RunAwaiting: calls of the run's last turn wait for a person's decision (Run.Awaiting). The run
	// holds its session as a running run does, but no process runs it: no lease, no recovery; a
	// decision resumes it (ResumeRun), a cancel or its expiry ends it (FinishRun).
	RunAwaiting      = "awaiting_approval"
	RunCompleted     = "completed"
	RunFailed        = "failed"
	RunCancelled     = "cancelled"
	RunMaxIterations = "max_iterations"
	RunInterrupted   = "interrupted"
)

// Session is one conversation.
type Session struct {
	ID        string
	Title     string
	Agent     string
	Metadata  json.RawMessage
	CreatedAt time.Time
	UpdatedAt time.Time
	// LastSeq is the Seq of the session's newest record as read (0: none). It is the store's own, not
	// part of what a client sees: a run that knows the records up to it may start before it is stored
	// (Run.AfterSeq).
	LastSeq int64
}

// Transcript is a session as one moment saw it: its records, oldest first, and its running run's
// id ("" when none).
type Transcript struct {
	Session      Session
	Records      []Record
	RunningRunID string
}

// BusyError is ErrBusy naming the run that keeps the session busy.
type BusyError struct {
	SessionID, RunID string
}

func (e *BusyError) Error() string {
	return "session " + e.SessionID + " has a run that has not ended: " + e.RunID
}

// Is makes a BusyError ErrBusy.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

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
// calls), the result of one tool call, or a system note. It has no JSON shape: the API's is runevent.Record.
type Record struct {
	ID          string
	SessionID   string
	RunID       string
	Role        string
	Content     string
	Attachments []Attachment
	Reasoning   string
	ToolCalls   []ToolCall
	ToolCallID  string
	Name        string
	Success     *bool
	DurationMS  *int64
	Payload     json.RawMessage
	Model       string
	// FinishReason of an assistant record: stop, tool_calls, length, content_filter, cancelled, error.
	FinishReason string
	Usage        *Usage
	CreatedAt    time.Time

	// SummaryThrough is, for a summary (a system record chatd writes when a conversation nears the
	// model's context window), the id of the last record it replaces in what the model is sent.
	SummaryThrough string
	// Retracts is, for a regeneration marker (a system record chatd writes when the last answer is
	// asked for again), the id of the user record whose answer it retracts: the records after that one
	// and before the marker are left out of what models are sent and of the chat UI's history (see
	// Current). They stay stored.
	Retracts string

	// Replay is, for an assistant record, what the provider that wrote it needs back verbatim on later
	// turns (thinking signatures, redacted thinking, Gemini thought signatures, OpenAI Responses
	// reasoning items); nil when there is none. It is opaque to clients and not part of the API shape.
	Replay *Replay

	// SuggestedValues, SuggestedActions and Payloads are, for an assistant record whose text carried
	// marked blocks (SUGGESTED_VALUES:, SUGGESTED_ACTIONS:, an agent's payload markers), what they held:
	// JSON arrays of values and actions, and the payloads with their ids and summaries. Content is the
	// text without the blocks; RawContent is the text as the model wrote it, kept for diagnostics when
	// it differs.
	SuggestedValues  json.RawMessage
	SuggestedActions json.RawMessage
	Payloads         []Payload
	RawContent       string

	// ParentID is, for a tool record, the id of the assistant record holding the call it answers.
	ParentID string
	// Seq orders the records of a session: 1, 2, 3 … assigned by AppendRecord.
	Seq int64
}

// Current returns a conversation's records as it now stands: without the answers regeneration markers
// retracted, and without the markers. A summary written while a retracted answer ran is kept when all it
// replaces comes before the retracted answer's question: what it says still holds. It returns records
// itself when there is no marker.
func Current(records []Record) []Record {
	if !slices.ContainsFunc(records, func(r Record) bool { return r.Retracts != "" }) {
		return records
	}
	out := make([]Record, 0, len(records))
	for _, r := range records {
		if r.Retracts == "" {
			out = append(out, r)
			continue
		}
		j := len(out) - 1
		for j >= 0 && out[j].ID != r.Retracts {
			j--
		}
		if j < 0 {
			continue // names nothing kept: the store refuses such a marker
		}
		kept := out[:j+1]
		for _, s := range out[j+1:] {
			if s.SummaryThrough != "" && slices.ContainsFunc(kept[:j], func(k Record) bool { return k.ID == s.SummaryThrough }) {
				kept = append(kept, s)
			}
		}
		out = kept
	}
	return out
}

// Replay is an assistant turn as its provider wrote it: its parts in order, with their signatures.
type Replay struct {
	// Model is the provider/model name of the model that wrote the parts: the one they are valid for.
	Model string       `json:"model"`
	Parts []ReplayPart `json:"parts"`
}

// Kinds of replay parts.
const (
	PartText              = "text"
	PartReasoning         = "reasoning"
	PartRedactedReasoning = "redacted_reasoning"
	PartToolCall          = "tool_call" // ID is the call's id; only the signature is kept here
)

// ReplayPart is one part of a Replay.
type ReplayPart struct {
	Kind      string `json:"kind"`
	Text      string `json:"text,omitempty"`
	Signature string `json:"signature,omitempty"`
	ID        string `json:"id,omitempty"`
}

// Run is one execution of the agent loop for one user message. A run is created running, or queued
// behind the session's running run and started later; it ends with one of the terminal statuses.
type Run struct {
	ID           string
	SessionID    string
	Status       string
	Agent        string
	Model        string
	FinishReason string
	Error        string
	Usage        Usage // of a run not ended yet: the sum of its usage entries so far
	CreatedAt    time.Time
	StartedAt    *time.Time
	EndedAt      *time.Time
	// LastEventSeq is the Seq of the run's last stored event (0: none).
	LastEventSeq int64
	// RecoveredFrom is, for a run a dead process left running, the Seq of the first event the recovery
	// appended to its log; 0 otherwise.
	RecoveredFrom int64
	// ReservedSeq bounds the Seqs a client may have been sent: the process that runs the run shows a
	// reader only events up to it, and raises it (CreateRun, StartRun, AppendEvents) before they go
	// further. Events a crash lost are numbered at most this high, so recovery numbers its own after it
	// and no id a client saw ever names another event. 0 for runs stored before it was kept.
	ReservedSeq int64

	// UserID is the owner; set by UnfinishedRuns, which reads across users.
	UserID string
	// IdempotencyKey, when set, is unique among the user's runs.
	IdempotencyKey string
	// RequestHash identifies the request that created the run, so a retry with the same idempotency key
	// but another request can be told apart.
	RequestHash string
	// Request is the caller's request of a queued run, opaque to the store: what the chat layer needs to
	// start it later, also after a restart.
	Request json.RawMessage
	// Awaiting is, for a run awaiting approval, what it waits for, opaque to the store: the chat layer's
	// waiting calls and the decisions made so far. Nil otherwise.
	Awaiting json.RawMessage

	// NewSession, given to CreateRun, is a session to create in the same transaction as the run (under
	// SessionID, or an assigned id): a send to a new conversation stores its session, run and message
	// together or not at all. Nil when the session exists.
	NewSession *Session
	// Title, given to CreateRun, becomes the session's title in the same transaction when it has none.
	Title string
	// KeyID is the API key the run was started with ("" none): its usage is counted against the key.
	KeyID string
	// Quota, given to CreateRun, are limits checked in its transaction: a run that would pass one is
	// refused with a *LimitError, and nothing is stored.
	Quota []Limit
	// AfterSeq, given to CreateRun with a first record in an existing session, is the Seq the session's
	// last record must still have: the caller built the run's history from the records up to it. When
	// another record came since, nothing is stored and CreateRun fails with ErrStale. Nil: no check.
	AfterSeq *int64
}

// RunEnd is how a run ended.
type RunEnd struct {
	Status       string // a terminal status
	FinishReason string
	Error        string // a short, safe description; never a secret
	Usage        Usage  // run totals
	// UsageFromEntries replaces Usage with the sum of the run's usage entries: for a run whose process
	// died, whose totals were lost with it.
	UsageFromEntries bool
	// Reason is the content of the failed tool records FinishRun adds for calls still open,
	// e.g. "the run was cancelled before this call finished".
	Reason string
	// Events are appended to the run's event log in the same transaction, so that a run is terminal if
	// and only if its log holds its last events. Each must carry the run's id.
	Events []Event
	// RecoveredFrom is stored as the run's RecoveredFrom.
	RecoveredFrom int64
	// Calls are the diagnostics of model calls whose turn was not stored, stored in the same transaction.
	// A call already stored (same run and N: the write that stored it lost its acknowledgement) is
	// skipped.
	Calls []ModelCall
	// KeepRequests, above 0, bounds the request bodies the run's session keeps, in the same transaction:
	// the calls of the session's runs older than its latest KeepRequests (by CreatedAt) lose their
	// Request, and their RequestOmitted becomes RequestsDropped. The rest of each call stays.
	KeepRequests    int
	RequestsDropped string
	// WhileAwaiting ends the run only if it still awaits approval: a run a decision resumed since the
	// caller read it (it runs its approved calls now) is refused with ErrConflict, so that a stale cancel
	// cannot close as "not run" a call that is running.
	WhileAwaiting bool
}

// Await is what AwaitRun stores with a run that waits for a person.
type Await struct {
	Awaiting json.RawMessage // what it waits for (Run.Awaiting), with what resumes it; required
	// ExpiresAt is when the wait expires; a store several instances share finds the runs whose wait
	// expired by it (zero: it does not expire).
	ExpiresAt time.Time
	// Events are appended to the run's log in the same transaction (the events up to the wait); each
	// must carry the run's id.
	Events []Event
}

// Reservation raises a run's ReservedSeq to Seq (never lowers it).
type Reservation struct {
	RunID string
	Seq   int64
}

// Event is one entry of a run's event log: Seq is its place in the run (1, 2, 3 … without gaps), Type
// its name and Data its JSON object.
type Event struct {
	RunID string
	Seq   int64
	Type  string
	Data  []byte
}

// UsageEntry is the usage of one model call.
type UsageEntry struct {
	RunID     string
	SessionID string
	KeyID     string
	Agent     string
	Model     string
	Usage
	CostNanoUSD int64 // from the config's price table; 0 when the model has no price
	// Estimated says the provider reported no usage for the call (cut short, or a server that does not
	// report it): chatd counted what was sent and streamed.
	Estimated bool
	CreatedAt time.Time // zero: now
}

// ModelCall is one model call of a run as its diagnostics show it: what it was sent and what the model
// answered before chatd parsed it. It is stored with the turn the call made (AppendTurn), or with the
// run's end (FinishRun) for a call that made none, and deleted with its run's session.
type ModelCall struct {
	RunID     string
	SessionID string
	// N numbers the run's calls: 1, 2, 3 … in the order they were sent (retries and continuations are
	// calls of their own).
	N     int
	Model string // provider/model
	// System is the system prompt; SameSystem says it is the one of the call before, not stored again.
	// Text fields (Model, System, RequestOmitted) are stored as SafeText makes them: a NUL character,
	// which PostgreSQL's text cannot hold, becomes U+FFFD, so that diagnostics never make a write fail.
	System     string
	SameSystem bool
	Tools      []string        // the names of the tools offered
	Settings   json.RawMessage // the call's settings as a JSON object (opaque to the store); nil: {}
	// Request is the request body as the provider encoded it, compressed (opaque to the store); nil
	// when it was not kept, and RequestOmitted says why.
	Request        []byte
	RequestOmitted string
	// Output is the model's raw answer of the turn the call ended, as a JSON object (opaque to the
	// store); nil for a call that ended no turn (it failed, or a continuation followed it).
	Output    json.RawMessage
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
	// DeleteSession deletes a session with its records and runs. It refuses with a *BusyError (which
	// is ErrBusy) while the session has a queued or running run, checked in the same transaction.
	DeleteSession(ctx context.Context, user, id string) error
	// Transcript reads a session, its records and its running run from one snapshot: a run that starts
	// or ends meanwhile is seen with its records or not at all.
	Transcript(ctx context.Context, user, sessionID string) (*Transcript, error)

	// Records returns the session's records, oldest first.
	Records(ctx context.Context, user, sessionID string) ([]Record, error)
	// RecordsAfter returns the session's records with Seq > after, oldest first: what was stored since
	// a reader last read. Records are never changed once stored, so a reader that keeps them reads
	// only the new ones.
	RecordsAfter(ctx context.Context, user, sessionID string, after int64) ([]Record, error)
	// Attachment returns attachment n (from 0) of one record of the session, or ErrNotFound.
	Attachment(ctx context.Context, user, sessionID, recordID string, n int) (*Attachment, error)
	// AppendRecord stores r at the end of its session, assigning ID (when empty), Seq and CreatedAt, and
	// touches the session's UpdatedAt. A tool record must name its ParentID and a ToolCallID that record
	// holds and has not answered; any other record is refused while a tool call of the session is open.
	// Both refusals are ErrConflict.
	AppendRecord(ctx context.Context, user string, r *Record) error
	// AppendTurn is AppendRecord and AddUsage of each of usage in one transaction, with calls, the
	// diagnostics of the calls that made the turn: a model's turn with what it cost and what it was
	// sent. Refused, it stores none of them.
	AppendTurn(ctx context.Context, user string, r *Record, usage []UsageEntry, calls []ModelCall) error
	// ModelCalls returns the stored model calls of one of the user's runs, by N; ErrNotFound when the
	// run is not the user's.
	ModelCalls(ctx context.Context, user, runID string) ([]ModelCall, error)
	// TitleSession sets a title chatd made for one of the user's sessions, unless the user set its
	// title (by creating it with one, or UpdateSession), checked in the update itself. It reports
	// whether it set it; a session that is not the user's is ErrNotFound. UpdatedAt is not changed.
	TitleSession(ctx context.Context, user, id, title string) (bool, error)

	// CreateRun stores r in one of the user's sessions, assigning ID (when empty) and CreatedAt. r.Status
	// is RunRunning (also when empty) or RunQueued. A running run is refused with ErrBusy while the
	// session has another running run; in the same transaction first, when not nil, is appended as by
	// AppendRecord (with RunID set), so that a run and its user message exist together or not at all.
	// A taken r.IdempotencyKey is ErrDuplicate. With r.NewSession the session is created in the same
	// transaction (its id taken, by this user or another, is ErrConflict, and r.SessionID is set to it);
	// with r.Title an untitled session gets that title. r.ReservedSeq is stored as given. With
	// r.AfterSeq, first is appended only while the session's last record still has that Seq; otherwise
	// nothing is stored and the error is ErrStale.
	CreateRun(ctx context.Context, user string, r *Run, first *Record) error
	// StartRun makes a queued run running, appending first (when not nil) and raising its ReservedSeq to
	// reserve in the same transaction. ErrBusy while the session has another running run; ErrConflict
	// when the run is not queued; on a store several instances share, a *CancelRequestedError (an
	// ErrConflict too) when a cancel was asked of the run on another instance and not yet carried out.
	StartRun(ctx context.Context, user, runID string, first *Record, reserve int64) error
	Run(ctx context.Context, user, id string) (*Run, error)
	// ActiveRun returns the session's running run, or ErrNotFound.
	ActiveRun(ctx context.Context, user, sessionID string) (*Run, error)
	// RunByKey returns the user's run created with this idempotency key, or ErrNotFound.
	RunByKey(ctx context.Context, user, key string) (*Run, error)
	// UnfinishedRuns returns, for every user, the runs still running or queued, oldest first, with UserID
	// and Request. It is for start-up, to end the runs of a process that died and start the queued ones.
	UnfinishedRuns(ctx context.Context) ([]Run, error)
	// AwaitRun makes a running run await approval, storing what it waits for and appending its events,
	// in one transaction. ErrConflict when the run is not running; on a store several instances share,
	// a *CancelRequestedError (an ErrConflict too) when a cancel was asked of the run on another
	// instance and not yet carried out: the run is not put to wait, for its owner to end it.
	AwaitRun(ctx context.Context, user, runID string, a Await) error
	// UpdateAwaiting replaces what a run awaiting approval waits for (Run.Awaiting), when it is still
	// before: ErrConflict when the run is not awaiting approval, or another write changed it first.
	UpdateAwaiting(ctx context.Context, user, runID string, before, after json.RawMessage) error
	// ResumeRun makes a run awaiting approval running again, when what it waits for is still before,
	// raising its ReservedSeq to reserve; Request and Awaiting are cleared. ErrConflict when it is not
	// awaiting approval or before changed: another decision, a cancel or its expiry came first. quota is
	// checked in the same transaction as CreateRun checks a new run's (a refusal is a *LimitError, and
	// the run still waits as it was): a resume counts as a run being created, except that the runs
	// queued in the run's own session, which wait for it, are not counted. ErrKeyRevoked, the run still
	// waiting, when the API key that started it (Run.KeyID) is revoked, has expired or is gone.
	ResumeRun(ctx context.Context, user, runID string, before json.RawMessage, reserve int64, quota []Limit) error
	// AwaitingRuns returns, for every user, the runs awaiting approval, oldest first, with UserID and
	// Awaiting: for start-up, to keep their expiry. When keyID is not "", only those started with that
	// API key: to cancel them when it is revoked.
	AwaitingRuns(ctx context.Context, keyID string) ([]Run, error)
	// ActiveRunsOfKey returns up to limit of the user's queued and running runs started with the API key
	// keyID, on whichever instance they run: to cancel them when the key is revoked. Each has only its
	// ID, SessionID, UserID, KeyID and Status (no request, no usage), and a page costs about its own
	// runs, not every active run of the key. The queued ones come first, then the running ones, each by id; after, the last run of the
	// previous page (nil for the first), is where the page starts, so that a caller reads them all by
	// pages of a bounded size. A run that starts between two pages may be listed twice (queued, then
	// running), never missed.
	ActiveRunsOfKey(ctx context.Context, user, keyID string, after *Run, limit int) ([]Run, error)
	// CloseCalls appends a failed tool record (content reason) for every tool call of the run that has
	// none, in call order, and returns them.
	CloseCalls(ctx context.Context, user, runID, reason string) ([]Record, error)
	// FinishRun ends a running, queued or awaiting run: in one transaction it closes the run's open calls as
	// CloseCalls does (content end.Reason), appends end.Events to the run's log, and sets the run's
	// status, finish reason, error, usage and EndedAt. It returns the tool records it appended. A run
	// that already ended is ErrConflict.
	FinishRun(ctx context.Context, user, runID string, end RunEnd) ([]Record, error)

	// AppendEvents appends events to the logs of their runs, and raises the runs' ReservedSeq as
	// reserved says, in one transaction. The caller (the chat layer, which owns the runs) assigns the
	// sequence numbers; a Seq already stored is ErrConflict and nothing of the batch is stored.
	AppendEvents(ctx context.Context, events []Event, reserved []Reservation) error
	// Events returns up to limit events of one of the user's runs with Seq > after, in order.
	Events(ctx context.Context, user, runID string, after int64, limit int) ([]Event, error)

	// AddUsage stores the usage of one model call.
	AddUsage(ctx context.Context, user string, u UsageEntry) error

	Accounts

	// Ready reports whether the store can serve: its database answers a query, and its schema is at the
	// latest migration this build knows (a schema another instance moved further is fine). It is cheap
	// enough for a readiness probe every few seconds.
	Ready(ctx context.Context) error

	Close() error
}

// SchemaBehind is Ready's error when the database's schema is older than the build's migrations.
func SchemaBehind(have, want int64) error {
	return fmt.Errorf("the database schema is at migration %d; this chatd needs %d (it migrates at start: restart it)", have, want)
}

// SafeText is s with each NUL character, and each byte that is not UTF-8, replaced by U+FFFD: text
// every store can hold.
func SafeText(s string) string {
	if !strings.Contains(s, "\x00") && utf8.ValidString(s) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
