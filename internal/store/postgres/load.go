package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"chatd/internal/store"
)

// A part of store.TransferParts as this store loads it: its table, the columns that identify a row,
// whether a row already there is updated to the source's (rows that change: a session's title, a run's
// status, a key's revocation) or left as it is (rows only ever inserted: records, events, usage), and
// what runs once the rows are written, in the same transaction: the columns of this store alone, derived
// from those copied.
type loadPart struct {
	table  string
	key    []string
	update bool
	after  string
}

// loadRunsAfterSQL gives the runs awaiting approval their expiry (awaiting_expires_at, which the sweep of
// expired waits reads), from what they wait for, as migration 00008 does: another store keeps it there
// alone. Every waiting run, not only the ones without one: a run copied again may wait anew.
const loadRunsAfterSQL = `UPDATE runs SET awaiting_expires_at = awaiting_expiry(awaiting, created_at)
WHERE status = 'awaiting_approval'`

var loadParts = map[string]loadPart{
	store.PartSessions:     {"sessions", []string{"id"}, true, ""},
	store.PartRecords:      {"records", []string{"id"}, false, ""},
	store.PartToolCalls:    {"tool_calls", []string{"record_id", "call_id"}, true, ""},
	store.PartToolRecords:  {"records", []string{"id"}, false, ""},
	store.PartRuns:         {"runs", []string{"id"}, true, loadRunsAfterSQL},
	store.PartRunEvents:    {"run_events", []string{"run_id", "seq"}, false, ""},
	store.PartUsage:        {"usage", []string{"id"}, false, ""},
	store.PartAPIKeys:      {"api_keys", []string{"id"}, true, ""},
	store.PartAuthSessions: {"auth_sessions", []string{"hash"}, true, ""},
	store.PartModelCalls:   {"model_calls", []string{"run_id", "n"}, false, ""},
}

// countSQL counts the rows of each part of store.TransferParts.
var countSQL = map[string]string{
	store.PartSessions:     `SELECT COUNT(*) FROM sessions`,
	store.PartRecords:      `SELECT COUNT(*) FROM records WHERE role <> 'tool'`,
	store.PartToolCalls:    `SELECT COUNT(*) FROM tool_calls`,
	store.PartToolRecords:  `SELECT COUNT(*) FROM records WHERE role = 'tool'`,
	store.PartRuns:         `SELECT COUNT(*) FROM runs`,
	store.PartRunEvents:    `SELECT COUNT(*) FROM run_events`,
	store.PartUsage:        `SELECT COUNT(*) FROM usage`,
	store.PartAPIKeys:      `SELECT COUNT(*) FROM api_keys`,
	store.PartAuthSessions: `SELECT COUNT(*) FROM auth_sessions`,
	store.PartModelCalls:   `SELECT COUNT(*) FROM model_calls`,
}

// Loader writes the rows of one part of store.TransferParts in one transaction: a row already there is
// skipped, or updated to the one given when its part's rows change. Loading the same rows twice stores
// them once.
type Loader struct {
	tx    *sql.Tx
	stmt  *sql.Stmt
	cols  []string
	part  string
	after string // loadPart.after
}

// Load starts loading a part whose rows have the columns cols. Call Row for each row, then Commit (or
// Rollback).
func (db *DB) Load(ctx context.Context, part string, cols []string) (*Loader, error) {
	lp, ok := loadParts[part]
	if !ok {
		return nil, fmt.Errorf("postgres: load: no part %q", part)
	}
	for _, k := range lp.key {
		if !slices.Contains(cols, k) {
			return nil, fmt.Errorf("postgres: load %s: no column %s", part, k)
		}
	}
	params := make([]string, len(cols))
	var set []string
	for i, c := range cols {
		params[i] = fmt.Sprintf("$%d", i+1)
		if !slices.Contains(lp.key, c) {
			set = append(set, c+" = EXCLUDED."+c)
		}
	}
	query := "INSERT INTO " + lp.table + " (" + strings.Join(cols, ", ") + ") VALUES (" + strings.Join(params, ", ") +
		") ON CONFLICT (" + strings.Join(lp.key, ", ") + ") DO "
	if lp.update && len(set) > 0 {
		query += "UPDATE SET " + strings.Join(set, ", ")
	} else {
		query += "NOTHING"
	}
	tx, err := db.pool.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("postgres: load %s: %w", part, err)
	}
	stmt, err := tx.PrepareContext(ctx, query)
	if err != nil {
		tx.Rollback()
		return nil, fmt.Errorf("postgres: load %s: %w", part, err)
	}
	return &Loader{tx: tx, stmt: stmt, cols: slices.Clone(cols), part: part, after: lp.after}, nil
}

// Row writes one row, its values in the order of the columns given to Load.
func (l *Loader) Row(ctx context.Context, vals []any) error {
	args := make([]any, len(vals))
	for i, v := range vals {
		args[i] = v
		if s, ok := v.(string); ok && (l.cols[i] == "request" || l.cols[i] == "hash") {
			args[i] = []byte(s) // bytea here, text in some stores
		}
	}
	if _, err := l.stmt.ExecContext(ctx, args...); err != nil {
		return fmt.Errorf("postgres: load %s: %w", l.part, mapErr(err))
	}
	return nil
}

// Commit stores the rows written.
func (l *Loader) Commit(ctx context.Context) error {
	l.stmt.Close()
	if l.after != "" {
		if _, err := l.tx.ExecContext(ctx, l.after); err != nil {
			l.tx.Rollback()
			return fmt.Errorf("postgres: load %s: %w", l.part, err)
		}
	}
	if err := l.tx.Commit(); err != nil {
		return fmt.Errorf("postgres: load %s: %w", l.part, err)
	}
	return nil
}

// Rollback forgets the rows written.
func (l *Loader) Rollback() {
	l.stmt.Close()
	l.tx.Rollback()
}

// Counts returns the number of rows of each part of store.TransferParts.
func (db *DB) Counts(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	for part, query := range countSQL {
		var n int64
		if err := db.pool.QueryRowContext(ctx, query).Scan(&n); err != nil {
			return nil, fmt.Errorf("postgres: count %s: %w", part, err)
		}
		out[part] = n
	}
	return out, nil
}

// pairingChecks each count rows that break the pairing invariant (store's package doc), with what they
// say when they find some.
var pairingChecks = []struct{ what, query string }{
	{"tool calls of ended runs without an answer", `SELECT COUNT(*) FROM tool_calls c JOIN runs r ON r.id = c.run_id
WHERE c.answer_id IS NULL AND r.status NOT IN ('queued', 'running', 'awaiting_approval')`},
	{"tool calls whose answer is not their tool record", `SELECT COUNT(*) FROM tool_calls c
WHERE c.answer_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM records t
	WHERE t.id = c.answer_id AND t.parent_id = c.record_id AND t.tool_call_id = c.call_id)`},
	{"tool records that answer no call", `SELECT COUNT(*) FROM records t WHERE t.role = 'tool' AND NOT EXISTS (
	SELECT 1 FROM tool_calls c WHERE c.record_id = t.parent_id AND c.call_id = t.tool_call_id AND c.answer_id = t.id)`},
	{"tool records not right after their call's record and its other answers", `SELECT COUNT(*) FROM records t
JOIN records a ON a.id = t.parent_id
WHERE t.role = 'tool' AND EXISTS (SELECT 1 FROM records o WHERE o.session_id = t.session_id
	AND o.seq > a.seq AND o.seq < t.seq AND NOT (o.role = 'tool' AND o.parent_id = a.id))`},
	{"sessions whose last_seq is not their last record's", `SELECT COUNT(*) FROM sessions s
WHERE s.last_seq <> COALESCE((SELECT MAX(seq) FROM records r WHERE r.session_id = s.id), 0)`},
}

// CheckPairing reports the rows of the database that break the pairing invariant; nil when none do.
func (db *DB) CheckPairing(ctx context.Context) error {
	var bad []string
	for _, c := range pairingChecks {
		var n int64
		if err := db.pool.QueryRowContext(ctx, c.query).Scan(&n); err != nil {
			return fmt.Errorf("postgres: check pairing: %w", err)
		}
		if n > 0 {
			bad = append(bad, fmt.Sprintf("%d %s", n, c.what))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: the pairing invariant does not hold: %s", store.ErrConflict, strings.Join(bad, "; "))
	}
	return nil
}
