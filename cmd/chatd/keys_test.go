package main

import (
	"bytes"
	"crypto/rand"
	"database/sql"
	"strings"
	"testing"

	"chatd/internal/store"
	"chatd/internal/store/postgres"
	"chatd/internal/store/postgres/pgtest"
)

// TestKeysRevokeCancelsRuns: chatd keys revoke on PostgreSQL, where chatd instances may be running,
// asks them to stop the key's queued and running runs (it records each cancel for the run's owner),
// and leaves another key's run alone.
func TestKeysRevokeCancelsRuns(t *testing.T) {
	dsn := pgtest.NewSchema(t)
	ctx := t.Context()
	db, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	key := func(name string) string {
		k := &store.APIKey{User: "alice", Name: name, Prefix: "chd_" + name, Hash: []byte(rand.Text())}
		if err := db.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		return k.ID
	}
	revoked, kept := key("revoked"), key("kept")
	newRun := func(sessionID, keyID, status string) string {
		r := &store.Run{SessionID: sessionID, Status: status, Agent: "default", Model: "m", KeyID: keyID, Request: []byte(`{}`)}
		if err := db.CreateRun(ctx, "alice", r, nil); err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	session := func() string {
		s := &store.Session{Agent: "default"}
		if err := db.CreateSession(ctx, "alice", s); err != nil {
			t.Fatal(err)
		}
		return s.ID
	}
	s1 := session()
	running, queued := newRun(s1, revoked, store.RunRunning), newRun(s1, revoked, store.RunQueued)
	other := newRun(session(), kept, store.RunRunning)

	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"keys", "revoke", revoked, "--db", dsn}, func(string) string { return "" }, &out, &errOut); err != nil {
		t.Fatalf("keys revoke: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "stop the 2 queued or running runs") {
		t.Errorf("keys revoke said:\n%s", out.String())
	}
	pool, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for id, want := range map[string]string{running: "the API key that started the run was revoked",
		queued: "the API key that started the run was revoked", other: ""} {
		var reason string
		if err := pool.QueryRowContext(ctx, `SELECT cancel_reason FROM runs WHERE id = $1`, id).Scan(&reason); err != nil {
			t.Fatal(err)
		}
		if reason != want {
			t.Errorf("run %s: cancel asked %q, want %q", id, reason, want)
		}
	}
}
