// Package postgres implements store.Store on PostgreSQL through pgx's database/sql driver (pgx/v5/stdlib).
//
// It owns the PostgreSQL schema (embedded migrations, applied at Open with goose under an advisory lock,
// so that instances starting together migrate once) and the SQL that enforces the store's invariants.
// Those live in the database, not in this process: one running run per session and an idempotency key
// once per user are unique indexes; every transaction that writes a session's records or runs first locks
// the session's row, so that the pairing checks it makes next see every earlier write to that session,
// whichever process made it. Of chatd it imports only store; only cmd/chatd's wiring and tests import it.
//
// Statements are prepared once per connection and kept by pgx's statement cache (the driver's default
// mode), so a store method costs one round trip per statement and no parse.
package postgres

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"chatd/internal/store"
)

// Options configure Open. The zero value is ready to use.
type Options struct {
	// Logger receives notes about the database, such as applied migrations. Nil discards them.
	Logger *slog.Logger
	// MaxConns bounds the connections the store opens; 0 means 4 per CPU, at least 8.
	MaxConns int
	// Instance, when set, names this process among the chatd instances sharing the database: the runs it
	// creates and starts are owned by it under leases of LeaseTTL (see leases.go), and the store sends
	// the notifications instances wake each other with. "" is a chatd alone on its database.
	Instance string
	// LeaseTTL is how long a lease lasts unless renewed (default DefaultLeaseTTL).
	LeaseTTL time.Duration
	// Now is the clock of leases and timestamps (default time.Now); tests step it.
	Now func() time.Time
}

// DB is a store.Store on one PostgreSQL database (the schema of the connection's search_path). It is safe
// for concurrent use.
type DB struct {
	pool *sql.DB
	log  *slog.Logger
	now  func() time.Time // replaced by tests that need equal timestamps
	// schema is the latest migration's version, which Ready expects the database at.
	schema int64

	instance string        // Options.Instance
	leaseTTL time.Duration // Options.LeaseTTL
	channel  string        // the prefix of this database and schema's notification channels

	rateMu    sync.Mutex
	rateSwept time.Time // when this instance last swept rate_limits (ratelimits.go)
}

var _ store.Store = (*DB)(nil)

// IsDSN reports whether db names a PostgreSQL database (a postgres:// or postgresql:// URL).
func IsDSN(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// Open connects to the PostgreSQL database of dsn (a postgres:// URL or a key=value string) and brings its
// schema up to date. The errors it returns never hold the DSN's password.
func Open(ctx context.Context, dsn string, opts Options) (*DB, error) {
	db, err := open(ctx, dsn, opts)
	if err != nil {
		return nil, fmt.Errorf("postgres: open %s: %w", Redact(dsn), redactErr(err, dsn))
	}
	return db, nil
}

func open(ctx context.Context, dsn string, opts Options) (*DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	db := &DB{log: opts.Logger, now: time.Now, instance: opts.Instance, leaseTTL: opts.LeaseTTL}
	if opts.Now != nil {
		db.now = opts.Now
	}
	if db.leaseTTL <= 0 {
		db.leaseTTL = DefaultLeaseTTL
	}
	if db.log == nil {
		db.log = slog.New(slog.DiscardHandler)
	}
	n := opts.MaxConns
	if n <= 0 {
		n = max(8, 4*runtime.GOMAXPROCS(0))
	}
	db.pool = stdlib.OpenDB(*cfg)
	db.pool.SetMaxOpenConns(n)
	db.pool.SetMaxIdleConns(n)
	db.pool.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.pool.PingContext(ctx); err != nil {
		db.pool.Close()
		return nil, err
	}
	if err := db.migrate(ctx); err != nil {
		db.pool.Close()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	if err := db.nameChannels(ctx); err != nil {
		db.pool.Close()
		return nil, err
	}
	return db, nil
}

//go:embed migrations/*.sql
var migrations embed.FS

// migrate applies the embedded migrations not yet recorded in the database. A session advisory lock,
// named after the database and schema, makes instances that start together apply them once.
func (db *DB) migrate(ctx context.Context) error {
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return err
	}
	var where string
	if err := db.pool.QueryRowContext(ctx, `SELECT current_database() || '.' || COALESCE(current_schema(), '')`).Scan(&where); err != nil {
		return err
	}
	h := fnv.New64a()
	h.Write([]byte("chatd migrations " + where))
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(int64(h.Sum64())), lock.WithLockTimeout(1, 300))
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db.pool, fsys,
		goose.WithDisableGlobalRegistry(true), goose.WithSessionLocker(locker))
	if err != nil {
		return err
	}
	if srcs := p.ListSources(); len(srcs) > 0 {
		db.schema = srcs[len(srcs)-1].Version
	}
	// Not p.Close: it would close the pool.
	results, err := p.Up(ctx)
	if err != nil {
		return err
	}
	for _, r := range results {
		db.log.Info("postgres: applied migration", "file", r.Source.Path, "duration", r.Duration)
	}
	return nil
}

// Ready reads the schema's version: one cheap query that needs the database to answer.
func (db *DB) Ready(ctx context.Context) error {
	var have int64
	if err := db.pool.QueryRowContext(ctx, `SELECT COALESCE(MAX(version_id), 0) FROM goose_db_version`).Scan(&have); err != nil {
		return fmt.Errorf("postgres: ready: %w", err)
	}
	if have < db.schema {
		return fmt.Errorf("postgres: ready: %w", store.SchemaBehind(have, db.schema))
	}
	return nil
}

// Close closes the store's connections.
func (db *DB) Close() error {
	return db.pool.Close()
}

// Redact returns dsn with its password, if any, replaced by "xxxxx", for logs and errors.
func Redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		return u.Redacted()
	}
	if strings.Contains(dsn, "://") {
		return "postgres://…" // not a URL we can read: say nothing of it
	}
	// A key=value string: drop the password's value.
	fields := strings.Fields(dsn)
	for i, f := range fields {
		if k, _, ok := strings.Cut(f, "="); ok && strings.TrimSpace(k) == "password" {
			fields[i] = "password=xxxxx"
		}
	}
	return strings.Join(fields, " ")
}

// redactErr makes sure an error of Open says nothing of the DSN's password, whatever the driver put in it.
func redactErr(err error, dsn string) error {
	pw := password(dsn)
	if pw == "" || !strings.Contains(err.Error(), pw) {
		return err
	}
	return redacted{err: err, msg: strings.ReplaceAll(err.Error(), pw, "xxxxx")}
}

// redacted is an error whose message had a secret removed; Unwrap keeps errors.Is working.
type redacted struct {
	err error
	msg string
}

func (r redacted) Error() string { return r.msg }
func (r redacted) Unwrap() error { return r.err }

// password returns the password the DSN holds, or "".
func password(dsn string) string {
	if cfg, err := pgx.ParseConfig(dsn); err == nil {
		return cfg.Password
	}
	if u, err := url.Parse(dsn); err == nil {
		if pw, ok := u.User.Password(); ok {
			return pw
		}
		return u.Query().Get("password")
	}
	return ""
}
