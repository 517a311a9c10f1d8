package sqlite

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"chatd/internal/store"
	"chatd/internal/store/storetest"
)

func openTest(t testing.TB, path string, opts Options) *DB {
	t.Helper()
	db, err := Open(context.Background(), path, opts)
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

func tempPath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "chatd.db")
}

func TestStore(t *testing.T) {
	t.Run("File", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store { return openTest(t, tempPath(t), Options{}) })
	})
	t.Run("Memory", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store { return openTest(t, MemoryPath, Options{}) })
	})
	// A clock that stands still makes every timestamp tie, so the sessions list is ordered by id alone
	// and its cursor must carry the id.
	t.Run("FrozenClock", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store {
			db := openTest(t, tempPath(t), Options{})
			at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
			db.now = func() time.Time { return at }
			return db
		})
	})
}

func TestPragmas(t *testing.T) {
	db := openTest(t, tempPath(t), Options{})
	ctx := t.Context()
	for _, tc := range []struct {
		pool        string
		pragma, val string
	}{
		{"writer", "journal_mode", "wal"},
		{"reader", "journal_mode", "wal"},
		{"writer", "foreign_keys", "1"},
		{"writer", "synchronous", "2"},
		{"writer", "busy_timeout", busyTimeout},
		{"reader", "busy_timeout", busyTimeout},
		{"reader", "query_only", "1"},
	} {
		conn := db.writer
		if tc.pool == "reader" {
			conn = db.reader
		}
		var got string
		if err := conn.QueryRowContext(ctx, "PRAGMA "+tc.pragma).Scan(&got); err != nil {
			t.Fatalf("%s: PRAGMA %s: %v", tc.pool, tc.pragma, err)
		}
		if got != tc.val {
			t.Errorf("%s: PRAGMA %s = %s, want %s", tc.pool, tc.pragma, got, tc.val)
		}
	}
	if _, err := db.reader.ExecContext(ctx, "DELETE FROM sessions"); err == nil {
		t.Error("a reader connection accepted a write")
	}
}

// TestReopen: data survives a reopen, and migrations run once.
func TestReopen(t *testing.T) {
	path, ctx := tempPath(t), t.Context()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	db, err := Open(ctx, path, Options{Logger: log})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	sess := &store.Session{Title: "kept"}
	if err := db.CreateSession(ctx, "alice", sess); err != nil {
		t.Fatal(err)
	}
	rec := store.Record{SessionID: sess.ID, Role: store.RoleUser, Content: "hello"}
	if err := db.AppendRecord(ctx, "alice", &rec); err != nil {
		t.Fatal(err)
	}
	versions := gooseVersions(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "applied migration") {
		t.Errorf("first Open logged no migration:\n%s", logs.String())
	}

	logs.Reset()
	db = openTest(t, path, Options{Logger: log})
	if logs.Len() != 0 {
		t.Errorf("second Open logged:\n%s", logs.String())
	}
	if got := gooseVersions(t, db); got != versions {
		t.Errorf("goose has %d version rows after reopening, %d before", got, versions)
	}
	recs, err := db.Records(ctx, "alice", sess.ID)
	if err != nil || len(recs) != 1 || recs[0].Content != "hello" {
		t.Fatalf("Records after reopen = %+v, %v", recs, err)
	}
	next := store.Record{SessionID: sess.ID, Role: store.RoleUser, Content: "again"}
	if err := db.AppendRecord(ctx, "alice", &next); err != nil || next.Seq != 2 {
		t.Errorf("AppendRecord after reopen: Seq %d, %v; want 2", next.Seq, err)
	}
}

func gooseVersions(t *testing.T, db *DB) int {
	t.Helper()
	var n int
	if err := db.reader.QueryRowContext(t.Context(), "SELECT count(*) FROM goose_db_version").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMigrateRuns upgrades a database of the first schema whose sessions hold several running runs,
// as a FinishRun that failed could leave them: one running run per session survives, the one with a
// call open or else the newest, and the others end as interrupted with their usage; ended runs keep
// theirs.
func TestMigrateRuns(t *testing.T) {
	path, ctx := tempPath(t), t.Context()
	const t0 = 1_700_000_000_000_000
	migrateTo(t, path, 1, []string{
		`INSERT INTO sessions (id, user_id, last_seq, created_at, updated_at)
			VALUES ('s1', 'u', 1, 0, 0), ('s2', 'u', 0, 0, 0)`,
		`INSERT INTO runs (id, session_id, user_id, status, model, created_at) VALUES
			('open', 's1', 'u', 'running', 'm', 1700000000000001),
			('newer', 's1', 'u', 'running', 'm', 1700000000000002),
			('old', 's2', 'u', 'running', 'm', 1700000000000003),
			('new', 's2', 'u', 'running', 'm', 1700000000000004)`,
		`INSERT INTO runs (id, session_id, user_id, status, input_tokens, created_at, ended_at)
			VALUES ('done', 's1', 'u', 'completed', 5, 1700000000000000, 1700000000000009)`,
		`INSERT INTO records (id, session_id, user_id, seq, run_id, role, created_at)
			VALUES ('a', 's1', 'u', 1, 'open', 'assistant', 1700000000000005)`,
		`INSERT INTO tool_calls (record_id, call_id, session_id, run_id, idx, name, arguments)
			VALUES ('a', 'c1', 's1', 'open', 0, 'f', '{}')`,
		`INSERT INTO usage (id, user_id, run_id, input_tokens, output_tokens, created_at) VALUES
			('u1', 'u', 'newer', 10, 3, 0), ('u2', 'u', 'newer', 10, 3, 0), ('u3', 'other', 'newer', 7000, 0, 0)`,
	})
	db := openTest(t, path, Options{})

	for _, want := range []struct {
		id, status string
		usage      store.Usage
	}{
		{"open", store.RunRunning, store.Usage{}},
		{"newer", store.RunInterrupted, store.Usage{InputTokens: 20, OutputTokens: 6}},
		{"old", store.RunInterrupted, store.Usage{}},
		{"new", store.RunRunning, store.Usage{}},
		{"done", store.RunCompleted, store.Usage{InputTokens: 5}},
	} {
		r, err := db.Run(ctx, "u", want.id)
		if err != nil {
			t.Fatalf("Run(%s): %v", want.id, err)
		}
		ended := r.EndedAt != nil && !r.EndedAt.Before(r.CreatedAt)
		if r.Status != want.status || r.Usage != want.usage || ended != (want.status != store.RunRunning) ||
			r.StartedAt == nil || !r.StartedAt.Equal(r.CreatedAt) || r.CreatedAt.UnixMicro() < t0 {
			t.Errorf("migrated run %s = %+v (started %v, ended %v); want %s with usage %+v",
				want.id, r, r.StartedAt, r.EndedAt, want.status, want.usage)
		}
	}
	// Start-up then ends the runs left running; the one with the open call closes it.
	runs, err := db.UnfinishedRuns(ctx)
	if err != nil || len(runs) != 2 || runs[0].ID != "open" || runs[1].ID != "new" {
		t.Fatalf("UnfinishedRuns after the migration = %+v, %v; want runs open and new", runs, err)
	}
	added, err := db.FinishRun(ctx, "u", "open", store.RunEnd{Status: store.RunInterrupted, UsageFromEntries: true})
	if err != nil || len(added) != 1 || added[0].ToolCallID != "c1" {
		t.Errorf("FinishRun of the run with the open call = %+v, %v; want c1 closed", added, err)
	}
}

// migrateTo brings a new database at path to schema version, then runs the statements.
func migrateTo(t *testing.T, path string, version int64, statements []string) {
	t.Helper()
	pool, err := openPool(t.Context(), "file:"+escapePath(path)+"?"+writerParams, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, pool, fsys, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(t.Context(), version); err != nil {
		t.Fatalf("migrate to version %d: %v", version, err)
	}
	for _, q := range statements {
		if _, err := pool.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func TestOpenMissingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	_, err := Open(t.Context(), filepath.Join(dir, "chatd.db"), Options{})
	if err == nil || !strings.Contains(err.Error(), dir+" does not exist") {
		t.Fatalf("Open in a missing directory: %v; want it to say the directory does not exist", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Open created %s", dir)
	}
}

func TestOpenOddPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a?b#c%20d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "chat d.db")
	openTest(t, path, Options{})
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the database is not at %s: %v", path, err)
	}
}

// TestReadsDoNotWaitForWrites: with the writer inside a transaction, reads still answer at once.
func TestReadsDoNotWaitForWrites(t *testing.T) {
	db := openTest(t, tempPath(t), Options{})
	sess := &store.Session{Title: "s"}
	if err := db.CreateSession(t.Context(), "alice", sess); err != nil {
		t.Fatal(err)
	}
	tx, err := db.writer.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(t.Context(), "UPDATE sessions SET title = 'busy'"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a safety net: a blocked read fails, not hangs
	defer cancel()
	got, err := db.Session(ctx, "alice", sess.ID)
	if err != nil || got.Title != "s" {
		t.Fatalf("Session during a write = %+v, %v; want the committed title", got, err)
	}
	if _, err := db.Records(ctx, "alice", sess.ID); err != nil {
		t.Fatalf("Records during a write: %v", err)
	}
}

// TestUsageOutlivesSession: DeleteSession keeps the usage rows.
func TestUsageOutlivesSession(t *testing.T) {
	db := openTest(t, tempPath(t), Options{})
	ctx := t.Context()
	sess := &store.Session{}
	if err := db.CreateSession(ctx, "alice", sess); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 6789, time.FixedZone("CET", 3600))
	u := store.UsageEntry{SessionID: sess.ID, RunID: "r", Agent: "a", Model: "m", CreatedAt: at,
		Usage: store.Usage{InputTokens: 1, OutputTokens: 2, CacheReadTokens: 3, CacheWriteTokens: 4, ReasoningTokens: 5}}
	if err := db.AddUsage(ctx, "alice", u); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteSession(ctx, "alice", sess.ID); err != nil {
		t.Fatal(err)
	}
	var got store.UsageEntry
	var created int64
	err := db.reader.QueryRowContext(ctx, `SELECT run_id, session_id, agent, model, input_tokens, output_tokens,
cache_read_tokens, cache_write_tokens, reasoning_tokens, created_at FROM usage WHERE user_id = 'alice'`).Scan(
		&got.RunID, &got.SessionID, &got.Agent, &got.Model, &got.InputTokens, &got.OutputTokens,
		&got.CacheReadTokens, &got.CacheWriteTokens, &got.ReasoningTokens, &created)
	if err != nil {
		t.Fatalf("usage row after DeleteSession: %v", err)
	}
	got.CreatedAt = fromMicros(created)
	u.CreatedAt = at.Truncate(time.Microsecond)
	if !got.CreatedAt.Equal(u.CreatedAt) {
		t.Errorf("usage created_at = %v, want %v", got.CreatedAt, u.CreatedAt)
	}
	got.CreatedAt = u.CreatedAt
	if got != u {
		t.Errorf("usage row = %+v, want %+v", got, u)
	}
}

// TestQueryPlans guards the indexes the hot queries rely on: each must search an index and never scan
// a table. Only the open calls of one run and the unfinished runs, a handful of rows, may be sorted
// after the search; the unfinished runs are a scan of a partial index, which holds only them.
func TestQueryPlans(t *testing.T) {
	db := openTest(t, tempPath(t), Options{})
	for _, tc := range []struct {
		name, query, want string
		args              []any
		sorts             bool
	}{
		{"sessions page", listSessionsAfterSQL,
			"SEARCH sessions USING INDEX sessions_by_user_updated (user_id=? AND (updated_at,id)<(?,?))",
			[]any{"u", 50, 1, "x"}, false},
		{"open calls", openCallsSQL, "SEARCH tool_calls USING INDEX tool_calls_open_by_session", []any{"s"}, false},
		{"open calls of a run", openRunCallsSQL, "SEARCH c USING INDEX tool_calls_open_by_run", []any{"r", "s"}, true},
		{"records", selectRecordsSQL, "SEARCH records USING INDEX sqlite_autoindex_records_2 (session_id=? AND seq>?)", []any{"s", "u", 0}, false},
		{"tool calls", selectToolCallsSQL, "SEARCH r USING INDEX sqlite_autoindex_records_2 (session_id=? AND seq>?)", []any{"s", "u", 0}, true},
		{"append", bumpSeqSQL, "SEARCH sessions USING INDEX", []any{"s", "u", 1}, false},
		{"claim call", claimCallSQL, "SEARCH tool_calls USING INDEX", []any{"a", "r", "c", "s"}, false},
		// run_events is a WITHOUT ROWID table: its rows are its primary key's B-tree.
		{"events", selectEventsSQL,
			"SEARCH e USING PRIMARY KEY (run_id=? AND seq>?)", []any{"r", "u", 0, 10}, false},
		{"last event", lastEventSeqSQL,
			"SEARCH run_events USING PRIMARY KEY (run_id=?)", []any{"r"}, false},
		{"active run", activeRunSQL, "SEARCH runs USING INDEX runs_one_running_per_session (session_id=?)",
			[]any{"s", "u"}, false},
		{"busy check", runningInSQL, "SEARCH runs USING INDEX runs_one_running_per_session (session_id=?)",
			[]any{"s", "u"}, false},
		{"unended run", unendedInSQL, "SEARCH runs USING INDEX runs_by_session (session_id=?)", []any{"s", "u"}, false},
		{"run by key", runByKeySQL,
			"SEARCH runs USING INDEX runs_by_idempotency_key (user_id=? AND idempotency_key=?)", []any{"u", "k"}, false},
		{"key taken", keyTakenSQL, "SEARCH runs USING COVERING INDEX runs_by_idempotency_key", []any{"u", "k"}, false},
		{"unfinished runs", unfinishedSQL, "SCAN runs USING INDEX runs_active_by_user", nil, true},
		{"active runs", activeRunsSQL, "SEARCH runs USING INDEX runs_active_by_user (user_id=?)", []any{"u", "s"}, false},
		{"a key's runs to cancel", keyRunsSQL, "SEARCH runs USING INDEX runs_active_by_user (user_id=?)",
			[]any{"u", "k", "", "", 100}, true},
		{"active runs of a key", activeKeyRunsSQL, "SEARCH runs USING INDEX runs_active_by_user (user_id=?)", []any{"k", "u", "s"}, false},
	} {
		plan := queryPlan(t, db, tc.query, tc.args...)
		rest := strings.NewReplacer("SCAN CONSTANT ROW", "", tc.want, "").Replace(plan)
		scans := strings.Contains(rest, "SCAN ")
		sorts := strings.Contains(plan, "USE TEMP B-TREE")
		if !strings.Contains(plan, tc.want) || scans || sorts && !tc.sorts {
			t.Errorf("%s: plan lacks %q, or scans, or sorts:\n%s", tc.name, tc.want, plan)
		}
	}
}

// TestSchemaEnforcesPairing writes past the Go checks: the schema itself refuses a tool record for a
// call that does not exist, a second answer, and a non-tool record pointing at a call.
func TestSchemaEnforcesPairing(t *testing.T) {
	db := openTest(t, MemoryPath, Options{})
	ctx := t.Context()
	const insert = `INSERT INTO records (id, session_id, user_id, seq, role, parent_id, tool_call_id, created_at)
VALUES ($1, 's', 'u', $2, $3, $4, $5, 0)`
	for _, q := range []string{
		`INSERT INTO sessions (id, user_id, created_at, updated_at) VALUES ('s', 'u', 0, 0)`,
		`INSERT INTO records (id, session_id, user_id, seq, role, created_at) VALUES ('a', 's', 'u', 1, 'assistant', 0)`,
		`INSERT INTO tool_calls (record_id, call_id, session_id, idx, name, arguments) VALUES ('a', 'c1', 's', 0, 'f', '{}')`,
	} {
		if _, err := db.writer.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := db.writer.ExecContext(ctx, insert, "t1", 2, "tool", "a", "c1"); err != nil {
		t.Fatalf("first answer: %v", err)
	}
	for _, tc := range []struct {
		name string
		args []any
	}{
		{"second answer", []any{"t2", 3, "tool", "a", "c1"}},
		{"answer to a call the record does not hold", []any{"t3", 4, "tool", "a", "c9"}},
		{"tool record without a call id", []any{"t4", 5, "tool", "a", nil}},
		{"user record pointing at a call", []any{"u1", 6, "user", "a", "c1"}},
		{"unknown role", []any{"x1", 7, "robot", nil, nil}},
		{"duplicate seq", []any{"u2", 2, "user", nil, nil}},
	} {
		_, err := db.writer.ExecContext(ctx, insert, tc.args...)
		wantConflict := mapErr(err)
		if err == nil || !errors.Is(wantConflict, store.ErrConflict) {
			t.Errorf("%s: got %v, want a constraint violation", tc.name, err)
		}
	}
}

func queryPlan(t *testing.T, db *DB, query string, args ...any) string {
	t.Helper()
	rows, err := db.reader.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		b.WriteString(detail + "\n")
	}
	return b.String()
}

// TestReadySchemaBehind: a database whose schema lacks the build's latest migration is not ready.
func TestReadySchemaBehind(t *testing.T) {
	db, err := Open(t.Context(), tempPath(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Ready(t.Context()); err != nil {
		t.Fatalf("Ready = %v", err)
	}
	if _, err := db.writer.ExecContext(t.Context(), `DELETE FROM goose_db_version WHERE version_id = (SELECT MAX(version_id) FROM goose_db_version)`); err != nil {
		t.Fatal(err)
	}
	if err := db.Ready(t.Context()); err == nil || !strings.Contains(err.Error(), "schema") {
		t.Errorf("Ready with the last migration undone = %v, want a schema error", err)
	}
}

// TestMigrateAwaiting upgrades a database of schema 10 whose runs have event logs to the schema with
// awaiting_approval: runs is rebuilt (SQLite cannot change its CHECK in place), and the events that
// refer to it survive — dropping the old table with foreign keys on would have deleted them all —, as
// do the runs' columns; the new status is then accepted, and the foreign keys hold again.
func TestMigrateAwaiting(t *testing.T) {
	path, ctx := tempPath(t), t.Context()
	migrateTo(t, path, 10, []string{
		`INSERT INTO sessions (id, user_id, last_seq, created_at, updated_at) VALUES ('s1', 'u', 0, 0, 0)`,
		`INSERT INTO runs (id, session_id, user_id, status, model, created_at, ended_at, reserved_seq, key_id, input_tokens)
			VALUES ('r1', 's1', 'u', 'completed', 'm', 1700000000000000, 1700000000000009, 300, 'k1', 42)`,
		`INSERT INTO run_events (run_id, seq, type, data) VALUES ('r1', 1, 'run_start', '{}'), ('r1', 2, 'done', '{"status":"completed"}')`,
	})
	db := openTest(t, path, Options{})
	r, err := db.Run(ctx, "u", "r1")
	if err != nil || r.Status != store.RunCompleted || r.ReservedSeq != 300 || r.KeyID != "k1" || r.Usage.InputTokens != 42 || r.LastEventSeq != 2 {
		t.Fatalf("run after the migration: %+v, %v", r, err)
	}
	events, err := db.Events(ctx, "u", "r1", 0, 10)
	if err != nil || len(events) != 2 {
		t.Fatalf("events after the migration: %+v, %v", events, err)
	}
	var fk int
	if err := db.writer.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil || fk != 1 {
		t.Errorf("foreign keys after the migration: %d, %v", fk, err)
	}
	if _, err := db.writer.ExecContext(ctx, `UPDATE runs SET status = 'awaiting_approval' WHERE id = 'r1'`); err != nil {
		t.Errorf("the new status: %v", err)
	}
	wantErr := db.DeleteSession(ctx, "u", "s1")
	if !errors.Is(wantErr, store.ErrBusy) {
		t.Errorf("deleting a session whose run awaits approval: %v, want busy", wantErr)
	}
	if _, err := db.writer.ExecContext(ctx, `UPDATE runs SET status = 'completed' WHERE id = 'r1'`); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteSession(ctx, "u", "s1"); err != nil {
		t.Fatal(err)
	}
	if n := len(mustEvents(t, db)); n != 0 {
		t.Errorf("%d events left after deleting the session: the cascade is gone", n)
	}
}

// mustEvents reads every stored event, of every run.
func mustEvents(t *testing.T, db *DB) []string {
	t.Helper()
	rows, err := db.writer.QueryContext(t.Context(), "SELECT run_id FROM run_events")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		rows.Scan(&id)
		out = append(out, id)
	}
	return out
}
