package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"chatd/internal/store"
)

// defaultCutReason is the content of the failed tool records FinishRun adds when RunEnd.Reason is empty.
const defaultCutReason = "the run ended before this call finished"

const runColumns = `id, session_id, status, agent, model, finish_reason, error, input_tokens, output_tokens,
cache_read_tokens, cache_write_tokens, reasoning_tokens, COALESCE(idempotency_key, ''), request_hash, created_at,
started_at, ended_at, recovered_from, reserved_seq, key_id, awaiting`

const (
	// insertRunSQL inserts nothing unless the session is the user's. The CASTs are for PostgreSQL, which
	// types a parameter in a SELECT list as text.
	insertRunSQL = `INSERT INTO runs (id, session_id, user_id, status, agent, model, idempotency_key, request_hash,
request, created_at, started_at, reserved_seq, key_id)
SELECT $1, id, user_id, $4, $5, $6, $7, $8, $9, CAST($10 AS BIGINT), CAST($11 AS BIGINT), CAST($12 AS BIGINT), $13
FROM sessions WHERE id = $2 AND user_id = $3`

	// titleSessionSQL titles a session that has no title yet.
	titleSessionSQL = `UPDATE sessions SET title = $3 WHERE id = $1 AND user_id = $2 AND title = ''`

	selectRunSQL = `SELECT ` + runColumns + ` FROM runs WHERE id = $1 AND user_id = $2`
	activeRunSQL = `SELECT ` + runColumns + ` FROM runs WHERE session_id = $1 AND user_id = $2 AND status IN ('running', 'awaiting_approval')`
	runByKeySQL  = `SELECT ` + runColumns + ` FROM runs WHERE user_id = $1 AND idempotency_key = $2`
	// unfinishedSQL's condition is runs_active_by_user's, written alike: SQLite uses a partial index only
	// for a condition it recognizes as the index's.
	unfinishedSQL   = `SELECT ` + runColumns + `, user_id, request FROM runs WHERE status IN ('running', 'queued') ORDER BY created_at, id`
	awaitingSQL     = `SELECT ` + runColumns + `, user_id, request FROM runs WHERE status = 'awaiting_approval' AND ($1 = '' OR key_id = $1) ORDER BY created_at, id`
	runningInSQL    = `SELECT id FROM runs WHERE session_id = $1 AND user_id = $2 AND status IN ('running', 'awaiting_approval')`
	keyTakenSQL     = `SELECT EXISTS (SELECT 1 FROM runs WHERE user_id = $1 AND idempotency_key = $2)`
	lastEventSeqSQL = `SELECT COALESCE(MAX(seq), 0) FROM run_events WHERE run_id = $1`

	// keyRunsSQL pages through a key's active runs among its user's (runs_active_by_user, whose
	// condition it repeats), only what a cancel needs: 'queued' sorts before 'running', so the queued
	// ones come first. A page reads the user's active runs, the few one user has; on SQLite only the
	// contract and chatd keys revoke read it (one process runs every run, and cancels them as live).
	keyRunsSQL = `SELECT id, session_id, user_id, key_id, status FROM runs
WHERE user_id = $1 AND status IN ('running', 'queued') AND key_id = $2 AND (status, id) > ($3, $4)
ORDER BY status, id LIMIT $5`

	runStateSQL = `SELECT session_id, status FROM runs WHERE id = $1 AND user_id = $2`
	startRunSQL = `UPDATE runs SET status = 'running', started_at = $3, request = NULL,
reserved_seq = CASE WHEN reserved_seq < $4 THEN $4 ELSE reserved_seq END
WHERE id = $1 AND user_id = $2 AND status = 'queued'`

	// reserveSQL raises a run's reserved_seq, never lowering it.
	reserveSQL  = `UPDATE runs SET reserved_seq = $2 WHERE id = $1 AND reserved_seq < $2`
	runUsageSQL = `SELECT COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0),
		COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(cache_write_tokens), 0), COALESCE(SUM(reasoning_tokens), 0)
		FROM usage WHERE run_id = $1 AND user_id = $2`

	// The run's calls still open, in the order they were made.
	openRunCallsSQL = `SELECT c.record_id, c.call_id, c.name
FROM tool_calls c JOIN records r ON r.id = c.record_id
WHERE c.run_id = $1 AND c.session_id = $2 AND c.answer_id IS NULL
ORDER BY r.seq, c.idx`

	endRunSQL = `UPDATE runs SET status = $3, finish_reason = $4, error = $5, input_tokens = $6,
output_tokens = $7, cache_read_tokens = $8, cache_write_tokens = $9, reasoning_tokens = $10, ended_at = $11,
recovered_from = $12, request = NULL, awaiting = NULL
WHERE id = $1 AND user_id = $2 AND status IN ('queued', 'running', 'awaiting_approval')`

	awaitRunSQL = `UPDATE runs SET status = 'awaiting_approval', awaiting = $3
WHERE id = $1 AND user_id = $2 AND status = 'running'`
	updateAwaitingSQL = `UPDATE runs SET awaiting = $4
WHERE id = $1 AND user_id = $2 AND status = 'awaiting_approval' AND awaiting = $3`
	resumeRunSQL = `UPDATE runs SET status = 'running', request = NULL, awaiting = NULL,
reserved_seq = CASE WHEN reserved_seq < $4 THEN $4 ELSE reserved_seq END
WHERE id = $1 AND user_id = $2 AND status = 'awaiting_approval' AND awaiting = $3`

	insertUsageSQL = `INSERT INTO usage (id, user_id, run_id, session_id, agent, model, input_tokens,
output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, created_at, key_id, cost_nanousd, estimated)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`

	insertEventSQL  = `INSERT INTO run_events (run_id, seq, type, data) VALUES ($1, $2, $3, $4)`
	selectEventsSQL = `SELECT e.seq, e.type, e.data FROM run_events e JOIN runs r ON r.id = e.run_id
WHERE e.run_id = $1 AND r.user_id = $2 AND e.seq > $3 ORDER BY e.seq LIMIT $4`
	runOwnedSQL = `SELECT EXISTS (SELECT 1 FROM runs WHERE id = $1 AND user_id = $2)`
)

// CreateRun stores r, running or queued, in one of the user's sessions — or in a new one, r.NewSession —
// with its first record when given, assigning ID (when empty) and CreatedAt.
func (db *DB) CreateRun(ctx context.Context, user string, r *store.Run, first *store.Record) error {
	run, sess, rec, err := store.NewRun(r, first, db.clock(), newID)
	if err != nil {
		return fmt.Errorf("sqlite: create run: %w", err)
	}
	var started any
	if run.StartedAt != nil {
		started = run.StartedAt.UnixMicro()
	}
	var request any
	if run.Status == store.RunQueued && run.Request != nil {
		request = string(run.Request)
	}
	err = db.write(ctx, "create run", func(tx txn) error {
		if run.NewSession != nil && run.IdempotencyKey == "" && len(run.Quota) == 0 && plain(first) {
			return createInNewSession(ctx, tx, user, &sess, &run, first, &rec, started)
		}
		if run.NewSession != nil {
			// A new session's title is the one the run gives it, from the message: not the user's choice.
			if err := insertSession(ctx, tx, user, &sess, false); err != nil {
				return err
			}
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
		if run.Status == store.RunRunning {
			if err := checkIdle(ctx, tx, user, run.SessionID); err != nil {
				return err
			}
		}
		if err := checkQuota(ctx, tx, user, run.Quota, ""); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, insertRunSQL, run.ID, run.SessionID, user, run.Status, run.Agent, run.Model,
			nullable(run.IdempotencyKey), run.RequestHash, request, run.CreatedAt.UnixMicro(), started, run.ReservedSeq, run.KeyID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return notFound("session", run.SessionID)
		}
		if run.Title != "" {
			if _, err := tx.ExecContext(ctx, titleSessionSQL, run.SessionID, user, run.Title); err != nil {
				return err
			}
		}
		if first != nil {
			return appendRecordAfter(ctx, tx, user, &rec, run.CreatedAt, run.AfterSeq)
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
	return first == nil || first.Role != store.RoleTool && first.Retracts == "" && len(first.ToolCalls) == 0
}

// createInNewSession is CreateRun's transaction for the common send, the first message of a new
// session, in three statements: a new session has no run to be busy with, no open call, no record to
// number after, and takes its title and last Seq as it is inserted.
func createInNewSession(ctx context.Context, tx txn, user string, sess *store.Session, run *store.Run,
	first, rec *store.Record, started any) error {
	var last int64
	if first != nil {
		last = 1
	}
	title := sess.Title
	if title == "" {
		title = run.Title
	}
	if _, err := tx.ExecContext(ctx, insertNewSessionSQL, sess.ID, user, title, sess.Agent, string(sess.Metadata),
		sess.CreatedAt.UnixMicro(), last); err != nil {
		return err
	}
	sess.Title = title
	if _, err := tx.ExecContext(ctx, insertRunSQL, run.ID, run.SessionID, user, run.Status, run.Agent, run.Model,
		nullable(run.IdempotencyKey), run.RequestHash, nil, run.CreatedAt.UnixMicro(), started, run.ReservedSeq, run.KeyID); err != nil {
		return err
	}
	if first == nil {
		return nil
	}
	rec.Seq, rec.CreatedAt = 1, run.CreatedAt
	return insertRecord(ctx, tx, user, rec)
}

// checkIdle refuses with store.ErrBusy while the user's session has a running run. The unique index
// runs_one_running_per_session enforces the same; checking first gives the error its own kind. Another
// user's session looks idle here, so that the insert that follows reports it as not found.
func checkIdle(ctx context.Context, tx txn, user, sessionID string) error {
	var id string
	err := tx.QueryRowContext(ctx, runningInSQL, sessionID, user).Scan(&id)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return err
	}
	return fmt.Errorf("%w: session %q runs %s", store.ErrBusy, sessionID, id)
}

// StartRun makes a queued run running, with its first record.
func (db *DB) StartRun(ctx context.Context, user, runID string, first *store.Record, reserve int64) error {
	var rec store.Record
	if first != nil {
		var err error
		if rec, err = store.NewRecord(first, newID); err != nil {
			return fmt.Errorf("sqlite: start run: %w", err)
		}
		rec.RunID = runID
	}
	err := db.write(ctx, "start run", func(tx txn) error {
		sessionID, status, err := runState(ctx, tx, user, runID)
		if err != nil {
			return err
		}
		if status != store.RunQueued {
			return conflict("run %q is %s, not queued", runID, status)
		}
		if err := checkIdle(ctx, tx, user, sessionID); err != nil {
			return err
		}
		now := db.clock()
		if _, err := tx.ExecContext(ctx, startRunSQL, runID, user, now.UnixMicro(), reserve); err != nil {
			return err
		}
		if first != nil {
			if rec.SessionID != sessionID {
				return conflict("the first record of run %q belongs to another session", runID)
			}
			return appendRecord(ctx, tx, user, &rec, now)
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
	return db.runBy(ctx, user, "run", id, selectRunSQL, id, user)
}

// completeRun adds what is not a column of the run's row: its last event and, before it ends, its usage.
func completeRun(ctx context.Context, tx txn, user string, r *store.Run) error {
	if err := tx.QueryRowContext(ctx, lastEventSeqSQL, r.ID).Scan(&r.LastEventSeq); err != nil {
		return err
	}
	if r.EndedAt != nil {
		return nil
	}
	u := &r.Usage
	return tx.QueryRowContext(ctx, runUsageSQL, r.ID, user).Scan(&u.InputTokens, &u.OutputTokens,
		&u.CacheReadTokens, &u.CacheWriteTokens, &u.ReasoningTokens)
}

// ActiveRun returns the session's running run.
func (db *DB) ActiveRun(ctx context.Context, user, sessionID string) (*store.Run, error) {
	return db.runBy(ctx, user, "running run of session", sessionID, activeRunSQL, sessionID, user)
}

// RunByKey returns the user's run created with the idempotency key.
func (db *DB) RunByKey(ctx context.Context, user, key string) (*store.Run, error) {
	return db.runBy(ctx, user, "run with idempotency key", key, runByKeySQL, user, key)
}

// runBy reads the one run query finds, reporting none as the missing "what id".
func (db *DB) runBy(ctx context.Context, user, what, id, query string, args ...any) (*store.Run, error) {
	var r *store.Run
	err := db.read(ctx, what, func(tx txn) error {
		var err error
		r, err = scanRun(tx.QueryRowContext(ctx, query, args...))
		if errors.Is(err, sql.ErrNoRows) {
			return notFound(what, id)
		}
		if err != nil {
			return err
		}
		return completeRun(ctx, tx, user, r)
	})
	if err != nil {
		return nil, err
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
	var runs []store.Run
	err := db.read(ctx, "active runs of key", func(tx txn) error {
		rows, err := tx.QueryContext(ctx, keyRunsSQL, user, keyID, status, id, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r store.Run
			if err := rows.Scan(&r.ID, &r.SessionID, &r.UserID, &r.KeyID, &r.Status); err != nil {
				return err
			}
			runs = append(runs, r)
		}
		return rows.Err()
	})
	return runs, err
}

// runsAcrossUsers reads the runs of query, of every user, with their user ids and requests.
func (db *DB) runsAcrossUsers(ctx context.Context, what, query string, args ...any) ([]store.Run, error) {
	var runs []store.Run
	err := db.read(ctx, what, func(tx txn) error {
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var request sql.NullString
			r, err := scanRun(rows, &request)
			if err != nil {
				return err
			}
			if request.Valid {
				r.Request = []byte(request.String)
			}
			runs = append(runs, *r)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		for i := range runs {
			if err := completeRun(ctx, tx, runs[i].UserID, &runs[i]); err != nil {
				return err
			}
		}
		return nil
	})
	return runs, err
}

// scanRun reads runColumns, then extra: for UnfinishedRuns, the user id and the request.
func scanRun(row scanner, extra ...any) (*store.Run, error) {
	var r store.Run
	var created int64
	var started, ended sql.NullInt64
	var awaiting sql.NullString
	u := &r.Usage
	dest := []any{&r.ID, &r.SessionID, &r.Status, &r.Agent, &r.Model, &r.FinishReason, &r.Error,
		&u.InputTokens, &u.OutputTokens, &u.CacheReadTokens, &u.CacheWriteTokens, &u.ReasoningTokens,
		&r.IdempotencyKey, &r.RequestHash, &created, &started, &ended, &r.RecoveredFrom, &r.ReservedSeq, &r.KeyID, &awaiting}
	if len(extra) > 0 {
		dest = append(dest, &r.UserID)
		dest = append(dest, extra...)
	}
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	r.CreatedAt = fromMicros(created)
	if awaiting.Valid {
		r.Awaiting = []byte(awaiting.String)
	}
	if started.Valid {
		t := fromMicros(started.Int64)
		r.StartedAt = &t
	}
	if ended.Valid {
		t := fromMicros(ended.Int64)
		r.EndedAt = &t
	}
	return &r, nil
}

// runState reads the session and status of one of the user's runs.
func runState(ctx context.Context, tx txn, user, runID string) (sessionID, status string, err error) {
	err = tx.QueryRowContext(ctx, runStateSQL, runID, user).Scan(&sessionID, &status)
	if errors.Is(err, sql.ErrNoRows) {
		err = notFound("run", runID)
	}
	return sessionID, status, err
}

// CloseCalls appends a failed tool record for each open call of the run.
func (db *DB) CloseCalls(ctx context.Context, user, runID, reason string) ([]store.Record, error) {
	var added []store.Record
	err := db.write(ctx, "close calls", func(tx txn) error {
		sessionID, _, err := runState(ctx, tx, user, runID)
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
		return nil, fmt.Errorf("sqlite: finish run: %w", conflict("%q is not a terminal run status", end.Status))
	}
	for _, e := range end.Events {
		if e.RunID != runID {
			return nil, fmt.Errorf("sqlite: finish run: %w", conflict("event %d belongs to run %q", e.Seq, e.RunID))
		}
	}
	var added []store.Record
	err := db.write(ctx, "finish run", func(tx txn) error {
		sessionID, status, err := runState(ctx, tx, user, runID)
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
		if err := insertEvents(ctx, tx, end.Events); err != nil {
			return err
		}
		if err := insertCalls(ctx, tx, user, end.Calls, now); err != nil {
			return err
		}
		if err := dropRequests(ctx, tx, sessionID, end.KeepRequests, end.RequestsDropped); err != nil {
			return err
		}
		u := end.Usage
		if end.UsageFromEntries {
			if err := tx.QueryRowContext(ctx, runUsageSQL, runID, user).Scan(&u.InputTokens, &u.OutputTokens,
				&u.CacheReadTokens, &u.CacheWriteTokens, &u.ReasoningTokens); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, endRunSQL, runID, user, end.Status, end.FinishReason, end.Error,
			u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheWriteTokens, u.ReasoningTokens,
			now.UnixMicro(), end.RecoveredFrom)
		return err
	})
	if err != nil {
		return nil, err
	}
	return added, nil
}

// AppendEvents appends a batch of events, of any runs, and raises the runs' reservations, in one
// transaction.
func (db *DB) AppendEvents(ctx context.Context, events []store.Event, reserved []store.Reservation) error {
	if len(events) == 0 && len(reserved) == 0 {
		return nil
	}
	return db.write(ctx, "append events", func(tx txn) error {
		if err := insertEvents(ctx, tx, events); err != nil {
			return err
		}
		return reserve(ctx, tx, reserved)
	})
}

// reserve raises the runs' reserved_seq.
func reserve(ctx context.Context, tx txn, reserved []store.Reservation) error {
	if len(reserved) == 0 {
		return nil
	}
	stmt, err := tx.prepared(ctx, reserveSQL)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, r := range reserved {
		if _, err := stmt.ExecContext(ctx, r.RunID, r.Seq); err != nil {
			return err
		}
	}
	return nil
}

// eventsPerInsert is how many events one INSERT statement carries: a multi-row insert costs the driver
// one call where single rows cost one each.
const eventsPerInsert = 128

// insertManyEventsSQL inserts eventsPerInsert events.
var insertManyEventsSQL = "INSERT INTO run_events (run_id, seq, type, data) VALUES " +
	strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?), ", eventsPerInsert), ", ")

func insertEvents(ctx context.Context, tx txn, events []store.Event) error {
	for _, e := range events {
		if e.Seq <= 0 || e.Type == "" {
			return conflict("event %d of run %q has no sequence number or type", e.Seq, e.RunID)
		}
	}
	if len(events) >= eventsPerInsert {
		stmt, err := tx.prepared(ctx, insertManyEventsSQL)
		if err != nil {
			return err
		}
		defer stmt.Close()
		args := make([]any, 0, 4*eventsPerInsert)
		var runID, typ any // boxed once for the events of one run and of one type in a row
		for len(events) >= eventsPerInsert {
			args = args[:0]
			for i, e := range events[:eventsPerInsert] {
				if i == 0 || e.RunID != events[i-1].RunID {
					runID = e.RunID
				}
				if i == 0 || e.Type != events[i-1].Type {
					typ = e.Type
				}
				args = append(args, runID, e.Seq, typ, e.Data)
			}
			if _, err := stmt.ExecContext(ctx, args...); err != nil {
				return err
			}
			events = events[eventsPerInsert:]
		}
	}
	if len(events) == 0 {
		return nil
	}
	stmt, err := tx.prepared(ctx, insertEventSQL)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, e := range events {
		if _, err := stmt.ExecContext(ctx, e.RunID, e.Seq, e.Type, e.Data); err != nil {
			return err
		}
	}
	return nil
}

// Events returns up to limit events of one of the user's runs after seq after.
func (db *DB) Events(ctx context.Context, user, runID string, after int64, limit int) ([]store.Event, error) {
	if limit <= 0 {
		limit = 1000
	}
	var events []store.Event
	err := db.read(ctx, "events", func(tx txn) error {
		rows, err := tx.QueryContext(ctx, selectEventsSQL, runID, user, after, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			e := store.Event{RunID: runID}
			var data string
			if err := rows.Scan(&e.Seq, &e.Type, &data); err != nil {
				return err
			}
			e.Data = []byte(data)
			events = append(events, e)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(events) > 0 {
			return nil
		}
		// No events: tell an empty log from a run that is not the user's.
		var owned bool
		if err := tx.QueryRowContext(ctx, runOwnedSQL, runID, user).Scan(&owned); err != nil {
			return err
		}
		if !owned {
			return notFound("run", runID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return events, nil
}

// openCall is a tool call without a tool record.
type openCall struct{ recordID, callID, name string }

// closeCalls appends a failed tool record for each open call of the run.
func closeCalls(ctx context.Context, tx txn, user, sessionID, runID, reason string,
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

// openRunCalls reads all the calls before any is closed: a connection (PostgreSQL's certainly) cannot
// run the appends while it still streams these rows.
func openRunCalls(ctx context.Context, tx txn, sessionID, runID string) ([]openCall, error) {
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
	at := u.CreatedAt.UTC().Truncate(time.Microsecond)
	if u.CreatedAt.IsZero() {
		at = db.clock()
	}
	return db.write(ctx, "add usage", func(tx txn) error {
		return insertUsage(ctx, tx, user, u, at)
	})
}

// insertUsage stores u, made at u.CreatedAt or, when that is zero, at now.
func insertUsage(ctx context.Context, tx txn, user string, u store.UsageEntry, now time.Time) error {
	at := now
	if !u.CreatedAt.IsZero() {
		at = u.CreatedAt.UTC().Truncate(time.Microsecond)
	}
	_, err := tx.ExecContext(ctx, insertUsageSQL, uuid.Must(uuid.NewV7()).String(), user, u.RunID,
		u.SessionID, u.Agent, u.Model, u.InputTokens, u.OutputTokens, u.CacheReadTokens,
		u.CacheWriteTokens, u.ReasoningTokens, at.UnixMicro(), u.KeyID, u.CostNanoUSD, u.Estimated)
	return err
}

// AwaitRun makes a running run await approval, with its request, what it waits for, and its events.
func (db *DB) AwaitRun(ctx context.Context, user, runID string, a store.Await) error {
	if len(a.Awaiting) == 0 {
		return fmt.Errorf("sqlite: await run: %w", conflict("run %q waits for nothing", runID))
	}
	for _, e := range a.Events {
		if e.RunID != runID {
			return fmt.Errorf("sqlite: await run: %w", conflict("event %d belongs to run %q", e.Seq, e.RunID))
		}
	}
	return db.write(ctx, "await run", func(tx txn) error {
		_, status, err := runState(ctx, tx, user, runID)
		if err != nil {
			return err
		}
		if status != store.RunRunning {
			return conflict("run %q is %s, not running", runID, status)
		}
		if err := insertEvents(ctx, tx, a.Events); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, awaitRunSQL, runID, user, string(a.Awaiting))
		return err
	})
}

// UpdateAwaiting replaces what an awaiting run waits for, when it is still before.
func (db *DB) UpdateAwaiting(ctx context.Context, user, runID string, before, after json.RawMessage) error {
	return db.write(ctx, "update awaiting", func(tx txn) error {
		return awaitingChange(ctx, tx, user, runID, nil, updateAwaitingSQL, string(before), string(after))
	})
}

// ResumeRun makes an awaiting run running again, when what it waits for is still before, its key still
// works and the quota allows one more run.
func (db *DB) ResumeRun(ctx context.Context, user, runID string, before json.RawMessage, reserve int64, quota []store.Limit) error {
	return db.write(ctx, "resume run", func(tx txn) error {
		check := func(sessionID string) error {
			if err := checkRunKey(ctx, tx, runID, db.clock()); err != nil {
				return err
			}
			// The awaiting run is not counted among the running: the check admits it as one more.
			return checkQuota(ctx, tx, user, quota, sessionID)
		}
		return awaitingChange(ctx, tx, user, runID, check, resumeRunSQL, string(before), reserve)
	})
}

// runKeyRefusedSQL: the run was started with an API key that is revoked, has expired at $2 or is gone.
const runKeyRefusedSQL = `SELECT EXISTS (SELECT 1 FROM runs r LEFT JOIN api_keys k ON k.id = r.key_id
WHERE r.id = $1 AND r.key_id <> '' AND (k.id IS NULL OR k.revoked_at IS NOT NULL OR k.expires_at <= $2))`

// checkRunKey refuses with store.ErrKeyRevoked the resume of a run whose key no longer works: what it
// started stops with the key, as a send with the key is refused.
func checkRunKey(ctx context.Context, tx txn, runID string, now time.Time) error {
	var refused bool
	if err := tx.QueryRowContext(ctx, runKeyRefusedSQL, runID, now.UnixMicro()).Scan(&refused); err != nil {
		return err
	}
	if refused {
		return fmt.Errorf("%w: run %q", store.ErrKeyRevoked, runID)
	}
	return nil
}

// awaitingChange runs an update of an awaiting run that names it by id, user and what it waits for
// ($1–$3), reporting a run that is not the user's as not found and one that changed as a conflict.
// check, when set, may refuse the update once the run is known to wait; it is given the run's session.
func awaitingChange(ctx context.Context, tx txn, user, runID string, check func(sessionID string) error, query string, args ...any) error {
	sessionID, status, err := runState(ctx, tx, user, runID)
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
