package chat

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"

	"chatd/internal/store"
)

// Event is one run event: Seq is its place in the run (1, 2, 3 … without gaps), Type its name and Data
// its JSON object.
type Event struct {
	Seq  int64
	Type string
	Data []byte
}

// Run is a live run — queued or running in this process. Its events are kept in order; any number of
// readers follow them, each at its own pace, without slowing the run: appending never waits for a
// reader, nor for the disk. The event log writes them to the store in batches.
type Run struct {
	ID        string
	SessionID string
	Agent     string
	Model     string

	user string
	plan *plan // what the run executes; for a queued run, what it will
	log  *eventLog

	mu           sync.Mutex
	events       []Event
	persisted    int64 // Seq of the last event the store holds
	status       string
	ended        bool
	waiters      map[chan struct{}]struct{}
	done         chan struct{}
	outcome      Outcome
	cancel       context.CancelFunc // set while running
	cancelReason string

	// flushMu serializes the writes of this run's events: the event log's batches and the run's end,
	// which writes the rest of the log with the run's final state.
	flushMu sync.Mutex
	dirty   atomic.Bool // events wait for the event log
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

func newRun(id, user string, p *plan, log *eventLog) *Run {
	r := &Run{ID: id, Agent: p.agentNm, Model: p.model, user: user, plan: p, log: log,
		status: store.RunRunning, waiters: map[chan struct{}]struct{}{}, done: make(chan struct{})}
	if p.session != nil {
		r.SessionID = p.session.ID
	}
	return r
}

// emit appends an event and wakes the readers: the per-token path, so no I/O and one lock.
func (r *Run) emit(typ string, data []byte) {
	r.mu.Lock()
	if r.ended {
		// A straggler (a tool's late progress report) must not follow done.
		r.mu.Unlock()
		return
	}
	r.events = append(r.events, Event{Seq: int64(len(r.events)) + 1, Type: typ, Data: data})
	r.wake()
	r.mu.Unlock()
	if r.log != nil && r.dirty.CompareAndSwap(false, true) {
		r.log.mark(r)
	}
}

// end appends the run's last events, already stored, records the outcome and wakes the readers: a
// reader that saw the last event before the run ended must learn that nothing more will come. After
// end no event is appended.
func (r *Run) end(last []Event, stored bool, o Outcome) {
	r.mu.Lock()
	r.events = append(r.events, last...)
	if stored {
		r.persisted = int64(len(r.events))
	}
	r.ended, r.outcome, r.status = true, o, o.Status
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

// lastSeq is the Seq of the run's last event.
func (r *Run) lastSeq() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return int64(len(r.events))
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

// Status is the run's status: queued, running, or how it ended.
func (r *Run) Status() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

// setRunning marks a queued run running, with the function that cancels it.
func (r *Run) setRunning(cancel context.CancelFunc) {
	r.mu.Lock()
	r.status, r.cancel = store.RunRunning, cancel
	reason := r.cancelReason
	r.mu.Unlock()
	if reason != "" { // cancelled while it was starting
		cancel()
	}
}

// requestCancel cancels a running run with reason. It reports false when the run is not running (queued
// or ended); a queued run is cancelled by its service.
func (r *Run) requestCancel(reason string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended || r.status != store.RunRunning {
		return false
	}
	if r.cancelReason == "" {
		r.cancelReason = reason
	}
	if r.cancel != nil {
		r.cancel()
	}
	return true
}

func (r *Run) reason() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cancelReason
}
