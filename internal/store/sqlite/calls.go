package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"chatd/internal/store"
)

const (
	// insertCallSQL stores a model call of one of the user's runs; a run of another user stores nothing.
	insertCallSQL = `INSERT INTO model_calls (run_id, n, session_id, user_id, model, system, tools, settings,
request, request_omitted, output, created_at)
SELECT id, $3, session_id, user_id, $4, $5, $6, $7, $8, $9, $10, $11 FROM runs WHERE id = $1 AND user_id = $2
ON CONFLICT (run_id, n) DO NOTHING`

	// dropRequestsSQL, completed by dropRequestsQuery, drops the request bodies of the calls of a
	// session's runs older than its latest few: only rows that still hold one are looked at
	// (model_calls_with_request), a few runs' calls.
	dropRequestsSQL = `UPDATE model_calls SET request = NULL, request_omitted = $2
WHERE session_id = $1 AND request IS NOT NULL
AND run_id NOT IN (SELECT id FROM runs WHERE session_id = $1 ORDER BY created_at DESC, id DESC LIMIT `

	selectCallsSQL = `SELECT n, session_id, model, system, tools, settings, request, request_omitted, output, created_at
FROM model_calls WHERE run_id = $1 AND user_id = $2 ORDER BY n`

	// titleGeneratedSQL sets a generated title unless the user set one: the check is the update's own.
	titleGeneratedSQL = `UPDATE sessions SET title = $3 WHERE id = $1 AND user_id = $2 AND NOT title_set`
	sessionOwnedSQL   = `SELECT 1 FROM sessions WHERE id = $1 AND user_id = $2`
)

// insertCalls stores the diagnostics of model calls in a write's transaction.
func insertCalls(ctx context.Context, tx txn, user string, calls []store.ModelCall, now time.Time) error {
	for _, c := range calls {
		at := now
		if !c.CreatedAt.IsZero() {
			at = c.CreatedAt.UTC().Truncate(time.Microsecond)
		}
		var system any
		if !c.SameSystem {
			system = store.SafeText(c.System)
		}
		tools, err := json.Marshal(c.Tools)
		if err != nil {
			return err
		}
		if c.Tools == nil {
			tools = []byte("[]")
		}
		settings := "{}"
		if c.Settings != nil {
			settings = string(c.Settings)
		}
		var output any
		if c.Output != nil {
			output = string(c.Output)
		}
		var request any
		if c.Request != nil {
			request = c.Request
		}
		if _, err := tx.ExecContext(ctx, insertCallSQL, c.RunID, user, c.N, store.SafeText(c.Model), system, string(tools), settings,
			request, store.SafeText(c.RequestOmitted), output, at.UnixMicro()); err != nil {
			return err
		}
	}
	return nil
}

// dropRequests keeps the request bodies of the calls of a session's latest keep runs only (all for 0).
func dropRequests(ctx context.Context, tx txn, sessionID string, keep int, why string) error {
	if keep <= 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, dropRequestsQuery(keep), sessionID, store.SafeText(why))
	return err
}

// dropRequestsQuery is dropRequestsSQL keeping the latest keep runs' requests. The count is written in
// the text, not bound: SQLite compiled the statement again at every run's end when its LIMIT was a
// parameter (sqlite3Reprepare: 50 µs a run's end where 18 µs do), and keep is one setting, so the
// text is one prepared statement.
func dropRequestsQuery(keep int) string {
	return dropRequestsSQL + strconv.Itoa(keep) + ")"
}

// ModelCalls returns the stored model calls of one of the user's runs, by N.
func (db *DB) ModelCalls(ctx context.Context, user, runID string) ([]store.ModelCall, error) {
	var owned bool
	if err := db.readStmts.queryRow(ctx, runOwnedSQL, runID, user).Scan(&owned); err != nil {
		return nil, fmt.Errorf("sqlite: model calls: %w", err)
	}
	if !owned {
		return nil, fmt.Errorf("sqlite: model calls: %w", notFound("run", runID))
	}
	rows, err := db.readStmts.query(ctx, selectCallsSQL, runID, user)
	if err != nil {
		return nil, fmt.Errorf("sqlite: model calls: %w", err)
	}
	defer rows.Close()
	out := []store.ModelCall{}
	for rows.Next() {
		c := store.ModelCall{RunID: runID}
		var system, output sql.NullString
		var tools, settings string
		var at int64
		if err := rows.Scan(&c.N, &c.SessionID, &c.Model, &system, &tools, &settings, &c.Request, &c.RequestOmitted,
			&output, &at); err != nil {
			return nil, fmt.Errorf("sqlite: model calls: %w", err)
		}
		if err := store.StoredCall(&c, system.String, system.Valid, tools, settings, output.String, output.Valid); err != nil {
			return nil, fmt.Errorf("sqlite: model calls: %w", err)
		}
		c.CreatedAt = time.UnixMicro(at).UTC()
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: model calls: %w", err)
	}
	return out, nil
}

// TitleSession sets a generated title, unless the user set the session's title.
func (db *DB) TitleSession(ctx context.Context, user, id, title string) (bool, error) {
	var set bool
	err := db.write(ctx, "title session", func(tx txn) error {
		res, err := tx.ExecContext(ctx, titleGeneratedSQL, id, user, title)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if set = n > 0; set {
			return nil
		}
		var one int
		err = tx.QueryRowContext(ctx, sessionOwnedSQL, id, user).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("session", id)
		}
		return err
	})
	if err != nil {
		return false, err
	}
	return set, nil
}
