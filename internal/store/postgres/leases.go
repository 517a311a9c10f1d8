package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"chatd/internal/store"
)

// DefaultLeaseTTL is how long a run's lease lasts unless its owner renews it. With the default sweep
// interval of the chat layer, a dead instance's runs are recovered within 30 seconds.
const DefaultLeaseTTL = 20 * time.Second

// maxClaim bounds the runs one ClaimExpired takes.
const maxClaim = 100

const (
	// renewSQL renews every lease of one instance in one statement, and returns the runs it holds.
	renewSQL = `UPDATE runs SET lease_expires_at = $2
WHERE owner = $1 AND id = ANY($3) AND status IN ('queued', 'running')
RETURNING id, session_id, user_id, status, cancel_reason`

	// claimSQL takes the oldest runs whose lease ended (or that never had one), skipping those another
	// instance is claiming right now, and makes them this instance's.
	claimSQL = `UPDATE runs SET owner = $1, lease_expires_at = $2
WHERE id IN (SELECT id FROM runs WHERE status IN ('queued', 'running')
	AND (lease_expires_at IS NULL OR lease_expires_at < $3)
	ORDER BY created_at, id LIMIT $4 FOR UPDATE SKIP LOCKED)
RETURNING id`

	claimedSQL = `SELECT ` + runColumns + `, r.user_id, r.request, r.cancel_reason` + runJoins +
		`WHERE r.id = ANY($1) ORDER BY r.created_at, r.id`

	// cancelSQL records a cancel for the run's owner, unless one is recorded already.
	cancelSQL = `UPDATE runs SET cancel_reason = CASE WHEN cancel_reason = '' THEN $3 ELSE cancel_reason END
WHERE id = $1 AND user_id = $2 AND status IN ('queued', 'running')
RETURNING id`

	// firstQueuedSQL finds a queued run of the session older than the one about to start.
	firstQueuedSQL = `SELECT EXISTS (SELECT 1 FROM runs o JOIN runs r ON r.id = $2
WHERE o.session_id = $1 AND o.status = 'queued' AND o.id <> r.id
	AND (o.created_at, o.id) < (r.created_at, r.id))`

	notifySQL = `SELECT pg_notify($1, $2)`

	// insertEventsNotifySQL is appendEventsSQL, then one notification per run of the batch, with the
	// Seq of its last event: followers elsewhere wake once per batch, not once per event.
	insertEventsNotifySQL = `WITH ins AS (` + insertEventsSQL + ` RETURNING run_id, seq),
res AS (UPDATE runs r SET reserved_seq = v.seq
	FROM (SELECT id, MAX(seq) AS seq FROM unnest($5::text[], $6::bigint[]) AS v (id, seq) GROUP BY id) v
	WHERE r.id = v.id AND r.reserved_seq < v.seq)
SELECT pg_notify($7, run_id || ' ' || MAX(seq)) FROM ins GROUP BY run_id`
)

// Notification channels, after the database and schema's prefix.
const (
	chanEvents  = "_events"
	chanCancel  = "_cancel"
	chanSession = "_session"
)

// nameChannels names the notification channels after the database and schema: channels are per
// database, and instances on another schema of it are another deployment.
func (db *DB) nameChannels(ctx context.Context) error {
	var where string
	if err := db.pool.QueryRowContext(ctx, `SELECT current_database() || '.' || COALESCE(current_schema(), '')`).Scan(&where); err != nil {
		return fmt.Errorf("name channels: %w", err)
	}
	h := fnv.New64a()
	h.Write([]byte(where))
	db.channel = "chatd_" + strconv.FormatUint(h.Sum64(), 36)
	return nil
}

// Instance is the name this store's process runs under among the instances on the database; "" for a
// chatd alone on it.
func (db *DB) Instance() string { return db.instance }

// LeaseTTL is how long a lease lasts unless renewed.
func (db *DB) LeaseTTL() time.Duration { return db.leaseTTL }

// leaseUntil is the end of a lease taken at now; nil for a chatd alone on its database (no lease).
func (db *DB) leaseUntil(now time.Time) any {
	if db.instance == "" {
		return nil
	}
	return now.Add(db.leaseTTL)
}

// RenewLeases extends the leases of the queued and running runs among ids that this instance holds, in
// one statement, and returns those runs, with the cancels asked of them elsewhere. The caller names the
// runs it really runs: a run this instance holds but lost track of (its end could not be stored) is left
// to expire, and recovered.
func (db *DB) RenewLeases(ctx context.Context, ids []string) ([]store.Leased, error) {
	if db.instance == "" || len(ids) == 0 {
		return nil, nil
	}
	rows, err := db.pool.QueryContext(ctx, renewSQL, db.instance, db.clock().Add(db.leaseTTL), ids)
	if err != nil {
		return nil, fmt.Errorf("postgres: renew leases: %w", err)
	}
	defer rows.Close()
	var out []store.Leased
	for rows.Next() {
		var l store.Leased
		if err := rows.Scan(&l.ID, &l.SessionID, &l.UserID, &l.Status, &l.CancelReason); err != nil {
			return nil, fmt.Errorf("postgres: renew leases: %w", err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: renew leases: %w", err)
	}
	return out, nil
}

// ClaimExpired takes up to 100 queued and running runs whose lease ended, oldest first, and returns them
// held by this instance under a new lease. Instances claiming at once take different runs. A running
// run claimed is to be recovered; one whose recovery stopped half-way is claimed again once its new lease
// ends.
func (db *DB) ClaimExpired(ctx context.Context) ([]store.Claimed, error) {
	if db.instance == "" {
		return nil, nil
	}
	var ids []string
	err := db.write(ctx, "claim expired runs", func(tx *sql.Tx) error {
		ids = ids[:0]
		now := db.clock()
		rows, err := tx.QueryContext(ctx, claimSQL, db.instance, now.Add(db.leaseTTL), now, maxClaim)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return rows.Err()
	})
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	rows, err := db.pool.QueryContext(ctx, claimedSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("postgres: claimed runs: %w", err)
	}
	defer rows.Close()
	var out []store.Claimed
	for rows.Next() {
		var c store.Claimed
		var request []byte
		r, err := scanRun(rows, &request, &c.CancelReason)
		if err != nil {
			return nil, fmt.Errorf("postgres: claimed runs: %w", err)
		}
		r.Request = request
		c.Run = *r
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: claimed runs: %w", err)
	}
	return out, nil
}

// RequestCancel records a cancel of one of the user's queued or running runs for the instance that owns
// it, and wakes that instance. It reports false when the run has ended (or is not the user's).
func (db *DB) RequestCancel(ctx context.Context, user, runID, reason string) (bool, error) {
	found := false
	err := db.write(ctx, "request cancel", func(tx *sql.Tx) error {
		var id string
		err := tx.QueryRowContext(ctx, cancelSQL, runID, user, reason).Scan(&id)
		if err == sql.ErrNoRows {
			found = false
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		_, err = tx.ExecContext(ctx, notifySQL, db.channel+chanCancel, runID)
		return err
	})
	return found, err
}

// checkFirstQueued refuses to start a queued run while an older one of its session is queued: queued
// runs start in order per session, whichever instance starts them.
func checkFirstQueued(ctx context.Context, tx *sql.Tx, sessionID, runID string) error {
	var older bool
	if err := tx.QueryRowContext(ctx, firstQueuedSQL, sessionID, runID).Scan(&older); err != nil {
		return err
	}
	if older {
		return fmt.Errorf("%w: an older queued run of session %s starts first", store.ErrBusy, sessionID)
	}
	return nil
}

// notifyEnd wakes the other instances when a run ends: its followers, and whoever queued a run behind it.
func (db *DB) notifyEnd(ctx context.Context, tx *sql.Tx, runID, sessionID string) error {
	if db.instance == "" {
		return nil
	}
	if err := db.notifyEvents(ctx, tx, runID); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, notifySQL, db.channel+chanSession, sessionID)
	return err
}

// notifyEvents tells the other instances that the run's log holds new events, up to its last.
func (db *DB) notifyEvents(ctx context.Context, tx *sql.Tx, runID string) error {
	if db.instance == "" {
		return nil
	}
	var last int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM run_events WHERE run_id = $1`, runID).Scan(&last); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, notifySQL, db.channel+chanEvents, runID+" "+strconv.FormatInt(last, 10))
	return err
}

// insertEventsNotify is insertEvents, with a notification per run of the batch.
func (db *DB) insertEventsNotify(ctx context.Context, q querier, events []store.Event, reserved []store.Reservation) error {
	if err := checkEvents(events); err != nil {
		return err
	}
	runs, seqs := make([]string, len(events)), make([]int64, len(events))
	types, data := make([]string, len(events)), make([]string, len(events))
	for i, e := range events {
		runs[i], seqs[i], types[i], data[i] = e.RunID, e.Seq, e.Type, string(e.Data)
	}
	rruns, rseqs := make([]string, len(reserved)), make([]int64, len(reserved))
	for i, r := range reserved {
		rruns[i], rseqs[i] = r.RunID, r.Seq
	}
	_, err := q.ExecContext(ctx, insertEventsNotifySQL, runs, seqs, types, data, rruns, rseqs, db.channel+chanEvents)
	return err
}
