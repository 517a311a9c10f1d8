// Package chat runs one conversation turn: it checks the request, stores the user's message, builds the
// model's context from the stored records, runs the agent loop, stores every turn and tool result as it
// completes, and publishes the run's events for any number of readers.
//
// It imports agent, llm, store and tool; never a concrete provider or store, and never net/http.
package chat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"chatd/internal/llm"
	"chatd/internal/prompt"
	"chatd/internal/store"
	"chatd/internal/tool"
)

// Errors the caller caused. *Error wraps one of them with a code and a message for the client.
var (
	ErrInvalid = errors.New("invalid request")
	ErrBusy    = errors.New("session busy")
	// ErrKeyReused: an idempotency key sent again with another request.
	ErrKeyReused = errors.New("idempotency key reused")
)

// Error is a failure of the caller's request, with a stable code and a message written for a person.
type Error struct {
	Kind    error // ErrInvalid, ErrBusy, ErrKeyReused, ErrClosed or store.ErrNotFound
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
	Model string
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
	// what it costs; runs then cannot be replayed after they end.
	FlushInterval time.Duration
	// Context are the defaults of what every model call is sent.
	Context ContextOptions
	// InterruptWait bounds how long a send with on_active_run=interrupt waits for the active run to
	// end (default 30s).
	InterruptWait time.Duration
}

// Service starts and tracks runs. It is safe for concurrent use.
type Service struct {
	opts   Options
	log    *slog.Logger
	events *eventLog // nil: no durable log
	base   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // running runs

	mu      sync.Mutex
	runs    map[string]*Run   // live runs (queued or running) by id
	queues  map[string]*queue // by session id
	closing bool

	diag diagnostics // the latest request of recent runs

	calibMu sync.Mutex
	calib   map[string]*prompt.Calibration // token estimate corrections by model
	// estimates are the token estimates of sessions' records, kept between their runs.
	estimates map[string]*prompt.Estimates
}

// queue is a session's queued runs, oldest first. Its mutex serializes starting them.
type queue struct {
	mu   sync.Mutex
	runs []*Run
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
	agents := map[string]Agent{"default": {}}
	for name, a := range opts.Agents {
		agents[name] = a
	}
	opts.Agents = agents
	s := &Service{opts: opts, log: opts.Logger, runs: map[string]*Run{}, queues: map[string]*queue{},
		calib: map[string]*prompt.Calibration{}, estimates: map[string]*prompt.Estimates{}}
	if opts.FlushInterval > 0 {
		s.events = newEventLog(opts.Store, opts.FlushInterval, opts.Logger)
	}
	s.base, s.cancel = context.WithCancel(context.Background())
	return s
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
}

// Started is the run a send started — or, for a retried send, the one it started before.
type Started struct {
	RunID     string
	SessionID string
	Status    string // queued or running; for a retried send, the run's status now
	// Replayed reports a retried send: the run is the one the first send started.
	Replayed bool
}

// Limits on a request's content.
const (
	MaxMessageBytes    = 256 << 10
	MaxAttachments     = 8
	maxTitleRunes      = 60
	maxIterationsLimit = 50
)

var imageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

func (r *Request) validate() error {
	if r.Regenerate {
		if r.Message != "" || len(r.Attachments) > 0 {
			return invalid("invalid_regenerate", "a regeneration answers the last user message again: send it without a message or attachments")
		}
		if r.SessionID == "" {
			return invalid("missing_session", "a regeneration needs the session_id of the conversation to answer again")
		}
	} else if strings.TrimSpace(r.Message) == "" && len(r.Attachments) == 0 {
		return invalid("missing_message", "the request has no message: send {\"message\": \"…\"}")
	}
	if len(r.Message) > MaxMessageBytes {
		return invalid("message_too_long", "the message is %d bytes; the limit is %d", len(r.Message), MaxMessageBytes)
	}
	if !utf8.ValidString(r.Message) {
		return invalid("invalid_message", "the message is not valid UTF-8")
	}
	if len(r.Attachments) > MaxAttachments {
		return invalid("too_many_attachments", "%d attachments; the limit is %d", len(r.Attachments), MaxAttachments)
	}
	for i, a := range r.Attachments {
		if !imageTypes[a.MediaType] {
			return invalid("invalid_attachment", "attachment %d has media type %q; supported: image/png, image/jpeg, image/gif, image/webp", i, a.MediaType)
		}
		if len(a.Data) == 0 {
			return invalid("invalid_attachment", "attachment %d has no data", i)
		}
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
