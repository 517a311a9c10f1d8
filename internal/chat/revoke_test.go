package chat_test

import (
	"crypto/rand"
	"encoding/json"
	"testing"
	"time"

	"chatd/internal/auth"
	"chatd/internal/chat"
	"chatd/internal/llm/llmtest"
	"chatd/internal/runevent"
	"chatd/internal/store"
	"chatd/internal/store/postgres/pgtest"
)

// revokedReason is the reason the API gives CancelKey.
const revokedReason = "the API key that started the run was revoked"

// newKey stores an API key of user on db and returns its id.
func newKey(t *testing.T, db store.Store, name string) string {
	t.Helper()
	k := &store.APIKey{User: user, Name: name, Prefix: "chd_" + name, Hash: []byte(rand.Text())}
	if err := db.CreateKey(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	return k.ID
}

// TestRevokeAcrossInstances: a key revoked on instance a stops what it started on instance b — its
// running run (the model held open) is cancelled, and its queued runs never start, the one behind that
// run and the one behind another key's run — while the other key's run on b goes on. Its run on a
// stops too, counted once.
func TestRevokeAcrossInstances(t *testing.T) {
	dsn := pgtest.NewSchema(t)
	clk := newClock()
	a := newInstance(t, dsn, "a", clk, true, llmtest.Turn{Text: "the revoked key's answer on a", Block: true})
	b := newInstance(t, dsn, "b", clk, true,
		llmtest.Turn{Text: "the revoked key's answer", Block: true},
		llmtest.Turn{Text: "the other key's answer", Block: true})
	revoked, kept := newKey(t, a.db, "revoked"), newKey(t, a.db, "kept")
	as := func(key string, onActive string) chat.StartOptions {
		return chat.StartOptions{Account: chat.Account{KeyID: key}, OnActiveRun: onActive}
	}
	start := func(req chat.Request, opt chat.StartOptions, want string) *chat.Started {
		t.Helper()
		st, err := b.svc.Start(t.Context(), user, req, opt)
		if err != nil || st.Status != want {
			t.Fatalf("start on b: %+v, %v; want %s", st, err, want)
		}
		return st
	}

	run := start(chat.Request{Message: "hello"}, as(revoked, ""), store.RunRunning)
	streamed := readUntil(t, b.svc, run.RunID, 0, isType(runevent.TypeTextDelta))
	other := start(chat.Request{Message: "hello too"}, as(kept, ""), store.RunRunning)
	readUntil(t, b.svc, other.RunID, 0, isType(runevent.TypeTextDelta))
	behindOwn := start(chat.Request{SessionID: run.SessionID, Message: "next"}, as(revoked, chat.OnActiveEnqueue), store.RunQueued)
	behindOther := start(chat.Request{SessionID: other.SessionID, Message: "next"}, as(revoked, chat.OnActiveEnqueue), store.RunQueued)
	onA, err := a.svc.Start(t.Context(), user, chat.Request{Message: "hello a"}, as(revoked, ""))
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, a.svc, onA.RunID, 0, isType(runevent.TypeTextDelta))

	if _, err := a.db.RevokeKey(t.Context(), user, revoked); err != nil {
		t.Fatal(err)
	}
	if n, err := a.svc.CancelKey(t.Context(), user, revoked, revokedReason); n != 4 || err != nil {
		t.Fatalf("CancelKey on a cancelled %d runs (%v), want 4: the running one on a, the running one and the two queued ones on b", n, err)
	}
	// What the notification asks of b, done now rather than waited for: b's renewal finds the cancels.
	b.svc.RenewLeases(t.Context())

	rest := readUntil(t, a.svc, run.RunID, streamed[len(streamed)-1].Seq, isType(runevent.TypeDone))
	checkRunLog(t, append(streamed, rest...), 1, true, store.RunCancelled)
	for _, id := range []string{onA.RunID, behindOwn.RunID, behindOther.RunID} {
		if out, err := a.svc.Wait(t.Context(), user, id); err != nil || out.Status != store.RunCancelled {
			t.Errorf("the revoked key's run %s: %+v, %v; want cancelled", id, out, err)
		}
	}
	if got := b.up.Requests(); len(got) != 2 {
		t.Errorf("b's model got %d requests, want 2: a queued run of the revoked key started", len(got))
	}

	// The other key's run was not touched: it still runs, until it is cancelled here.
	if r, err := a.db.Run(t.Context(), user, other.RunID); err != nil || r.Status != store.RunRunning {
		t.Fatalf("the other key's run: %+v, %v; want still running", r, err)
	}
	if _, err := b.svc.Cancel(t.Context(), user, other.RunID, ""); err != nil {
		t.Fatal(err)
	}
	if out, err := b.svc.Wait(t.Context(), user, other.RunID); err != nil || out.Status != store.RunCancelled {
		t.Fatalf("the other key's run after its own cancel: %+v, %v", out, err)
	}
}

// TestRevokedQueuedRunNeverStarts: a queued run of a revoked key whose owner has not carried out the
// cancel yet (no notification reached it, its next renewal is far off) does not start when the run
// before it ends: the store refuses to start it, and it ends cancelled, its model never called.
func TestRevokedQueuedRunNeverStarts(t *testing.T) {
	dsn := pgtest.NewSchema(t)
	clk := newClock()
	a := newInstance(t, dsn, "a", clk, false)
	b := newInstance(t, dsn, "b", clk, false, llmtest.Turn{Text: "another key's answer", Block: true})
	revoked, kept := newKey(t, a.db, "revoked"), newKey(t, a.db, "kept")

	first, err := b.svc.Start(t.Context(), user, chat.Request{Message: "hello"}, chat.StartOptions{Account: chat.Account{KeyID: kept}})
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, b.svc, first.RunID, 0, isType(runevent.TypeTextDelta))
	queued := enqueueOn(t, b, first.SessionID, revoked)
	if _, err := a.db.RevokeKey(t.Context(), user, revoked); err != nil {
		t.Fatal(err)
	}
	if n, err := a.svc.CancelKey(t.Context(), user, revoked, revokedReason); n != 1 || err != nil {
		t.Fatalf("CancelKey on a cancelled %d runs (%v), want 1", n, err)
	}
	// The session frees on b before b hears of the cancel: its queue tries to start the revoked run.
	wantQueuedCancelled(t, b, first.RunID, queued.RunID)
}

// TestRevokedRunsOfADeadInstance: the runs of a revoked key whose instance died are not started again
// by the instance that takes them over: the running one ends interrupted, the queued one ends without
// starting, its key refused.
func TestRevokedRunsOfADeadInstance(t *testing.T) {
	dsn := pgtest.NewSchema(t)
	clk := newClock()
	dead := newInstance(t, dsn, "dead", clk, false, llmtest.Turn{Text: "a partial answer that never ends", Block: true})
	a := newInstance(t, dsn, "a", clk, false)
	revoked := newKey(t, a.db, "revoked")
	opt := chat.StartOptions{Account: chat.Account{KeyID: revoked}, OnActiveRun: chat.OnActiveEnqueue}

	run, err := dead.svc.Start(t.Context(), user, chat.Request{Message: "hello"}, opt)
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, a.svc, run.RunID, 0, isType(runevent.TypeTextDelta))
	queued, err := dead.svc.Start(t.Context(), user, chat.Request{SessionID: run.SessionID, Message: "next"}, opt)
	if err != nil || queued.Status != store.RunQueued {
		t.Fatalf("enqueue: %+v, %v", queued, err)
	}
	// Its first events stored: "dead" is still a process here, and its log must not race the recovery's.
	readUntil(t, a.svc, queued.RunID, 0, isType(runevent.TypeStatus))
	if _, err := a.db.RevokeKey(t.Context(), user, revoked); err != nil {
		t.Fatal(err)
	}
	// Asked of an instance that no longer answers: recorded, never waited for.
	if n, err := a.svc.CancelKey(t.Context(), user, revoked, revokedReason); n != 2 || err != nil {
		t.Fatalf("CancelKey cancelled %d runs (%v), want 2", n, err)
	}
	clk.step(leaseTTL + time.Second) // "dead" stopped renewing
	if err := a.svc.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	events := readUntil(t, a.svc, run.RunID, 0, isType(runevent.TypeDone))
	checkRunLog(t, events, 1, false, store.RunInterrupted)
	out, err := a.svc.Wait(t.Context(), user, queued.RunID)
	if err != nil || out.Status == store.RunCompleted || out.Status == store.RunRunning {
		t.Fatalf("the revoked key's queued run taken over: %+v, %v; want ended without starting", out, err)
	}
	if out.Error == nil || out.Error.Code != "key_revoked" {
		t.Errorf("the queued run taken over ended with %+v, want key_revoked", out.Error)
	}
	if got := a.up.Requests(); len(got) != 0 {
		t.Errorf("the instance that took the runs over called its model %d times, want 0", len(got))
	}
}

// TestSendRacingRevoke: a send whose key was verified before a revoke on another instance (b's cache
// of verified keys still trusts it, or its request body was still coming in) but whose run is stored
// only once the revoke's CancelKey has listed the key's runs, stops all the same: the run reads its key
// again once stored, and ends cancelled. A run started early has called its model once by then; one
// stored first never calls it.
func TestSendRacingRevoke(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opt       chat.StartOptions
		wantCalls int
	}{
		{name: "started early", wantCalls: 1},
		{name: "stored first", opt: chat.StartOptions{IdempotencyKey: "send-1"}, wantCalls: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := pgtest.NewSchema(t)
			clk := newClock()
			a := newInstance(t, dsn, "a", clk, true)
			b := newInstance(t, dsn, "b", clk, true, llmtest.Turn{Text: "an answer the revoked key must not get"})
			authA, err := auth.New(t.Context(), auth.Options{Store: a.db})
			if err != nil {
				t.Fatal(err)
			}
			authB, err := auth.New(t.Context(), auth.Options{Store: b.db})
			if err != nil {
				t.Fatal(err)
			}
			secret, k, err := authA.CreateKey(t.Context(), auth.KeySpec{User: user, Name: "racing"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := authB.Verify(t.Context(), secret); err != nil {
				t.Fatal(err)
			}
			if _, err := authA.RevokeKey(t.Context(), user, k.ID); err != nil {
				t.Fatal(err)
			}
			if n, err := a.svc.CancelKey(t.Context(), user, k.ID, revokedReason); n != 0 || err != nil {
				t.Fatalf("CancelKey cancelled %d runs before the send (%v), want 0", n, err)
			}
			p, err := authB.Verify(t.Context(), secret)
			if err != nil {
				t.Fatalf("b's cache no longer trusts the revoked key (%v): the race this test is about cannot happen", err)
			}
			opt := tc.opt
			opt.Account = chat.Account{KeyID: p.KeyID}
			st, err := b.svc.Start(t.Context(), user, chat.Request{Message: "hello"}, opt)
			if err != nil {
				t.Fatal(err)
			}
			out, err := b.svc.Wait(t.Context(), user, st.RunID)
			if err != nil || out.Status != store.RunCancelled {
				t.Fatalf("the run sent with the revoked key: %+v, %v; want cancelled", out, err)
			}
			events := readUntil(t, a.svc, st.RunID, 0, isType(runevent.TypeDone))
			if c := cancelledEvent(t, events); c.Reason != revokedReason {
				t.Errorf("cancelled for %q, want %q", c.Reason, revokedReason)
			}
			if got := b.up.Requests(); len(got) != tc.wantCalls {
				t.Errorf("b's model got %d requests, want %d", len(got), tc.wantCalls)
			}
		})
	}
}

// cancelledEvent returns the cancelled event among a run's events.
func cancelledEvent(t *testing.T, events []chat.Event) runevent.Cancelled {
	t.Helper()
	for _, e := range events {
		if e.Type == runevent.TypeCancelled {
			var c runevent.Cancelled
			if err := json.Unmarshal(e.Data, &c); err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
	t.Fatalf("no cancelled event among %d events", len(events))
	return runevent.Cancelled{}
}

// TestQueuedRacingRevoke: a run of a revoked key queued after the revoke listed the key's runs (b's
// cache still trusted the key) never reaches the model: it reads its key again as it starts, once
// stored as running, and ends cancelled before its first model call.
func TestQueuedRacingRevoke(t *testing.T) {
	dsn := pgtest.NewSchema(t)
	clk := newClock()
	a := newInstance(t, dsn, "a", clk, true)
	b := newInstance(t, dsn, "b", clk, true, llmtest.Turn{Text: "another key's answer", Block: true},
		llmtest.Turn{Text: "an answer the revoked key must not get"})
	revoked, kept := newKey(t, a.db, "revoked"), newKey(t, a.db, "kept")
	first, err := b.svc.Start(t.Context(), user, chat.Request{Message: "hello"}, chat.StartOptions{Account: chat.Account{KeyID: kept}})
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, b.svc, first.RunID, 0, isType(runevent.TypeTextDelta))
	if _, err := a.db.RevokeKey(t.Context(), user, revoked); err != nil {
		t.Fatal(err)
	}
	if n, err := a.svc.CancelKey(t.Context(), user, revoked, revokedReason); n != 0 || err != nil {
		t.Fatalf("CancelKey cancelled %d runs before the send (%v), want 0", n, err)
	}
	queued := enqueueOn(t, b, first.SessionID, revoked)
	wantQueuedCancelled(t, b, first.RunID, queued.RunID)
}

// enqueueOn queues on in the session a send of the key, behind the session's run.
func enqueueOn(t *testing.T, on *instance, sessionID, keyID string) *chat.Started {
	t.Helper()
	queued, err := on.svc.Start(t.Context(), user, chat.Request{SessionID: sessionID, Message: "next"},
		chat.StartOptions{Account: chat.Account{KeyID: keyID}, OnActiveRun: chat.OnActiveEnqueue})
	if err != nil || queued.Status != store.RunQueued {
		t.Fatalf("enqueue: %+v, %v", queued, err)
	}
	return queued
}

// wantQueuedCancelled cancels the run ahead (on on, whose model answered it) so that the session frees,
// and fails t unless the revoked key's queued run then ends cancelled without calling the model.
func wantQueuedCancelled(t *testing.T, on *instance, aheadID, queuedID string) {
	t.Helper()
	if _, err := on.svc.Cancel(t.Context(), user, aheadID, ""); err != nil {
		t.Fatal(err)
	}
	out, err := on.svc.Wait(t.Context(), user, queuedID)
	if err != nil || out.Status != store.RunCancelled {
		t.Fatalf("the revoked key's queued run: %+v, %v; want cancelled", out, err)
	}
	if got := on.up.Requests(); len(got) != 1 {
		t.Errorf("the model got %d requests, want 1: the revoked key's queued run called it", len(got))
	}
}
