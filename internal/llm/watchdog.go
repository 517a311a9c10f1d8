package llm

import (
	"sync"
	"sync/atomic"
	"time"
)

// Watchdog calls its function when Poke has not been called for its idle time: a stream consumer pokes
// it on every event that brings something, so that a stream kept open by keep-alives alone still ends.
// Poke is cheap — one clock read and one atomic store, no timer reset — for the per-token path.
type Watchdog struct {
	idle  time.Duration
	start time.Time
	last  atomic.Int64 // when Poke was last called, as nanoseconds since start
	timer *time.Timer
	fired atomic.Bool

	// mu orders the timer's callback with Stop: a callback already running when Stop is called would
	// otherwise re-arm the timer, or fire, after Stop returned.
	mu      sync.Mutex
	stopped bool
}

// NewWatchdog starts a watchdog that calls fire, once, after idle without a Poke. Stop it when the
// stream ends.
func NewWatchdog(idle time.Duration, fire func()) *Watchdog {
	w := &Watchdog{idle: idle, start: time.Now()}
	w.timer = time.AfterFunc(idle, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.stopped {
			return
		}
		since := time.Duration(int64(time.Since(w.start)) - w.last.Load())
		if since < w.idle {
			w.timer.Reset(w.idle - since)
			return
		}
		w.fired.Store(true)
		fire()
	})
	return w
}

// Poke says the stream brought something.
func (w *Watchdog) Poke() { w.last.Store(int64(time.Since(w.start))) }

// Fired reports whether the watchdog has called its function.
func (w *Watchdog) Fired() bool { return w.fired.Load() }

// Stop stops the watchdog; its function is not called after Stop returns, unless it already was.
func (w *Watchdog) Stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	w.timer.Stop()
}
