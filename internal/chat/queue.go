package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"chatd/internal/agent"
	"chatd/internal/runevent"
	"chatd/internal/store"
)

// enqueue stores a queued run behind the session's active run. It starts when the runs before it have
// ended (kick); its request is kept in the store so that a restart starts it too.
func (s *Service) enqueue(ctx context.Context, p *plan, key, hash, activeID string) (*Started, error) {
	req, err := json.Marshal(p.req)
	if err != nil {
		return nil, fmt.Errorf("enqueue: %w", err)
	}
	run := s.newRun(newID(), p.user, p)
	run.status = store.RunQueued
	if err := s.admitQueued(run, s.opts.Limits.QueuedRuns); err != nil {
		return nil, err
	}
	// A queued run reserves no Seq: its first events show once the event log has stored them.
	err = s.opts.Store.CreateRun(ctx, p.user, &store.Run{ID: run.ID, SessionID: run.SessionID, Agent: run.Agent,
		Model: run.Model, Status: store.RunQueued, IdempotencyKey: key, RequestHash: hash, Request: req, Title: p.title()}, nil)
	if err != nil {
		s.retire(run)
		return nil, err
	}
	run.emit(runevent.TypeRunStart, runevent.Encode(runevent.RunStart{RunID: run.ID, SessionID: run.SessionID, Model: run.Model, Agent: run.Agent}))
	run.emit(runevent.TypeStatus, runevent.EncodeStatus("Waiting for the active run "+activeID+" to end…"))
	s.push(run)
	s.kick(run.SessionID)
	return &Started{RunID: run.ID, SessionID: run.SessionID, Status: store.RunQueued}, nil
}

// admitQueued makes a queued run live, unless its session already has limit runs queued (0: no
// limit). It is not counted in s.wg until it starts. Counting under s.mu, with the run admitted in the
// same hold, is what keeps concurrent sends from all passing the check.
func (s *Service) admitQueued(run *Run, limit int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return errClosing()
	}
	if limit > 0 {
		n := 0
		for _, r := range s.runs {
			if r.SessionID == run.SessionID && r.Status() == store.RunQueued {
				n++
			}
		}
		if n >= limit {
			return &Error{Kind: ErrBusy, Code: "queue_full",
				Message: fmt.Sprintf("session %s already has %d messages waiting behind its active run, the limit; wait for them, or cancel some", run.SessionID, n)}
		}
	}
	s.runs[run.ID] = run
	return nil
}

// push appends a queued run to its session's queue. kick drops an empty queue from s.queues while it holds
// the queue's lock, so the queue is checked to still be the session's under that lock.
func (s *Service) push(run *Run) {
	for {
		q := s.queue(run.SessionID)
		q.mu.Lock()
		s.mu.Lock()
		current := s.queues[run.SessionID] == q
		s.mu.Unlock()
		if current {
			q.runs = append(q.runs, run)
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
	}
}

func (s *Service) queue(sessionID string) *queue {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[sessionID]
	if q == nil {
		q = &queue{}
		s.queues[sessionID] = q
	}
	return q
}

// kick starts the session's oldest queued run if the session has no running run. It is called after a
// run is queued and after a run ends; the queue's mutex orders the two, so one of them sees the session
// free and none starts two runs.
func (s *Service) kick(sessionID string) {
	s.mu.Lock()
	q := s.queues[sessionID]
	s.mu.Unlock()
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.runs) > 0 {
		next := q.runs[0]
		if next.reason() != "" { // cancelled while queued
			q.runs = q.runs[1:]
			s.endQueued(next, next.reason())
			continue
		}
		err := s.startQueued(next)
		if errors.Is(err, store.ErrBusy) || errors.Is(err, ErrClosed) {
			return // the running run's end kicks again; a closing service starts nothing
		}
		q.runs = q.runs[1:]
		if err == nil {
			return
		}
		s.log.Error("start queued run", "run", next.ID, "err", err)
		obs := newObserver(s, next.plan, next)
		obs.finish(agent.Result{Status: agent.StatusFailed, Err: err})
	}
	s.mu.Lock()
	if len(q.runs) == 0 && s.queues[sessionID] == q {
		delete(s.queues, sessionID)
	}
	s.mu.Unlock()
}

// startQueued stores the user's message of a queued run and launches it.
func (s *Service) startQueued(run *Run) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ErrClosed // it stays queued in the store: the next start of chatd runs it
	}
	s.wg.Add(1)
	s.mu.Unlock()
	p := run.plan
	first := p.first(run.SessionID)
	reserve := run.reservation()
	if err := s.opts.Store.StartRun(context.WithoutCancel(s.base), run.user, run.ID, first, reserve); err != nil {
		s.wg.Done()
		return err
	}
	run.granted(reserve)
	s.launch(run, first)
	return nil
}

// endQueued ends a queued run that never started: cancelled, or not startable.
func (s *Service) endQueued(run *Run, reason string) {
	run.mu.Lock()
	if run.cancelReason == "" {
		run.cancelReason = reason
	}
	run.mu.Unlock()
	obs := newObserver(s, run.plan, run)
	obs.finish(agent.Result{Status: agent.StatusCancelled, FinishReason: "cancelled"})
}

// cancelQueued removes a queued run from its queue and ends it as cancelled. It reports false when the
// run is no longer queued (it started meanwhile).
func (s *Service) cancelQueued(run *Run, reason string) bool {
	q := s.queue(run.SessionID)
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, r := range q.runs {
		if r == run {
			q.runs = append(q.runs[:i:i], q.runs[i+1:]...)
			s.endQueued(run, reason)
			return true
		}
	}
	return false
}
