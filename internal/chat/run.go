package chat

import (
	"encoding/json"
	"sync"

	"chatd/internal/store"
)

// Event is one run event: Seq is its place in the run (1, 2, 3 … without gaps), Type its name and Data
// its JSON object.
type Event struct {
	Seq  int64
	Type string
	Data []byte
}

// Run is a run in progress or ended. Its events are kept in order; any number of readers can follow them,
// each at its own pace, without slowing the run: appending never waits for a reader.
type Run struct {
	ID        string
	SessionID string
	Agent     string
	Model     string

	mu      sync.Mutex
	events  []Event
	ended   bool
	waiters map[chan struct{}]struct{}
	done    chan struct{}
	outcome Outcome
}

// Outcome is how a run ended, for the batch endpoint.
type Outcome struct {
	Status       string
	FinishReason string
	Message      *store.Record // the last assistant record; nil when the run stored none
	ToolHistory  []ToolHistoryEntry
	Usage        store.Usage
	Error        *ErrorInfo // the failure of a failed run
}

// ToolHistoryEntry summarizes one tool call of a run.
type ToolHistoryEntry struct {
	ToolCallID string          `json:"tool_call_id"`
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
	Success    bool            `json:"success"`
	Content    string          `json:"content"`
	DurationMS int64           `json:"duration_ms"`
	Payload    json.RawMessage `json:"payload,omitempty"`
}

// ErrorInfo is the error event's data.
type ErrorInfo struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

func newRun(id, sessionID, agent, model string) *Run {
	return &Run{ID: id, SessionID: sessionID, Agent: agent, Model: model,
		waiters: map[chan struct{}]struct{}{}, done: make(chan struct{})}
}

// emit appends an event and wakes the readers.
func (r *Run) emit(typ string, data []byte) {
	r.mu.Lock()
	r.events = append(r.events, Event{Seq: int64(len(r.events)) + 1, Type: typ, Data: data})
	r.wake()
	r.mu.Unlock()
}

// end records the outcome and wakes the readers: a reader that saw the last event before the run ended
// must learn that nothing more will come. After end no event is appended.
func (r *Run) end(o Outcome) {
	r.mu.Lock()
	r.ended, r.outcome = true, o
	r.wake()
	r.mu.Unlock()
	close(r.done)
}

// wake signals every watcher; r.mu is held.
func (r *Run) wake() {
	for c := range r.waiters {
		select {
		case c <- struct{}{}:
		default: // already signalled
		}
	}
}

// Events returns the events after seq after, and whether the run has ended (then no more will come).
// The returned slice is shared: do not modify it.
func (r *Run) Events(after int64) ([]Event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if after < 0 {
		after = 0
	}
	if after >= int64(len(r.events)) {
		return nil, r.ended
	}
	return r.events[after:len(r.events):len(r.events)], r.ended
}

// Watch returns a channel that receives a signal after new events are appended (signals coalesce), and
// a function to stop watching.
func (r *Run) Watch() (<-chan struct{}, func()) {
	c := make(chan struct{}, 1)
	r.mu.Lock()
	r.waiters[c] = struct{}{}
	r.mu.Unlock()
	return c, func() {
		r.mu.Lock()
		delete(r.waiters, c)
		r.mu.Unlock()
	}
}

// Done is closed when the run has ended.
func (r *Run) Done() <-chan struct{} { return r.done }

// Outcome returns how the run ended; valid after Done is closed.
func (r *Run) Outcome() Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outcome
}
