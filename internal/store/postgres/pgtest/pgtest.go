// Package pgtest gives tests outside store/postgres what its own tests use: the PostgreSQL test server
// (CHATD_TEST_POSTGRES, skipped when absent unless CHATD_CI=1) and a fresh schema per test.
// It imports the standard library and pgx's database/sql driver only.
package pgtest

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

// DefaultDSN is the server the tests use when CHATD_TEST_POSTGRES names none.
const DefaultDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// Server returns the DSN of the test server, skipping the test when it cannot be reached — or failing it
// under CI (CHATD_CI=1), where PostgreSQL must be up.
func Server(t testing.TB) string {
	t.Helper()
	dsn := cmp.Or(os.Getenv("CHATD_TEST_POSTGRES"), DefaultDSN)
	pool, err := sql.Open("pgx", dsn)
	if err == nil {
		defer pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = pool.PingContext(ctx)
	}
	if err != nil {
		msg := "PostgreSQL cannot be reached at the test server (CHATD_TEST_POSTGRES, default " + DefaultDSN +
			"); set CHATD_TEST_POSTGRES to a server's URL to run these tests"
		if os.Getenv("CHATD_CI") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return dsn
}

// NewSchema creates an empty schema on the test server, dropped when the test ends, and returns a DSN
// whose connections use it.
func NewSchema(t testing.TB) string {
	t.Helper()
	dsn := Server(t)
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
	return WithSearchPath(t, dsn, name)
}

// WithSearchPath returns dsn with its connections' search_path set to schema.
func WithSearchPath(t testing.TB, dsn, schema string) string {
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
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
