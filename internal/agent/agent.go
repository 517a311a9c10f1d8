// Package agent runs the model ⇄ tools loop of one run: it streams each model call, emits every step to a
// Sink as it happens, runs tool calls in parallel (read-only ones while the model still streams),
// continues answers cut by the token limit, and stops at an answer without tool calls or at the iteration
// cap. It owns no storage: a Recorder stores each turn and each tool result, the loop waits for it, and
// the Context builds every model call's conversation from what was stored.
//
// It imports llm and the standard library; tools are reached through the Tools interface declared here.
package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"chatd/internal/llm"
)

// Tools is what the loop needs of the tools offered to the model.
type Tools interface {
	// ReadOnly reports whether the named tool may start while the model is still streaming.
	ReadOnly(name string) bool
	// Call runs one call. It never panics and always returns; a failure is a result with Success false.
	Call(ctx context.Context, call llm.ToolCall) ToolResult
}

// Approver is an optional capability of Tools: it names the calls that wait for a person's decision
// before they run. The loop runs the other calls of the turn, stores their results, and ends the run
// awaiting approval (Result.Waiting), holding nothing: whoever decides resumes it as a new Run on the
// stored history.
type Approver interface {
	// NeedsApproval reports whether call waits for a person, and why (for the person).
	NeedsApproval(call llm.ToolCall) (reason string, ask bool)
}

// Waiting is a call of the run's last turn that waits for a person's decision; it has no result yet.
type Waiting struct {
	Call   llm.ToolCall
	Reason string
}

// ToolResult is the outcome of one tool call.
type ToolResult struct {
	Arguments json.RawMessage // the arguments as run (repaired); nil when the call did not run
	Content   string          // text for the model
	Payload   json.RawMessage // structured data for the UI
	// Attachments are binary content the tool returned (images: Kind PartImage), kept on the tool record.
	Attachments []llm.Part
	Success     bool
	Duration    time.Duration
}

// Turn is one assistant turn: what the model said, thought and asked to call.
type Turn struct {
	Text      string
	Reasoning string
	// Parts are the turn's text and reasoning parts in the order they streamed, with the signatures
	// and item ids the provider needs back on later turns; Text and Reasoning are their texts joined.
	Parts []llm.Part
	// ToolCalls have ids unique within the turn and arguments that are JSON objects.
	ToolCalls    []llm.ToolCall
	FinishReason string // stop, tool_calls, length, content_filter, cancelled, error
	Usage        llm.Usage
	Model        string // the provider's model name
	// Origin is the model that answered (the primary or a fallback) as llm.Origin: what the turn's
	// messages carry, and what its replay is valid for.
	Origin string
}

// HasReplay reports whether the turn carries something only its provider can read back: a
// signature, an item id, redacted reasoning.
func (t *Turn) HasReplay() bool {
	for i := range t.Parts {
		if t.Parts[i].HasReplay() {
			return true
		}
	}
	for _, c := range t.ToolCalls {
		if c.Signature != "" {
			return true
		}
	}
	return false
}

// Status is how a run ended.
type Status string

// Run statuses.
const (
	StatusCompleted     Status = "completed"
	StatusFailed        Status = "failed"
	StatusCancelled     Status = "cancelled"
	StatusMaxIterations Status = "max_iterations"
	// StatusAwaitingApproval: calls of the last stored turn wait for a person (Result.Waiting); every
	// other call of the turn has its result stored.
	StatusAwaitingApproval Status = "awaiting_approval"
)

// Model is one model a run may call.
type Model struct {
	Provider llm.Provider
	Name     string // the provider's model name
	// ProviderName is the provider's configured name (the "anthropic" of "anthropic/claude-…").
	ProviderName string
}

// Config is one run's settings. Models and Context are required; the zero value of each limit means its
// default.
type Config struct {
	// Models are the models a model call may use, in order: the first is the primary, and each next one
	// is tried when a call fails before any output, once the retries of the model before it are spent.
	Models      []Model
	System      string
	ToolSpecs   []llm.ToolSpec // the tools the model sees; nil: none
	Tools       Tools
	Temperature *float64
	MaxTokens   int
	Reasoning   *llm.Reasoning
	// Cache marks the system prompt and the tool declarations as a cached prefix (Anthropic's
	// cache_control); the Context marks the conversation's own breakpoints.
	Cache bool

	MaxIterations    int           // tool rounds before the last turn without tools; default 10
	MaxContinuations int           // automatic continuations of an answer cut by length; default 3, <0 none
	MaxToolCalls     int           // calls run per turn; default 32 (more get failed results)
	Retries          int           // retries of a model call that failed before any output; default 2, <0 none
	RetryBase        time.Duration // first backoff; default 1s, doubled each time
	MaxRetryWait     time.Duration // a longer retry-after fails at once; default 30s
	// RetryWindow bounds the time spent retrying one model: no retry starts after it (default 2m).
	RetryWindow time.Duration
	// Limits on what the models stream; zero values are the defaults.
	Limits Limits
	// Context builds the conversation of every model call from what the Recorder stored: it holds the
	// history, the user's new message last.
	Context Context
	Logger  *slog.Logger
	// Sending, when set, is told of every model call before it is sent — each retry and fallback too,
	// so that its calls are those the upstream received: the model and the request. It must not change
	// req but for setting req.Encoded, to be handed the body the provider sends; it may keep req (the
	// loop never changes a request it has sent). Every attempt of a call is sent with the same req, so
	// an Encoded it set for one attempt stays for the next unless it sets it again.
	Sending func(m Model, req *llm.Request)
	// Calls, when set, is told of every model call attempt as it starts and ends: metrics, traces.
	Calls Calls
}

// Calls observes model calls. CallStart is called before each attempt — a retry of the one before
// (retry), or the first on a fallback model (fallback) — with the request as it is sent; it returns the
// context the call runs in (one carrying a span, which the adapters pass to the provider) and what is
// called, once, when the attempt has ended.
type Calls interface {
	CallStart(ctx context.Context, m Model, req *llm.Request, retry, fallback bool) (context.Context, func(CallEnd))
}

// CallEnd is how a model call attempt ended: its usage and finish reason, and its error (nil when it
// succeeded).
type CallEnd struct {
	Usage        llm.Usage
	FinishReason llm.FinishReason
	Err          error
}

// Context builds the conversation sent to the model.
type Context interface {
	// Messages returns the conversation for the next model call; the loop calls it before every model
	// call, once the previous turn and its results are stored. compact asks for the older turns to be
	// summarized first: the provider answered that the request does not fit its context window.
	Messages(ctx context.Context, compact bool) ([]llm.Message, error)
}

// Limits bound what a run's models stream, so that a broken or hostile upstream costs a bounded amount
// of memory, storage and time. The zero value of each is its default.
type Limits struct {
	// OutputBytes bounds the text, reasoning and tool-call arguments of one model call (default 4 MiB);
	// RunOutputBytes the same over the run's calls (default 16 MiB). A model call past either fails the
	// run (LimitError output_limit), keeping what it said up to the limit.
	OutputBytes    int
	RunOutputBytes int
	// ArgumentBytes bounds one tool call's arguments (default 256 KiB), TurnArgumentBytes the arguments
	// of one turn's calls together (default 1 MiB). A call past either is not run: its result says
	// why, and the model goes on.
	ArgumentBytes     int
	TurnArgumentBytes int
	// IdleTime bounds the wait for the next event of a model stream — text, reasoning, a call, usage —
	// however busy the connection is with keep-alives (default 5m). A model call that goes quiet fails
	// as a transport failure: retried before any output, failing the run after.
	IdleTime time.Duration
}

// Defaults of Limits.
const (
	DefaultOutputBytes       = 4 << 20
	DefaultRunOutputBytes    = 16 << 20
	DefaultArgumentBytes     = 256 << 10
	DefaultTurnArgumentBytes = 1 << 20
	DefaultIdleTime          = 5 * time.Minute
)

func (l *Limits) defaults() {
	l.OutputBytes = cmp.Or(max(l.OutputBytes, 0), DefaultOutputBytes)
	l.RunOutputBytes = cmp.Or(max(l.RunOutputBytes, 0), DefaultRunOutputBytes)
	l.ArgumentBytes = cmp.Or(max(l.ArgumentBytes, 0), DefaultArgumentBytes)
	l.TurnArgumentBytes = cmp.Or(max(l.TurnArgumentBytes, 0), DefaultTurnArgumentBytes)
	l.IdleTime = cmp.Or(max(l.IdleTime, 0), DefaultIdleTime)
}

// LimitError is a limit a run reached. The run fails with it and keeps what it said; Code names the
// limit for clients (output_limit, run_timeout, event_limit …).
type LimitError struct {
	Code    string
	Message string
}

func (e *LimitError) Error() string { return e.Message }

// DefaultMaxIterations is the tool rounds a run has when its agent and request set none.
const DefaultMaxIterations = 10

func (c *Config) defaults() {
	c.Limits.defaults()
	if c.MaxIterations <= 0 {
		c.MaxIterations = DefaultMaxIterations
	}
	if c.MaxContinuations == 0 {
		c.MaxContinuations = 3
	}
	if c.MaxToolCalls <= 0 {
		c.MaxToolCalls = 32
	}
	if c.Retries == 0 {
		c.Retries = 2
	}
	if c.RetryBase <= 0 {
		c.RetryBase = time.Second
	}
	if c.MaxRetryWait <= 0 {
		c.MaxRetryWait = 30 * time.Second
	}
	if c.RetryWindow <= 0 {
		c.RetryWindow = 2 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Result is how a run ended.
type Result struct {
	Status       Status
	FinishReason string
	Usage        llm.Usage // the sum over every model call
	// Final is the last stored turn; nil when the run stored none.
	Final *Turn
	// Err is the failure of a failed run.
	Err error
	// Waiting are the calls a run awaiting approval waits on, in call order.
	Waiting []Waiting
}

// Run runs the loop on the conversation cfg.Context builds until the model answers without tool calls,
// the iteration cap, a failure, or ctx is cancelled. It emits every step to sink (nil: none) and stores
// every turn and tool result with rec. Cancelling ctx keeps the partial answer: rec still gets the turn
// and a result for every call, on a context that is not cancelled.
func Run(ctx context.Context, cfg Config, rec Recorder, sink Sink) Result {
	switch {
	case len(cfg.Models) == 0:
		return Result{Status: StatusFailed, FinishReason: "error", Err: errors.New("agent: no model to call")}
	case cfg.Context == nil || rec == nil:
		return Result{Status: StatusFailed, FinishReason: "error", Err: errors.New("agent: a run needs a Context and a Recorder")}
	}
	if sink == nil {
		sink = discard{}
	}
	cfg.defaults()
	r := &runner{cfg: cfg, rec: rec, sink: sink}
	return r.run(ctx)
}

type runner struct {
	cfg  Config
	rec  Recorder
	sink Sink
	// messages is the conversation of the next model call, as the Context last built it.
	messages []llm.Message
	usage    llm.Usage
	final    *Turn
	output   int // bytes the run's model calls streamed: text, reasoning, arguments
	// The deltas sent to the sink, reused from one to the next: boxing a new one in an Event for each
	// token would allocate on the per-token path.
	text      TextDelta
	reasoning ReasoningDelta
	callDelta ToolCallDelta
}

func (r *runner) run(ctx context.Context) Result {
	for round := 1; ; round++ {
		last := round > r.cfg.MaxIterations
		t, err := r.runPhaseModel(ctx, last)
		if t == nil {
			return r.end(ctx, "", err)
		}
		r.final = &t.Turn
		reason := notRunReason(ctx, err, last, r.cfg.MaxIterations)
		if err := r.runPhaseTools(ctx, t, reason); err != nil {
			return r.end(ctx, "", err)
		}
		switch {
		case err != nil || ctx.Err() != nil:
			return r.end(ctx, t.FinishReason, err)
		case len(t.waiting) > 0:
			res := r.end(ctx, t.FinishReason, nil)
			res.Status, res.Waiting = StatusAwaitingApproval, t.waiting
			return res
		case len(t.ToolCalls) == 0 || last:
			res := r.end(ctx, t.FinishReason, nil)
			if last {
				res.Status = StatusMaxIterations
			}
			return res
		}
	}
}

// end builds the result of a run that stops now. A run whose context was cancelled by a limit (its
// cause a *LimitError) fails with it; any other cancel is a cancel.
func (r *runner) end(ctx context.Context, finish string, err error) Result {
	res := Result{Status: StatusCompleted, FinishReason: finish, Usage: r.usage, Final: r.final, Err: err}
	switch {
	case limitCause(ctx) != nil:
		res.Status, res.FinishReason, res.Err = StatusFailed, "error", limitCause(ctx)
	case ctx.Err() != nil:
		res.Status, res.FinishReason, res.Err = StatusCancelled, "cancelled", nil
	case err != nil:
		res.Status = StatusFailed
		if res.FinishReason == "" {
			res.FinishReason = "error"
		}
	}
	return res
}

// limitCause returns the limit that cancelled ctx, or nil.
func limitCause(ctx context.Context) *LimitError {
	if ctx.Err() == nil {
		return nil
	}
	e, _ := errors.AsType[*LimitError](context.Cause(ctx))
	return e
}

// notRunReason is the content of the failed result of a call that will not run, or "" when calls run.
func notRunReason(ctx context.Context, streamErr error, last bool, max int) string {
	switch {
	case limitCause(ctx) != nil:
		return "Not run: " + limitCause(ctx).Message
	case ctx.Err() != nil:
		return "The run was cancelled before this call ran."
	case streamErr != nil:
		return "The model's response broke off before this call could run."
	case last:
		return "Not run: the run reached its limit of " + strconv.Itoa(max) + " tool rounds, so the model had to answer without tools."
	}
	return ""
}
