package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"chatd/internal/store"
)

const (
	keyColumns = `id, user_id, name, prefix, hash, admin, agents, limits, created_at, expires_at, revoked_at`

	insertKeySQL = `INSERT INTO api_keys (` + keyColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`
	keyByHashSQL = `SELECT ` + keyColumns + ` FROM api_keys WHERE hash = $1`
	keyByIDSQL   = `SELECT ` + keyColumns + ` FROM api_keys WHERE id = $1 AND ($2 = '' OR user_id = $2)`
	keysSQL      = `SELECT ` + keyColumns + ` FROM api_keys WHERE $1 = '' OR user_id = $1 ORDER BY created_at DESC, id DESC`
	revokeKeySQL = `UPDATE api_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL`
	hasKeysSQL   = `SELECT EXISTS (SELECT 1 FROM api_keys)`

	insertAuthSessionSQL = `INSERT INTO auth_sessions (hash, key_id, created_at, expires_at) VALUES ($1, $2, $3, $4)`
	authSessionSQL       = `SELECT key_id, created_at, expires_at FROM auth_sessions WHERE hash = $1`
	deleteAuthSessionSQL = `DELETE FROM auth_sessions WHERE hash = $1`
	endSignInsSQL        = `DELETE FROM auth_sessions WHERE key_id = $1`
	expiredSignInsSQL    = `DELETE FROM auth_sessions WHERE expires_at <= $1`
	oldSignInsSQL        = `DELETE FROM auth_sessions WHERE key_id = $1 AND hash NOT IN
(SELECT hash FROM auth_sessions WHERE key_id = $1 ORDER BY created_at DESC, hash DESC LIMIT $2)`

	// What a Quota counts: the runs not ended and the usage since a time, of one key — or of a user,
	// leaving out the keys that set their own limit of the kind: those count over the key alone, as the
	// per-minute limiter counts them, so that a key's own limit neither spends nor is held to its user's.
	// The runs queued in the session of a run being resumed are left out (see checkQuota); a new run
	// passes '' for that session, which no run has.
	activeRunsSQL = `SELECT COUNT(*) FROM runs WHERE user_id = $1 AND status IN ('running', 'queued')
AND (status = 'running' OR session_id <> $2)
AND key_id NOT IN (SELECT id FROM api_keys WHERE user_id = $1 AND json_extract(limits, '$.concurrent_runs') > 0)`
	activeKeyRunsSQL = `SELECT COUNT(*) FROM runs WHERE key_id = $1 AND user_id = $2 AND status IN ('running', 'queued')
AND (status = 'running' OR session_id <> $3)`
	usageSinceSQL = `SELECT
COALESCE(SUM(CASE WHEN key_id IN (SELECT id FROM api_keys WHERE user_id = $1 AND json_extract(limits, '$.tokens_per_day') > 0)
	THEN 0 ELSE input_tokens + output_tokens END), 0),
COALESCE(SUM(CASE WHEN key_id IN (SELECT id FROM api_keys WHERE user_id = $1 AND json_extract(limits, '$.spend_usd') > 0)
	THEN 0 ELSE cost_nanousd END), 0)
FROM usage WHERE user_id = $1 AND created_at >= $2`
	keyUsageSinceSQL = `SELECT COALESCE(SUM(input_tokens + output_tokens), 0), COALESCE(SUM(cost_nanousd), 0)
FROM usage WHERE key_id = $3 AND user_id = $1 AND created_at >= $2`
)

// CreateKey stores k.
func (db *DB) CreateKey(ctx context.Context, k *store.APIKey) error {
	key := *k
	if key.ID == "" {
		key.ID = uuid.Must(uuid.NewV7()).String()
	}
	if key.User == "" || len(key.Hash) == 0 {
		return fmt.Errorf("sqlite: create key: %w", conflict("a key needs a user and a hash"))
	}
	agents, err := json.Marshal(nonNil(key.Agents))
	if err != nil {
		return fmt.Errorf("sqlite: create key: %w", err)
	}
	limits, err := json.Marshal(key.Limits)
	if err != nil {
		return fmt.Errorf("sqlite: create key: %w", err)
	}
	key.CreatedAt, key.RevokedAt = db.clock(), nil
	if key.ExpiresAt != nil {
		t := key.ExpiresAt.UTC().Truncate(time.Microsecond)
		key.ExpiresAt = &t
	}
	err = db.write(ctx, "create key", func(tx txn) error {
		_, err := tx.ExecContext(ctx, insertKeySQL, key.ID, key.User, key.Name, key.Prefix, key.Hash, key.Admin,
			string(agents), string(limits), key.CreatedAt.UnixMicro(), micros(key.ExpiresAt), nil)
		return err
	})
	if err != nil {
		return err
	}
	*k = key
	return nil
}

// KeyByHash returns the key whose hash is hash.
func (db *DB) KeyByHash(ctx context.Context, hash []byte) (*store.APIKey, error) {
	var k *store.APIKey
	err := db.read(ctx, "key", func(tx txn) error {
		var err error
		k, err = scanKey(tx.QueryRowContext(ctx, keyByHashSQL, hash))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: key", store.ErrNotFound)
		}
		return err
	})
	return k, err
}

// Keys lists the keys of user, or of everyone.
func (db *DB) Keys(ctx context.Context, user string) ([]store.APIKey, error) {
	var keys []store.APIKey
	err := db.read(ctx, "keys", func(tx txn) error {
		rows, err := tx.QueryContext(ctx, keysSQL, user)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			k, err := scanKey(rows)
			if err != nil {
				return err
			}
			keys = append(keys, *k)
		}
		return rows.Err()
	})
	return keys, err
}

// RevokeKey revokes a key and ends its sign-ins.
func (db *DB) RevokeKey(ctx context.Context, user, id string) (*store.APIKey, error) {
	var k *store.APIKey
	err := db.write(ctx, "revoke key", func(tx txn) error {
		var err error
		if k, err = scanKey(tx.QueryRowContext(ctx, keyByIDSQL, id, user)); errors.Is(err, sql.ErrNoRows) {
			return notFound("key", id)
		} else if err != nil {
			return err
		}
		if k.RevokedAt == nil {
			now := db.clock()
			if _, err := tx.ExecContext(ctx, revokeKeySQL, id, now.UnixMicro()); err != nil {
				return err
			}
			k.RevokedAt = &now
		}
		_, err = tx.ExecContext(ctx, endSignInsSQL, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	return k, nil
}

// HasKeys reports whether a key was ever created.
func (db *DB) HasKeys(ctx context.Context) (bool, error) {
	var has bool
	err := db.read(ctx, "has keys", func(tx txn) error {
		return tx.QueryRowContext(ctx, hasKeysSQL).Scan(&has)
	})
	return has, err
}

// maxSignIns bounds the live sign-ins of one key: past it, the oldest end.
const maxSignIns = 100

// CreateAuthSession stores a sign-in (made at CreatedAt, or now). In the same transaction it forgets the
// sign-ins expired by then, and ends the
// key's oldest past maxSignIns, so that signing in again and again cannot grow the table.
func (db *DB) CreateAuthSession(ctx context.Context, s *store.AuthSession) error {
	if s.CreatedAt.IsZero() {
		s.CreatedAt = db.clock()
	}
	s.CreatedAt = s.CreatedAt.UTC().Truncate(time.Microsecond)
	s.ExpiresAt = s.ExpiresAt.UTC().Truncate(time.Microsecond)
	return db.write(ctx, "create sign-in", func(tx txn) error {
		if _, err := tx.ExecContext(ctx, expiredSignInsSQL, s.CreatedAt.UnixMicro()); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, insertAuthSessionSQL, s.Hash, s.KeyID, s.CreatedAt.UnixMicro(), s.ExpiresAt.UnixMicro()); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, oldSignInsSQL, s.KeyID, maxSignIns)
		return err
	})
}

// AuthSession returns a sign-in and its key.
func (db *DB) AuthSession(ctx context.Context, hash []byte) (*store.AuthSession, *store.APIKey, error) {
	s := &store.AuthSession{Hash: hash}
	var k *store.APIKey
	err := db.read(ctx, "sign-in", func(tx txn) error {
		var created, expires int64
		err := tx.QueryRowContext(ctx, authSessionSQL, hash).Scan(&s.KeyID, &created, &expires)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: sign-in", store.ErrNotFound)
		} else if err != nil {
			return err
		}
		s.CreatedAt, s.ExpiresAt = fromMicros(created), fromMicros(expires)
		k, err = scanKey(tx.QueryRowContext(ctx, keyByIDSQL, s.KeyID, ""))
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return s, k, nil
}

// DeleteAuthSession ends a sign-in.
func (db *DB) DeleteAuthSession(ctx context.Context, hash []byte) error {
	return db.write(ctx, "delete sign-in", func(tx txn) error {
		_, err := tx.ExecContext(ctx, deleteAuthSessionSQL, hash)
		return err
	})
}

func scanKey(row scanner) (*store.APIKey, error) {
	var k store.APIKey
	var agents, limits string
	var created int64
	var expires, revoked sql.NullInt64
	if err := row.Scan(&k.ID, &k.User, &k.Name, &k.Prefix, &k.Hash, &k.Admin, &agents, &limits, &created, &expires, &revoked); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(agents), &k.Agents); err != nil {
		return nil, fmt.Errorf("key %s: agents: %w", k.ID, err)
	}
	if err := json.Unmarshal([]byte(limits), &k.Limits); err != nil {
		return nil, fmt.Errorf("key %s: limits: %w", k.ID, err)
	}
	k.CreatedAt = fromMicros(created)
	k.ExpiresAt, k.RevokedAt = timeOf(expires), timeOf(revoked)
	return &k, nil
}

// checkQuota refuses with a *store.LimitError when a run would pass one of the limits. It runs in the
// write transaction that creates or resumes the run: SQLite's one writer makes the count and the write
// one step.
//
// resumed is the session of a run being resumed, "" for a new run. The runs queued in it are not
// counted: they passed the check when they were queued, and they wait for the resumed run — a
// session's runs run one at a time, so the resumed run and those queued behind it hold one slot between
// them, and counting them would refuse every decision until the wait expired. Runs queued in other
// sessions are counted, as a new run counts them: each will hold a slot of its own once the run before
// it in its session ends.
func checkQuota(ctx context.Context, tx txn, user string, quota []store.Limit, resumed string) error {
	var tokens, cost sql.NullInt64 // of the last usage query, reused when two limits share it
	var last store.Limit
	for _, l := range quota {
		var used int64
		switch l.Name {
		case store.LimitConcurrentRuns:
			var err error
			if l.KeyID != "" {
				err = tx.QueryRowContext(ctx, activeKeyRunsSQL, l.KeyID, user, resumed).Scan(&used)
			} else {
				err = tx.QueryRowContext(ctx, activeRunsSQL, user, resumed).Scan(&used)
			}
			if err != nil {
				return err
			}
		case store.LimitTokens, store.LimitSpend:
			if !tokens.Valid || last.KeyID != l.KeyID || !last.Since.Equal(l.Since) {
				t, c, err := usageSince(ctx, tx, user, l.KeyID, l.Since)
				if err != nil {
					return err
				}
				tokens, cost, last = sql.NullInt64{Int64: t, Valid: true}, sql.NullInt64{Int64: c, Valid: true}, l
			}
			used = tokens.Int64
			if l.Name == store.LimitSpend {
				used = cost.Int64
			}
		default:
			return fmt.Errorf("unknown limit %q", l.Name)
		}
		if l.Max > 0 && used >= l.Max {
			return &store.LimitError{Limit: l, Used: used}
		}
	}
	return nil
}

func usageSince(ctx context.Context, tx txn, user, keyID string, since time.Time) (tokens, cost int64, err error) {
	if keyID != "" {
		err = tx.QueryRowContext(ctx, keyUsageSinceSQL, user, since.UnixMicro(), keyID).Scan(&tokens, &cost)
	} else {
		err = tx.QueryRowContext(ctx, usageSinceSQL, user, since.UnixMicro()).Scan(&tokens, &cost)
	}
	return tokens, cost, err
}

// UsageSince sums the tokens and cost of usage entries since a time.
func (db *DB) UsageSince(ctx context.Context, user, keyID string, since time.Time) (tokens, cost int64, err error) {
	err = db.read(ctx, "usage since", func(tx txn) error {
		tokens, cost, err = usageSince(ctx, tx, user, keyID, since)
		return err
	})
	return tokens, cost, err
}

// usageGroups are the expressions UsageTotals groups by. Days are UTC: created_at is unix microseconds.
var usageGroups = map[string]string{
	store.GroupByUser:  "user_id",
	store.GroupByKey:   "key_id",
	store.GroupByAgent: "agent",
	store.GroupByModel: "model",
	store.GroupByDay:   "strftime('%Y-%m-%d', created_at / 1000000, 'unixepoch')",
}

// UsageTotals sums usage entries per group.
func (db *DB) UsageTotals(ctx context.Context, q store.UsageQuery) ([]store.UsageTotal, error) {
	group, ok := usageGroups[q.GroupBy]
	if !ok {
		return nil, fmt.Errorf("sqlite: usage totals: unknown grouping %q", q.GroupBy)
	}
	var from, to int64 = 0, 1<<63 - 1
	if !q.From.IsZero() {
		from = q.From.UnixMicro()
	}
	if !q.To.IsZero() {
		to = q.To.UnixMicro()
	}
	query := `SELECT ` + group + `, COUNT(*), SUM(input_tokens), SUM(output_tokens), SUM(cache_read_tokens),
SUM(cache_write_tokens), SUM(reasoning_tokens), SUM(cost_nanousd)
FROM usage WHERE ($1 = '' OR user_id = $1) AND created_at >= $2 AND created_at < $3
GROUP BY 1 ORDER BY 1`
	var totals []store.UsageTotal
	err := db.read(ctx, "usage totals", func(tx txn) error {
		rows, err := tx.QueryContext(ctx, query, q.User, from, to)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var t store.UsageTotal
			u := &t.Usage
			if err := rows.Scan(&t.Group, &t.Calls, &u.InputTokens, &u.OutputTokens, &u.CacheReadTokens,
				&u.CacheWriteTokens, &u.ReasoningTokens, &t.CostNanoUSD); err != nil {
				return err
			}
			totals = append(totals, t)
		}
		return rows.Err()
	})
	return totals, err
}

func micros(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMicro()
}

func timeOf(us sql.NullInt64) *time.Time {
	if !us.Valid {
		return nil
	}
	t := fromMicros(us.Int64)
	return &t
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
