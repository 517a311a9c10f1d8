package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"chatd/internal/runevent"
	"chatd/internal/store"
)

// Texts of a run a dead process left running.
const (
	// EventsLost is the code of the error event recovery writes when a client may have been sent
	// events the dead process had not stored: the log goes on past every id it may have sent.
	EventsLost        = "events_lost"
	interruptedError  = "chatd stopped before the run ended; the partial answer is kept"
	interruptedReason = "chatd stopped before this call finished."
	// FinishInterrupted is the finish reason of an assistant record recovered from a run's event log.
	FinishInterrupted = "interrupted"
)

// Recover ends the runs a previous process left running — it died or was killed mid-run — and starts
// the runs it left queued. A running run ends as interrupted: the answer it had streamed (as far as its
// event log holds it) is stored as an assistant record, its open tool calls get failed tool records,
// and its log ends with error and done interrupted, so that its session accepts the next message with a
// history every provider accepts. Call it at start-up, before serving: it assumes that no other process
// owns a run. The runs left awaiting approval stay so: their expiry is kept again.
//
// On a store several instances share, it recovers only the runs whose owner's lease ended (Sweep): the
// runs of live instances are theirs.
func (s *Service) Recover(ctx context.Context) error {
	if err := s.keepExpiries(ctx); err != nil {
		return fmt.Errorf("recover runs: %w", err)
	}
	if s.leases != nil {
		return s.Sweep(ctx)
	}
	runs, err := s.opts.Store.UnfinishedRuns(ctx)
	if err != nil {
		return fmt.Errorf("recover runs: %w", err)
	}
	var errs []error
	for i := range runs {
		if r := &runs[i]; r.Status == store.RunRunning {
			if err := s.interrupt(ctx, r); err != nil {
				errs = append(errs, fmt.Errorf("recover run %s: %w", r.ID, err))
				continue
			}
			s.log.Warn("run interrupted by a previous stop", storedRunAttrs(r)...)
		}
	}
	sessions := map[string]bool{}
	for i := range runs {
		if r := &runs[i]; r.Status == store.RunQueued {
			if err := s.requeue(ctx, r); err != nil {
				errs = append(errs, fmt.Errorf("recover queued run %s: %w", r.ID, err))
				continue
			}
			sessions[r.SessionID] = true
		}
	}
	for id := range sessions {
		s.queues.kick(id)
	}
	return errors.Join(errs...)
}

// interrupt ends a run a dead process left running. Its events go on after the run's reservation: the
// dead process may have sent a client any id up to it, and those ids keep naming what they named. When
// that leaves a gap after the stored log, the first event after it says so (error, code events_lost).
func (s *Service) interrupt(ctx context.Context, r *store.Run) error {
	lastSeq, logged, partial, err := s.scanLog(ctx, r)
	if err != nil {
		return err
	}
	var events []store.Event
	add := func(typ string, data []byte) {
		lastSeq++
		events = append(events, store.Event{RunID: r.ID, Seq: lastSeq, Type: typ, Data: data})
	}
	stored := lastSeq
	lastSeq = max(lastSeq, r.ReservedSeq)
	from := lastSeq + 1
	if lastSeq > stored {
		add(runevent.TypeError, runevent.Encode(runevent.Error{Code: EventsLost, Message: fmt.Sprintf("chatd stopped before it stored "+
			"events %d to %d of this run, which a client may have been sent; the stored records hold the answer as "+
			"far as it was saved", stored+1, lastSeq)}))
	}
	unlogged, err := s.unlogged(ctx, r, logged)
	if err != nil {
		return err
	}
	for i := range unlogged {
		add(runevent.TypeRecord, runevent.Encode(runevent.RecordEvent{Message: runevent.RecordOf(&unlogged[i])}))
	}
	// The log is a prefix of what the run emitted: text streamed before a record it does not name belongs
	// to that record's turn, which is stored already.
	if partial != nil && len(unlogged) == 0 {
		rec, err := s.storePartial(ctx, r, partial)
		if err != nil {
			return err
		}
		if rec != nil {
			add(runevent.TypeRecord, runevent.Encode(runevent.RecordEvent{Message: runevent.RecordOf(rec)}))
		}
	}
	closed, err := s.opts.Store.CloseCalls(ctx, r.UserID, r.ID, interruptedReason)
	if err != nil {
		return err
	}
	for i := range closed {
		add(runevent.TypeRecord, runevent.Encode(runevent.RecordEvent{Message: runevent.RecordOf(&closed[i])}))
	}
	add(runevent.TypeError, runevent.Encode(runevent.Error{Code: "interrupted", Message: interruptedError, Retryable: true}))
	add(runevent.TypeDone, runevent.Encode(runevent.Done{Status: store.RunInterrupted}))
	_, err = s.opts.Store.FinishRun(ctx, r.UserID, r.ID, store.RunEnd{Status: store.RunInterrupted,
		FinishReason: FinishInterrupted, Error: interruptedError, UsageFromEntries: true, Reason: interruptedReason,
		Events: events, RecoveredFrom: from})
	return err
}

// partialTurn is what a run streamed of a turn it did not store.
type partialTurn struct {
	text, reasoning strings.Builder
}

// scanLog reads a run's stored events and returns the Seq of the last one, the id of the last record
// the log names, and the turn the run was streaming when its process died: the text and reasoning after
// the last logged user or assistant record (nil when there is none).
func (s *Service) scanLog(ctx context.Context, r *store.Run) (int64, string, *partialTurn, error) {
	var last int64
	var logged string
	var p *partialTurn
	for {
		events, err := s.opts.Store.Events(ctx, r.UserID, r.ID, last, 1000)
		if err != nil {
			return 0, "", nil, err
		}
		if len(events) == 0 {
			break
		}
		for _, e := range events {
			last = e.Seq
			switch e.Type {
			case runevent.TypeRecord:
				var d struct {
					Message struct {
						ID   string `json:"id"`
						Role string `json:"role"`
					} `json:"message"`
				}
				if json.Unmarshal(e.Data, &d) != nil {
					continue
				}
				logged = d.Message.ID
				if d.Message.Role != store.RoleTool {
					p = nil
				}
			case runevent.TypeTextDelta, runevent.TypeReasoningDelta:
				var d struct {
					Text string `json:"text"`
				}
				if json.Unmarshal(e.Data, &d) != nil {
					continue
				}
				if p == nil {
					p = &partialTurn{}
				}
				if e.Type == runevent.TypeTextDelta {
					p.text.WriteString(d.Text)
				} else {
					p.reasoning.WriteString(d.Text)
				}
			}
		}
	}
	if p != nil && strings.TrimSpace(p.text.String()) == "" && strings.TrimSpace(p.reasoning.String()) == "" {
		p = nil
	}
	return last, logged, p, nil
}

// unlogged returns the run's records stored after logged, the last one its log names ("" for none): the
// process died before the event log wrote their record events — or, for a partial answer, an earlier
// recovery that stopped half-way stored it. A run's records are the last of its session.
func (s *Service) unlogged(ctx context.Context, r *store.Run, logged string) ([]store.Record, error) {
	recs, err := s.opts.Store.Records(ctx, r.UserID, r.SessionID)
	if err != nil {
		return nil, err
	}
	i := len(recs)
	for i > 0 && recs[i-1].RunID == r.ID && recs[i-1].ID != logged {
		i--
	}
	return recs[i:], nil
}

// storePartial stores the partial answer of an interrupted run as its last assistant record.
func (s *Service) storePartial(ctx context.Context, r *store.Run, p *partialTurn) (*store.Record, error) {
	rec := &store.Record{SessionID: r.SessionID, RunID: r.ID, Role: store.RoleAssistant, Content: p.text.String(),
		Reasoning: p.reasoning.String(), Model: r.Model, FinishReason: FinishInterrupted}
	if err := s.opts.Store.AppendRecord(ctx, r.UserID, rec); err != nil {
		if errors.Is(err, store.ErrConflict) {
			// A tool call is open: the text belongs to no turn the history can hold. It stays in the log.
			s.log.Warn("partial answer of an interrupted run not stored: a tool call is open", storedRunAttrs(r)...)
			return nil, nil
		}
		return nil, err
	}
	return rec, nil
}

// requeue makes a queued run of a previous process live again, to start when its session is free.
func (s *Service) requeue(ctx context.Context, r *store.Run) error {
	var req Request
	if err := json.Unmarshal(r.Request, &req); err != nil {
		return s.failQueued(ctx, r, fmt.Errorf("its stored request is unreadable: %w", err))
	}
	req.SessionID = r.SessionID
	if refused, err := s.keyRefused(ctx, r); err != nil {
		return err
	} else if refused != nil {
		return s.failQueued(ctx, r, refused)
	}
	// The sender's quota was checked when the run was queued; its key still counts what it uses.
	p, err := s.plan(ctx, r.UserID, req, Account{KeyID: r.KeyID})
	if err != nil {
		return s.failQueued(ctx, r, err)
	}
	run := s.newRun(r.ID, r.UserID, p)
	run.status = store.RunQueued
	for after := int64(0); ; {
		events, err := s.opts.Store.Events(ctx, r.UserID, r.ID, after, 1000)
		if err != nil {
			return err
		}
		if len(events) == 0 {
			break
		}
		for _, e := range events {
			run.events = append(run.events, Event{Seq: e.Seq, Type: e.Type, Data: e.Data})
		}
		after = events[len(events)-1].Seq
	}
	// The stored events show at once; new ones go after every id the dead process may have sent, and
	// show once the event log has raised the reservation past them.
	run.persisted = 0
	if n := len(run.events); n > 0 {
		run.persisted = run.events[n-1].Seq
	}
	run.next = max(run.persisted, r.ReservedSeq) + 1
	if run.log != nil {
		run.reserved = run.persisted
	}
	if len(run.events) == 0 {
		run.emit(runevent.TypeRunStart, runevent.Encode(runevent.RunStart{RunID: run.ID, SessionID: run.SessionID, Model: run.Model, Agent: run.Agent,
			Action: p.req.Action != nil}))
	}
	run.emit(runevent.TypeStatus, runevent.EncodeStatus("chatd restarted; the queued message starts when the session is free…"))
	if err := s.admitQueued(run, 0); err != nil { // every run the store kept queued
		return err
	}
	s.queues.push(run)
	return nil
}

// keyRefused returns why a queued run may not start because of its API key — revoked, or expired,
// while chatd was down —, or nil.
func (s *Service) keyRefused(ctx context.Context, r *store.Run) (refused, err error) {
	if r.KeyID == "" {
		return nil, nil
	}
	keys, err := s.opts.Store.Keys(ctx, r.UserID)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		if k.ID == r.KeyID && k.RevokedAt == nil && (k.ExpiresAt == nil || time.Now().Before(*k.ExpiresAt)) {
			return nil, nil
		}
	}
	return errKeyRevoked(), nil
}

// errKeyRevoked says why a run may not start or resume: its API key no longer works.
func errKeyRevoked() *Error {
	return &Error{Kind: ErrForbidden, Code: "key_revoked", Message: "the API key that sent it was revoked or has expired"}
}

// keyRevokedReason is the cancel reason of the runs of a revoked key.
const keyRevokedReason = "the API key that started the run was revoked"

// failQueued ends a recovered queued run that can no longer start.
func (s *Service) failQueued(ctx context.Context, r *store.Run, cause error) error {
	s.log.Error("queued run cannot start after a restart", append(storedRunAttrs(r), "err", cause)...)
	last := max(r.LastEventSeq, r.ReservedSeq) // past every id a client may have been sent
	msg := "the queued message could not be started after chatd restarted: " + cause.Error()
	info := runevent.Error{Code: "invalid_request", Message: msg}
	if e, ok := errors.AsType[*Error](cause); ok {
		info.Code = e.Code
	}
	events := []store.Event{
		{RunID: r.ID, Seq: last + 1, Type: runevent.TypeError, Data: runevent.Encode(info)},
		{RunID: r.ID, Seq: last + 2, Type: runevent.TypeDone, Data: runevent.Encode(runevent.Done{Status: store.RunFailed})},
	}
	_, err := s.opts.Store.FinishRun(ctx, r.UserID, r.ID, store.RunEnd{Status: store.RunFailed, FinishReason: "error",
		Error: msg, Events: events})
	return err
}
