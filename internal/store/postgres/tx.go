package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"chatd/internal/store"
)

// maxAttempts bounds how often a write runs when PostgreSQL aborts it for a deadlock or a serialization
// failure, which a second try resolves.
const maxAttempts = 5

// PostgreSQL's error codes (SQLSTATE) the store tells apart.
const (
	codeUniqueViolation      = "23505"
	codeForeignKeyViolation  = "23503"
	codeCheckViolation       = "23514"
	codeNotNullViolation     = "23502"
	codeBadCharacter         = "22021" // character_not_in_repertoire: a NUL, or bytes that are not UTF-8
	codeUntranslatable       = "22P05"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
)

// Unique indexes whose violation has a meaning of its own.
const (
	oneRunningIndex     = "runs_one_running_per_session"
	idempotencyKeyIndex = "runs_by_idempotency_key"
)

// querier is a *sql.DB or *sql.Tx.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// write runs fn in a read-committed transaction and commits it, running it again when PostgreSQL
// aborted it for a deadlock or a serialization failure; fn must be safe to run again. It returns fn's
// error wrapped with the operation's name, constraint violations as the store's errors.
//
// A write whose ctx ends before it starts is not run; once started, it runs to its end, as the SQLite
// store's writes do: a caller that gives up never leaves half of a write's outcome unknown to itself.
func (db *DB) write(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	ctx = context.WithoutCancel(ctx)
	var err error
	for range maxAttempts {
		if err = db.tryWrite(ctx, fn); err == nil || !retryable(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("postgres: %s: %w", op, mapErr(err))
	}
	return nil
}

func (db *DB) tryWrite(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	tx, err := db.pool.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if v := recover(); v != nil {
			tx.Rollback()
			err = fmt.Errorf("panic in write: %v", v)
		}
	}()
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// exec runs one statement on its own (PostgreSQL makes it atomic), with write's retries and errors.
func (db *DB) exec(ctx context.Context, op, query string, args ...any) (sql.Result, error) {
	var res sql.Result
	err := db.write1(ctx, op, func(q querier) error {
		var err error
		res, err = q.ExecContext(ctx, query, args...)
		return err
	})
	return res, err
}

// write1 is write for a function that runs a single statement: it needs no transaction of its own.
func (db *DB) write1(ctx context.Context, op string, fn func(q querier) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	ctx = context.WithoutCancel(ctx)
	var err error
	for range maxAttempts {
		if err = fn(db.pool); err == nil || !retryable(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("postgres: %s: %w", op, mapErr(err))
	}
	return nil
}

// read runs fn in one read-only repeatable-read transaction, so that the queries in fn see one snapshot.
// A read of one statement needs none: it runs on the pool.
func (db *DB) read(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	tx, err := db.pool.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	return tx.Commit()
}

// retryable reports whether PostgreSQL aborted a transaction that may succeed when run again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == codeSerializationFailure || pe.Code == codeDeadlockDetected)
}

// mapErr turns a violated constraint into the store's error for it, keeping PostgreSQL's message for the
// log: a second running run in a session is store.ErrBusy, a taken idempotency key store.ErrDuplicate,
// anything else store.ErrConflict. The schema's constraints are the last line of defence of the
// invariants the store checks first; they are the only one against another process's concurrent write.
func mapErr(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	switch pe.Code {
	case codeUniqueViolation:
		switch pe.ConstraintName {
		case oneRunningIndex:
			return fmt.Errorf("%w: %w", store.ErrBusy, err)
		case idempotencyKeyIndex:
			return fmt.Errorf("%w: %w", store.ErrDuplicate, err)
		}
		return fmt.Errorf("%w: %w", store.ErrConflict, err)
	case codeForeignKeyViolation, codeCheckViolation, codeNotNullViolation:
		return fmt.Errorf("%w: %w", store.ErrConflict, err)
	case codeBadCharacter, codeUntranslatable:
		// PostgreSQL's text holds UTF-8 without NUL; SQLite's would take it. Such text is refused as
		// a record that breaks the shape of records is.
		return fmt.Errorf("%w: text with a NUL character or invalid UTF-8 cannot be stored: %w", store.ErrConflict, err)
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

// stored returns t as the store keeps it: UTC, to the microsecond.
func stored(t time.Time) time.Time {
	return t.UTC().Truncate(time.Microsecond)
}

// timeOf returns a nullable stored time in UTC.
func timeOf(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	u := t.Time.UTC()
	return &u
}

// nullable stores the empty string as NULL, for columns where NULL means "none" (and where UNIQUE must
// not treat two empty values as equal).
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}
