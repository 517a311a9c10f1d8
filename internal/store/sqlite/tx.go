package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"chatd/internal/store"
)

// read runs fn in one read transaction, so that the queries in fn see one snapshot of the database.
func (db *DB) read(ctx context.Context, op string, fn func(tx txn) error) error {
	tx, err := db.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("sqlite: %s: %w", op, err)
	}
	defer tx.Rollback()
	if err := fn(txn{tx, db.readStmts}); err != nil {
		return fmt.Errorf("sqlite: %s: %w", op, err)
	}
	return nil
}

// mapErr turns a violated constraint into store.ErrConflict, keeping SQLite's message for the log: the
// schema's constraints are the last line of defence of the invariants the Go checks enforce first.
func mapErr(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CONSTRAINT {
		return fmt.Errorf("%w: %w", store.ErrConflict, err)
	}
	return err
}

// conflict reports a write that would break one of the store's invariants.
func conflict(format string, args ...any) error {
	return fmt.Errorf("%w: %s", store.ErrConflict, fmt.Sprintf(format, args...))
}

// notFound reports a row that does not exist for this user.
func notFound(what, id string) error {
	return fmt.Errorf("%w: %s %q", store.ErrNotFound, what, id)
}

// clock returns the current time as stored: UTC, to the microsecond.
func (db *DB) clock() time.Time {
	return db.now().UTC().Truncate(time.Microsecond)
}

// fromMicros turns a stored time back into a time.Time in UTC.
func fromMicros(us int64) time.Time {
	return time.UnixMicro(us).UTC()
}

// nullable stores the empty string as NULL, for columns where NULL means "none" (and where UNIQUE must
// not treat two empty values as equal).
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
