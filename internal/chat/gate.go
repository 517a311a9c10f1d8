package chat

import (
	"errors"
	"time"

	"chatd/internal/store"
)

// A run starts early when its whole history is known before anything is stored: a new session's
// (its history is its user message alone), or a session's next run on this instance when the records
// its last run here kept end at the session's newest record (continuesEarly). Its model call goes out
// while the transaction that stores the run and its message (and a new session) commits, and the
// commit's fsync costs the first token nothing. What the run would make seen or durable waits until
// the commit is known: the model's stream goes on into the run, which holds its events unseen and
// unwritten (Run.hold), and its records, its usage, its tools and its end wait at the run's gate.
// Nothing reaches a client, and nothing refers to the run in the store, before the run and its message
// are durable; once they are, the first tokens go out with the run's first events. When the commit
// fails (the session's id was taken meanwhile, the key was sent twice, a limit refused it, the session
// got a record the history did not hold, or it is busy), the run is abandoned: its model call is
// cancelled and nothing of it is kept. A send whose early run was abandoned for a stale history or a
// busy session goes on as any other does (place), without starting early again.

// gate holds back a run started before its CreateRun committed. The sender opens or fails it once.
type gate struct {
	done  chan struct{}
	err   error        // the commit's failure; set before done closes
	first store.Record // the user message as stored; set before done closes
	// created is the session's CreatedAt, which names the records the run keeps for the session's next
	// run (histories); set before done closes.
	created time.Time
	at      time.Time // when it opened: the run's held events become visible then
}

func newGate() *gate { return &gate{done: make(chan struct{})} }

// open lets the run go on: first is its user message as the store completed it, in the session created
// at created.
func (g *gate) open(first *store.Record, created time.Time) {
	g.first, g.created, g.at = *first, created, time.Now()
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
// first message (its whole history is that message) in a session chatd names, a plain send (plain).
func (p *plan) startsEarly(key string) bool {
	// Only a session whose id chatd made: one the client names may be taken (by its other send, or by
	// another user), and every send that lost would have cost a model call.
	return p.newSession != nil && p.req.SessionID == "" && p.plain(key)
}

// plain reports whether the send may call its model before its run is stored at all: no idempotency
// key (retries of one key sent at once must not reach the model more than once), no limits the store's
// transaction counts (a refused run must not reach the model), not a regeneration (its marker is
// checked against the session's last user record in the commit), not an action (it runs a tool, not
// the model).
func (p *plan) plain(key string) bool {
	return key == "" && len(p.account.Quota) == 0 && !p.req.Regenerate && p.req.Action == nil
}

// continuesEarly returns, when the planned run to an existing session may call its model before it is
// stored, the records its history starts with: those the session's last run here kept, which must end
// at the session's newest record as the plan read it (the commit checks that none came since:
// store.Run.AfterSeq). Nil on a retry (attempt > 0: the session was busy, or a record came, a moment
// ago), while a run of the session is going on here (it is busy, or about to add records), and for a
// session whose records are not kept here (its history must be read anyway).
func (s *Service) continuesEarly(p *plan, key string, attempt int) []store.Record {
	if p.session == nil || attempt > 0 || !p.plain(key) {
		return nil
	}
	kept := s.hist.get(p.user, p.session.ID, p.session.CreatedAt)
	if len(kept) == 0 || kept[len(kept)-1].Seq != p.session.LastSeq || s.busyHere(p.user, p.session.ID) {
		return nil
	}
	return kept
}

// earlyHistory returns, for a run that may start before it is stored, its history, its user message
// (first, given its id) last, and the session's last Seq the commit must still find (nil for a new
// session); a nil history when the run starts once it is stored.
func (s *Service) earlyHistory(p *plan, key string, attempt int, first *store.Record) (history []store.Record, after *int64) {
	var kept []store.Record
	if !p.startsEarly(key) {
		if kept = s.continuesEarly(p, key, attempt); kept == nil {
			return nil, nil
		}
		last := p.session.LastSeq
		after = &last
	}
	first.ID = newID()                 // the run's copy of its history names the message as the store will
	return append(kept, *first), after // kept is clipped: this copies
}
