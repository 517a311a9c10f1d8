package postgres

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"chatd/internal/store"
	"chatd/internal/store/postgres/pgtest"
)

// Two *DB on one database are two instances of chatd: two connection pools that share nothing but
// PostgreSQL. These tests race them against each other; the database alone must hold the invariants.

// twoInstances opens two stores on one fresh schema.
func twoInstances(t *testing.T) [2]*DB {
	dsn := pgtest.NewSchema(t)
	return [2]*DB{openTest(t, dsn), openTest(t, dsn)}
}

// race runs fn(i, store) for i in [0, n) at once, alternating the instances, and returns the errors.
func race(dbs [2]*DB, n int, fn func(i int, s store.Store) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = fn(i, dbs[i%2]) })
	}
	wg.Wait()
	return errs
}

// wantOneWinner fails unless exactly one of errs is nil and the others are target.
func wantOneWinner(t *testing.T, what string, errs []error, target error) int {
	t.Helper()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("%s: racers %d and %d both won", what, winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, target):
			t.Errorf("%s: racer %d: %v, want %v", what, i, err, target)
		}
	}
	if winner < 0 {
		t.Fatalf("%s: nobody won", what)
	}
	return winner
}

// TestInstancesOneRunningRun: CreateRuns and StartRuns racing from two instances for one session make
// one running run, and only the winner's first record is stored.
func TestInstancesOneRunningRun(t *testing.T) {
	dbs := twoInstances(t)
	ctx, alice := t.Context(), "alice"
	for round := range 5 {
		sess := &store.Session{Title: fmt.Sprint("round ", round)}
		if err := dbs[0].CreateSession(ctx, alice, sess); err != nil {
			t.Fatal(err)
		}
		errs := race(dbs, 8, func(i int, s store.Store) error {
			first := store.Record{SessionID: sess.ID, Role: store.RoleUser, Content: fmt.Sprint(i)}
			return s.CreateRun(ctx, alice, &store.Run{SessionID: sess.ID}, &first)
		})
		winner := wantOneWinner(t, "CreateRun", errs, store.ErrBusy)
		recs, err := dbs[1].Records(ctx, alice, sess.ID)
		if err != nil || len(recs) != 1 || recs[0].Content != fmt.Sprint(winner) {
			t.Fatalf("after the race the session holds %+v (%v); want the winner's record alone", recs, err)
		}
		running, err := dbs[1].ActiveRun(ctx, alice, sess.ID)
		if err != nil {
			t.Fatal(err)
		}

		// Queued runs started from both instances at once, once the running one ended.
		queued := make([]*store.Run, 6)
		for i := range queued {
			queued[i] = &store.Run{SessionID: sess.ID, Status: store.RunQueued, Request: []byte(`{}`)}
			if err := dbs[i%2].CreateRun(ctx, alice, queued[i], nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := dbs[0].FinishRun(ctx, alice, running.ID, store.RunEnd{Status: store.RunCompleted}); err != nil {
			t.Fatal(err)
		}
		errs = race(dbs, len(queued), func(i int, s store.Store) error {
			first := store.Record{SessionID: sess.ID, Role: store.RoleUser, Content: fmt.Sprint("queued ", i)}
			return s.StartRun(ctx, alice, queued[i].ID, &first, 0)
		})
		winner = wantOneWinner(t, "StartRun", errs, store.ErrBusy)
		if active, err := dbs[0].ActiveRun(ctx, alice, sess.ID); err != nil || active.ID != queued[winner].ID {
			t.Errorf("ActiveRun = %+v, %v; want the winner %s", active, err, queued[winner].ID)
		}
		// The same queued run started twice: once.
		if _, err := dbs[1].FinishRun(ctx, alice, queued[winner].ID, store.RunEnd{Status: store.RunCompleted}); err != nil {
			t.Fatal(err)
		}
		next := queued[(winner+1)%len(queued)]
		errs = race(dbs, 4, func(i int, s store.Store) error {
			return s.StartRun(ctx, alice, next.ID, nil, 0)
		})
		for i, err := range errs {
			if err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrBusy) {
				t.Errorf("StartRun of one run, racer %d: %v", i, err)
			}
		}
		wantOneWinner(t, "StartRun of one run", errs, store.ErrConflict)
		recs, err = dbs[0].Records(ctx, alice, sess.ID)
		if err != nil || len(recs) != 2 {
			t.Errorf("records after the StartRun races = %+v, %v; want two", recs, err)
		}
	}
}

// TestInstancesIdempotencyKey: one key sent to both instances at once, for different sessions, makes one
// run; the others are ErrDuplicate.
func TestInstancesIdempotencyKey(t *testing.T) {
	dbs := twoInstances(t)
	ctx := t.Context()
	for round := range 5 {
		key := fmt.Sprint("key-", round)
		errs := race(dbs, 8, func(i int, s store.Store) error {
			return s.CreateRun(ctx, "alice", &store.Run{IdempotencyKey: key, NewSession: &store.Session{}}, nil)
		})
		wantOneWinner(t, "CreateRun with one key", errs, store.ErrDuplicate)
	}
}

// TestInstancesQuota: a concurrent-runs limit holds across instances.
func TestInstancesQuota(t *testing.T) {
	dbs := twoInstances(t)
	const most = 3
	limit := store.Limit{Name: store.LimitConcurrentRuns, Max: most}
	errs := race(dbs, 20, func(i int, s store.Store) error {
		return s.CreateRun(t.Context(), "alice", &store.Run{NewSession: &store.Session{}, Quota: []store.Limit{limit}}, nil)
	})
	passed := 0
	for _, err := range errs {
		switch {
		case err == nil:
			passed++
		case !errors.Is(err, store.ErrLimit):
			t.Errorf("a refused CreateRun: %v, want ErrLimit", err)
		}
	}
	if passed != most {
		t.Errorf("%d CreateRuns passed a limit of %d", passed, most)
	}
}

// TestInstancesPairing: while an assistant record's calls are open, records appended from both instances
// at once never come between it and its answers; each call gets exactly one answer; Seq stays gap-free.
func TestInstancesPairing(t *testing.T) {
	dbs := twoInstances(t)
	ctx, alice := t.Context(), "alice"
	sess := &store.Session{}
	if err := dbs[0].CreateSession(ctx, alice, sess); err != nil {
		t.Fatal(err)
	}
	for round := range 5 {
		// Assistant records with calls and user records at once: the first assistant record stored opens
		// a call, and no record but its answer may follow it.
		asst := store.Record{}
		var mu sync.Mutex
		errs := race(dbs, 8, func(i int, s store.Store) error {
			r := store.Record{SessionID: sess.ID, Role: store.RoleUser, Content: fmt.Sprint("user ", i)}
			if i%2 == 0 {
				r = store.Record{SessionID: sess.ID, Role: store.RoleAssistant, ToolCalls: []store.ToolCall{
					{ID: "call_1", Name: "f"}, {ID: "call_2", Name: "f"}}}
			}
			err := s.AppendRecord(ctx, alice, &r)
			if err == nil && r.Role == store.RoleAssistant {
				mu.Lock()
				defer mu.Unlock()
				if asst.ID != "" {
					return fmt.Errorf("a second assistant record was stored while %s's calls were open", asst.ID)
				}
				asst = r
			}
			return err
		})
		for i, err := range errs {
			if err != nil && !errors.Is(err, store.ErrConflict) {
				t.Fatalf("round %d, racer %d: %v", round, i, err)
			}
		}
		if asst.ID == "" {
			t.Fatalf("round %d: no assistant record was stored", round)
		}
		const each = 4
		errs = race(dbs, 3*each, func(i int, s store.Store) error {
			r := store.Record{SessionID: sess.ID, Role: store.RoleUser, Content: fmt.Sprint("user ", i)}
			if i%3 != 0 {
				r = store.Record{SessionID: sess.ID, Role: store.RoleTool, ParentID: asst.ID,
					ToolCallID: fmt.Sprint("call_", i%3), Content: fmt.Sprint("answer ", i)}
			}
			return s.AppendRecord(ctx, alice, &r)
		})
		answered := map[int]int{}
		for i, err := range errs {
			switch {
			case err == nil && i%3 != 0:
				answered[i%3]++
			case err != nil && !errors.Is(err, store.ErrConflict):
				t.Errorf("round %d, racer %d: %v, want ErrConflict when refused", round, i, err)
			}
		}
		if answered[1] != 1 || answered[2] != 1 {
			t.Errorf("round %d: answers per call = %v, want one each", round, answered)
		}
	}
	recs, err := dbs[1].Records(ctx, alice, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	checkPairing(t, recs)
}

// checkPairing fails unless recs keep the invariant: Seq 1..n; a tool record answers an open call of its
// parent; no other record while a call is open.
func checkPairing(t *testing.T, recs []store.Record) {
	t.Helper()
	open := map[string]bool{} // parent id + "/" + call id
	for i, r := range recs {
		if r.Seq != int64(i+1) {
			t.Fatalf("record %d has Seq %d", i, r.Seq)
		}
		if r.Role == store.RoleTool {
			k := r.ParentID + "/" + r.ToolCallID
			if !open[k] {
				t.Fatalf("record %d (Seq %d) answers %s, which is not open", i, r.Seq, k)
			}
			delete(open, k)
			continue
		}
		if len(open) > 0 {
			t.Fatalf("record %d (%s %q, Seq %d) was stored while calls %v were open", i, r.Role, r.Content, r.Seq, open)
		}
		for _, c := range r.ToolCalls {
			open[r.ID+"/"+c.ID] = true
		}
	}
}
