// Package sqlite implements store.Store on SQLite through modernc.org/sqlite (pure Go, no cgo).
//
// It owns the SQLite schema (embedded migrations, applied at Open with goose), the SQL that enforces the
// store's pairing invariant, and the lock file beside a file database (<path>.lock) that keeps a second
// process off the database while one runs on it. Of chatd it imports only store; only cmd/chatd's wiring
// and tests import it, everything else sees a store.Store.
//
// A file database runs in WAL mode with two pools: one writer connection, so writes queue in Go rather
// than fail on SQLite's single write lock, and a pool of read-only connections, so reads never wait for
// a write.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"chatd/internal/store"
)

// Options configure Open. The zero value is ready to use.
type Options struct {
	// Logger receives notes about the database, such as applied migrations. Nil discards them.
	Logger *slog.Logger
	// Owner says who opens the database, such as "chatd serve on 127.0.0.1:8080". It is written into the
	// lock file, and a second process that tries to open the database while this one holds it is told.
	Owner string
}

// DB is a store.Store on one SQLite database. It is safe for concurrent use.
type DB struct {
	writer *sql.DB  // at most one connection; every write transaction runs on it
	reader *sql.DB  // read-only connections; the writer itself for ":memory:"
	lock   *os.File // holds the lock on the lock file; nil for ":memory:"
	log    *slog.Logger
	now    func() time.Time // replaced by tests that need equal timestamps
	schema int64            // the latest migration's version, which Ready expects the database at

	// The committer (commit.go): writes wait in writes; quit stops it; committerDone is closed when it
	// has stopped.
	writes        chan *writeReq
	quit          chan struct{}
	committerDone chan struct{}
	closeOnce     sync.Once
	commits       atomic.Int64 // transactions committed (or tried) by the committer

	// writeStmts and readStmts are the statements each pool keeps prepared (stmts.go).
	writeStmts, readStmts *stmtCache
}

var _ store.Store = (*DB)(nil)

// MemoryPath opens a private in-memory database, for tests.
const MemoryPath = ":memory:"

// busyTimeout bounds how long a connection waits for a lock held by another process (or, for readers,
// by a checkpoint) before failing with SQLITE_BUSY.
const busyTimeout = "5000"

// DSN parameters. The writer begins every transaction IMMEDIATE so it takes the write lock up front:
// a deferred transaction that reads, then writes, can fail with SQLITE_BUSY when another process wrote
// in between, and busy_timeout cannot help it. synchronous(FULL) syncs the WAL on every commit: a
// stored answer must survive a power cut.
const (
	writerParams = "_pragma=busy_timeout(" + busyTimeout + ")" +
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=foreign_keys(1)&_txlock=immediate"
	readerParams = "_pragma=busy_timeout(" + busyTimeout + ")&_pragma=foreign_keys(1)&_pragma=query_only(1)"
	memoryParams = "_pragma=foreign_keys(1)&_txlock=immediate"
)

// Open opens (creating when missing) the SQLite database at path and brings its schema up to date.
// The file's directory must exist. Path MemoryPath (":memory:") opens a private in-memory database.
func Open(ctx context.Context, path string, opts Options) (*DB, error) {
	db := &DB{log: opts.Logger, now: time.Now}
	if db.log == nil {
		db.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if path == MemoryPath {
		err = db.openMemory(ctx)
	} else {
		err = db.openFile(ctx, path, opts.Owner)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db.writeStmts, db.readStmts = newStmtCache(db.writer), newStmtCache(db.reader)
	db.startCommitter()
	if err := db.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: migrate %s: %w", path, err)
	}
	return db, nil
}

// openFile takes the database's lock before any connection touches the file, then opens the writer
// first: it switches the file to WAL, which the read-only readers cannot.
func (db *DB) openFile(ctx context.Context, path, owner string) error {
	if err := checkDir(path); err != nil {
		return err
	}
	lock, err := lockFile(path, owner)
	if err != nil {
		return err
	}
	uri := "file:" + escapePath(path)
	writer, err := openPool(ctx, uri+"?"+writerParams, 1)
	if err != nil {
		lock.Close()
		return err
	}
	reader, err := openPool(ctx, uri+"?"+readerParams, max(4, runtime.GOMAXPROCS(0)))
	if err != nil {
		writer.Close()
		lock.Close()
		return err
	}
	db.writer, db.reader, db.lock = writer, reader, lock
	return nil
}

// openMemory uses one connection for reads and writes: an in-memory database lives only as long as its
// connection, and sharing one between connections (cache=shared) would bring table locks that fail with
// SQLITE_LOCKED instead of waiting, and no WAL. Tests are the only users, so reads queuing behind writes
// is fine.
func (db *DB) openMemory(ctx context.Context) error {
	pool, err := openPool(ctx, MemoryPath+"?"+memoryParams, 1)
	if err != nil {
		return err
	}
	pool.SetConnMaxIdleTime(0) // never close the connection: it is the database
	db.writer, db.reader = pool, pool
	return nil
}

// openPool opens a pool of at most n connections and connects once, so that a bad path or a file that
// is not a database is reported by Open rather than by the first query.
func openPool(ctx context.Context, dsn string, n int) (*sql.DB, error) {
	pool, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	pool.SetMaxOpenConns(n)
	pool.SetMaxIdleConns(n)
	pool.SetConnMaxLifetime(0)
	if err := pool.PingContext(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// checkDir reports a missing directory in words a person can act on; SQLite would only say "unable to
// open database file".
func checkDir(path string) error {
	if path == "" {
		return errors.New("empty path: name a database file, or " + MemoryPath)
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("directory %s does not exist; create it first", dir)
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	return nil
}

// escapePath makes path safe inside a "file:" URI, where '?' starts the query, '#' a fragment, '%' an
// escape, and a leading "//" an authority (which Clean removes).
func escapePath(path string) string {
	return strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(filepath.ToSlash(filepath.Clean(path)))
}

//go:embed migrations/*.sql
var migrations embed.FS

// migrate applies the embedded migrations not yet recorded in the database.
func (db *DB) migrate(ctx context.Context) error {
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db.writer, fsys, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return err
	}
	if srcs := p.ListSources(); len(srcs) > 0 {
		db.schema = srcs[len(srcs)-1].Version
	}
	// Not p.Close: it would close the writer pool.
	results, err := p.Up(ctx)
	if err != nil {
		return err
	}
	for _, r := range results {
		db.log.Info("sqlite: applied migration", "file", r.Source.Path, "duration", r.Duration)
	}
	return nil
}

// Ready reads the schema's version: one cheap query that needs the database to answer.
func (db *DB) Ready(ctx context.Context) error {
	var have int64
	if err := db.reader.QueryRowContext(ctx, `SELECT COALESCE(MAX(version_id), 0) FROM goose_db_version`).Scan(&have); err != nil {
		return fmt.Errorf("sqlite: ready: %w", err)
	}
	if have < db.schema {
		return fmt.Errorf("sqlite: ready: %w", store.SchemaBehind(have, db.schema))
	}
	return nil
}

// Close runs the writes already waiting, closes both pools, then releases the database's lock.
func (db *DB) Close() error {
	db.closeOnce.Do(func() { close(db.quit) })
	<-db.committerDone
	db.writeStmts.close()
	db.readStmts.close()
	var err error
	if db.reader != db.writer {
		err = db.reader.Close()
	}
	err = errors.Join(err, db.writer.Close())
	if db.lock != nil {
		// A second Close is not an error, as it is not one for the pools.
		if lerr := db.lock.Close(); !errors.Is(lerr, os.ErrClosed) {
			err = errors.Join(err, lerr)
		}
	}
	return err
}
