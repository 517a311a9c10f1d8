package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

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

	// insertNewSessionSQL inserts a session with its first record's Seq: CreateRun's new session.
	insertNewSessionSQL = `INSERT INTO sessions (id, user_id, title, agent, metadata, created_at, updated_at, last_seq)
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
SET title = COALESCE($3, title), title_set = (title_set OR $3 IS NOT NULL), metadata = COALESCE($4, metadata), updated_at = $5
WHERE id = $1 AND user_id = $2
RETURNING ` + sessionColumns

	deleteSessionSQL = `DELETE FROM sessions WHERE id = $1 AND user_id = $2`
	unendedInSQL     = `SELECT id FROM runs WHERE session_id = $1 AND user_id = $2 AND status IN ('queued', 'running', 'awaiting_approval') ORDER BY created_at LIMIT 1`
)

// CreateSession stores s, assigning ID (when empty), CreatedAt and UpdatedAt, and Metadata {} when nil.
func (db *DB) CreateSession(ctx context.Context, user string, s *store.Session) error {
	created, err := store.NewSession(s, db.clock(), newID)
	if err != nil {
		return fmt.Errorf("sqlite: create session: %w", err)
	}
	err = db.write(ctx, "create session", func(tx txn) error {
		return insertSession(ctx, tx, user, &created, created.Title != "")
	})
	if err != nil {
		return err
	}
	*s = created
	return nil
}

// insertSession inserts a session newSession made; titleSet says the user chose its title. An id taken
// (by any user) is ErrConflict.
func insertSession(ctx context.Context, tx txn, user string, s *store.Session, titleSet bool) error {
	_, err := tx.ExecContext(ctx, insertSessionSQL, s.ID, user, s.Title, s.Agent, string(s.Metadata), s.CreatedAt.UnixMicro(), titleSet)
	return err
}

// Session returns one of the user's sessions.
func (db *DB) Session(ctx context.Context, user, id string) (*store.Session, error) {
	s, err := scanSession(db.readStmts.queryRow(ctx, selectSessionSQL, id, user))
	if errors.Is(err, sql.ErrNoRows) {
		err = notFound("session", id)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: session: %w", err)
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
		rows, err = db.readStmts.query(ctx, listSessionsSQL, user, limit+1)
	} else {
		var at int64
		var id string
		if at, id, err = store.DecodeCursor(p.Cursor); err != nil {
			return nil, "", fmt.Errorf("sqlite: sessions: %w", err)
		}
		rows, err = db.readStmts.query(ctx, listSessionsAfterSQL, user, limit+1, at, id)
	}
	if err != nil {
		return nil, "", fmt.Errorf("sqlite: sessions: %w", err)
	}
	defer rows.Close()
	list := []store.Session{}
	for rows.Next() {
		s, err := scanSession(rows)
		if err != nil {
			return nil, "", fmt.Errorf("sqlite: sessions: %w", err)
		}
		list = append(list, *s)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("sqlite: sessions: %w", err)
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
			return nil, fmt.Errorf("sqlite: update session: %w", err)
		}
		metaArg = "{}" // JSON null clears it
		if meta != nil {
			metaArg = string(meta)
		}
	}
	var s *store.Session
	err := db.write(ctx, "update session", func(tx txn) error {
		row := tx.QueryRowContext(ctx, updateSessionSQL, id, user, p.Title, metaArg, db.clock().UnixMicro())
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
// its usage entries stay.
func (db *DB) DeleteSession(ctx context.Context, user, id string) error {
	return db.write(ctx, "delete session", func(tx txn) error {
		var runID string
		err := tx.QueryRowContext(ctx, unendedInSQL, id, user).Scan(&runID)
		if err == nil {
			return &store.BusyError{SessionID: id, RunID: runID}
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		res, err := tx.ExecContext(ctx, deleteSessionSQL, id, user)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return notFound("session", id)
		}
		return nil
	})
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

func scanSession(row scanner) (*store.Session, error) {
	var s store.Session
	var meta string
	var created, updated int64
	if err := row.Scan(&s.ID, &s.Title, &s.Agent, &meta, &created, &updated, &s.LastSeq); err != nil {
		return nil, err
	}
	s.Metadata = json.RawMessage(meta)
	s.CreatedAt, s.UpdatedAt = fromMicros(created), fromMicros(updated)
	return &s, nil
}
