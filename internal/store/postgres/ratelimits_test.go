package postgres

import (
	"sync"
	"testing"
	"time"

	"chatd/internal/store/postgres/pgtest"
)

// The database's clock runs on while these tests do, so they count requests and bound waits rather than
// time them, under limits per day: an interval of hours, which no run of the tests comes near.

// allowRace sends requests of key from both instances at once and returns how many were counted and the
// waits of those refused.
func allowRace(t *testing.T, dbs [2]*DB, key string, n int, per time.Duration, requests int) (passed int, waits []time.Duration) {
	t.Helper()
	got := make([]time.Duration, requests)
	errs := make([]error, requests)
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() { got[i], errs[i] = dbs[i%2].AllowRequest(t.Context(), key, n, per) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got[i] == 0 {
			passed++
		} else {
			waits = append(waits, got[i])
		}
	}
	return passed, waits
}

// TestInstancesShareRequestLimit: two instances (two pools) share one allowance per key: of many
// requests at once from both, exactly the limit's number pass, and each refused one is told to wait a
// while no longer than the period. Another key's allowance is its own.
func TestInstancesShareRequestLimit(t *testing.T) {
	dbs := twoInstances(t)
	const n, per, requests = 5, 24 * time.Hour, 40
	passed, waits := allowRace(t, dbs, "alice", n, per, requests)
	if passed != n {
		t.Fatalf("%d of %d requests from two instances passed a limit of %d", passed, requests, n)
	}
	for i, w := range waits {
		if w <= 0 || w > per {
			t.Errorf("refused request %d: wait %v, want within (0, %v]", i, w, per)
		}
	}
	if passed, _ := allowRace(t, dbs, "bob", n, per, 8); passed != n {
		t.Errorf("another key: %d of 8 passed, want %d", passed, n)
	}
	for _, db := range dbs {
		if w, err := db.AllowRequest(t.Context(), "alice", 0, per); w != 0 || err != nil {
			t.Errorf("no limit: AllowRequest = %v, %v; want 0, nil", w, err)
		}
	}
}

// TestRequestLimitAlgorithm: the statement keeps the in-memory limiter's arithmetic. With a limit of 4 a
// day (one each 6 h, up to 18 h ahead), a caller whose next arrival is 1 h ahead is counted, and moves
// 6 h on; one 20 h ahead is refused for the 2 h past the 18 h, less the moments since.
func TestRequestLimitAlgorithm(t *testing.T) {
	db := openTest(t, pgtest.NewSchema(t))
	ctx := t.Context()
	const n, per = 4, 24 * time.Hour
	setAhead := func(ahead string) {
		t.Helper()
		if _, err := db.pool.ExecContext(ctx, `INSERT INTO rate_limits (key, tat, counted)
VALUES ('carol', statement_timestamp() + $1::interval, true)
ON CONFLICT (key) DO UPDATE SET tat = excluded.tat`, ahead); err != nil {
			t.Fatal(err)
		}
	}
	aheadOf := func() time.Duration {
		t.Helper()
		var us int64
		if err := db.pool.QueryRowContext(ctx, `SELECT (EXTRACT(EPOCH FROM tat - statement_timestamp()) * 1000000)::bigint
FROM rate_limits WHERE key = 'carol'`).Scan(&us); err != nil {
			t.Fatal(err)
		}
		return time.Duration(us) * time.Microsecond
	}

	setAhead("1 hour")
	if w, err := db.AllowRequest(ctx, "carol", n, per); w != 0 || err != nil {
		t.Fatalf("1 h ahead: AllowRequest = %v, %v; want counted", w, err)
	}
	if a := aheadOf(); a <= 6*time.Hour || a > 7*time.Hour {
		t.Errorf("after a counted request the next arrival is %v ahead, want 7 h less the moments since", a)
	}

	setAhead("20 hours")
	w, err := db.AllowRequest(ctx, "carol", n, per)
	if err != nil || w <= time.Hour || w > 2*time.Hour {
		t.Fatalf("20 h ahead: AllowRequest = %v, %v; want a wait of 2 h less the moments since", w, err)
	}
	if a := aheadOf(); a <= 19*time.Hour || a > 20*time.Hour {
		t.Errorf("a refused request moved the next arrival to %v ahead; want it where it was", a)
	}

	// Past due: the whole allowance is back, as for a caller never seen.
	setAhead("-1 hour")
	passed := 0
	for range n + 2 {
		if w, err := db.AllowRequest(ctx, "carol", n, per); err != nil {
			t.Fatal(err)
		} else if w == 0 {
			passed++
		}
	}
	if passed != n {
		t.Errorf("a caller past due: %d of %d passed, want %d", passed, n+2, n)
	}
}

// TestRequestLimitSweep: a sweep deletes the rows of callers whose allowance is whole again and keeps
// those still owed time, whose count goes on.
func TestRequestLimitSweep(t *testing.T) {
	db := openTest(t, pgtest.NewSchema(t))
	ctx := t.Context()
	const n, per = 3, 24 * time.Hour
	for _, key := range []string{"idle-1", "idle-2", "busy"} {
		if _, err := db.AllowRequest(ctx, key, n, per); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.pool.ExecContext(ctx, `UPDATE rate_limits SET tat = statement_timestamp() - interval '1 second'
WHERE key LIKE 'idle-%'`); err != nil {
		t.Fatal(err)
	}
	deleted, err := db.sweepRateLimits(ctx)
	if err != nil || deleted != 2 {
		t.Fatalf("sweep deleted %d rows (%v), want the 2 idle callers'", deleted, err)
	}
	var keys []string
	rows, err := db.pool.QueryContext(ctx, `SELECT key FROM rate_limits ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != "busy" {
		t.Errorf("after the sweep rate_limits holds %q, want [busy]", keys)
	}
	passed := 0
	for range n {
		if w, err := db.AllowRequest(ctx, "busy", n, per); err != nil {
			t.Fatal(err)
		} else if w == 0 {
			passed++
		}
	}
	if passed != n-1 {
		t.Errorf("the kept caller: %d of %d more passed, want %d", passed, n, n-1)
	}
}
