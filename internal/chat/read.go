package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"chatd/internal/runevent"
	"chatd/internal/store"
)

// notFound is the error for a run id the user has no run under.
func notFound(id string) error {
	return &Error{Kind: store.ErrNotFound, Code: "run_not_found", Message: fmt.Sprintf("no run %q", id)}
}

// RunInfo returns one of the user's runs: its status, agent, model, times and usage so far.
func (s *Service) RunInfo(ctx context.Context, user, id string) (*store.Run, error) {
	r, err := s.opts.Store.Run(ctx, user, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound(id)
	}
	if err != nil {
		return nil, err
	}
	if live := s.live(user, id); live != nil {
		r.LastEventSeq = live.lastSeq()
	}
	return r, nil
}

// CancelResult says what a cancel did.
type CancelResult struct {
	RunID string
	// Status is "cancelling" for a running run that was asked to stop, "cancelled" for a queued run
	// (ended at once), or the status of a run that had already ended.
	Status string
	// AlreadyEnded reports a run that had ended before: the cancel did nothing.
	AlreadyEnded bool
	Message      string
}

// Cancel stops one of the user's runs: the model call and the running tools stop, the partial answer is
// stored, open tool calls get failed tool records, and the run ends with cancelled, then done cancelled.
// A queued run ends at once without starting. Cancelling a run that has ended does nothing.
func (s *Service) Cancel(ctx context.Context, user, id, reason string) (*CancelResult, error) {
	if reason == "" {
		reason = "cancelled by the user"
	}
	if live := s.live(user, id); live != nil {
		cancelling := &CancelResult{RunID: id, Status: "cancelling", Message: "the run is stopping; its stream ends with cancelled, then done"}
		if live.requestCancel(reason) {
			return cancelling, nil
		}
		if live.Status() == store.RunQueued {
			if s.queues.cancel(live, reason) {
				return &CancelResult{RunID: id, Status: store.RunCancelled, Message: "the queued run was cancelled before it started"}, nil
			}
			// It started meanwhile: the queue's lock was held until it was running.
			if live.requestCancel(reason) {
				return cancelling, nil
			}
		}
		select {
		case <-live.Done():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	r, err := s.opts.Store.Run(ctx, user, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound(id)
	}
	if err != nil {
		return nil, err
	}
	if r.Status == store.RunAwaiting {
		return s.cancelAwaiting(ctx, user, r, reason)
	}
	if r.Status == store.RunRunning || r.Status == store.RunQueued {
		// Another instance's run: its owner cancels it when the request reaches it.
		if asked, err := s.cancelElsewhere(ctx, user, id, reason); err != nil {
			return nil, err
		} else if asked {
			return &CancelResult{RunID: id, Status: "cancelling",
				Message: "the run is stopping on the chatd instance that runs it; its stream ends with cancelled, then done"}, nil
		}
		// In the store, not in this process (one chatd holds a database): a run whose end could not be
		// stored. The next start of chatd ends it.
		return nil, &Error{Kind: ErrBusy, Code: "run_not_here", RunID: id,
			Message: "the database says the run is running, but this chatd is not running it (its end could not be stored); chatd ends it as interrupted when it next starts"}
	}
	return &CancelResult{RunID: id, Status: r.Status, AlreadyEnded: true, Message: "the run had already ended (" + r.Status + "); nothing was cancelled"}, nil
}

// CancelKey cancels every run the user started with an API key that is queued, running or awaiting
// approval, on every instance: the key was revoked, and what it started must not go on spending. The
// runs live here are asked to cancel, as Cancel asks them, never waited for; those another instance
// holds are asked of it (its owner carries the cancel out when woken, or at its next lease renewal; a
// dead owner's run is interrupted, or its queued run refused for its key, by the instance that takes it
// over); those awaiting approval end here. It returns how many it cancelled or asked to cancel, and
// never waits for another instance. Its error says that some runs may go on: the store could not list
// them, or a cancel could not be recorded; the caller may call it again, which asks again what is
// still active.
//
// A run stored after the store listed the key's runs reads its key again itself, and stops
// (recheckKey).
func (s *Service) CancelKey(ctx context.Context, user, keyID, reason string) (int, error) {
	if keyID == "" {
		return 0, nil
	}
	// The queued ones are cancelled first: a running run's end starts the next run queued behind it,
	// which would be the key's own if it were still queued, and would call the model before its cancel.
	s.mu.Lock()
	var queued, others []*Run
	for _, r := range s.runs {
		switch {
		case r.plan == nil || r.plan.account.KeyID != keyID:
		case r.Status() == store.RunQueued:
			queued = append(queued, r)
		default:
			others = append(others, r)
		}
	}
	s.mu.Unlock()
	here := map[string]bool{}
	for _, runs := range [][]*Run{queued, others} {
		for _, r := range runs {
			here[r.ID] = true
		}
	}
	cancel := func(runs []*Run) {
		for _, r := range runs {
			s.cancelLive(r, reason)
		}
	}
	cancel(queued)
	n, errElsewhere := s.cancelKeyElsewhere(ctx, user, keyID, reason, here)
	cancel(others)
	m, errAwaiting := s.cancelKeyAwaiting(ctx, keyID, reason)
	return len(queued) + len(others) + n + m, errors.Join(errElsewhere, errAwaiting)
}

// keyRunsPage is how many of a revoked key's active runs one store read returns.
const keyRunsPage = 100

// cancelKeyElsewhere asks the instances that hold them to cancel the key's queued and running runs not
// live here (here: those CancelKey cancels itself), the queued ones first, as the store lists them; it
// reads them by pages, so a key with many runs costs more reads, not a larger one. A run that became
// live here since CancelKey looked is cancelled here. Alone on its store, the service runs every active
// run itself: those not live here are runs whose end could not be stored, ended at the next start.
func (s *Service) cancelKeyElsewhere(ctx context.Context, user, keyID, reason string, here map[string]bool) (int, error) {
	if s.leases == nil {
		return 0, nil
	}
	n := 0
	var failed notAsked
	var after *store.Run
	for {
		runs, err := s.opts.Store.ActiveRunsOfKey(ctx, user, keyID, after, keyRunsPage)
		if err != nil {
			s.log.Error("read the active runs of a revoked key", "key_id", keyID, "err", err)
			return n, errors.Join(fmt.Errorf("read the key's queued and running runs: %w", err), failed.err())
		}
		for i := range runs {
			r := &runs[i]
			if here[r.ID] {
				continue // cancelled by CancelKey, or listed again (queued, then running)
			}
			here[r.ID] = true
			if live := s.live(r.UserID, r.ID); live != nil {
				s.cancelLive(live, reason)
				n++
				continue
			}
			asked, err := s.cancelElsewhere(ctx, r.UserID, r.ID, reason)
			if err != nil {
				s.log.Error("ask another instance to cancel a run of a revoked key", append(storedRunAttrs(r), "err", err)...)
				failed.add(err)
				continue
			}
			if asked {
				n++
			}
		}
		if len(runs) < keyRunsPage {
			return n, failed.err()
		}
		after = &runs[len(runs)-1]
	}
}

// notAsked counts the runs of a revoked key that could not be asked to cancel, and keeps the first
// failure.
type notAsked struct {
	n     int
	first error
}

func (f *notAsked) add(err error) {
	if f.n++; f.first == nil {
		f.first = err
	}
}

// err is nil when every run was asked.
func (f *notAsked) err() error {
	if f.n == 0 {
		return nil
	}
	return fmt.Errorf("ask for the cancel of %d of the key's runs: %w", f.n, f.first)
}

// cancelKeyAwaiting cancels the key's runs awaiting approval, which live in the store only (on any
// instance): a decision could not resume them with a revoked key anyway.
func (s *Service) cancelKeyAwaiting(ctx context.Context, keyID, reason string) (int, error) {
	runs, err := s.opts.Store.AwaitingRuns(ctx, keyID)
	if err != nil {
		s.log.Error("read the runs awaiting approval of a revoked key", "key_id", keyID, "err", err)
		return 0, fmt.Errorf("read the key's runs awaiting approval: %w", err)
	}
	n := 0
	var failed notAsked
	for i := range runs {
		r := &runs[i]
		if _, err := s.cancelAwaiting(ctx, r.UserID, r, reason); err != nil {
			s.log.Error("cancel a run awaiting approval of a revoked key", append(storedRunAttrs(r), "err", err)...)
			failed.add(err)
			continue
		}
		n++
	}
	return n, failed.err()
}

// Follower reads one run's events in order, from the live run or from the store: a run that is not
// live any more has its whole log in the store.
type Follower struct {
	s     *Service
	user  string
	id    string
	after int64

	run   *Run          // the live run; nil when reading the store
	c     chan struct{} // the live run's signal to this reader
	wake  <-chan struct{}
	stop  func()
	ended bool // the store's log ended, or the live run's every event was read

	more bool       // the last store read returned a full page
	info *store.Run // the stored run, while reading the store; read again only while it has not ended
	// inRecovery: the reader resumed from an id in the part of the log recovery wrote.
	inRecovery bool

	// sub is signalled when another instance stored more of the run's log (a notification), or when it
	// is time to look anyway (poll); nil when the service is alone on its store.
	sub   chan struct{}
	unsub func()
	poll  *time.Timer
}

// followPage is how many stored events one Read returns at most.
const followPage = 512

// pollInterval is how often a reader of a run that is neither live here nor ended checks the store.
const pollInterval = 250 * time.Millisecond

// Follow returns a reader of the user's run's events after Seq after.
func (s *Service) Follow(ctx context.Context, user, id string, after int64) (*Follower, error) {
	f := &Follower{s: s, user: user, id: id, after: max(after, 0)}
	if live := s.live(user, id); live != nil {
		f.run = live
		f.c, f.stop = live.watch(f.after)
		f.wake = f.c
		return f, nil
	}
	r, err := s.opts.Store.Run(ctx, user, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, notFound(id)
		}
		return nil, err
	}
	f.info = r
	if s.leases != nil && r.EndedAt == nil {
		// Subscribed before the first read, so that no notification falls between the two.
		f.sub, f.unsub = s.remote.subscribe(id)
	}
	// A run recovered before reservations were kept (ReservedSeq 0) had its recovery's events numbered
	// right after the stored log, over ids the dead process may have sent.
	f.inRecovery = r.EndedAt != nil && r.RecoveredFrom > 0 && r.ReservedSeq == 0 && f.after >= r.RecoveredFrom
	return f, nil
}

// Close stops following.
func (f *Follower) Close() {
	if f.stop != nil {
		f.stop()
	}
	if f.unsub != nil {
		f.unsub()
	}
	if f.poll != nil {
		f.poll.Stop()
	}
}

// Read returns the next events, none when none are ready, and end when the log is over and every
// event of it was returned.
func (f *Follower) Read(ctx context.Context) ([]Event, bool, error) {
	if f.ended {
		return nil, true, nil
	}
	if f.run != nil {
		events, ended, inStore := f.run.eventsFor(f.c, f.after)
		if inStore {
			// Behind the events the run keeps in memory: the store has the ones it dropped.
			if events, err := f.page(ctx, f.after); err != nil || len(events) > 0 {
				if len(events) > 0 {
					f.after = events[len(events)-1].Seq
				}
				return events, false, err
			}
		}
		if len(events) > 0 {
			f.after = events[len(events)-1].Seq
			return events, false, nil
		}
		if ended {
			f.ended = true
			if last := f.run.lastSeq(); f.after > last && last > 0 {
				// A last id beyond the end: events a crash lost after the reader saw them.
				done, _, _ := f.run.Events(last - 1)
				return done, true, nil
			}
		}
		return nil, f.ended, nil
	}
	r := f.info
	if f.inRecovery {
		// The ids from recovery's first event on may have named events the dead process streamed but
		// never stored (a run recovered before reservations were kept): the reader gets recovery's
		// events in full — the partial answer, the closed calls, error and done — and learns how the
		// run ended.
		return f.tail(ctx, r.RecoveredFrom-1)
	}
	events, err := f.page(ctx, f.after)
	if err != nil {
		return nil, false, err
	}
	if len(events) > 0 {
		f.after = events[len(events)-1].Seq
		return events, false, nil
	}
	if r.EndedAt == nil {
		if r, err = f.s.opts.Store.Run(ctx, f.user, f.id); err != nil {
			return nil, false, err
		}
		f.info = r
		if r.EndedAt != nil {
			// It ended since the page above was read, and its last events were stored with its end:
			// read them before saying it ended.
			if events, err = f.page(ctx, f.after); err != nil {
				return nil, false, err
			}
			if len(events) > 0 {
				f.after = events[len(events)-1].Seq
				return events, false, nil
			}
		}
	}
	switch {
	case r.EndedAt != nil && f.after > r.LastEventSeq && r.LastEventSeq > 0:
		// A last id beyond the end: events a crash lost after the reader saw them. The log's last
		// event, done, tells it how the run ended.
		return f.tail(ctx, r.LastEventSeq-1)
	case r.EndedAt != nil:
		f.ended = true
	case r.Status == store.RunAwaiting && f.after >= r.LastEventSeq:
		// Paused for a person: this part of its log is over (awaiting_approval was its last event).
		// Its log goes on once it is decided, from the next Seq.
		f.ended = true
	default:
		// Not ended, not live when Follow looked: it may have become live here since (a queued run
		// recovered at start-up), or belong to another process; the next Read looks again.
		if live := f.s.live(f.user, f.id); live != nil {
			f.run = live
			f.c, f.stop = live.watch(f.after)
			f.wake = f.c
			return f.Read(ctx)
		}
	}
	return nil, f.ended, nil
}

// page reads up to followPage stored events after Seq after.
func (f *Follower) page(ctx context.Context, after int64) ([]Event, error) {
	stored, err := f.s.opts.Store.Events(ctx, f.user, f.id, after, followPage)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound(f.id)
	}
	if err != nil {
		return nil, err
	}
	f.more = len(stored) == followPage
	events := make([]Event, len(stored))
	for i, e := range stored {
		events[i] = Event{Seq: e.Seq, Type: e.Type, Data: e.Data}
	}
	return events, nil
}

// tail ends the reading with the stored events after Seq after: the answer to a reader whose last id
// names events a crash lost.
func (f *Follower) tail(ctx context.Context, after int64) ([]Event, bool, error) {
	f.ended = true
	events, err := f.page(ctx, after)
	return events, true, err
}

// Wait returns a channel that receives when Read may have more: a signal from the live run, or, when
// reading the store, at once while pages remain and after a short poll otherwise.
func (f *Follower) Wait() <-chan struct{} {
	if f.run != nil {
		return f.wake
	}
	if f.sub != nil {
		// Another instance's run: a notification wakes the reader, a poll in case it was lost.
		if f.more || f.ended {
			poke(f.sub)
		} else if f.poll == nil {
			sub := f.sub
			f.poll = time.AfterFunc(remotePoll, func() { poke(sub) })
		} else {
			f.poll.Reset(remotePoll)
		}
		return f.sub
	}
	c := make(chan struct{}, 1)
	if f.more || f.ended {
		c <- struct{}{}
		return c
	}
	time.AfterFunc(pollInterval, func() { c <- struct{}{} })
	return c
}

// Wait waits until the user's run has ended, or ctx, and returns how it ended.
func (s *Service) Wait(ctx context.Context, user, id string) (Outcome, error) {
	for {
		if live := s.live(user, id); live != nil {
			select {
			case <-live.Done():
				return live.Outcome(), nil
			case <-ctx.Done():
				return Outcome{}, ctx.Err()
			}
		}
		r, err := s.opts.Store.Run(ctx, user, id)
		if errors.Is(err, store.ErrNotFound) {
			return Outcome{}, notFound(id)
		}
		if err != nil {
			return Outcome{}, err
		}
		if r.EndedAt != nil {
			return s.storedOutcome(ctx, user, r)
		}
		if r.Status == store.RunAwaiting {
			return Outcome{Status: r.Status, Usage: r.Usage, ToolHistory: []runevent.ToolHistory{}}, nil
		}
		select {
		case <-time.After(pollInterval):
		case <-ctx.Done():
			return Outcome{}, ctx.Err()
		}
	}
}

// storedOutcome rebuilds the outcome of an ended run from the last events of its log, and from its
// records when the log has no complete event (a cancelled, failed or interrupted run, or no log).
func (s *Service) storedOutcome(ctx context.Context, user string, r *store.Run) (Outcome, error) {
	o := Outcome{Status: r.Status, FinishReason: r.FinishReason, Usage: r.Usage, ToolHistory: []runevent.ToolHistory{}}
	events, err := s.opts.Store.Events(ctx, user, r.ID, max(r.LastEventSeq-8, 0), 16)
	if err != nil {
		return o, err
	}
	completed := false
	for _, e := range events {
		switch e.Type {
		case runevent.TypeComplete:
			c, err := runevent.Decode[runevent.Complete](e.Data)
			if err != nil {
				return o, fmt.Errorf("run %s: event %d: %w", r.ID, e.Seq, err)
			}
			o.Message, o.ToolHistory, completed = c.Message, c.ToolHistory, true
		case runevent.TypeError:
			info, err := runevent.Decode[runevent.Error](e.Data)
			if err != nil {
				return o, fmt.Errorf("run %s: event %d: %w", r.ID, e.Seq, err)
			}
			o.Error = &info
		}
	}
	if o.Error == nil && r.Status == store.RunFailed {
		o.Error = &runevent.Error{Code: "internal", Message: r.Error}
	}
	if !completed {
		return s.recordsOutcome(ctx, user, r, o)
	}
	return o, nil
}

// recordsOutcome adds to o the run's last assistant record and its tool calls, as its records hold them.
func (s *Service) recordsOutcome(ctx context.Context, user string, r *store.Run, o Outcome) (Outcome, error) {
	recs, err := s.opts.Store.Records(ctx, user, r.SessionID)
	if err != nil {
		return o, err
	}
	var calls []store.ToolCall
	for i := range recs {
		switch rec := &recs[i]; {
		case rec.RunID != r.ID:
		case rec.Role == store.RoleAssistant:
			o.Message, calls = runevent.RecordOf(rec), rec.ToolCalls
		case rec.Role == store.RoleTool:
			h := runevent.ToolHistory{ToolCallID: rec.ToolCallID, Name: rec.Name, Arguments: json.RawMessage("{}"),
				Success: rec.Success != nil && *rec.Success, Content: rec.Content, Payload: rec.Payload}
			if i := slices.IndexFunc(calls, func(c store.ToolCall) bool { return c.ID == rec.ToolCallID }); i >= 0 {
				h.Arguments = calls[i].Arguments
			}
			if rec.DurationMS != nil {
				h.DurationMS = *rec.DurationMS
			}
			o.ToolHistory = append(o.ToolHistory, h)
		}
	}
	return o, nil
}
