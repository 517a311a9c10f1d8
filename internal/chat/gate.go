package chat

import (
	"errors"
	"time"

	"chatd/internal/store"
)

// A run to a new session starts early: its history is its user message alone, known before anything
// is stored, so its model call goes out while the transaction that stores the session, the run and the
// message commits, and the commit's fsync costs the first token nothing. What the run would make seen
// or durable waits until the commit is known: the model's stream goes on into the run, which holds its
// events unseen and unwritten (Run.hold), and its records, its usage, its tools and its end wait at the
// run's gate. Nothing reaches a client, and nothing refers to the run in the store, before the run and
// its message are durable; once they are, the first tokens go out with the run's first events. When
// the commit fails (the session's id was taken meanwhile, the key was sent twice, a limit refused it),
// the run is abandoned: its model call is cancelled and nothing of it is kept.

// gate holds back a run started before its CreateRun committed. The sender opens or fails it once.
type gate struct {
	done  chan struct{}
	err   error        // the commit's failure; set before done closes
	first store.Record // the user message as stored; set before done closes
	at    time.Time    // when it opened: the run's held events become visible then
}

func newGate() *gate { return &gate{done: make(chan struct{})} }

// open lets the run go on: first is its user message as the store completed it.
func (g *gate) open(first *store.Record) {
	g.first, g.at = *first, time.Now()
	close(g.done)
}

// fail abandons the run: its commit failed with err.
func (g *gate) fail(err error) {
	g.err = err
	close(g.done)
}

// known reports whether the commit has ended, either way.
func (g *gate) known() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// committed waits for the commit and reports whether it succeeded.
func (g *gate) committed() bool {
	<-g.done
	return g.err == nil
}

// errAbandoned stops the model call of a run whose commit failed.
var errAbandoned = errors.New("the run was not stored")

// startsEarly reports whether the planned run may call its model before it is stored: a new session's
// first message (its whole history is that message) in a session chatd names, sent without an idempotency key (retries of one
// key sent at once must not reach the model more than once) by a sender whose limits need no count in
// the store's transaction (those are checked with the run, and a refused run must not reach the model).
func (p *plan) startsEarly(key string) bool {
	// Only a session whose id chatd made: one the client names may be taken (by its other send, or by
	// another user), and every send that lost would have cost a model call.
	return p.newSession != nil && p.req.SessionID == "" && !p.req.Regenerate && key == "" && len(p.account.Quota) == 0
}
