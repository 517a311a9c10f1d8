package postgres

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"chatd/internal/store"
	"chatd/internal/store/postgres/pgtest"
	"chatd/internal/store/storetest"
)

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
	pgtest.Server(t)
	t.Run("Fresh", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store { return openTest(t, pgtest.NewSchema(t)) })
	})
	// A clock that stands still makes every timestamp tie, so the sessions list is ordered by id alone
	// and its cursor must carry the id.
	t.Run("FrozenClock", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store {
			db := openTest(t, pgtest.NewSchema(t))
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
	dsn := pgtest.NewSchema(t)
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
	dsn := pgtest.NewSchema(t)
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

// TestPairingWhileAwaiting: chatd migrate's pairing check accepts a run awaiting approval.
func TestPairingWhileAwaiting(t *testing.T) {
	db := openTest(t, pgtest.NewSchema(t))
	storetest.PairingWhileAwaiting(t, db, db.CheckPairing)
}

// TestExpiredAwaiting: a run awaiting approval is found by ExpiredAwaiting once its wait's expiry is
// at or before the time asked — with its user —, never before it, nor once it runs again or ended.
func TestExpiredAwaiting(t *testing.T) {
	db := openTest(t, pgtest.NewSchema(t))
	ctx, user := t.Context(), "alice"
	sess := &store.Session{Agent: "default"}
	if err := db.CreateSession(ctx, user, sess); err != nil {
		t.Fatal(err)
	}
	run := &store.Run{SessionID: sess.ID, Agent: "default", Model: "openai/gpt-4o-mini"}
	if err := db.CreateRun(ctx, user, run, nil); err != nil {
		t.Fatal(err)
	}
	expires := time.Date(2026, 5, 2, 12, 0, 0, 0, time.UTC)
	waits := []byte(`{"calls":[]}`)
	if err := db.AwaitRun(ctx, user, run.ID, store.Await{Awaiting: waits, ExpiresAt: expires}); err != nil {
		t.Fatal(err)
	}
	found := func(before time.Time) []store.Run {
		t.Helper()
		runs, err := db.ExpiredAwaiting(ctx, before)
		if err != nil {
			t.Fatal(err)
		}
		return runs
	}
	if runs := found(expires.Add(-time.Second)); len(runs) != 0 {
		t.Errorf("before its expiry: %+v", runs)
	}
	if runs := found(expires); len(runs) != 1 || runs[0].ID != run.ID || runs[0].UserID != user {
		t.Errorf("at its expiry: %+v, want the run with its user", runs)
	}
	if err := db.ResumeRun(ctx, user, run.ID, waits, 10, nil); err != nil {
		t.Fatal(err)
	}
	if runs := found(expires.Add(time.Hour)); len(runs) != 0 {
		t.Errorf("once resumed: %+v", runs)
	}
}

// TestAwaitingExpiryBackfilled: a run already waiting when migration 00008 adds awaiting_expires_at gets
// its expiry from what it waits for, so the sweep of expired waits finds it; one whose awaiting cannot
// be read gets its creation time, so that the sweep finds it too, and ends it.
func TestAwaitingExpiryBackfilled(t *testing.T) {
	dsn := pgtest.NewSchema(t)
	ctx, user := t.Context(), "alice"
	db := openTest(t, dsn)
	await := func(awaiting string, expires time.Time) *store.Run {
		t.Helper()
		sess := &store.Session{Agent: "default"}
		if err := db.CreateSession(ctx, user, sess); err != nil {
			t.Fatal(err)
		}
		run := &store.Run{SessionID: sess.ID, Agent: "default", Model: "openai/gpt-4o-mini"}
		if err := db.CreateRun(ctx, user, run, nil); err != nil {
			t.Fatal(err)
		}
		if err := db.AwaitRun(ctx, user, run.ID, store.Await{Awaiting: []byte(awaiting), ExpiresAt: expires}); err != nil {
			t.Fatal(err)
		}
		return run
	}
	expires := time.Date(2026, 5, 2, 12, 0, 0, 0, time.UTC)
	readable := await(`{"request":{"message":"mail bob"},"expires_at":"2026-05-02T12:00:00Z","calls":[]}`, expires)
	unreadable := await(`{"expires_at":`, time.Time{})
	// The schema as it was before 00008, the runs waiting: its down drops the column.
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db.pool, fsys, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 7); err != nil {
		t.Fatalf("down to 00007: %v", err)
	}
	if err := db.migrate(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	for _, tc := range []struct {
		before time.Time
		want   []string
	}{
		{expires.Add(-time.Microsecond), nil},
		{expires, []string{readable.ID}},
		{unreadable.CreatedAt, []string{readable.ID, unreadable.ID}},
	} {
		runs, err := db.ExpiredAwaiting(ctx, tc.before)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range runs {
			got = append(got, r.ID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("ExpiredAwaiting(%s) after 00008: %v, want %v", tc.before, got, tc.want)
		}
	}
}

// TestAwaitRunCancelRequested: a run a cancel was asked of on another instance is not put to wait — no
// instance would carry the cancel out —: AwaitRun refuses with a *CancelRequestedError naming the
// cancel's reason, an ErrConflict, and the run still runs for its owner to end.
func TestAwaitRunCancelRequested(t *testing.T) {
	db := openTest(t, pgtest.NewSchema(t))
	ctx, user := t.Context(), "alice"
	sess := &store.Session{Agent: "default"}
	if err := db.CreateSession(ctx, user, sess); err != nil {
		t.Fatal(err)
	}
	run := &store.Run{SessionID: sess.ID, Agent: "default", Model: "openai/gpt-4o-mini"}
	if err := db.CreateRun(ctx, user, run, nil); err != nil {
		t.Fatal(err)
	}
	if asked, err := db.RequestCancel(ctx, user, run.ID, "cancelled on b"); err != nil || !asked {
		t.Fatalf("RequestCancel = %v, %v", asked, err)
	}
	err := db.AwaitRun(ctx, user, run.ID, store.Await{Awaiting: []byte(`{"calls":[]}`)})
	if c, ok := errors.AsType[*store.CancelRequestedError](err); !ok || c.Reason != "cancelled on b" || !errors.Is(err, store.ErrConflict) {
		t.Fatalf("AwaitRun of a run a cancel was asked of: %v, want a *CancelRequestedError for \"cancelled on b\"", err)
	}
	if got, err := db.Run(ctx, user, run.ID); err != nil || got.Status != store.RunRunning {
		t.Errorf("the run after the refused AwaitRun: %+v, %v; want running", got, err)
	}
}

// TestStartRunCancelRequested: a queued run a cancel was asked of on another instance (a revoke of its
// key) does not start before its owner carries the cancel out: StartRun refuses with a
// *CancelRequestedError, and the run is still queued, for its owner to end as cancelled.
func TestStartRunCancelRequested(t *testing.T) {
	db := openTest(t, pgtest.NewSchema(t))
	ctx, user := t.Context(), "alice"
	sess := &store.Session{Agent: "default"}
	if err := db.CreateSession(ctx, user, sess); err != nil {
		t.Fatal(err)
	}
	run := &store.Run{SessionID: sess.ID, Status: store.RunQueued, Agent: "default", Model: "openai/gpt-4o-mini", Request: []byte(`{}`)}
	if err := db.CreateRun(ctx, user, run, nil); err != nil {
		t.Fatal(err)
	}
	if asked, err := db.RequestCancel(ctx, user, run.ID, "revoked on b"); err != nil || !asked {
		t.Fatalf("RequestCancel = %v, %v", asked, err)
	}
	err := db.StartRun(ctx, user, run.ID, &store.Record{Role: store.RoleUser, Content: "hello"}, 0)
	if c, ok := errors.AsType[*store.CancelRequestedError](err); !ok || c.Reason != "revoked on b" || !errors.Is(err, store.ErrConflict) {
		t.Fatalf("StartRun of a run a cancel was asked of: %v, want a *CancelRequestedError for \"revoked on b\"", err)
	}
	if got, err := db.Run(ctx, user, run.ID); err != nil || got.Status != store.RunQueued {
		t.Errorf("the run after the refused StartRun: %+v, %v; want queued", got, err)
	}
	if recs, err := db.Records(ctx, user, sess.ID); err != nil || len(recs) != 0 {
		t.Errorf("records after the refused StartRun: %+v, %v; want none", recs, err)
	}
}
