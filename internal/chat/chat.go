// Package chat runs one conversation turn: it checks the request, stores the user's message, builds the
// model's context from the stored records, runs the agent loop, stores every turn and tool result as it
// completes, and publishes the run's events for any number of readers.
//
// It imports agent, llm, store and tool; never a concrete provider or store, and never net/http.
package chat

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/marker"
	"chatd/internal/metrics"
	"chatd/internal/store"
	"chatd/internal/tool"
	"chatd/internal/tracing"
)

// Errors the caller caused. *Error wraps one of them with a code and a message for the client.
var (
	ErrInvalid = errors.New("invalid request")
	ErrBusy    = errors.New("session busy")
	// ErrKeyReused: an idempotency key sent again with another request.
	ErrKeyReused = errors.New("idempotency key reused")
	// ErrForbidden: the caller may not use what the request names (an agent outside its key's).
	ErrForbidden = errors.New("forbidden")
	// ErrConflict: the request does not fit the conversation as it stands (an action its last answer
	// did not suggest, a regeneration that would take back an action's run).
	ErrConflict = errors.New("conflict with the conversation")
)

// Error is a failure of the caller's request, with a stable code and a message written for a person.
type Error struct {
	Kind    error // ErrInvalid, ErrBusy, ErrKeyReused, ErrForbidden, ErrConflict, ErrClosed or store.ErrNotFound
	Code    string
	Message string
	RunID   string // for ErrBusy: the active run
}

func (e *Error) Error() string { return e.Message }
func (e *Error) Unwrap() error { return e.Kind }

func invalid(code, format string, args ...any) error {
	return &Error{Kind: ErrInvalid, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Models resolves a "provider/model" name.
type Models interface {
	// Resolve returns the provider serving name and the provider's own model name. Its errors are
	// written for the person who configures chatd.
	Resolve(name string) (llm.Provider, string, error)
}

// Agent is a named profile: model, prompt, tools and limits. The zero value is a useful default agent.
type Agent struct {
	// Description says what the agent is for, for the people who pick one (GET /v1/agents).
	Description string
	Model       string
	// Fallbacks are provider/model names tried in order when the model fails before any output.
	Fallbacks    []string
	SystemPrompt string
	Tools        []string // allowed tool names and "server__*" patterns; nil allows every tool not bound to a scope
	// Scopes add tools by the request context's page, tab and subtab (seed 003); nil: Options.Scopes.
	Scopes        *tool.Scopes
	MaxIterations int
	Temperature   *float64
	MaxTokens     int
	Reasoning     *llm.Reasoning
	// Instructions and Guidelines are the system prompt's sections after the tools (SystemPrompt is
	// its identity, first).
	Instructions string
	Guidelines   string
	// Context settings; zero values take ContextOptions'.
	ToolHistoryRounds int
	ContextWindow     int // tokens; 0: configured or known for the model
	CompactAt         float64
	// Payloads are the structured blocks its answers may carry after a marker (seed 003); Suggestions
	// tells the model it may end an answer with SUGGESTED_VALUES and SUGGESTED_ACTIONS (which are
	// parsed in every answer either way).
	Payloads    []PayloadType
	Suggestions bool
	// TitleModel titles a session from its first exchange: provider/model, TitleNone, or "" for
	// Options.TitleModel.
	TitleModel string
	// Approvals are its approval rules, first match wins (tool.NewApprovals): whether a call runs, is
	// refused, or waits for a person.
	Approvals []tool.ApprovalRule
	// AskUser offers the built-in ask_user tool (AskUserTool).
	AskUser bool
}

// Options configure a Service.
type Options struct {
	Store        store.Store
	Models       Models
	Tools        *tool.Registry
	Agents       map[string]Agent // "default" is added when missing
	Scopes       *tool.Scopes     // the tool scopes of agents without their own
	DefaultModel string
	Logger       *slog.Logger
	// Agent loop tuning, mostly for tests; zero values are the loop's defaults.
	RetryBase time.Duration
	// FlushInterval is the longest an event waits before it is written to the store (default
	// DefaultFlushInterval). Negative switches the durable event log off — for benchmarks that measure
	// what it costs; runs then cannot be replayed after they end, and after a crash the ids a client was
	// sent are not kept from naming other events.
	FlushInterval time.Duration
	// Context are the defaults of what every model call is sent.
	Context ContextOptions
	// InterruptWait bounds how long a send with on_active_run=interrupt waits for the active run to
	// end (default 30s).
	InterruptWait time.Duration
	// Limits bound what a request and a run may hold; zero values are the defaults.
	Limits Limits
	// Now is the clock that paces tool progress reports (default time.Now): tests step it.
	Now func() time.Time
	// Prices are the prices of models by provider/model name, for the cost of each model call.
	Prices map[string]Price
	// SweepInterval is how often, on a store several instances share (lease.go), this one looks for
	// runs whose owner's lease ended (default DefaultSweepInterval).
	SweepInterval time.Duration
	// Metrics count runs, model and tool calls, tokens, the event log's writes; nil counts nothing. One
	// service per Metrics: the service registers its gauges of live runs on it.
	Metrics *metrics.Metrics
	// Tracing traces runs, model and tool calls; nil traces nothing.
	Tracing *tracing.Tracing
	// TitleModel is the model that titles a session after its first answer, for agents that name
	// none: provider/model, TitleNone to keep the title cut from the first message, or "" for the
	// session's own model.
	TitleModel string
	// ApprovalTimeout is how long a run waits for a person's decision before its undecided calls are
	// denied (default DefaultApprovalTimeout).
	ApprovalTimeout time.Duration
	// Quota returns the limits a send of the user with the API key keyID ("" without one) is admitted
	// with now, as Account.Quota carries them: a decision that resumes a run awaiting approval is
	// admitted with those of the key that sent the run. Nil limits nothing (chatd without auth).
	Quota func(ctx context.Context, user, keyID string) ([]store.Limit, error)
}

// Price is what a model costs, in US dollars per million tokens. A cache price of 0 is the input price.
type Price struct {
	Input      float64
	Output     float64
	CacheRead  float64
	CacheWrite float64
}

// cost is the cost of a model call's usage in nano-dollars (0 for a model without a price). Input
// tokens count the prompt whole; its cache reads and writes are priced apart.
func (p Price) cost(u store.Usage) int64 {
	read, write := cmp.Or(p.CacheRead, p.Input), cmp.Or(p.CacheWrite, p.Input)
	plain := max(u.InputTokens-u.CacheReadTokens-u.CacheWriteTokens, 0)
	// $/Mtok × tokens = µ$; × 1000 = n$.
	usd := float64(plain)*p.Input + float64(u.CacheReadTokens)*read + float64(u.CacheWriteTokens)*write +
		float64(u.OutputTokens)*p.Output
	return int64(math.Round(usd * 1000))
}

// Limits bound a request and the resources of a run. The zero value of each is its default; every one
// is hard: passing it is a clear error for the caller, or ends the run with one, never a crash.
type Limits struct {
	MessageBytes    int // a message's text (default 256 KiB)
	ContextBytes    int // a request's context, as JSON (default 64 KiB): it goes into every system prompt
	Attachments     int // attachments of one message (default 8)
	AttachmentBytes int // one attachment, decoded (default 10 MiB)
	// RunTime bounds a run's wall time, from its start to its end (default 15m): a run past it fails
	// with run_timeout, keeping what it said.
	RunTime time.Duration
	// RunEvents bounds the events of a run (default 500,000): past it the run fails with event_limit,
	// and its deltas are no longer kept. Providers stream a delta for a token or so, and a run may
	// think and write hundreds of thousands of tokens over its rounds; the byte limits bound the rest.
	RunEvents int
	// DiagnosticsBytes bounds what one run stores for its diagnostics (default 8 MiB): its model calls'
	// compressed requests, system prompts, context and answers, all counted. A part over a quarter of
	// it, or past what the run has left, is cut or not stored, and the diagnostics say so. Negative: no
	// diagnostics are kept or stored.
	DiagnosticsBytes int
	// DiagnosticsRuns bounds the runs of a session whose calls keep their request bodies (default 10):
	// the end of a run drops those of the session's older runs, which keep the rest of their
	// diagnostics, so that a long session does not store its whole conversation again with every run.
	DiagnosticsRuns int
	// QueuedRuns bounds the runs queued behind a session's running run (default 32): one more is
	// refused with queue_full.
	QueuedRuns int
	// MarkerBytes bounds one marked block of an answer (SUGGESTED_VALUES: …, a payload marker's JSON),
	// from its marker to its end (default 256 KiB): a larger one is dropped, with a logged note.
	MarkerBytes int
	// HistoryBytes bounds the records kept in memory between the runs of recent sessions (default
	// 256 MiB), so that a session's next run reads only its new records; negative keeps none.
	HistoryBytes int
	// Model bounds what the models of a run stream: output, tool-call arguments, idle time.
	Model agent.Limits
}

// Defaults of Limits.
const (
	DefaultMessageBytes     = 256 << 10
	DefaultContextBytes     = 64 << 10
	DefaultAttachments      = 8
	DefaultAttachmentBytes  = 10 << 20
	DefaultRunTime          = 15 * time.Minute
	DefaultRunEvents        = 500_000
	DefaultDiagnosticsBytes = 8 << 20
	DefaultDiagnosticsRuns  = 10
	DefaultQueuedRuns       = 32
)

func (l *Limits) defaults() {
	l.MessageBytes = cmp.Or(max(l.MessageBytes, 0), DefaultMessageBytes)
	l.ContextBytes = cmp.Or(max(l.ContextBytes, 0), DefaultContextBytes)
	l.Attachments = cmp.Or(max(l.Attachments, 0), DefaultAttachments)
	l.AttachmentBytes = cmp.Or(max(l.AttachmentBytes, 0), DefaultAttachmentBytes)
	l.RunTime = cmp.Or(max(l.RunTime, 0), DefaultRunTime)
	l.RunEvents = cmp.Or(max(l.RunEvents, 0), DefaultRunEvents)
	if l.DiagnosticsBytes == 0 {
		l.DiagnosticsBytes = DefaultDiagnosticsBytes // negative: none kept
	}
	l.DiagnosticsRuns = cmp.Or(max(l.DiagnosticsRuns, 0), DefaultDiagnosticsRuns)
	l.QueuedRuns = cmp.Or(max(l.QueuedRuns, 0), DefaultQueuedRuns)
	l.MarkerBytes = cmp.Or(max(l.MarkerBytes, 0), marker.DefaultMaxBlock)
	if l.HistoryBytes == 0 {
		l.HistoryBytes = DefaultHistoryBytes
	}
}

// Service starts and tracks runs. It is safe for concurrent use.
type Service struct {
	opts   Options
	log    *slog.Logger
	events *eventLog // nil: no durable log
	base   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // running runs
	// titles counts the title calls going; titleCtx is theirs, cancelled by stopTitles when a drain's
	// time is up (or by cancel).
	titles     sync.WaitGroup
	titleCtx   context.Context
	stopTitles context.CancelFunc

	mu   sync.Mutex
	runs map[string]*Run // live runs (queued or running) by id
	// inSession are the live runs of each session (runs by session id): a send asks whether its
	// session is busy here, or how many runs it has queued, without reading every live run.
	inSession map[string][]*Run
	closing   bool

	queues *sessionQueues // the runs waiting for their session's running run
	est    *estimator     // token estimates, kept between runs
	hist   *histories     // records, kept between runs
	// payloadTypes are each agent's payload types, their schemas compiled.
	payloadTypes map[string][]payloadType
	// approvals are each agent's approval policy, compiled.
	approvals map[string]*tool.Approvals
	// expiries are the timers of the runs awaiting approval, by run id: all this process keeps of them.
	expiries map[string]*time.Timer
	// interrupters serializes the sends that interrupt a session's run.
	interrupters keyedMutex

	leases *leases // nil: the service is alone on its store
	remote wakeups // the readers here of runs other instances run
}

// New returns a service. Close it to cancel and wait for its runs.
func New(opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.FlushInterval == 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.InterruptWait <= 0 {
		opts.InterruptWait = 30 * time.Second
	}
	opts.Limits.defaults()
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ApprovalTimeout <= 0 {
		opts.ApprovalTimeout = DefaultApprovalTimeout
	}
	agents := map[string]Agent{"default": {}}
	payloadTypes := map[string][]payloadType{}
	approvals := map[string]*tool.Approvals{}
	for name, a := range opts.Agents {
		agents[name] = a
		types, err := compilePayloadTypes(a.Payloads)
		if err != nil {
			// Config.Validate checked them (CheckPayloadTypes): an agent built elsewhere loses its types.
			opts.Logger.Error("agent payload types left out", "agent", name, "err", err)
		}
		payloadTypes[name] = types
		if approvals[name], err = tool.NewApprovals(a.Approvals); err != nil {
			// Config.Validate checked them: an agent built elsewhere with bad rules asks before every call.
			opts.Logger.Error("agent approval rules left out", "agent", name, "err", err)
			approvals[name], _ = tool.NewApprovals([]tool.ApprovalRule{{Tools: []string{"*"}, Decision: tool.Ask}})
		}
	}
	opts.Agents = agents
	s := &Service{opts: opts, log: opts.Logger, runs: map[string]*Run{}, inSession: map[string][]*Run{},
		est: newEstimator(), hist: newHistories(int64(max(opts.Limits.HistoryBytes, 0))), payloadTypes: payloadTypes,
		approvals: approvals, expiries: map[string]*time.Timer{}}
	s.queues = newSessionQueues(s.startQueued, s.finishQueued, opts.Logger)
	if opts.FlushInterval > 0 {
		s.events = newEventLog(opts.Store, opts.FlushInterval, opts.Logger)
		s.events.metrics = opts.Metrics
	}
	known := s.configuredModels()
	opts.Metrics.KnownModels(known...)
	opts.Tracing.KnownModels(known...)
	opts.Metrics.Func("chatd_runs_active", "Runs running in this process.", func() float64 { return float64(s.count(store.RunRunning)) })
	opts.Metrics.Func("chatd_runs_queued", "Runs of this process waiting for their session's running run.", func() float64 { return float64(s.count(store.RunQueued)) })
	s.base, s.cancel = context.WithCancel(context.Background())
	s.titleCtx, s.stopTitles = context.WithCancel(s.base)
	if ls := sharedStore(opts.Store); ls != nil {
		s.startLeases(ls)
	}
	return s
}

// configuredModels are the models the operator named: the default and title models, the agents'
// models, title models and fallbacks, the priced models, and those the providers' config lists. Only they
// have a label of their own in the metrics and a span name of their own; a request may name any model of
// a configured provider, and those are counted together as "other".
func (s *Service) configuredModels() []string {
	names := []string{s.opts.DefaultModel, s.opts.TitleModel}
	for _, a := range s.opts.Agents {
		names = append(names, a.Model, a.TitleModel)
		names = append(names, a.Fallbacks...)
	}
	for name := range s.opts.Prices {
		names = append(names, name)
	}
	if l, ok := s.opts.Models.(interface{ Configured() []string }); ok {
		names = append(names, l.Configured()...)
	}
	return slices.DeleteFunc(names, func(n string) bool { return n == "" || n == TitleNone })
}

// MaxModelBytes bounds the model a request names (validModel).
const MaxModelBytes = 200

// validModel reports whether a request's model is short and made of letters, digits and . _ - : / @ +
// (every provider's names are: "ollama/llama3.1:8b", "openrouter/anthropic/claude-3.5-sonnet").
func validModel(name string) bool {
	if len(name) > MaxModelBytes {
		return false
	}
	for _, c := range []byte(name) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', strings.IndexByte("._-:/@+", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// Request is one user message for a session. Its JSON is how a queued run keeps it until it starts.
type Request struct {
	SessionID     string             `json:"session_id,omitempty"`
	Message       string             `json:"message"`
	Attachments   []store.Attachment `json:"attachments,omitempty"`
	Model         string             `json:"model,omitempty"`
	Agent         string             `json:"agent,omitempty"`
	Temperature   *float64           `json:"temperature,omitempty"`
	MaxTokens     int                `json:"max_tokens,omitempty"`
	SelectedTools []string           `json:"selected_tools,omitempty"` // nil: every tool the agent allows
	MaxIterations int                `json:"max_iterations,omitempty"`
	Context       map[string]any     `json:"context,omitempty"`
	// Regenerate asks for the session's last answer again, instead of sending a message: the answer to
	// the last user message is retracted (store.Record.Retracts) and a new run answers that message.
	Regenerate bool `json:"regenerate,omitempty"`
	// ReplacesRun, for a regeneration, is the run whose answer the caller sees as the last one (the UI's
	// message id): when that run did not answer the session's last user message, the regeneration is
	// refused rather than replacing an answer the caller has not seen.
	ReplacesRun string `json:"-"`
	// Action, instead of a message, runs a suggested action whose handler is the server: the tool it
	// names, in the session (SessionID), with its data as arguments (see planAction).
	Action *Action `json:"action,omitempty"`
	// CreateSession starts a session under SessionID when the user has none by that id (a chat id the
	// client made, as the AI SDK's useChat does), with the run, once the request is checked.
	CreateSession bool `json:"-"`
}

// What a send does when its session already has a running run.
const (
	OnActiveReject    = "reject"    // fail with ErrBusy (the default)
	OnActiveInterrupt = "interrupt" // cancel the running run, then start
	OnActiveEnqueue   = "enqueue"   // start when the running run (and those queued before) ended
)

// StartOptions are how a send starts, besides what it asks.
type StartOptions struct {
	OnActiveRun string // OnActiveReject when empty
	// IdempotencyKey, when set, makes a retried send return the run the first one started.
	IdempotencyKey string
	// Account is what the sender may use; the zero value limits nothing.
	Account Account
}

// Account is what a send may use beyond its user's conversations: the API key it came with, the agents
// that key allows, and the limits the run is created under.
type Account struct {
	KeyID string // stored with the run and its usage
	// Agent reports whether the sender may use an agent; nil: every agent.
	Agent func(name string) bool
	// Quota is checked when the run is stored, in the same transaction (a refusal is a
	// *store.LimitError); its token and spend limits are checked again after each model call, and a
	// run past one ends with that limit's code once the call is stored.
	Quota []store.Limit
}

// Started is the run a send started — or, for a retried send, the one it started before.
type Started struct {
	RunID     string
	SessionID string
	Status    string // queued or running; for a retried send, the run's status now
	// Replayed reports a retried send: the run is the one the first send started.
	Replayed bool
}

// Limits on a request's content that are not settings.
const (
	maxTitleRunes      = 60
	maxIterationsLimit = 50
)

// imageTypes are the attachment types models take, each with the bytes its files start with.
var imageTypes = map[string]func([]byte) bool{
	"image/png":  func(b []byte) bool { return bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) },
	"image/jpeg": func(b []byte) bool { return bytes.HasPrefix(b, []byte{0xff, 0xd8, 0xff}) },
	"image/gif": func(b []byte) bool {
		return bytes.HasPrefix(b, []byte("GIF87a")) || bytes.HasPrefix(b, []byte("GIF89a"))
	},
	"image/webp": func(b []byte) bool {
		return len(b) >= 12 && bytes.Equal(b[:4], []byte("RIFF")) && bytes.Equal(b[8:12], []byte("WEBP"))
	},
}

func (r *Request) validate(lim *Limits) error {
	if r.Regenerate && r.Action != nil {
		return invalid("invalid_action", "a request either regenerates the last answer or runs an action, not both")
	}
	if r.Regenerate {
		if r.Message != "" || len(r.Attachments) > 0 {
			return invalid("invalid_regenerate", "a regeneration answers the last user message again: send it without a message or attachments")
		}
		if r.SessionID == "" {
			return invalid("missing_session", "a regeneration needs the session_id of the conversation to answer again")
		}
	} else if r.Action != nil {
		if r.Message != "" || len(r.Attachments) > 0 || r.SessionID == "" {
			return invalid("invalid_action", "an action runs in a session (session_id) without a message or attachments")
		}
	} else if strings.TrimSpace(r.Message) == "" && len(r.Attachments) == 0 {
		return invalid("missing_message", "the request has no message: send {\"message\": \"…\"}")
	}
	if len(r.Message) > lim.MessageBytes {
		return invalid("message_too_long", "the message is %d bytes; the limit is %d", len(r.Message), lim.MessageBytes)
	}
	if !utf8.ValidString(r.Message) {
		return invalid("invalid_message", "the message is not valid UTF-8")
	}
	if len(r.Attachments) > lim.Attachments {
		return invalid("too_many_attachments", "%d attachments; the limit is %d", len(r.Attachments), lim.Attachments)
	}
	for i, a := range r.Attachments {
		looksLike, ok := imageTypes[a.MediaType]
		switch {
		case !ok:
			return invalid("invalid_attachment", "attachment %d has media type %q; supported: image/png, image/jpeg, image/gif, image/webp", i, a.MediaType)
		case len(a.Data) == 0:
			return invalid("invalid_attachment", "attachment %d has no data", i)
		case len(a.Data) > lim.AttachmentBytes:
			return invalid("attachment_too_large", "attachment %d is %d bytes; the limit is %d", i, len(a.Data), lim.AttachmentBytes)
		case !looksLike(a.Data):
			return invalid("invalid_attachment", "attachment %d is declared %s, but its bytes are not a %s file", i, a.MediaType, strings.TrimPrefix(a.MediaType, "image/"))
		}
	}
	if len(r.Model) > MaxModelBytes {
		return invalid("invalid_model", "the model name is %d bytes; the limit is %d", len(r.Model), MaxModelBytes)
	}
	if !validModel(r.Model) {
		return invalid("invalid_model", "a model is named provider/model with letters, digits and . _ - : / @ + only, for example openai/gpt-4o-mini")
	}
	if r.MaxIterations < 0 || r.MaxIterations > maxIterationsLimit {
		return invalid("invalid_max_iterations", "max_iterations must be between 1 and %d", maxIterationsLimit)
	}
	if r.MaxTokens < 0 {
		return invalid("invalid_max_tokens", "max_tokens must be positive")
	}
	if t := r.Temperature; t != nil && (*t < 0 || *t > 2) {
		return invalid("invalid_temperature", "temperature must be between 0 and 2")
	}
	return nil
}

func newID() string { return uuid.Must(uuid.NewV7()).String() }
