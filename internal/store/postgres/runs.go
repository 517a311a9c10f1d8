package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"chatd/internal/store"
)

// defaultCutReason is the content of the failed tool records FinishRun adds when RunEnd.Reason is empty.
const defaultCutReason = "the run ended before this call finished"

// runColumns read a run with what is not a column of its row: the usage of a run not ended yet is the
// sum of its entries (u, joined by runJoins), and its last event's Seq. One statement reads it all, from
// one snapshot.
const runColumns = `r.id, r.session_id, r.status, r.agent, r.model, r.finish_reason, r.error,
CASE WHEN r.ended_at IS NULL THEN u.input ELSE r.input_tokens END,
CASE WHEN r.ended_at IS NULL THEN u.output ELSE r.output_tokens END,
CASE WHEN r.ended_at IS NULL THEN u.cache_read ELSE r.cache_read_tokens END,
CASE WHEN r.ended_at IS NULL THEN u.cache_write ELSE r.cache_write_tokens END,
CASE WHEN r.ended_at IS NULL THEN u.reasoning ELSE r.reasoning_tokens END,
COALESCE(r.idempotency_key, ''), r.request_hash, r.created_at, r.started_at, r.ended_at, r.recovered_from,
r.reserved_seq, r.key_id,
COALESCE((SELECT MAX(e.seq) FROM run_events e WHERE e.run_id = r.id), 0), r.awaiting`

// runJoins sums the usage entries of a run not ended yet (of its user: run ids are labels there).
const runJoins = ` FROM runs r CROSS JOIN LATERAL (SELECT
COALESCE(SUM(input_tokens), 0)::bigint AS input, COALESCE(SUM(output_tokens), 0)::bigint AS output,
COALESCE(SUM(cache_read_tokens), 0)::bigint AS cache_read, COALESCE(SUM(cache_write_tokens), 0)::bigint AS cache_write,
COALESCE(SUM(reasoning_tokens), 0)::bigint AS reasoning
FROM usage WHERE r.ended_at IS NULL AND run_id = r.id AND user_id = r.user_id) u `

const (
	insertRunSQL = `INSERT INTO runs (id, session_id, user_id, status, agent, model, idempotency_key, request_hash,
request, created_at, started_at, reserved_seq, key_id, owner, lease_expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`

	// titleSessionSQL titles a session that has no title yet.
	titleSessionSQL = `UPDATE sessions SET title = $3 WHERE id = $1 AND user_id = $2 AND title = ''`

	selectRunSQL  = `SELECT ` + runColumns + runJoins + `WHERE r.id = $1 AND r.user_id = $2`
	activeRunSQL  = `SELECT ` + runColumns + runJoins + `WHERE r.session_id = $1 AND r.user_id = $2 AND r.status IN ('running', 'awaiting_approval')`
	runByKeySQL   = `SELECT ` + runColumns + runJoins + `WHERE r.user_id = $1 AND r.idempotency_key = $2`
	unfinishedSQL = `SELECT ` + runColumns + `, r.user_id, r.request` + runJoins +
		`WHERE r.status IN ('queued', 'running') ORDER BY r.created_at, r.id`
	awaitingSQL = `SELECT ` + runColumns + `, r.user_id, r.request` + runJoins +
		`WHERE r.status = 'awaiting_approval' AND ($1 = '' OR r.key_id = $1) ORDER BY r.created_at, r.id`
	// keyRunsSQL pages through a key's active runs, only what a cancel needs: runs_active_by_key
	// (key_id, status, id) hands them in order from where the page starts, so that a page costs its own
	// rows, not every active run of the key. 'queued' sorts before 'running': the queued ones come first.
	keyRunsSQL = `SELECT id, session_id, user_id, key_id, status FROM runs
WHERE key_id = $2 AND status IN ('running', 'queued') AND (status, id) > ($3, $4) AND user_id = $1
ORDER BY status, id LIMIT $5`
	runningInSQL = `SELECT id FROM runs WHERE session_id = $1 AND user_id = $2 AND status IN ('running', 'awaiting_approval')`
	keyTakenSQL  = `SELECT EXISTS (SELECT 1 FROM runs WHERE user_id = $1 AND idempotency_key = $2)`

	// lockRunSessionSQL locks the session of one of the user's runs (see lockSessionSQL) and returns
	// its id. A run never moves to another session, so reading its session_id needs no lock.
	lockRunSessionSQL = `SELECT id FROM sessions
WHERE id = (SELECT session_id FROM runs WHERE id = $1 AND user_id = $2) AND user_id = $2
FOR UPDATE`
	runStatusSQL = `SELECT status FROM runs WHERE id = $1 AND user_id = $2`

	startRunSQL = `UPDATE runs SET status = 'running', started_at = $3, request = NULL,
reserved_seq = GREATEST(reserved_seq, $4), owner = COALESCE($5, owner),
lease_expires_at = COALESCE($6, lease_expires_at)
WHERE id = $1 AND user_id = $2 AND status = 'queued'`

	// endRunSQL ends a run, with the usage given or ($13) the sum of its entries.
	endRunSQL = `UPDATE runs SET status = $3, finish_reason = $4, error = $5, ended_at = $11, recovered_from = $12,
request = NULL, (input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens) = (
	SELECT CASE WHEN $13 THEN COALESCE(SUM(u.input_tokens), 0)::bigint ELSE $6 END,
		CASE WHEN $13 THEN COALESCE(SUM(u.output_tokens), 0)::bigint ELSE $7 END,
		CASE WHEN $13 THEN COALESCE(SUM(u.cache_read_tokens), 0)::bigint ELSE $8 END,
		CASE WHEN $13 THEN COALESCE(SUM(u.cache_write_tokens), 0)::bigint ELSE $9 END,
		CASE WHEN $13 THEN COALESCE(SUM(u.reasoning_tokens), 0)::bigint ELSE $10 END
	FROM usage u WHERE $13 AND u.run_id = $1 AND u.user_id = $2), awaiting = NULL
WHERE id = $1 AND user_id = $2 AND status IN ('queued', 'running', 'awaiting_approval')`

	cancelReasonSQL = `SELECT cancel_reason FROM runs WHERE id = $1 FOR UPDATE`
	awaitRunSQL     = `UPDATE runs SET status = 'awaiting_approval', awaiting = $3, awaiting_expires_at = $4
WHERE id = $1 AND user_id = $2 AND status = 'running'`
	updateAwaitingSQL = `UPDATE runs SET awaiting = $4
WHERE id = $1 AND user_id = $2 AND status = 'awaiting_approval' AND awaiting = $3`
	resumeRunSQL = `UPDATE runs SET status = 'running', request = NULL, awaiting = NULL,
reserved_seq = GREATEST(reserved_seq, $4), owner = COALESCE($5, owner), lease_expires_at = COALESCE($6, lease_expires_at)
WHERE id = $1 AND user_id = $2 AND status = 'awaiting_approval' AND awaiting = $3`

	// The run's calls still open, in the order they were made.
	openRunCallsSQL = `SELECT c.record_id, c.call_id, c.name
FROM tool_calls c JOIN records r ON r.id = c.record_id
WHERE c.run_id = $1 AND c.session_id = $2 AND c.answer_id IS NULL
ORDER BY r.seq, c.idx`

	insertUsageSQL = `INSERT INTO usage (id, user_id, run_id, session_id, agent, model, input_tokens,
output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, created_at, key_id, cost_nanousd, estimated)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`

	selectEventsSQL = `SELECT e.seq, e.type, e.data FROM run_events e JOIN runs r ON r.id = e.run_id
WHERE e.run_id = $1 AND r.user_id = $2 AND e.seq > $3 ORDER BY e.seq LIMIT $4`
	runOwnedSQL = `SELECT EXISTS (SELECT 1 FROM runs WHERE id = $1 AND user_id = $2)`

	// insertEventsSQL inserts a batch of events, of any runs, in one statement.
	insertEventsSQL = `INSERT INTO run_events (run_id, seq, type, data)
SELECT run_id, seq, type, data::json FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[]) AS e (run_id, seq, type, data)`

	// reserveSQL raises runs' reserved_seq, never lowering it.
	reserveSQL = `UPDATE runs r SET reserved_seq = v.seq
FROM (SELECT id, MAX(seq) AS seq FROM unnest($1::text[], $2::bigint[]) AS v (id, seq) GROUP BY id) v
WHERE r.id = v.id AND r.reserved_seq < v.seq`

	// appendEventsSQL does both in one statement.
	appendEventsSQL = `WITH ins AS (` + insertEventsSQL + `)
UPDATE runs r SET reserved_seq = v.seq
FROM (SELECT id, MAX(seq) AS seq FROM unnest($5::text[], $6::bigint[]) AS v (id, seq) GROUP BY id) v
WHERE r.id = v.id AND r.reserved_seq < v.seq`
)

// CreateRun stores r, running or queued, in one of the user's sessions — or in a new one, r.NewSession —
// with its first record when given, assigning ID (when empty) and CreatedAt.
func (db *DB) CreateRun(ctx context.Context, user string, r *store.Run, first *store.Record) error {
	run, sess, rec, err := store.NewRun(r, first, db.clock(), newID)
	if err != nil {
		return fmt.Errorf("postgres: create run: %w", err)
	}
	var started any
	if run.StartedAt != nil {
		started = *run.StartedAt
	}
	var request []byte
	if run.Status == store.RunQueued && run.Request != nil {
		request = run.Request
	}
	if run.NewSession != nil && run.IdempotencyKey == "" && len(run.Quota) == 0 && first != nil && plain(first) {
		if err := db.createInNewSession(ctx, user, &sess, &run, &rec, started); err != nil {
			return err
		}
		*first, *run.NewSession, *r = rec, sess, run
		return nil
	}
	err = db.write(ctx, "create run", func(tx *sql.Tx) error {
		if err := prepareRun(ctx, tx, user, &run, &sess); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, insertRunSQL, run.ID, run.SessionID, user, run.Status, run.Agent, run.Model,
			nullable(run.IdempotencyKey), run.RequestHash, request, run.CreatedAt, started, run.ReservedSeq, run.KeyID,
			nullable(db.instance), db.leaseUntil(run.CreatedAt))
		if err != nil {
			return err
		}
		if run.Title != "" && run.NewSession == nil {
			if _, err := tx.ExecContext(ctx, titleSessionSQL, run.SessionID, user, run.Title); err != nil {
				return err
			}
		}
		if first != nil {
			r := rec // a retried transaction starts from the record as it was
			if err := appendRecordAfter(ctx, tx, user, &r, run.CreatedAt, run.AfterSeq); err != nil {
				return err
			}
			rec = r
		}
		return nil
	})
	if err != nil {
		return err
	}
	if first != nil {
		*first = rec
		sess.LastSeq = rec.Seq // a new session's: its one record
	}
	if run.NewSession != nil {
		*run.NewSession = sess
	}
	*r = run
	return nil
}

// plain reports whether a first record needs none of appendRecord's checks in a new session: no
// record to pair with or retract, no calls to store.
func plain(first *store.Record) bool {
	return first.Role != store.RoleTool && first.Retracts == "" && len(first.ToolCalls) == 0
}

// newChatSQL stores the common send, the first message of a new session, in one statement: PostgreSQL
// runs a statement sent outside a transaction as a transaction of its own, so the send costs one round
// trip instead of six (BEGIN, four statements, COMMIT). A new session has no run to be busy with, no
// open call and no record to number after: it takes its title and last Seq as it is inserted. The
// foreign keys of the run and the record are checked at the statement's end, when the session exists.
var newChatSQL = `WITH s AS (
	INSERT INTO sessions (id, user_id, title, agent, metadata, created_at, updated_at, title_set, last_seq)
	VALUES ($1, $2, $3, $4, $5, $6, $6, FALSE, 1)
), r AS (
	INSERT INTO runs (id, session_id, user_id, status, agent, model, idempotency_key, request_hash,
		request, created_at, started_at, reserved_seq, key_id, owner, lease_expires_at)
	VALUES ($7, $1, $2, $8, $9, $10, NULL, $11, NULL, $6, $12, $13, $14, $15, $16)
)
INSERT INTO records (` + recordColumns + `) VALUES (` + params(17, 23) + `)`

// params is "$from, …" for n parameters.
func params(from, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(from+i))
	}
	return b.String()
}

// createInNewSession is CreateRun's statement for the common send (newChatSQL).
func (db *DB) createInNewSession(ctx context.Context, user string, sess *store.Session, run *store.Run,
	rec *store.Record, started any) error {
	if sess.Title == "" {
		sess.Title = run.Title
	}
	r := *rec
	r.Seq, r.CreatedAt = 1, run.CreatedAt
	sess.LastSeq = r.Seq
	recArgs, err := recordArgs(user, &r)
	if err != nil {
		return fmt.Errorf("postgres: create run: %w", err)
	}
	args := append([]any{sess.ID, user, sess.Title, sess.Agent, string(sess.Metadata), run.CreatedAt,
		run.ID, run.Status, run.Agent, run.Model, run.RequestHash, started, run.ReservedSeq, run.KeyID,
		nullable(db.instance), db.leaseUntil(run.CreatedAt)}, recArgs...)
	if _, err := db.exec(ctx, "create run", newChatSQL, args...); err != nil {
		return err
	}
	*rec = r
	return nil
}

// prepareRun does what CreateRun does before it inserts the run: it creates the new session or locks the
// existing one, and checks the idempotency key, that the session is idle (for a running run) and the
// quota, in that order.
//
// A run with a key or a quota first takes a transaction lock of its user: checking a key or counting runs
// and then inserting is one step only when no other transaction of the user does the same in between.
// This lock is taken before any row lock, and only here and in ResumeRun (before its row lock too), so
// it cannot deadlock.
func prepareRun(ctx context.Context, tx *sql.Tx, user string, run *store.Run, sess *store.Session) error {
	if run.IdempotencyKey != "" || len(run.Quota) > 0 {
		if _, err := tx.ExecContext(ctx, lockUserSQL, user); err != nil {
			return err
		}
	}
	if run.NewSession != nil {
		if sess.Title == "" {
			sess.Title = run.Title
		}
		// A new session's title is the one the run gives it, from the message: not the user's choice.
		if _, err := tx.ExecContext(ctx, insertSessionSQL, sessionArgs(user, sess, false)...); err != nil {
			return err
		}
	} else if err := lockSession(ctx, tx, user, run.SessionID); err != nil {
		return err
	}
	if run.IdempotencyKey != "" {
		var taken bool
		if err := tx.QueryRowContext(ctx, keyTakenSQL, user, run.IdempotencyKey).Scan(&taken); err != nil {
			return err
		}
		if taken {
			return fmt.Errorf("%w: %q", store.ErrDuplicate, run.IdempotencyKey)
		}
	}
	if run.Status == store.RunRunning && run.NewSession == nil {
		if err := checkIdle(ctx, tx, user, run.SessionID); err != nil {
			return err
		}
	}
	return checkQuota(ctx, tx, user, run.Quota, "")
}

// checkIdle refuses with a *store.BusyError while the user's session has a running run. The unique
// index runs_one_running_per_session enforces the same (its violation is ErrBusy too); checking first,
// under the session's lock, names the run.
func checkIdle(ctx context.Context, tx *sql.Tx, user, sessionID string) error {
	var id string
	err := tx.QueryRowContext(ctx, runningInSQL, sessionID, user).Scan(&id)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return err
	}
	return &store.BusyError{SessionID: sessionID, RunID: id}
}

// lockRun locks the session of one of the user's runs and returns the session's id and the run's status,
// read under that lock.
func lockRun(ctx context.Context, tx *sql.Tx, user, runID string) (sessionID, status string, err error) {
	err = tx.QueryRowContext(ctx, lockRunSessionSQL, runID, user).Scan(&sessionID)
	if err == nil {
		err = tx.QueryRowContext(ctx, runStatusSQL, runID, user).Scan(&status)
	}
	if errors.Is(err, sql.ErrNoRows) {
		err = notFound("run", runID)
	}
	return sessionID, status, err
}

// StartRun makes a queued run running, with its first record.
func (db *DB) StartRun(ctx context.Context, user, runID string, first *store.Record, reserve int64) error {
	var rec store.Record
	if first != nil {
		var err error
		if rec, err = store.NewRecord(first, newID); err != nil {
			return fmt.Errorf("postgres: start run: %w", err)
		}
		rec.RunID = runID
	}
	err := db.write(ctx, "start run", func(tx *sql.Tx) error {
		sessionID, status, err := lockRun(ctx, tx, user, runID)
		if err != nil {
			return err
		}
		if status != store.RunQueued {
			return conflict("run %q is %s, not queued", runID, status)
		}
		// A cancel asked on another instance (a revoke of its key, say) that its owner has not carried
		// out yet: the run must not start and call the model first. The row's lock orders the two: a
		// cancel asked after the start finds the run running, and its owner stops it.
		var cancelReason string
		if err := tx.QueryRowContext(ctx, cancelReasonSQL, runID).Scan(&cancelReason); err != nil {
			return err
		}
		if cancelReason != "" {
			return &store.CancelRequestedError{Reason: cancelReason}
		}
		if err := checkIdle(ctx, tx, user, sessionID); err != nil {
			return err
		}
		if err := checkFirstQueued(ctx, tx, sessionID, runID); err != nil {
			return err
		}
		now := db.clock()
		if _, err := tx.ExecContext(ctx, startRunSQL, runID, user, now, reserve, nullable(db.instance), db.leaseUntil(now)); err != nil {
			return err
		}
		if first != nil {
			if rec.SessionID != sessionID {
				return conflict("the first record of run %q belongs to another session", runID)
			}
			r := rec
			if err := appendRecord(ctx, tx, user, &r, now); err != nil {
				return err
			}
			rec = r
		}
		return nil
	})
	if err != nil {
		return err
	}
	if first != nil {
		*first = rec
	}
	return nil
}

// Run returns one of the user's runs. The usage of a run not ended yet is the sum of its usage entries.
func (db *DB) Run(ctx context.Context, user, id string) (*store.Run, error) {
	return db.runBy(ctx, "run", id, selectRunSQL, id, user)
}

// ActiveRun returns the session's running run.
func (db *DB) ActiveRun(ctx context.Context, user, sessionID string) (*store.Run, error) {
	return db.runBy(ctx, "running run of session", sessionID, activeRunSQL, sessionID, user)
}

// RunByKey returns the user's run created with the idempotency key.
func (db *DB) RunByKey(ctx context.Context, user, key string) (*store.Run, error) {
	return db.runBy(ctx, "run with idempotency key", key, runByKeySQL, user, key)
}

// runBy reads the one run query finds, reporting none as the missing "what id".
func (db *DB) runBy(ctx context.Context, what, id, query string, args ...any) (*store.Run, error) {
	r, err := scanRun(db.pool.QueryRowContext(ctx, query, args...))
	if errors.Is(err, sql.ErrNoRows) {
		err = notFound(what, id)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", what, err)
	}
	return r, nil
}

// UnfinishedRuns returns every user's running and queued runs, oldest first.
func (db *DB) UnfinishedRuns(ctx context.Context) ([]store.Run, error) {
	return db.runsAcrossUsers(ctx, "unfinished runs", unfinishedSQL)
}

// AwaitingRuns returns every user's runs awaiting approval, or those started with keyID, oldest first.
func (db *DB) AwaitingRuns(ctx context.Context, keyID string) ([]store.Run, error) {
	return db.runsAcrossUsers(ctx, "awaiting runs", awaitingSQL, keyID)
}

// ActiveRunsOfKey returns a page of the user's queued and running runs started with keyID, the queued
// ones first: their ids, sessions, users, keys and statuses.
func (db *DB) ActiveRunsOfKey(ctx context.Context, user, keyID string, after *store.Run, limit int) ([]store.Run, error) {
	var status, id string
	if after != nil {
		status, id = after.Status, after.ID
	}
	rows, err := db.pool.QueryContext(ctx, keyRunsSQL, user, keyID, status, id, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: active runs of key: %w", err)
	}
	defer rows.Close()
	var runs []store.Run
	for rows.Next() {
		var r store.Run
		if err := rows.Scan(&r.ID, &r.SessionID, &r.UserID, &r.KeyID, &r.Status); err != nil {
			return nil, fmt.Errorf("postgres: active runs of key: %w", err)
		}
		runs = append(runs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: active runs of key: %w", err)
	}
	return runs, nil
}

// runsAcrossUsers reads the runs of query, of every user, with their user ids and requests.
func (db *DB) runsAcrossUsers(ctx context.Context, what, query string, args ...any) ([]store.Run, error) {
	rows, err := db.pool.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", what, err)
	}
	defer rows.Close()
	var runs []store.Run
	for rows.Next() {
		var request []byte
		r, err := scanRun(rows, &request)
		if err != nil {
			return nil, fmt.Errorf("postgres: %s: %w", what, err)
		}
		r.Request = request
		runs = append(runs, *r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", what, err)
	}
	return runs, nil
}

// scanRun reads runColumns, then extra: for UnfinishedRuns, the user id and the request.
func scanRun(row scanner, extra ...any) (*store.Run, error) {
	var r store.Run
	var started, ended sql.NullTime
	var awaiting sql.NullString
	u := &r.Usage
	dest := []any{&r.ID, &r.SessionID, &r.Status, &r.Agent, &r.Model, &r.FinishReason, &r.Error,
		&u.InputTokens, &u.OutputTokens, &u.CacheReadTokens, &u.CacheWriteTokens, &u.ReasoningTokens,
		&r.IdempotencyKey, &r.RequestHash, &r.CreatedAt, &started, &ended, &r.RecoveredFrom, &r.ReservedSeq, &r.KeyID,
		&r.LastEventSeq, &awaiting}
	if len(extra) > 0 {
		dest = append(dest, &r.UserID)
		dest = append(dest, extra...)
	}
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	r.CreatedAt = r.CreatedAt.UTC()
	r.StartedAt, r.EndedAt = timeOf(started), timeOf(ended)
	if awaiting.Valid {
		r.Awaiting = []byte(awaiting.String)
	}
	return &r, nil
}

// CloseCalls appends a failed tool record for each open call of the run.
func (db *DB) CloseCalls(ctx context.Context, user, runID, reason string) ([]store.Record, error) {
	var added []store.Record
	err := db.write(ctx, "close calls", func(tx *sql.Tx) error {
		sessionID, _, err := lockRun(ctx, tx, user, runID)
		if err != nil {
			return err
		}
		added, err = closeCalls(ctx, tx, user, sessionID, runID, reason, db.clock())
		return err
	})
	if err != nil {
		return nil, err
	}
	return added, nil
}

// FinishRun ends a running or queued run in one transaction: a failed tool record for each of its
// calls still open, in call order, its last events, then the run's end state. It returns the records it
// appended.
func (db *DB) FinishRun(ctx context.Context, user, runID string, end store.RunEnd) ([]store.Record, error) {
	if !terminal(end.Status) {
		return nil, fmt.Errorf("postgres: finish run: %w", conflict("%q is not a terminal run status", end.Status))
	}
	for _, e := range end.Events {
		if e.RunID != runID {
			return nil, fmt.Errorf("postgres: finish run: %w", conflict("event %d belongs to run %q", e.Seq, e.RunID))
		}
	}
	var added []store.Record
	err := db.write(ctx, "finish run", func(tx *sql.Tx) error {
		sessionID, status, err := lockRun(ctx, tx, user, runID)
		if err != nil {
			return err
		}
		if status != store.RunRunning && status != store.RunQueued && status != store.RunAwaiting {
			return conflict("run %q already ended (%s)", runID, status)
		}
		if end.WhileAwaiting && status != store.RunAwaiting {
			return conflict("run %q no longer awaits approval (%s)", runID, status)
		}
		now := db.clock()
		if added, err = closeCalls(ctx, tx, user, sessionID, runID, end.Reason, now); err != nil {
			return err
		}
		if err := insertEvents(ctx, tx, end.Events, nil); err != nil {
			return err
		}
		if err := insertCalls(ctx, tx, user, end.Calls, now); err != nil {
			return err
		}
		if err := dropRequests(ctx, tx, sessionID, end.KeepRequests, end.RequestsDropped); err != nil {
			return err
		}
		u := end.Usage
		_, err = tx.ExecContext(ctx, endRunSQL, runID, user, end.Status, end.FinishReason, end.Error,
			u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheWriteTokens, u.ReasoningTokens,
			now, end.RecoveredFrom, end.UsageFromEntries)
		if err != nil {
			return err
		}
		return db.notifyEnd(ctx, tx, runID, sessionID)
	})
	if err != nil {
		return nil, err
	}
	return added, nil
}

// AppendEvents appends a batch of events, of any runs, and raises the runs' reservations, in one
// statement.
func (db *DB) AppendEvents(ctx context.Context, events []store.Event, reserved []store.Reservation) error {
	if len(events) == 0 && len(reserved) == 0 {
		return nil
	}
	if err := checkEvents(events); err != nil {
		return fmt.Errorf("postgres: append events: %w", err)
	}
	return db.write1(ctx, "append events", func(q querier) error {
		if db.instance != "" && len(events) > 0 {
			return db.insertEventsNotify(ctx, q, events, reserved)
		}
		return insertEvents(ctx, q, events, reserved)
	})
}

// checkEvents refuses events without a sequence number or a type.
func checkEvents(events []store.Event) error {
	for _, e := range events {
		if e.Seq <= 0 || e.Type == "" {
			return conflict("event %d of run %q has no sequence number or type", e.Seq, e.RunID)
		}
	}
	return nil
}

// insertEvents inserts events and raises the runs' reserved_seq as reserved says, in one statement
// whatever their number.
func insertEvents(ctx context.Context, q querier, events []store.Event, reserved []store.Reservation) error {
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
	var err error
	switch {
	case len(events) > 0 && len(reserved) > 0:
		_, err = q.ExecContext(ctx, appendEventsSQL, runs, seqs, types, data, rruns, rseqs)
	case len(events) > 0:
		_, err = q.ExecContext(ctx, insertEventsSQL, runs, seqs, types, data)
	case len(reserved) > 0:
		_, err = q.ExecContext(ctx, reserveSQL, rruns, rseqs)
	}
	return err
}

// Events returns up to limit events of one of the user's runs after seq after.
func (db *DB) Events(ctx context.Context, user, runID string, after int64, limit int) ([]store.Event, error) {
	if limit <= 0 {
		limit = 1000
	}
	events, err := db.events(ctx, user, runID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: events: %w", err)
	}
	if len(events) > 0 {
		return events, nil
	}
	// No events: tell an empty log from a run that is not the user's.
	var owned bool
	if err := db.pool.QueryRowContext(ctx, runOwnedSQL, runID, user).Scan(&owned); err != nil {
		return nil, fmt.Errorf("postgres: events: %w", err)
	}
	if !owned {
		return nil, fmt.Errorf("postgres: events: %w", notFound("run", runID))
	}
	return nil, nil
}

func (db *DB) events(ctx context.Context, user, runID string, after int64, limit int) ([]store.Event, error) {
	rows, err := db.pool.QueryContext(ctx, selectEventsSQL, runID, user, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var events []store.Event
	for rows.Next() {
		e := store.Event{RunID: runID}
		if err := rows.Scan(&e.Seq, &e.Type, &e.Data); err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	return events, rows.Err()
}

// openCall is a tool call without a tool record.
type openCall struct{ recordID, callID, name string }

// closeCalls appends a failed tool record for each open call of the run. The caller holds the session's
// lock.
func closeCalls(ctx context.Context, tx *sql.Tx, user, sessionID, runID, reason string,
	now time.Time) ([]store.Record, error) {
	calls, err := openRunCalls(ctx, tx, sessionID, runID)
	if err != nil || len(calls) == 0 {
		return nil, err
	}
	if reason == "" {
		reason = defaultCutReason
	}
	added := make([]store.Record, 0, len(calls))
	for _, c := range calls {
		failed, zero := false, int64(0)
		rec, err := store.NewRecord(&store.Record{SessionID: sessionID, RunID: runID, Role: store.RoleTool,
			Content: reason, ParentID: c.recordID, ToolCallID: c.callID, Name: c.name,
			Success: &failed, DurationMS: &zero}, newID)
		if err != nil {
			return nil, err
		}
		if err := appendRecord(ctx, tx, user, &rec, now); err != nil {
			return nil, err
		}
		added = append(added, rec)
	}
	return added, nil
}

// openRunCalls reads all the calls before any is closed: a connection cannot run the appends while it
// still streams these rows.
func openRunCalls(ctx context.Context, tx *sql.Tx, sessionID, runID string) ([]openCall, error) {
	rows, err := tx.QueryContext(ctx, openRunCallsSQL, runID, sessionID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var calls []openCall
	for rows.Next() {
		var c openCall
		if err := rows.Scan(&c.recordID, &c.callID, &c.name); err != nil {
			return nil, err
		}
		calls = append(calls, c)
	}
	return calls, rows.Err()
}

// terminal reports whether s is a status a run can end with.
func terminal(s string) bool {
	switch s {
	case store.RunCompleted, store.RunFailed, store.RunCancelled, store.RunMaxIterations, store.RunInterrupted:
		return true
	}
	return false
}

// AddUsage stores the usage of one model call under the user. The run and session ids are labels, not
// checked references: accounting must not fail, and must outlive a deleted session.
func (db *DB) AddUsage(ctx context.Context, user string, u store.UsageEntry) error {
	_, err := db.exec(ctx, "add usage", insertUsageSQL, usageArgs(user, u, db.clock())...)
	return err
}

// maxExpired bounds the runs one ExpiredAwaiting returns.
const maxExpired = 100

const expiredAwaitingSQL = `SELECT id, user_id FROM runs
WHERE status = 'awaiting_approval' AND awaiting_expires_at <= $1 ORDER BY awaiting_expires_at, id LIMIT $2`

// ExpiredAwaiting returns runs awaiting approval whose wait expired at or before before (at most 100, the
// oldest first), with ID and UserID: for a sweep to expire those whose expiry timer no live instance
// keeps. It changes nothing: the expiry itself is a decision, which only one instance's resume wins.
func (db *DB) ExpiredAwaiting(ctx context.Context, before time.Time) ([]store.Run, error) {
	rows, err := db.pool.QueryContext(ctx, expiredAwaitingSQL, before, maxExpired)
	if err != nil {
		return nil, fmt.Errorf("postgres: expired awaiting runs: %w", err)
	}
	defer rows.Close()
	var runs []store.Run
	for rows.Next() {
		var r store.Run
		if err := rows.Scan(&r.ID, &r.UserID); err != nil {
			return nil, fmt.Errorf("postgres: expired awaiting runs: %w", err)
		}
		runs = append(runs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: expired awaiting runs: %w", err)
	}
	return runs, nil
}

// usageArgs are insertUsageSQL's arguments for u, made at u.CreatedAt or, when that is zero, at now.
func usageArgs(user string, u store.UsageEntry, now time.Time) []any {
	at := now
	if !u.CreatedAt.IsZero() {
		at = stored(u.CreatedAt)
	}
	return []any{uuid.Must(uuid.NewV7()).String(), user, u.RunID, u.SessionID, u.Agent, u.Model, u.InputTokens,
		u.OutputTokens, u.CacheReadTokens, u.CacheWriteTokens, u.ReasoningTokens, at, u.KeyID, u.CostNanoUSD, u.Estimated}
}

// AwaitRun makes a running run await approval, with its request, what it waits for, and its events.
func (db *DB) AwaitRun(ctx context.Context, user, runID string, a store.Await) error {
	if len(a.Awaiting) == 0 {
		return fmt.Errorf("postgres: await run: %w", conflict("run %q waits for nothing", runID))
	}
	for _, e := range a.Events {
		if e.RunID != runID {
			return fmt.Errorf("postgres: await run: %w", conflict("event %d belongs to run %q", e.Seq, e.RunID))
		}
	}
	return db.write(ctx, "await run", func(tx *sql.Tx) error {
		_, status, err := lockRun(ctx, tx, user, runID)
		if err != nil {
			return err
		}
		if status != store.RunRunning {
			return conflict("run %q is %s, not running", runID, status)
		}
		// A cancel asked on another instance (RequestCancel) is carried out by the run's owner while it
		// runs or is queued; a waiting run has no owner. The row's lock holds off a cancel asked now: it
		// finds the run waiting, and ends it as such.
		var cancelReason string
		if err := tx.QueryRowContext(ctx, cancelReasonSQL, runID).Scan(&cancelReason); err != nil {
			return err
		}
		if cancelReason != "" {
			return &store.CancelRequestedError{Reason: cancelReason}
		}
		if err := insertEvents(ctx, tx, a.Events, nil); err != nil {
			return err
		}
		var expires sql.NullTime
		if !a.ExpiresAt.IsZero() {
			expires = sql.NullTime{Time: a.ExpiresAt, Valid: true}
		}
		if _, err := tx.ExecContext(ctx, awaitRunSQL, runID, user, string(a.Awaiting), expires); err != nil {
			return err
		}
		return db.notifyEvents(ctx, tx, runID)
	})
}

// UpdateAwaiting replaces what an awaiting run waits for, when it is still before.
func (db *DB) UpdateAwaiting(ctx context.Context, user, runID string, before, after json.RawMessage) error {
	return db.write(ctx, "update awaiting", func(tx *sql.Tx) error {
		return awaitingChange(ctx, tx, user, runID, nil, updateAwaitingSQL, string(before), string(after))
	})
}

// ResumeRun makes an awaiting run running again, owned by this instance, when what it waits for is still
// before, its key still works and the quota allows one more run.
func (db *DB) ResumeRun(ctx context.Context, user, runID string, before json.RawMessage, reserve int64, quota []store.Limit) error {
	return db.write(ctx, "resume run", func(tx *sql.Tx) error {
		if len(quota) > 0 {
			// As prepareRun: the user's lock, before any row lock, makes the count and the resume one step
			// for every run of the user created or resumed at the same time, on any instance.
			if _, err := tx.ExecContext(ctx, lockUserSQL, user); err != nil {
				return err
			}
		}
		now := db.clock()
		check := func(sessionID string) error {
			// A revoke committed after this read is not seen here: the service checks the key again
			// once the run is live, where the revoke's cancel of the key's live runs finds it.
			if err := checkRunKey(ctx, tx, runID, now); err != nil {
				return err
			}
			if len(quota) == 0 {
				return nil
			}
			// The awaiting run is not counted among the running: the check admits it as one more.
			return checkQuota(ctx, tx, user, quota, sessionID)
		}
		return awaitingChange(ctx, tx, user, runID, check, resumeRunSQL, string(before), reserve, nullable(db.instance), db.leaseUntil(now))
	})
}

// runKeyRefusedSQL: the run was started with an API key that is revoked, has expired at $2 or is gone.
const runKeyRefusedSQL = `SELECT EXISTS (SELECT 1 FROM runs r LEFT JOIN api_keys k ON k.id = r.key_id
WHERE r.id = $1 AND r.key_id <> '' AND (k.id IS NULL OR k.revoked_at IS NOT NULL OR k.expires_at <= $2))`

// checkRunKey refuses with store.ErrKeyRevoked the resume of a run whose key no longer works: what it
// started stops with the key, as a send with the key is refused.
func checkRunKey(ctx context.Context, tx *sql.Tx, runID string, now time.Time) error {
	var refused bool
	if err := tx.QueryRowContext(ctx, runKeyRefusedSQL, runID, now).Scan(&refused); err != nil {
		return err
	}
	if refused {
		return fmt.Errorf("%w: run %q", store.ErrKeyRevoked, runID)
	}
	return nil
}

// awaitingChange runs an update of an awaiting run that names it by id, user and what it waits for
// ($1–$3), under its session's lock, reporting a run that is not the user's as not found and one that
// changed as a conflict. check, when set, may refuse the update once the run is known to wait; it is
// given the run's session.
func awaitingChange(ctx context.Context, tx *sql.Tx, user, runID string, check func(sessionID string) error, query string, args ...any) error {
	sessionID, status, err := lockRun(ctx, tx, user, runID)
	if err != nil {
		return err
	}
	if status != store.RunAwaiting {
		return conflict("run %q is %s, not awaiting approval", runID, status)
	}
	if check != nil {
		if err := check(sessionID); err != nil {
			return err
		}
	}
	res, err := tx.ExecContext(ctx, query, append([]any{runID, user}, args...)...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return conflict("run %q: what it waits for has changed", runID)
	}
	return nil
}
