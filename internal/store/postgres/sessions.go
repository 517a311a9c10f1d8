package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"chatd/internal/store"
)

// Page sizes of Sessions.
const (
	defaultPageSize = 50
	maxPageSize     = 200
)

const (
	// insertSessionSQL inserts a session; $7 says whether the user chose its title (TitleSession).
	insertSessionSQL = `INSERT INTO sessions (id, user_id, title, agent, metadata, created_at, updated_at, title_set)
VALUES ($1, $2, $3, $4, $5, $6, $6, $7)`

	sessionColumns = `id, title, agent, metadata, created_at, updated_at, last_seq`

	selectSessionSQL = `SELECT ` + sessionColumns + ` FROM sessions WHERE id = $1 AND user_id = $2`

	// The first page and the pages after a cursor; (updated_at, id) is the key the index is sorted by.
	listSessionsSQL = `SELECT ` + sessionColumns + ` FROM sessions WHERE user_id = $1
ORDER BY updated_at DESC, id DESC LIMIT $2`
	listSessionsAfterSQL = `SELECT ` + sessionColumns + ` FROM sessions
WHERE user_id = $1 AND (updated_at, id) < ($3, $4)
ORDER BY updated_at DESC, id DESC LIMIT $2`

	updateSessionSQL = `UPDATE sessions
SET title = COALESCE($3, title), title_set = (title_set OR $3::text IS NOT NULL),
    metadata = COALESCE($4::json, metadata), updated_at = $5
WHERE id = $1 AND user_id = $2
RETURNING ` + sessionColumns

	// lockSessionSQL takes the session's row lock: the first statement of every transaction that writes
	// the session's records or runs, so that what it reads next includes every earlier write to them.
	lockSessionSQL = `SELECT 1 FROM sessions WHERE id = $1 AND user_id = $2 FOR UPDATE`

	deleteSessionSQL = `DELETE FROM sessions WHERE id = $1 AND user_id = $2`
	unendedInSQL     = `SELECT id FROM runs WHERE session_id = $1 AND user_id = $2 AND status IN ('queued', 'running', 'awaiting_approval') ORDER BY created_at LIMIT 1`
)

// CreateSession stores s, assigning ID (when empty), CreatedAt and UpdatedAt, and Metadata {} when nil.
func (db *DB) CreateSession(ctx context.Context, user string, s *store.Session) error {
	created, err := store.NewSession(s, db.clock(), newID)
	if err != nil {
		return fmt.Errorf("postgres: create session: %w", err)
	}
	if _, err := db.exec(ctx, "create session", insertSessionSQL, sessionArgs(user, &created, created.Title != "")...); err != nil {
		return err
	}
	*s = created
	return nil
}

// sessionArgs are insertSessionSQL's arguments; titleSet says the user chose the title. An id taken (by
// any user) is ErrConflict.
func sessionArgs(user string, s *store.Session, titleSet bool) []any {
	return []any{s.ID, user, s.Title, s.Agent, string(s.Metadata), s.CreatedAt, titleSet}
}

// Session returns one of the user's sessions.
func (db *DB) Session(ctx context.Context, user, id string) (*store.Session, error) {
	s, err := scanSession(db.pool.QueryRowContext(ctx, selectSessionSQL, id, user))
	if errors.Is(err, sql.ErrNoRows) {
		err = notFound("session", id)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: session: %w", err)
	}
	return s, nil
}

// Sessions lists the user's sessions, most recently updated first, and the cursor of the next page.
func (db *DB) Sessions(ctx context.Context, user string, p store.Page) ([]store.Session, string, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = defaultPageSize
	}
	limit = min(limit, maxPageSize)
	var rows *sql.Rows
	var err error
	if p.Cursor == "" {
		rows, err = db.pool.QueryContext(ctx, listSessionsSQL, user, limit+1)
	} else {
		var at int64
		var id string
		if at, id, err = store.DecodeCursor(p.Cursor); err != nil {
			return nil, "", fmt.Errorf("postgres: sessions: %w", err)
		}
		rows, err = db.pool.QueryContext(ctx, listSessionsAfterSQL, user, limit+1, time.UnixMicro(at).UTC(), id)
	}
	if err != nil {
		return nil, "", fmt.Errorf("postgres: sessions: %w", err)
	}
	defer rows.Close()
	list := []store.Session{}
	for rows.Next() {
		s, err := scanSession(rows)
		if err != nil {
			return nil, "", fmt.Errorf("postgres: sessions: %w", err)
		}
		list = append(list, *s)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("postgres: sessions: %w", err)
	}
	// One row more than the page tells whether another page follows.
	if len(list) <= limit {
		return list, "", nil
	}
	list = list[:limit]
	last := list[limit-1]
	return list, store.EncodeCursor(last.UpdatedAt.UnixMicro(), last.ID), nil
}

// UpdateSession changes the patch's non-nil fields and touches UpdatedAt.
func (db *DB) UpdateSession(ctx context.Context, user, id string, p store.SessionPatch) (*store.Session, error) {
	var metaArg any // NULL keeps the stored metadata
	if p.Metadata != nil {
		meta, err := store.SessionMetadata(p.Metadata)
		if err != nil {
			return nil, fmt.Errorf("postgres: update session: %w", err)
		}
		metaArg = "{}" // JSON null clears it
		if meta != nil {
			metaArg = string(meta)
		}
	}
	var s *store.Session
	err := db.write1(ctx, "update session", func(q querier) error {
		row := q.QueryRowContext(ctx, updateSessionSQL, id, user, p.Title, metaArg, db.clock())
		var err error
		s, err = scanSession(row)
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("session", id)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// DeleteSession deletes a session; its records, tool calls and runs go with it (ON DELETE CASCADE),
// its usage entries stay. The session's lock keeps a run from starting between the check and the delete.
func (db *DB) DeleteSession(ctx context.Context, user, id string) error {
	return db.write(ctx, "delete session", func(tx *sql.Tx) error {
		if err := lockSession(ctx, tx, user, id); err != nil {
			return err
		}
		var runID string
		err := tx.QueryRowContext(ctx, unendedInSQL, id, user).Scan(&runID)
		if err == nil {
			return &store.BusyError{SessionID: id, RunID: runID}
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		_, err = tx.ExecContext(ctx, deleteSessionSQL, id, user)
		return err
	})
}

// lockSession locks one of the user's sessions for the rest of the transaction.
func lockSession(ctx context.Context, tx *sql.Tx, user, id string) error {
	var one int
	err := tx.QueryRowContext(ctx, lockSessionSQL, id, user).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return notFound("session", id)
	}
	return err
}

func scanSession(row scanner) (*store.Session, error) {
	var s store.Session
	var meta []byte
	if err := row.Scan(&s.ID, &s.Title, &s.Agent, &meta, &s.CreatedAt, &s.UpdatedAt, &s.LastSeq); err != nil {
		return nil, err
	}
	s.Metadata = json.RawMessage(meta)
	s.CreatedAt, s.UpdatedAt = s.CreatedAt.UTC(), s.UpdatedAt.UTC()
	return &s, nil
}
