package chat

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"chatd/internal/store"
)

// leaseStore is what a store shared by several chatd instances offers (store/postgres opened with an
// instance name): runs owned by leases, and cancels carried to a run's owner. A store without it, or
// whose Instance is "", serves one process, and the service runs as it always has.
type leaseStore interface {
	// Instance names this process among the instances; "" when it is alone on the database.
	Instance() string
	// LeaseTTL is how long a lease lasts unless renewed.
	LeaseTTL() time.Duration
	// RenewLeases extends the leases of the runs among ids this instance holds, in one statement, and
	// returns them with the cancels asked of them elsewhere.
	RenewLeases(ctx context.Context, ids []string) ([]store.Leased, error)
	// ClaimExpired takes queued and running runs whose lease ended, now held by this instance.
	ClaimExpired(ctx context.Context) ([]store.Claimed, error)
	// RequestCancel records a cancel for the run's owner and wakes it; false when the run has ended.
	RequestCancel(ctx context.Context, user, runID, reason string) (bool, error)
}

// DefaultSweepInterval is how often an instance looks for runs whose owner died, by default: with the
// store's default lease of 20 seconds, such a run is recovered within 30.
const DefaultSweepInterval = 10 * time.Second

// leases keeps the runs of an instance among several: it renews their leases, recovers the runs of
// instances that died, starts the queued runs a notification says may start, and carries out cancels
// asked elsewhere. Its two loops (maintain, sweeping) run from New until Close.
type leases struct {
	st    leaseStore
	sweep time.Duration
	nudge chan struct{} // a notification asks the loop for work (coalesced)
	stop  chan struct{}
	once  sync.Once // closes stop: Close may be called more than once
	wg    sync.WaitGroup

	mu       sync.Mutex
	renewNow bool            // a cancel was asked elsewhere of a run that may be ours
	sessions map[string]bool // sessions whose running run ended elsewhere
	kickAll  bool            // notifications may have been lost
}

// sharedStore returns the store's lease capability when several instances may share it, else nil.
func sharedStore(st store.Store) leaseStore {
	if ls, ok := st.(leaseStore); ok && ls.Instance() != "" {
		return ls
	}
	return nil
}

// startLeases starts the loops of a service on a shared store.
func (s *Service) startLeases(ls leaseStore) {
	l := &leases{st: ls, sweep: s.opts.SweepInterval, nudge: make(chan struct{}, 1), stop: make(chan struct{}),
		sessions: map[string]bool{}}
	if l.sweep <= 0 {
		l.sweep = DefaultSweepInterval
	}
	s.leases = l
	l.wg.Go(s.maintain)
	l.wg.Go(s.sweeping)
}

// stopLeases stops the loops and waits for them; the runs it held are ended or stay leased until their
// leases end.
func (s *Service) stopLeases() {
	if s.leases == nil {
		return
	}
	s.leases.once.Do(func() { close(s.leases.stop) })
	s.leases.wg.Wait()
}

// maintain renews this instance's leases three times per TTL, and does what notifications ask in
// between. Sweeps have a loop of their own (sweeping): a slow sweep — up to a hundred expired waits
// resumed one after another, on a slow database — must not hold back the renewals without which this
// instance's runs are taken over as if it had died.
func (s *Service) maintain() {
	l := s.leases
	renew := time.NewTicker(max(l.st.LeaseTTL()/3, time.Millisecond))
	defer renew.Stop()
	ctx := context.Background()
	for {
		select {
		case <-l.stop:
			return
		case <-renew.C:
			s.RenewLeases(ctx)
		case <-l.nudge:
			s.nudged(ctx)
		}
	}
}

// sweeping sweeps every sweep interval, one sweep at a time: a tick while a sweep runs is dropped.
func (s *Service) sweeping() {
	l := s.leases
	sweep := time.NewTicker(l.sweep)
	defer sweep.Stop()
	ctx := context.Background()
	for {
		select {
		case <-l.stop:
			return
		case <-sweep.C:
			if err := s.Sweep(ctx); err != nil {
				s.log.Error("sweep runs of dead instances", "err", err)
			}
		}
	}
}

// nudged does what notifications asked since the last time.
func (s *Service) nudged(ctx context.Context) {
	l := s.leases
	l.mu.Lock()
	renew, all, sessions := l.renewNow, l.kickAll, l.sessions
	l.renewNow, l.kickAll, l.sessions = false, false, map[string]bool{}
	l.mu.Unlock()
	if renew || all {
		s.RenewLeases(ctx)
	}
	if all {
		for _, id := range s.queues.sessions() {
			sessions[id] = true
		}
	}
	for id := range sessions {
		s.queues.kick(id)
	}
}

// RenewLeases extends the leases of the runs live here, and carries out the cancels asked of them on
// other instances. The service's loop calls it three times per lease TTL; tests call it directly.
func (s *Service) RenewLeases(ctx context.Context) {
	if s.leases == nil {
		return
	}
	s.mu.Lock()
	ids := make([]string, 0, len(s.runs))
	for id := range s.runs {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	held, err := s.leases.st.RenewLeases(ctx, ids)
	if err != nil {
		s.log.Error("renew run leases", "err", err)
		return
	}
	// The queued ones are cancelled first, as CancelKey does: a running run's end starts the next run
	// queued behind it, which may be one a cancel was asked of too (a revoked key's).
	for _, queued := range []bool{true, false} {
		for _, h := range held {
			if h.CancelReason == "" || (h.Status == store.RunQueued) != queued {
				continue
			}
			if live := s.live(h.UserID, h.ID); live != nil {
				s.cancelLive(live, h.CancelReason)
			}
		}
	}
}

// cancelLive cancels a run live here, running or queued, without waiting for its end.
func (s *Service) cancelLive(live *Run, reason string) {
	if live.requestCancel(reason) {
		return
	}
	if live.Status() == store.RunQueued && !s.queues.cancel(live, reason) {
		live.requestCancel(reason) // it started meanwhile
	}
}

// Sweep recovers the runs whose owner's lease ended — the instance died, or lost the database: a running
// run ends as interrupted as start-up recovery ends it, a queued one is queued here. Every instance
// sweeps every sweep interval; the store hands each such run to one of them. It also tries again to
// start the runs queued here, in case a notification that their session is free was lost.
func (s *Service) Sweep(ctx context.Context) error {
	if s.leases == nil {
		return nil
	}
	var errs []error
	sessions := map[string]bool{}
	for {
		claimed, err := s.leases.st.ClaimExpired(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("claim runs of dead instances: %w", err))
			break
		}
		if len(claimed) == 0 {
			break
		}
		for i := range claimed {
			c := &claimed[i]
			if s.live(c.UserID, c.ID) != nil {
				continue // ours, though its renewal was late: the claim renewed it
			}
			if err := s.recoverClaimed(ctx, c); err != nil {
				errs = append(errs, fmt.Errorf("recover run %s: %w", c.ID, err))
				continue
			}
			if c.Status == store.RunQueued {
				sessions[c.SessionID] = true
			}
		}
	}
	for _, id := range s.queues.sessions() {
		sessions[id] = true
	}
	for id := range sessions {
		s.queues.kick(id)
	}
	if err := s.sweepExpired(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// expiredStore is a shared store that finds the runs awaiting approval whose wait has expired.
type expiredStore interface {
	ExpiredAwaiting(ctx context.Context, before time.Time) ([]store.Run, error)
}

// expiryGrace is how long past its expiry a waiting run is left to the timer of the instance that
// paused it (or of any started since), before every instance's sweep expires it.
const expiryGrace = time.Minute

// sweepExpired expires the runs awaiting approval whose expiry passed more than expiryGrace ago: their
// timer lived on an instance that died, and no instance started since. Two instances may expire the
// same run at once: the expiry is a decision, and only one resume of it wins (ResumeRun's conflict);
// the other finds the run no longer waiting.
func (s *Service) sweepExpired(ctx context.Context) error {
	es, ok := s.opts.Store.(expiredStore)
	if !ok {
		return nil
	}
	runs, err := es.ExpiredAwaiting(ctx, s.opts.Now().Add(-expiryGrace))
	if err != nil {
		return fmt.Errorf("expired awaiting runs: %w", err)
	}
	for _, r := range runs {
		s.expire(r.UserID, r.ID)
	}
	return nil
}

// recoverClaimed ends a running run a dead instance left, or queues here a queued one.
func (s *Service) recoverClaimed(ctx context.Context, c *store.Claimed) error {
	if c.Status == store.RunRunning {
		if err := s.interrupt(ctx, &c.Run); err != nil {
			return err
		}
		s.log.Warn("run interrupted: the instance that ran it stopped renewing its lease", storedRunAttrs(&c.Run)...)
		return nil
	}
	if err := s.requeue(ctx, &c.Run); err != nil {
		return err
	}
	if c.CancelReason != "" {
		if live := s.live(c.UserID, c.ID); live != nil {
			s.queues.cancel(live, c.CancelReason)
		}
	}
	return nil
}

// cancelElsewhere asks the instance that owns a run not live here to cancel it. It reports false when
// the run has ended, or when this service is alone on its store (then no other instance runs it).
func (s *Service) cancelElsewhere(ctx context.Context, user, id, reason string) (bool, error) {
	if s.leases == nil {
		return false, nil
	}
	return s.leases.st.RequestCancel(ctx, user, id, reason)
}

// Wake is how the notifications of other instances reach the service (store/postgres's Listener calls
// it): new events of a run wake its followers here, a cancel asked elsewhere is carried out if the run
// is ours, a session whose run ended starts its next queued run if it is queued here. It never blocks.
func (s *Service) Wake(w store.Wakeup) {
	if s.leases == nil {
		return
	}
	l := s.leases
	switch w.Kind {
	case store.WakeEvents:
		s.remote.signal(w.RunID)
		return
	case store.WakeCancel:
		s.mu.Lock()
		_, ours := s.runs[w.RunID]
		s.mu.Unlock()
		if !ours {
			return
		}
		l.mu.Lock()
		l.renewNow = true
		l.mu.Unlock()
	case store.WakeSession:
		if !s.queues.has(w.SessionID) {
			return
		}
		l.mu.Lock()
		l.sessions[w.SessionID] = true
		l.mu.Unlock()
	case store.WakeAll:
		s.remote.signalAll()
		l.mu.Lock()
		l.kickAll, l.renewNow = true, true
		l.mu.Unlock()
	default:
		return
	}
	select {
	case l.nudge <- struct{}{}:
	default: // a nudge is pending already
	}
}
