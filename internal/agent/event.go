package agent

import (
	"context"

	"chatd/internal/llm"
)

// Sink receives the events of a run as they happen, to show them: nothing the loop does waits on what a
// sink does with them, and a sink cannot fail the run. Emit is called from the goroutine that called Run,
// except for ToolComplete, which comes from the call's own goroutine the moment the call ends (so that a
// client sees a finished tool at once, also while the model still streams): Emit must be safe for
// concurrent use, and should return quickly. The deltas (*TextDelta, *ReasoningDelta, *ToolCallDelta)
// are reused for the next token: a sink must not keep one after Emit returns.
type Sink interface {
	Emit(Event)
}

// Event is one step of a run: a StatusMessage, *TextDelta, *ReasoningDelta, *ToolCallDelta, ToolStart,
// ToolComplete, ApprovalRequired or Usage.
type Event interface {
	agentEvent()
}

// StatusMessage says what the run is doing, for a person: thinking, retrying, running a tool.
type StatusMessage struct {
	Message string
}

// TextDelta is a piece of the answer's text.
type TextDelta struct {
	Text string
}

// ReasoningDelta is a piece of the model's reasoning.
type ReasoningDelta struct {
	Text string
}

// ToolCallDelta is a piece of a tool call as the model streams it: its id and name as known so far, and
// the next fragment of its arguments.
type ToolCallDelta struct {
	Index          int
	ID, Name       string
	ArgumentsDelta string
}

// ToolStart reports a call that starts running, with its arguments as a JSON object.
type ToolStart struct {
	Call llm.ToolCall
}

// ToolComplete reports a call that ended, or that will not run (its result says why). It may come
// before the turn holding the call is recorded.
type ToolComplete struct {
	Call   llm.ToolCall
	Result ToolResult
}

// ApprovalRequired reports a call of a stored turn that waits for a person's decision (Approver) instead
// of running; the run ends awaiting approval once the turn's other calls have ended.
type ApprovalRequired struct {
	Call   llm.ToolCall
	Reason string
}

// Usage reports the usage of one model call, and the model that made it.
type Usage struct {
	Model Model
	Usage llm.Usage
}

func (StatusMessage) agentEvent()    {}
func (*TextDelta) agentEvent()       {}
func (*ReasoningDelta) agentEvent()  {}
func (*ToolCallDelta) agentEvent()   {}
func (ToolStart) agentEvent()        {}
func (ToolComplete) agentEvent()     {}
func (Usage) agentEvent()            {}
func (ApprovalRequired) agentEvent() {}

// Recorder stores what a run produces. The loop waits for each write, and an error fails the run. Both
// methods are called from the goroutine that called Run, with a context that is not cancelled when the
// run is: a cancelled run still keeps its partial answer. What a recorder stores is what the Context
// builds the next model call's conversation from.
type Recorder interface {
	// RecordTurn stores a model turn once it has ended (continuations included).
	RecordTurn(ctx context.Context, t *Turn) error
	// RecordToolResult stores the result of one call of a recorded turn, as the call ends (in the
	// order the calls end). Every call of the turn gets exactly one, until a write fails.
	RecordToolResult(ctx context.Context, t *Turn, call llm.ToolCall, res ToolResult) error
}

// discard is the Sink of a run given none.
type discard struct{}

func (discard) Emit(Event) {}
