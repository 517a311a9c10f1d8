package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"chatd/internal/store"
)

// defaultCutReason is the content of the failed tool records FinishRun adds when RunEnd.Reason is empty.
const defaultCutReason = "the run ended before this call finished"

const (
	// insertRunSQL inserts nothing unless the session is the user's. The CAST is for PostgreSQL, which
	// types a parameter in a SELECT list as text.
	insertRunSQL = `INSERT INTO runs (id, session_id, user_id, status, agent, model, created_at)
SELECT $1, id, user_id, 'running', $4, $5, CAST($6 AS BIGINT) FROM sessions WHERE id = $2 AND user_id = $3`

	selectRunSQL = `SELECT id, session_id, status, agent, model, finish_reason, error, input_tokens,
output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, created_at, ended_at
FROM runs WHERE id = $1 AND user_id = $2`

	runStateSQL    = `SELECT session_id, status FROM runs WHERE id = $1 AND user_id = $2`
	runningRunsSQL = `SELECT id, user_id FROM runs WHERE status = 'running' ORDER BY created_at, id`
	runUsageSQL    = `SELECT COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0),
		COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(cache_write_tokens), 0), COALESCE(SUM(reasoning_tokens), 0)
		FROM usage WHERE run_id = $1 AND user_id = $2`

	// The run's calls still open, in the order they were made.
	openRunCallsSQL = `SELECT c.record_id, c.call_id, c.name
FROM tool_calls c JOIN records r ON r.id = c.record_id
WHERE c.run_id = $1 AND c.session_id = $2 AND c.answer_id IS NULL
ORDER BY r.seq, c.idx`

	endRunSQL = `UPDATE runs SET status = $3, finish_reason = $4, error = $5, input_tokens = $6,
output_tokens = $7, cache_read_tokens = $8, cache_write_tokens = $9, reasoning_tokens = $10, ended_at = $11
WHERE id = $1 AND user_id = $2 AND status = 'running'`

	insertUsageSQL = `INSERT INTO usage (id, user_id, run_id, session_id, agent, model, input_tokens,
output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`
)

// CreateRun stores r with status running in one of the user's sessions, assigning ID (when empty) and
// CreatedAt.
func (db *DB) CreateRun(ctx context.Context, user string, r *store.Run) error {
	run := *r
	if run.ID == "" {
		run.ID = uuid.Must(uuid.NewV7()).String()
	}
	run.Status, run.FinishReason, run.Error, run.Usage, run.EndedAt = store.RunRunning, "", "", store.Usage{}, nil
	run.CreatedAt = db.clock()
	err := db.write(ctx, "create run", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, insertRunSQL, run.ID, run.SessionID, user, run.Agent, run.Model,
			run.CreatedAt.UnixMicro())
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return notFound("session", run.SessionID)
		}
		return nil
	})
	if err != nil {
		return err
	}
	*r = run
	return nil
}

// Run returns one of the user's runs.
func (db *DB) Run(ctx context.Context, user, id string) (*store.Run, error) {
	var r store.Run
	var created int64
	var ended sql.NullInt64
	u := &r.Usage
	err := db.reader.QueryRowContext(ctx, selectRunSQL, id, user).Scan(&r.ID, &r.SessionID, &r.Status,
		&r.Agent, &r.Model, &r.FinishReason, &r.Error, &u.InputTokens, &u.OutputTokens, &u.CacheReadTokens,
		&u.CacheWriteTokens, &u.ReasoningTokens, &created, &ended)
	if errors.Is(err, sql.ErrNoRows) {
		err = notFound("run", id)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: run: %w", err)
	}
	r.CreatedAt = fromMicros(created)
	if ended.Valid {
		t := fromMicros(ended.Int64)
		r.EndedAt = &t
	}
	return &r, nil
}

// FinishRun ends a running run in one transaction: a failed tool record for each of its calls still
// open, in call order, then the run's end state. It returns the records it appended.
func (db *DB) FinishRun(ctx context.Context, user, runID string, end store.RunEnd) ([]store.Record, error) {
	if !terminal(end.Status) {
		return nil, fmt.Errorf("sqlite: finish run: %w", conflict("%q is not a terminal run status", end.Status))
	}
	var added []store.Record
	err := db.write(ctx, "finish run", func(tx *sql.Tx) error {
		var sessionID, status string
		err := tx.QueryRowContext(ctx, runStateSQL, runID, user).Scan(&sessionID, &status)
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("run", runID)
		}
		if err != nil {
			return err
		}
		if status != store.RunRunning {
			return conflict("run %q already ended (%s)", runID, status)
		}
		now := db.clock()
		if added, err = closeCalls(ctx, tx, user, sessionID, runID, end.Reason, now); err != nil {
			return err
		}
		u := end.Usage
		_, err = tx.ExecContext(ctx, endRunSQL, runID, user, end.Status, end.FinishReason, end.Error,
			u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheWriteTokens, u.ReasoningTokens,
			now.UnixMicro())
		return err
	})
	if err != nil {
		return nil, err
	}
	return added, nil
}

// interruptedError is the error of a run a dead process left running.
const interruptedError = "chatd stopped before the run ended"

// InterruptRunning ends the runs a dead process left running, each as FinishRun would with status
// interrupted, so that their sessions accept the next message.
func (db *DB) InterruptRunning(ctx context.Context, reason string) ([]store.Run, error) {
	type owned struct{ id, user string }
	var running []owned
	rows, err := db.reader.QueryContext(ctx, runningRunsSQL)
	if err != nil {
		return nil, fmt.Errorf("sqlite: interrupt running: %w", err)
	}
	for rows.Next() {
		var o owned
		if err := rows.Scan(&o.id, &o.user); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlite: interrupt running: %w", err)
		}
		running = append(running, o)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: interrupt running: %w", err)
	}
	var ended []store.Run
	for _, o := range running {
		end := store.RunEnd{Status: store.RunInterrupted, Error: interruptedError, Reason: reason}
		u := &end.Usage
		if err := db.reader.QueryRowContext(ctx, runUsageSQL, o.id, o.user).Scan(&u.InputTokens, &u.OutputTokens,
			&u.CacheReadTokens, &u.CacheWriteTokens, &u.ReasoningTokens); err != nil {
			return ended, fmt.Errorf("sqlite: interrupt running: usage of %s: %w", o.id, err)
		}
		if _, err := db.FinishRun(ctx, o.user, o.id, end); err != nil && !errors.Is(err, store.ErrConflict) {
			return ended, err
		}
		r, err := db.Run(ctx, o.user, o.id)
		if err != nil {
			return ended, err
		}
		ended = append(ended, *r)
	}
	return ended, nil
}

// openCall is a tool call without a tool record.
type openCall struct{ recordID, callID, name string }

// closeCalls appends a failed tool record for each open call of the run.
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
		rec, err := newRecord(&store.Record{SessionID: sessionID, RunID: runID, Role: store.RoleTool,
			Content: reason, ParentID: c.recordID, ToolCallID: c.callID, Name: c.name,
			Success: &failed, DurationMS: &zero})
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
	at := u.CreatedAt.UTC().Truncate(time.Microsecond)
	if u.CreatedAt.IsZero() {
		at = db.clock()
	}
	return db.write(ctx, "add usage", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, insertUsageSQL, uuid.Must(uuid.NewV7()).String(), user, u.RunID,
			u.SessionID, u.Agent, u.Model, u.InputTokens, u.OutputTokens, u.CacheReadTokens,
			u.CacheWriteTokens, u.ReasoningTokens, at.UnixMicro())
		return err
	})
}
