package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"chatd/internal/agent"
	"chatd/internal/logging"
	"chatd/internal/runevent"
	"chatd/internal/store"
)

// sessionQueues holds the runs queued behind each session's running run, oldest first, and starts them
// one at a time as the session frees up. It knows nothing of the store: start stores a run's first
// record and launches it, finish ends a run that never started.
type sessionQueues struct {
	// start launches a queued run; store.ErrBusy while its session has a running run, ErrClosed once
	// the service is shutting down.
	start func(*Run) error
	// finish ends a queued run that never started, as res says.
	finish func(run *Run, res agent.Result)
	log    *slog.Logger

	mu     sync.Mutex
	queues map[string]*queue // by session id; a session without queued runs has none
}

// queue is a session's queued runs, oldest first. Its mutex serializes starting them.
type queue struct {
	mu   sync.Mutex
	runs []*Run
}

func newSessionQueues(start func(*Run) error, finish func(*Run, agent.Result), log *slog.Logger) *sessionQueues {
	return &sessionQueues{start: start, finish: finish, log: log, queues: map[string]*queue{}}
}

// of returns the session's queue, made when it has none.
func (qs *sessionQueues) of(sessionID string) *queue {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q := qs.queues[sessionID]
	if q == nil {
		q = &queue{}
		qs.queues[sessionID] = q
	}
	return q
}

// sessions lists the sessions that have runs queued here.
func (qs *sessionQueues) sessions() []string {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	ids := make([]string, 0, len(qs.queues))
	for id := range qs.queues {
		ids = append(ids, id)
	}
	return ids
}

// has reports whether the session has runs queued here.
func (qs *sessionQueues) has(sessionID string) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return qs.queues[sessionID] != nil
}

// push appends a queued run to its session's queue. kick drops an empty queue while it holds the queue's
// lock, so the queue is checked to still be the session's under that lock.
func (qs *sessionQueues) push(run *Run) {
	for {
		q := qs.of(run.SessionID)
		q.mu.Lock()
		qs.mu.Lock()
		current := qs.queues[run.SessionID] == q
		qs.mu.Unlock()
		if current {
			q.runs = append(q.runs, run)
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
	}
}

// kick starts the session's oldest queued run if the session has no running run. It is called after a
// run is queued and after a running run ends, on that run's goroutine; the queue's mutex orders the two,
// so one of them sees the session free and none starts two runs. A queued run that cannot start ends,
// and the next one is tried.
func (qs *sessionQueues) kick(sessionID string) {
	qs.mu.Lock()
	q := qs.queues[sessionID]
	qs.mu.Unlock()
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.runs) > 0 {
		next := q.runs[0]
		if reason := next.reason(); reason != "" { // cancelled while queued
			q.runs = q.runs[1:]
			qs.end(next, reason)
			continue
		}
		err := qs.start(next)
		if errors.Is(err, store.ErrBusy) || errors.Is(err, ErrClosed) {
			return // the running run's end kicks again; a closing service starts nothing
		}
		q.runs = q.runs[1:]
		if err == nil {
			return
		}
		if c, ok := errors.AsType[*store.CancelRequestedError](err); ok {
			// Cancelled on another instance, before this one carried the cancel out.
			qs.end(next, c.Reason)
			continue
		}
		qs.log.Error("start queued run", append(runAttrs(next), "err", err)...)
		qs.finish(next, agent.Result{Status: agent.StatusFailed, Err: err})
	}
	qs.mu.Lock()
	if len(q.runs) == 0 && qs.queues[sessionID] == q {
		delete(qs.queues, sessionID)
	}
	qs.mu.Unlock()
}

// cancel removes a queued run from its queue and ends it as cancelled. It reports false when the run is
// no longer queued (it started meanwhile).
func (qs *sessionQueues) cancel(run *Run, reason string) bool {
	q := qs.of(run.SessionID)
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, r := range q.runs {
		if r == run {
			q.runs = append(q.runs[:i:i], q.runs[i+1:]...)
			qs.end(run, reason)
			return true
		}
	}
	return false
}

// end ends a queued run that never started as cancelled, for reason unless it has one.
func (qs *sessionQueues) end(run *Run, reason string) {
	run.setCancelReason(reason)
	qs.finish(run, agent.Result{Status: agent.StatusCancelled, FinishReason: "cancelled"})
}

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
	t0 := time.Now()
	err = s.opts.Store.CreateRun(ctx, p.user, &store.Run{ID: run.ID, SessionID: run.SessionID, Agent: run.Agent,
		Model: run.Model, Status: store.RunQueued, IdempotencyKey: key, RequestHash: hash, Request: req, Title: p.title(),
		KeyID: p.account.KeyID, Quota: p.account.Quota}, nil)
	s.opts.Metrics.StoreOp("create_run", time.Since(t0))
	if err != nil {
		s.retire(run)
		return nil, err
	}
	run.emit(runevent.TypeRunStart, runevent.Encode(runevent.RunStart{RunID: run.ID, SessionID: run.SessionID, Model: run.Model, Agent: run.Agent,
		Action: p.req.Action != nil}))
	run.emit(runevent.TypeStatus, runevent.EncodeStatus("Waiting for the active run "+activeID+" to end…"))
	s.queues.push(run)
	s.queues.kick(run.SessionID)
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
		for _, r := range s.inSession[run.SessionID] {
			if r.Status() == store.RunQueued {
				n++
			}
		}
		if n >= limit {
			return &Error{Kind: ErrBusy, Code: "queue_full",
				Message: fmt.Sprintf("session %s already has %d messages waiting behind its active run, the limit; wait for them, or cancel some", run.SessionID, n)}
		}
	}
	s.track(run)
	return nil
}

// startQueued stores the user's message of a queued run and launches it: the queues' start.
func (s *Service) startQueued(run *Run) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ErrClosed // it stays queued in the store: the next start of chatd runs it
	}
	s.wg.Add(1)
	s.mu.Unlock()
	p := run.plan
	// The budget was checked when the run was queued; what ran since may have used it up.
	if err := s.overBudget(context.WithoutCancel(s.base), p.user, p.account); err != nil {
		s.wg.Done()
		if e, ok := errors.AsType[*store.LimitError](err); ok {
			return budgetError(e)
		}
		return err
	}
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

// finishQueued ends a queued run that never started: the queues' finish. It is counted among the runs
// ended (cancelled, or failed to start), not among those started.
func (s *Service) finishQueued(run *Run, res agent.Result) {
	obs := s.newObserver(run.plan, run)
	obs.metrics = s.opts.Metrics.RunNotStarted(run.Agent, run.Model)
	obs.finish(res)
}

// runAttrs name a run in a line logged outside its own logger: run_id, session_id, user.
func runAttrs(run *Run) []any {
	return logging.RunIdentity{RunID: run.ID, SessionID: run.SessionID, User: run.user}.Attrs()
}

// storedRunAttrs name a stored run (with its UserID, as UnfinishedRuns and claims give it) the same way.
func storedRunAttrs(r *store.Run) []any {
	return logging.RunIdentity{RunID: r.ID, SessionID: r.SessionID, User: r.UserID}.Attrs()
}
