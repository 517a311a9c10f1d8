package postgres

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"chatd/internal/store"
	"chatd/internal/store/storetest"
)

// defaultTestDSN is the server the tests use when CHATD_TEST_POSTGRES names none.
const defaultTestDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// testServer returns the DSN of the test server, skipping the test when it cannot be reached — or failing
// it under CI (CHATD_CI=1), where PostgreSQL must be up.
func testServer(t testing.TB) string {
	t.Helper()
	dsn := cmp.Or(os.Getenv("CHATD_TEST_POSTGRES"), defaultTestDSN)
	pool, err := sql.Open("pgx", dsn)
	if err == nil {
		defer pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = pool.PingContext(ctx)
	}
	if err != nil {
		msg := "PostgreSQL at " + Redact(dsn) + " cannot be reached (" + redactErr(err, dsn).Error() +
			"); set CHATD_TEST_POSTGRES to a server's URL to run these tests"
		if os.Getenv("CHATD_CI") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return dsn
}

// newSchema creates an empty schema on the test server, dropped when the test ends, and returns a DSN
// whose connections use it.
func newSchema(t testing.TB) string {
	t.Helper()
	dsn := testServer(t)
	b := make([]byte, 8)
	rand.Read(b)
	name := "chatd_test_" + hex.EncodeToString(b)
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(context.Background(), "CREATE SCHEMA "+name); err != nil {
		admin.Close()
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		defer admin.Close()
		if _, err := admin.ExecContext(context.Background(), "DROP SCHEMA "+name+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return withSearchPath(t, dsn, name)
}

// withSearchPath returns dsn with its connections' search_path set to schema.
func withSearchPath(t testing.TB, dsn, schema string) string {
	if !IsDSN(dsn) {
		return dsn + " search_path=" + schema
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("CHATD_TEST_POSTGRES: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func openTest(t testing.TB, dsn string) *DB {
	t.Helper()
	db, err := Open(context.Background(), dsn, Options{MaxConns: 8})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db
}

func TestStore(t *testing.T) {
	testServer(t)
	t.Run("Fresh", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store { return openTest(t, newSchema(t)) })
	})
	// A clock that stands still makes every timestamp tie, so the sessions list is ordered by id alone
	// and its cursor must carry the id.
	t.Run("FrozenClock", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store {
			db := openTest(t, newSchema(t))
			at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
			db.now = func() time.Time { return at }
			return db
		})
	})
}

// appliedMigrations counts the migrations goose recorded in the schema.
func appliedMigrations(t *testing.T, db *DB) int {
	t.Helper()
	var n int
	if err := db.pool.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM goose_db_version WHERE version_id > 0`).Scan(&n); err != nil {
		t.Fatalf("count migrations: %v", err)
	}
	return n
}

// TestReopen: opening a migrated database again applies nothing and keeps what it holds.
func TestReopen(t *testing.T) {
	dsn := newSchema(t)
	ctx := t.Context()
	first, err := Open(ctx, dsn, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	sess := &store.Session{Title: "kept"}
	if err := first.CreateSession(ctx, "alice", sess); err != nil {
		t.Fatal(err)
	}
	want := appliedMigrations(t, first)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second := openTest(t, dsn)
	if got := appliedMigrations(t, second); got != want {
		t.Errorf("after a second Open, %d migrations are recorded, want %d", got, want)
	}
	if got, err := second.Session(ctx, "alice", sess.ID); err != nil || got.Title != "kept" {
		t.Errorf("Session after reopening = %+v, %v", got, err)
	}
}

// TestOpenConcurrently: instances that start together on an empty database migrate it once, under the
// advisory lock; both open.
func TestOpenConcurrently(t *testing.T) {
	dsn := newSchema(t)
	const n = 3
	dbs, errs := make([]*DB, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { dbs[i], errs[i] = Open(t.Context(), dsn, Options{MaxConns: 4}) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("Open %d: %v", i, errs[i])
			continue
		}
		t.Cleanup(func() { dbs[i].Close() })
	}
	if t.Failed() {
		return
	}
	var rows, versions int
	err := dbs[0].pool.QueryRowContext(t.Context(),
		`SELECT COUNT(*), COUNT(DISTINCT version_id) FROM goose_db_version WHERE version_id > 0`).Scan(&rows, &versions)
	if err != nil {
		t.Fatal(err)
	}
	if entries, err := migrations.ReadDir("migrations"); err != nil || rows != len(entries) || versions != rows {
		t.Errorf("goose recorded %d migrations (%d distinct), want each of the %d once (%v)", rows, versions, len(entries), err)
	}
}

// TestOpenRedactsPassword: an error of Open never shows the DSN's password.
func TestOpenRedactsPassword(t *testing.T) {
	const secret = "s3cret-Pw"
	for _, dsn := range []string{
		"postgres://chatd:" + secret + "@127.0.0.1:1/chatd?sslmode=disable&connect_timeout=5",
		"postgres://chatd@127.0.0.1:1/chatd?sslmode=disable&connect_timeout=5&password=" + secret,
		"host=127.0.0.1 port=1 user=chatd password=" + secret + " dbname=chatd sslmode=disable connect_timeout=5",
		"postgres://chatd:" + secret + "@127.0.0.1:1/chatd?sslmode=nonsense",
		"postgres://chatd:" + secret + "@[::1/chatd",
	} {
		db, err := Open(t.Context(), dsn, Options{})
		if err == nil {
			db.Close()
			t.Errorf("Open(%s) succeeded", Redact(dsn))
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Open's error shows the password: %v", err)
		}
		if strings.Contains(Redact(dsn), secret) {
			t.Errorf("Redact(%q) = %q", dsn, Redact(dsn))
		}
	}
}

func TestIsDSN(t *testing.T) {
	for db, want := range map[string]bool{
		"postgres://h/db": true, "postgresql://u@h/db": true, "sqlite:./chatd.db": false, "chatd.db": false,
		"postgres:x": false,
	} {
		if got := IsDSN(db); got != want {
			t.Errorf("IsDSN(%q) = %v, want %v", db, got, want)
		}
	}
}
