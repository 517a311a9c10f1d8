package chat

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"

	"chatd/internal/agent"
	"chatd/internal/runevent"
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
// reader, nor for the disk. The event log writes them to the store in batches, and then drops them
// from memory: a stream held open for long keeps only what the store does not have yet, and a reader
// behind the events kept reads the rest from the store (Follower.Read).
//
// A reader sees an event only once its Seq is reserved in the store (store.Run.ReservedSeq): the run is
// created with reserveAhead Seqs reserved, and the event log raises the reservation, in the batches it
// writes anyway, well before the run reaches it. A crash loses at most the events up to the
// reservation, so recovery numbers its events after it, and an id a client saw never names another
// event.
type Run struct {
	ID        string
	SessionID string
	Agent     string
	Model     string

	user string
	plan *plan // what the run executes; for a queued run, what it will
	log  *eventLog
	// calls are the model calls the run sent that it has not stored yet, for its diagnostics.
	calls *callLog

	mu     sync.Mutex
	events []Event // in Seq order; Seqs run without gaps, but for one after a restart (requeue)
	// trimmed is the Seq of the last event dropped from events once stored (0: none): a reader after
	// an earlier Seq reads the store up to it.
	trimmed int64
	next    int64 // the Seq of the next event
	// reserved is the highest Seq a reader may see: the store's ReservedSeq for the run (MaxInt64 without
	// a durable log).
	reserved  int64
	persisted int64 // Seq of the last event the store holds
	// held says the run started before its commit (gate.go) and the commit is not known yet: its
	// events wait, unseen and unwritten, after the Seqs its first two events will take (see hold).
	held      bool
	status    string
	ended     bool
	finishing bool // the agent loop has returned: the run ends as it ended, a cancel comes too late
	// waiters are the readers to signal, each with the Seq of the last event it was given (MaxInt64:
	// one that does not say): the events after it stay in memory for it.
	waiters      map[chan struct{}]int64
	done         chan struct{}
	outcome      Outcome
	ctx          context.Context         // the run's, set while running
	cancel       context.CancelCauseFunc // set while running
	cancelReason string
	// maxEvents bounds the run's events (0: no bound); overLimit is set once it is reached, and the
	// run cancelled with event_limit.
	maxEvents int64
	overLimit bool
	// questions are the questions from MCP servers the run's calls wait on (elicit.go).
	questions questionBoard

	// flushMu serializes the writes of this run's events: the event log's batches and the run's end,
	// which writes the rest of the log with the run's final state.
	flushMu sync.Mutex
	dirty   atomic.Bool // events wait for the event log
}

// Outcome is how a run ended, for the batch endpoint.
type Outcome struct {
	Status       string
	FinishReason string
	Message      *runevent.Record // the last assistant record; nil when the run stored none
	ToolHistory  []runevent.ToolHistory
	Usage        store.Usage
	Error        *runevent.Error // the failure of a failed run
}

// reserveAhead is how many Seqs past its last event a run keeps reserved, at least: a new run starts
// with this many, and the event log raises the reservation when a run's events come within half of it.
const reserveAhead = 256

func newRun(id, user string, p *plan, log *eventLog) *Run {
	r := &Run{ID: id, Agent: p.agentNm, Model: p.model, user: user, plan: p, log: log, next: 1,
		reserved: math.MaxInt64, status: store.RunRunning, waiters: map[chan struct{}]int64{}, done: make(chan struct{})}
	if log != nil {
		r.reserved = 0 // until the store says more
	}
	r.SessionID = p.sessionID()
	return r
}

// emit appends an event and wakes the readers: the per-token path, so no I/O and one lock. An event past
// the reservation waits, unseen, for the event log to raise it, and asks it to hurry.
func (r *Run) emit(typ string, data []byte) {
	r.mu.Lock()
	if r.ended {
		// A straggler (a tool's late progress report) must not follow done.
		r.mu.Unlock()
		return
	}
	if r.maxEvents > 0 && r.next > r.maxEvents {
		stop := r.limit()
		if droppable(typ) {
			// Past the limit only the events that structure the run are kept, while it stops.
			r.mu.Unlock()
			stop()
			return
		}
		defer stop()
	}
	seq := r.next
	r.next++
	r.events = append(r.events, Event{Seq: seq, Type: typ, Data: data})
	short := seq+reserveAhead/4 > r.reserved
	if seq <= r.reserved {
		r.wake()
	}
	held := r.held
	r.mu.Unlock()
	if r.log != nil && !held {
		if r.dirty.CompareAndSwap(false, true) {
			r.log.mark(r)
		}
		if short {
			r.log.hurry()
		}
	}
}

// firstEvents is how many events begin emits for a run before the loop's first: run_start and the
// user's record.
const firstEvents = 2

// hold readies a run that starts before its commit: the loop's events, which may come before the
// commit is known, are kept after the Seqs of the first events begin emits once it is (open), and
// neither a reader nor the event log sees them until then. The loop need not wait at the gate for
// the model's first token: the token is there when the commit ends, and goes to the client with the
// run's first events, in one write.
func (r *Run) hold() {
	r.mu.Lock()
	r.held, r.next, r.reserved = true, firstEvents+1, 0
	r.mu.Unlock()
}

// open ends the hold of a run whose commit succeeded: its first events (Seqs 1 and 2) go before those
// the loop emitted meanwhile, readers see them all up to reserved (MaxInt64 without a durable log),
// and the event log writes them.
func (r *Run) open(runStart, record []byte, reserved int64) {
	r.mu.Lock()
	first := [firstEvents]Event{{Seq: 1, Type: runevent.TypeRunStart, Data: runStart}, {Seq: 2, Type: runevent.TypeRecord, Data: record}}
	r.events = append(first[:], r.events...)
	r.held = false
	if r.log == nil {
		reserved = math.MaxInt64
	}
	r.reserve(reserved)
	r.mu.Unlock()
	if r.log != nil && r.dirty.CompareAndSwap(false, true) {
		r.log.mark(r)
	}
}

// errEventLimit is the failure of a run that reached its event limit.
func errEventLimit(n int64) error {
	return &agent.LimitError{Code: "event_limit", Message: fmt.Sprintf("the run passed chatd's limit of %d events; what it said is kept", n)}
}

// limit marks the run over its event limit and returns what stops it (once; then a no-op); r.mu is
// held, so the caller stops it after unlocking.
func (r *Run) limit() func() {
	if r.overLimit || r.cancel == nil {
		return func() {}
	}
	r.overLimit = true
	cancel, n := r.cancel, r.maxEvents
	return func() { cancel(errEventLimit(n)) }
}

// droppable reports the events a run past its event limit no longer keeps: the deltas and notes,
// which may come in any number, unlike the records, calls and results of its turns.
func droppable(typ string) bool {
	switch typ {
	case runevent.TypeTextDelta, runevent.TypeReasoningDelta, runevent.TypeToolCallDelta, runevent.TypeToolProgress, runevent.TypeStatus:
		return true
	}
	return false
}

// reserve raises the Seq up to which readers see events, and wakes them when it grew; r.mu is held.
func (r *Run) reserve(seq int64) {
	if seq > r.reserved {
		r.reserved = seq
		r.wake()
	}
}

// granted raises the reservation to seq once the store holds it.
func (r *Run) granted(seq int64) {
	r.mu.Lock()
	r.reserve(seq)
	r.mu.Unlock()
}

// reservation is what a run about to start asks the store to reserve: reserveAhead Seqs past its last
// event; 0 without a durable log, which reserves nothing.
func (r *Run) reservation() int64 {
	if r.log == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next - 1 + reserveAhead
}

// index returns the position of the first event after Seq after; r.mu is held.
func (r *Run) index(after int64) int {
	n := len(r.events)
	if n == 0 {
		return 0
	}
	if first := r.events[0].Seq; r.events[n-1].Seq-first == int64(n-1) { // no gap: event i has Seq first+i
		return int(min(max(after-first+1, 0), int64(n)))
	}
	return sort.Search(n, func(i int) bool { return r.events[i].Seq > after })
}

// trim drops from memory the events the store holds (up to persisted) and every reader was given;
// r.mu is held. Readers keep the slices they were given: those of the dropped events' array stay
// theirs.
func (r *Run) trim() {
	upTo := r.persisted
	for _, seen := range r.waiters {
		upTo = min(upTo, seen)
	}
	k := r.index(upTo)
	if k == 0 || r.ended { // an ended run keeps its last events for the readers that resume at its end
		return
	}
	r.trimmed = r.events[k-1].Seq
	n := len(r.events) - k
	if n == 0 { // an idle stream keeps nothing
		r.events = nil
		return
	}
	// A run still streaming gets room for as many events as were dropped, what it emits in about one
	// batch's interval: a slice that grew again from nothing at every batch cost more in copies.
	rest := make([]Event, n, n+k)
	copy(rest, r.events[k:])
	r.events = rest
}

// visible returns the number of events a reader may see; r.mu is held.
func (r *Run) visible() int {
	if r.reserved >= r.next-1 {
		return len(r.events)
	}
	return r.index(r.reserved)
}

// end appends the run's last events, already stored, records the outcome and wakes the readers: a
// reader that saw the last event before the run ended must learn that nothing more will come. After
// end no event is appended.
func (r *Run) end(last []Event, stored bool, o Outcome) {
	r.mu.Lock()
	r.events = append(r.events, last...)
	if n := len(last); n > 0 {
		r.next = last[n-1].Seq + 1
	}
	if stored {
		r.persisted = r.next - 1
		r.reserved = max(r.reserved, r.persisted) // all of it is in the store
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
// The returned slice is shared: do not modify it. When the events after seq after begin with some the
// run dropped once they were stored, it returns none and inStore: the reader reads those from the store.
func (r *Run) Events(after int64) (events []Event, ended, inStore bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.visibleAfter(after)
}

// eventsFor is Events for the reader watching with c, which is given the events up to the last
// returned: the run may drop those from memory once they are stored.
func (r *Run) eventsFor(c chan struct{}, after int64) (events []Event, ended, inStore bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	events, ended, inStore = r.visibleAfter(after)
	if _, ok := r.waiters[c]; ok {
		if n := len(events); n > 0 {
			after = events[n-1].Seq
		}
		r.waiters[c] = after
	}
	return events, ended, inStore
}

// visibleAfter is Events; r.mu is held.
func (r *Run) visibleAfter(after int64) (events []Event, ended, inStore bool) {
	if after < r.trimmed {
		return nil, r.ended, true
	}
	n := r.visible()
	i := r.index(after)
	if i >= n {
		// An ended run whose last events are not visible could not store its end: its readers stop
		// here, and find it in the store once it is recovered.
		return nil, r.ended, false
	}
	return r.events[i:n:n], r.ended, false
}

// lastSeq is the Seq of the run's last event a reader may see.
func (r *Run) lastSeq() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := r.visible(); n > 0 {
		return r.events[n-1].Seq
	}
	return r.trimmed
}

// Watch returns a channel that receives a signal after new events are appended (signals coalesce), and
// a function to stop watching.
func (r *Run) Watch() (<-chan struct{}, func()) {
	return r.watch(math.MaxInt64)
}

// watch is Watch for a reader that has the events up to Seq seen, and reads the rest with eventsFor.
func (r *Run) watch(seen int64) (chan struct{}, func()) {
	c := make(chan struct{}, 1)
	r.mu.Lock()
	r.waiters[c] = seen
	r.mu.Unlock()
	return c, func() {
		r.mu.Lock()
		delete(r.waiters, c)
		r.mu.Unlock()
	}
}

// hasEnded reports whether the run has ended: it stores nothing more.
func (r *Run) hasEnded() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ended
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

// setRunning marks a queued run running, with its context and the function that cancels it.
func (r *Run) setRunning(ctx context.Context, cancel context.CancelCauseFunc) {
	r.mu.Lock()
	r.status, r.ctx, r.cancel = store.RunRunning, ctx, cancel
	reason := r.cancelReason
	r.mu.Unlock()
	if reason != "" { // cancelled while it was starting
		cancel(nil)
	}
}

// requestCancel cancels a running run with reason. It reports false when the run is not running (queued
// or ended); a queued run is cancelled by its service.
func (r *Run) requestCancel(reason string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended || r.finishing || r.status != store.RunRunning {
		return false
	}
	if r.cancelReason == "" && r.ctx != nil && r.ctx.Err() != nil {
		return false // a limit ended it already: it ends as that limit says, not as cancelled
	}
	if r.cancelReason == "" {
		r.cancelReason = reason
	}
	if r.cancel != nil {
		r.cancel(nil)
	}
	return true
}

// stop ends a running run with cause (a limit it passed), unless its loop has returned already.
func (r *Run) stop(cause error) {
	r.mu.Lock()
	cancel, finishing := r.cancel, r.finishing
	r.mu.Unlock()
	if cancel != nil && !finishing {
		cancel(cause)
	}
}

// setFinishing marks a run whose agent loop has returned: from now on nothing cancels it.
func (r *Run) setFinishing() {
	r.mu.Lock()
	r.finishing = true
	r.mu.Unlock()
}

func (r *Run) reason() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cancelReason
}

// setCancelReason gives a queued run that ends without starting its cancel reason, unless it has one.
func (r *Run) setCancelReason(reason string) {
	r.mu.Lock()
	if r.cancelReason == "" {
		r.cancelReason = reason
	}
	r.mu.Unlock()
}
