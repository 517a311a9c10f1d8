package chat

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"chatd/internal/metrics"
	"chatd/internal/store"
)

// DefaultFlushInterval is how long an event waits, at most, before the event log writes it: the part of
// a run a crash can lose.
const DefaultFlushInterval = 100 * time.Millisecond

// eventLog writes the events of every live run to the store in batches, one transaction per interval
// for all runs together, so that no disk write sits on the path of a token. A run's end does not wait
// for it: it writes the rest of its own log with its final state (see observer.finish).
type eventLog struct {
	store    store.Store
	interval time.Duration
	log      *slog.Logger

	mu    sync.Mutex
	dirty []*Run

	kick     chan struct{}
	now      chan struct{} // a run nears the end of its reservation: write without waiting the interval
	stop     chan struct{}
	stopped  chan struct{}
	stopOnce sync.Once

	// The flusher's own buffers, reused from batch to batch.
	batch    []store.Event
	reserved []store.Reservation
	locked   []*Run
	ends     []int64
	grants   []int64 // the reservation each locked run asks for; 0: none

	lastErr time.Time // when a failed write was last logged

	metrics *metrics.Metrics // batch sizes and write latency; nil counts nothing
}

func newEventLog(st store.Store, interval time.Duration, log *slog.Logger) *eventLog {
	l := &eventLog{store: st, interval: interval, log: log,
		kick: make(chan struct{}, 1), now: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	go l.loop()
	return l
}

// mark queues r for the next batch. Run.emit calls it once per batch, when r turns dirty.
func (l *eventLog) mark(r *Run) {
	l.mu.Lock()
	l.dirty = append(l.dirty, r)
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// hurry asks for the next batch at once: a run's events near the end of its reservation, and readers
// wait for it to grow.
func (l *eventLog) hurry() {
	select {
	case l.now <- struct{}{}:
	default:
	}
}

// loop writes a batch an interval after the first event that waits for one, or at once when hurried.
func (l *eventLog) loop() {
	defer close(l.stopped)
	timer := time.NewTimer(l.interval)
	timer.Stop()
	for {
		select {
		case <-l.kick:
		case <-l.stop:
			l.flush()
			return
		}
		timer.Reset(l.interval)
		select {
		case <-timer.C:
		case <-l.now:
			timer.Stop()
		case <-l.stop:
			timer.Stop()
			l.flush()
			return
		}
		l.flush()
	}
}

// close writes what waits and stops the loop. It may be called more than once.
func (l *eventLog) close() {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.stopped
}

// flush writes the unwritten events of every dirty run in one transaction, and raises the
// reservation of each run whose events come near its end. A run whose end is being written is skipped:
// its end writes its events itself. A failed write keeps the events for the next batch; the runs go on
// meanwhile.
func (l *eventLog) flush() {
	l.mu.Lock()
	runs := l.dirty
	l.dirty = nil
	l.mu.Unlock()
	if len(runs) == 0 {
		return
	}
	batch, reserved, locked, ends, grants := l.batch[:0], l.reserved[:0], l.locked[:0], l.ends[:0], l.grants[:0]
	for _, r := range runs {
		r.dirty.Store(false) // before reading the events: one emitted from now on marks r again
		if !r.flushMu.TryLock() {
			continue
		}
		r.mu.Lock()
		pending := r.events[r.index(r.persisted):]
		end, grant := r.next-1, int64(0)
		if end+reserveAhead/2 > r.reserved {
			// A run that streams fast gets room for twice what it wrote since the last batch.
			grant = end + max(reserveAhead, 2*int64(len(pending)))
		}
		r.mu.Unlock()
		if len(pending) == 0 && grant == 0 {
			r.flushMu.Unlock()
			continue
		}
		for _, e := range pending {
			batch = append(batch, store.Event{RunID: r.ID, Seq: e.Seq, Type: e.Type, Data: e.Data})
		}
		if grant > 0 {
			reserved = append(reserved, store.Reservation{RunID: r.ID, Seq: grant})
		}
		locked, ends, grants = append(locked, r), append(ends, end), append(grants, grant)
	}
	t0 := time.Now()
	err := l.store.AppendEvents(context.Background(), batch, reserved)
	l.metrics.EventLogBatch(len(batch), time.Since(t0))
	for i, r := range locked {
		if err == nil {
			r.mu.Lock()
			r.persisted = max(r.persisted, ends[i])
			r.reserve(grants[i])
			r.trim()
			r.mu.Unlock()
		} else if r.dirty.CompareAndSwap(false, true) {
			l.mark(r) // try again with the next batch
		}
		r.flushMu.Unlock()
	}
	if err != nil && time.Since(l.lastErr) > 10*time.Second {
		l.lastErr = time.Now()
		l.log.Error("event log: write failed; events are kept in memory and written again", "events", len(batch), "err", err)
	}
	clear(batch) // drop the references to event data
	clear(reserved)
	clear(locked)
	l.batch, l.reserved, l.locked, l.ends, l.grants = batch[:0], reserved[:0], locked[:0], ends[:0], grants[:0]
}

// pending returns r's events the store does not hold yet, and the Seq of r's last event; r.flushMu is
// held.
func (r *Run) pending() ([]store.Event, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rest := r.events[r.index(r.persisted):]
	evs := make([]store.Event, 0, len(rest)+4)
	for _, e := range rest {
		evs = append(evs, store.Event{RunID: r.ID, Seq: e.Seq, Type: e.Type, Data: e.Data})
	}
	return evs, r.next - 1
}
