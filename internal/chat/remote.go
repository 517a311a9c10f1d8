package chat

import (
	"sync"
	"time"
)

// remotePoll is how often a reader of a run that another instance runs reads the store when no
// notification woke it: the fallback for notifications lost, or a listener that is down.
const remotePoll = time.Second

// wakeups are the readers on this instance of runs other instances run, by run id: a notification that
// a run's log grew wakes its readers here.
type wakeups struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

// subscribe returns a channel signalled (coalesced) when the run's log may have grown, and a function
// that stops it.
func (w *wakeups) subscribe(runID string) (chan struct{}, func()) {
	c := make(chan struct{}, 1)
	w.mu.Lock()
	if w.subs == nil {
		w.subs = map[string]map[chan struct{}]struct{}{}
	}
	if w.subs[runID] == nil {
		w.subs[runID] = map[chan struct{}]struct{}{}
	}
	w.subs[runID][c] = struct{}{}
	w.mu.Unlock()
	return c, func() {
		w.mu.Lock()
		delete(w.subs[runID], c)
		if len(w.subs[runID]) == 0 {
			delete(w.subs, runID)
		}
		w.mu.Unlock()
	}
}

// signal wakes the readers of one run.
func (w *wakeups) signal(runID string) {
	w.mu.Lock()
	for c := range w.subs[runID] {
		poke(c)
	}
	w.mu.Unlock()
}

// signalAll wakes every reader: notifications may have been lost.
func (w *wakeups) signalAll() {
	w.mu.Lock()
	for _, subs := range w.subs {
		for c := range subs {
			poke(c)
		}
	}
	w.mu.Unlock()
}

// poke signals c unless a signal is pending.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
