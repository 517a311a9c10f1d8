package postgres

import (
	"context"
	"fmt"
	"time"

	"chatd/internal/store"
)

var _ store.RateLimits = (*DB)(nil)

const (
	// allowSQL is one request of a caller ($1) under the generic cell rate algorithm, in one statement:
	// with t the statement's time on the database's clock, the request is counted when the caller's tat
	// is at most t + burst ($3, microseconds), and its tat moves to max(tat, t) + interval ($2); else the
	// row keeps its tat. The insert of a caller without a row (or one whose row was swept) is a first
	// request, always counted. ON CONFLICT locks the caller's row, so that requests from every instance
	// are counted one after the other. It returns whether the request was counted and tat - t, in
	// microseconds, from which the caller's wait follows.
	allowSQL = `INSERT INTO rate_limits AS r (key, tat, counted)
VALUES ($1, statement_timestamp() + $2 * interval '1 microsecond', true)
ON CONFLICT (key) DO UPDATE SET
	counted = r.tat <= statement_timestamp() + $3 * interval '1 microsecond',
	tat = CASE WHEN r.tat <= statement_timestamp() + $3 * interval '1 microsecond'
		THEN GREATEST(r.tat, statement_timestamp()) + $2 * interval '1 microsecond'
		ELSE r.tat END
RETURNING counted, (EXTRACT(EPOCH FROM tat - statement_timestamp()) * 1000000)::bigint`

	// sweepRateLimitsSQL deletes the rows of callers whose whole allowance is back, up to $1 of them,
	// skipping rows a request holds right now.
	sweepRateLimitsSQL = `DELETE FROM rate_limits WHERE key IN (
	SELECT key FROM rate_limits WHERE tat < statement_timestamp() LIMIT $1 FOR UPDATE SKIP LOCKED)`
)

// Sweeps of rate_limits: each instance sweeps at most once a rateSweepEvery, during a request, and
// deletes up to maxRateSweep rows; a sweep that found more leaves the next request to sweep again.
const (
	rateSweepEvery = time.Minute
	maxRateSweep   = 10000
)

// AllowRequest counts a request of key against n requests per period in the rate_limits table, on the
// database's clock, so that every instance on the database counts against one allowance per key and
// their clocks do not matter. Now and then it also deletes the rows of keys whose allowance is whole
// again, so that the table holds only the callers of about the last period.
func (db *DB) AllowRequest(ctx context.Context, key string, n int, per time.Duration) (time.Duration, error) {
	if n <= 0 {
		return 0, nil
	}
	// In microseconds, as the database keeps time.
	interval := (per / time.Duration(n)).Microseconds()
	burst := per.Microseconds() - interval
	var counted bool
	var ahead int64 // tat - now, µs
	err := db.pool.QueryRowContext(ctx, allowSQL, key, interval, burst).Scan(&counted, &ahead)
	if err != nil {
		return 0, fmt.Errorf("postgres: count a request: %w", err)
	}
	db.maybeSweepRateLimits(ctx)
	if counted {
		return 0, nil
	}
	// The row's tat is past now + burst, or the request would have been counted.
	return time.Duration(ahead-burst) * time.Microsecond, nil
}

// maybeSweepRateLimits sweeps rate_limits when this instance has not for rateSweepEvery. A failed sweep
// is logged and tried again at the next due one: the rows it left only take room.
func (db *DB) maybeSweepRateLimits(ctx context.Context) {
	now := db.clock()
	db.rateMu.Lock()
	due := now.Sub(db.rateSwept) >= rateSweepEvery
	if due {
		db.rateSwept = now // this request sweeps; those at the same time do not
	}
	db.rateMu.Unlock()
	if !due {
		return
	}
	deleted, err := db.sweepRateLimits(ctx)
	if err != nil {
		db.log.Warn("postgres: sweep rate limits", "err", err)
		return
	}
	if deleted >= maxRateSweep {
		db.rateMu.Lock()
		db.rateSwept = time.Time{} // more to delete: the next request sweeps again
		db.rateMu.Unlock()
	}
}

// sweepRateLimits deletes up to maxRateSweep rows of rate_limits whose tat has passed and returns how
// many it deleted.
func (db *DB) sweepRateLimits(ctx context.Context) (int64, error) {
	res, err := db.pool.ExecContext(ctx, sweepRateLimitsSQL, maxRateSweep)
	if err != nil {
		return 0, fmt.Errorf("postgres: sweep rate limits: %w", err)
	}
	return res.RowsAffected()
}
