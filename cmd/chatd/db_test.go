package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenStore: --db picks the store by its form, and an error opening PostgreSQL never shows the
// password.
func TestOpenStore(t *testing.T) {
	st, err := openStore(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "chatd.db"), nil, "test")
	if err != nil {
		t.Fatalf("openStore(sqlite): %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for _, db := range []string{
		"postgres://chatd:s3cret@127.0.0.1:1/chatd?sslmode=disable&connect_timeout=5",
		"postgresql://chatd:s3cret@127.0.0.1:1/chatd?sslmode=disable&connect_timeout=5",
	} {
		st, err := openStore(t.Context(), db, nil, "test")
		if err == nil {
			st.Close()
			t.Fatalf("openStore(%s) found a server on port 1", db)
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "postgres: open ") || strings.Contains(msg, "s3cret") {
			t.Errorf("openStore: %v; want a postgres error without the password", err)
		}
	}
	if _, err := openStore(t.Context(), "mysql://x", nil, "test"); err == nil {
		t.Error("openStore(mysql://x) succeeded")
	}
}
