package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"chatd/internal/store"
)

// dumpQueries read each part of store.TransferParts in a stable order.
var dumpQueries = map[string]string{
	store.PartSessions: `SELECT id, user_id, title, agent, metadata, last_seq, created_at, updated_at, title_set FROM sessions ORDER BY id`,
	store.PartRecords: `SELECT id, session_id, user_id, seq, run_id, role, content, attachments, reasoning, parent_id,
tool_call_id, name, success, duration_ms, payload, model, finish_reason, usage, replay, summary_through, retracts, parsed, created_at
FROM records WHERE role <> 'tool' ORDER BY session_id, seq`,
	store.PartToolCalls: `SELECT record_id, call_id, session_id, run_id, idx, name, arguments, answer_id FROM tool_calls
ORDER BY record_id, idx`,
	store.PartToolRecords: `SELECT id, session_id, user_id, seq, run_id, role, content, attachments, reasoning, parent_id,
tool_call_id, name, success, duration_ms, payload, model, finish_reason, usage, replay, summary_through, retracts, parsed, created_at
FROM records WHERE role = 'tool' ORDER BY session_id, seq`,
	store.PartRuns: `SELECT id, session_id, user_id, status, agent, model, finish_reason, error, input_tokens, output_tokens,
cache_read_tokens, cache_write_tokens, reasoning_tokens, idempotency_key, request_hash, request, created_at, started_at,
ended_at, recovered_from, reserved_seq, key_id, awaiting FROM runs ORDER BY created_at, id`,
	store.PartRunEvents: `SELECT run_id, seq, type, data FROM run_events ORDER BY run_id, seq`,
	store.PartUsage: `SELECT id, user_id, run_id, session_id, key_id, agent, model, input_tokens, output_tokens,
cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_nanousd, estimated, created_at FROM usage ORDER BY id`,
	store.PartAPIKeys: `SELECT id, user_id, name, prefix, hash, admin, agents, limits, created_at, expires_at, revoked_at
FROM api_keys ORDER BY id`,
	store.PartAuthSessions: `SELECT hash, key_id, created_at, expires_at FROM auth_sessions ORDER BY hash`,
	store.PartModelCalls: `SELECT run_id, n, session_id, user_id, model, system, tools, settings, request, request_omitted,
output, created_at FROM model_calls ORDER BY run_id, n`,
}

// countQueries count the rows of each part.
var countQueries = map[string]string{
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

// Columns SQLite keeps as microseconds since the epoch, and as 0 or 1.
var (
	timeColumns = map[string]bool{"created_at": true, "updated_at": true, "started_at": true, "ended_at": true,
		"expires_at": true, "revoked_at": true}
	boolColumns = map[string]bool{"success": true, "admin": true, "estimated": true, "title_set": true}
)

// Dump calls fn for each row of one part of store.TransferParts, in a stable order, with the part's
// column names and the row's values as store.TransferParts describes them. fn must not keep vals. The
// caller holds the database's lock (Open took it), so no chatd writes to it meanwhile.
func (db *DB) Dump(ctx context.Context, part string, fn func(cols []string, vals []any) error) error {
	query, ok := dumpQueries[part]
	if !ok {
		return fmt.Errorf("sqlite: dump: no part %q", part)
	}
	rows, err := db.reader.QueryContext(ctx, query)
	if err != nil {
		return fmt.Errorf("sqlite: dump %s: %w", part, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return fmt.Errorf("sqlite: dump %s: %w", part, err)
	}
	raw := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	vals := make([]any, len(cols))
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return fmt.Errorf("sqlite: dump %s: %w", part, err)
		}
		for i, c := range cols {
			v, err := neutral(c, raw[i])
			if err != nil {
				return fmt.Errorf("sqlite: dump %s: column %s: %w", part, c, err)
			}
			vals[i] = v
		}
		if err := fn(cols, vals); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlite: dump %s: %w", part, err)
	}
	return nil
}

// neutral converts a value as SQLite returned it to the form store.TransferParts describes.
func neutral(col string, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch {
	case timeColumns[col]:
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("a time stored as %T", v)
		}
		return time.UnixMicro(n).UTC(), nil
	case boolColumns[col]:
		switch b := v.(type) {
		case int64:
			return b != 0, nil
		case bool:
			return b, nil
		}
		return nil, fmt.Errorf("a boolean stored as %T", v)
	}
	return v, nil
}

// Counts returns the number of rows of each part of store.TransferParts.
func (db *DB) Counts(ctx context.Context) (map[string]int64, error) {
	return counts(ctx, db.reader, countQueries)
}

func counts(ctx context.Context, q *sql.DB, queries map[string]string) (map[string]int64, error) {
	out := map[string]int64{}
	for part, query := range queries {
		var n int64
		if err := q.QueryRowContext(ctx, query).Scan(&n); err != nil {
			return nil, fmt.Errorf("sqlite: count %s: %w", part, err)
		}
		out[part] = n
	}
	return out, nil
}
