package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"chatd/internal/store"
)

const (
	// bumpSeqSQL assigns the next Seq. Updating the session row first also checks that the session is
	// the user's and touches its UpdatedAt, in one statement.
	bumpSeqSQL = `UPDATE sessions SET last_seq = last_seq + 1, updated_at = $3
WHERE id = $1 AND user_id = $2
RETURNING last_seq`
	// bumpSeqAfterSQL is bumpSeqSQL for a writer that built on the session's records up to Seq $4: it
	// assigns nothing once another record came since.
	bumpSeqAfterSQL = `UPDATE sessions SET last_seq = last_seq + 1, updated_at = $3
WHERE id = $1 AND user_id = $2 AND last_seq = $4
RETURNING last_seq`

	// claimCallSQL marks a call answered. It matches only a call that the parent record holds, in this
	// session, and that is still open, so no rows means the tool record answers nothing it may answer.
	claimCallSQL = `UPDATE tool_calls SET answer_id = $1
WHERE record_id = $2 AND call_id = $3 AND session_id = $4 AND answer_id IS NULL`

	openCallsSQL = `SELECT EXISTS (SELECT 1 FROM tool_calls WHERE session_id = $1 AND answer_id IS NULL)`

	insertRecordSQL = `INSERT INTO records (id, session_id, user_id, seq, run_id, role, content, attachments,
reasoning, parent_id, tool_call_id, name, success, duration_ms, payload, model, finish_reason, usage, created_at,
replay, summary_through, retracts, parsed)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23)`

	insertToolCallSQL = `INSERT INTO tool_calls (record_id, call_id, session_id, run_id, idx, name, arguments)
VALUES ($1, $2, $3, $4, $5, $6, $7)`

	// lastUserRecordSQL finds whether a record is the session's last user record: a marker retracts only
	// the answer to that one (an older one would take the newer messages with it).
	lastUserRecordSQL = `SELECT EXISTS (SELECT 1 FROM records r WHERE r.id = $1 AND r.session_id = $2 AND r.role = 'user'
AND NOT EXISTS (SELECT 1 FROM records n WHERE n.session_id = r.session_id AND n.role = 'user' AND n.seq > r.seq))`

	sessionSizeSQL = `SELECT last_seq FROM sessions WHERE id = $1 AND user_id = $2`

	selectRecordsSQL = `SELECT id, seq, run_id, role, content, attachments, reasoning, parent_id, tool_call_id,
name, success, duration_ms, payload, model, finish_reason, usage, created_at, replay, summary_through, retracts, parsed
FROM records WHERE session_id = $1 AND user_id = $2 AND seq > $3 ORDER BY seq`

	selectAttachmentsSQL = `SELECT attachments FROM records WHERE id = $1 AND session_id = $2 AND user_id = $3`

	selectToolCallsSQL = `SELECT c.record_id, c.call_id, c.name, c.arguments
FROM records r JOIN tool_calls c ON c.record_id = r.id
WHERE r.session_id = $1 AND r.user_id = $2 AND r.seq > $3
ORDER BY r.seq, c.idx`
)

// AppendRecord stores r at the end of its session in one transaction, enforcing the pairing invariant,
// and assigns r's ID (when empty), Seq and CreatedAt.
func (db *DB) AppendRecord(ctx context.Context, user string, r *store.Record) error {
	return db.AppendTurn(ctx, user, r, nil, nil)
}

// AppendTurn is AppendRecord and AddUsage of each of usage in one transaction, with the calls'
// diagnostics.
func (db *DB) AppendTurn(ctx context.Context, user string, r *store.Record, usage []store.UsageEntry, calls []store.ModelCall) error {
	rec, err := store.NewRecord(r, newID)
	if err != nil {
		return fmt.Errorf("sqlite: append record: %w", err)
	}
	err = db.write(ctx, "append record", func(tx txn) error {
		now := db.clock()
		if err := appendRecord(ctx, tx, user, &rec, now); err != nil {
			return err
		}
		for _, u := range usage {
			if err := insertUsage(ctx, tx, user, u, now); err != nil {
				return err
			}
		}
		return insertCalls(ctx, tx, user, calls, now)
	})
	if err != nil {
		return err
	}
	*r = rec // only now: a failed append leaves the caller's record as it was
	return nil
}

// appendRecord is AppendRecord inside a transaction; FinishRun uses it too.
func appendRecord(ctx context.Context, tx txn, user string, rec *store.Record, now time.Time) error {
	return appendRecordAfter(ctx, tx, user, rec, now, nil)
}

// appendRecordAfter is appendRecord for a writer that built on the session's records up to Seq *after
// (nil: whatever they are): store.ErrStale once another record came since.
func appendRecordAfter(ctx context.Context, tx txn, user string, rec *store.Record, now time.Time, after *int64) error {
	seq, err := nextSeq(ctx, tx, user, rec.SessionID, now, after)
	if err != nil {
		return err
	}
	if err := pair(ctx, tx, rec); err != nil {
		return err
	}
	if rec.Retracts != "" {
		var ok bool
		if err := tx.QueryRowContext(ctx, lastUserRecordSQL, rec.Retracts, rec.SessionID).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return conflict("record %q is not the last user record of session %q; a marker retracts the answer to that one",
				rec.Retracts, rec.SessionID)
		}
	}
	rec.Seq, rec.CreatedAt = seq, now
	if err := insertRecord(ctx, tx, user, rec); err != nil {
		return err
	}
	for i, c := range rec.ToolCalls {
		_, err := tx.ExecContext(ctx, insertToolCallSQL, rec.ID, c.ID, rec.SessionID, nullable(rec.RunID), i,
			c.Name, string(c.Arguments))
		if err != nil {
			return err
		}
	}
	return nil
}

// nextSeq takes the session's next Seq, when its last is still *after (nil: any).
func nextSeq(ctx context.Context, tx txn, user, sessionID string, now time.Time, after *int64) (int64, error) {
	var row *sql.Row
	if after == nil {
		row = tx.QueryRowContext(ctx, bumpSeqSQL, sessionID, user, now.UnixMicro())
	} else {
		row = tx.QueryRowContext(ctx, bumpSeqAfterSQL, sessionID, user, now.UnixMicro(), *after)
	}
	var seq int64
	err := row.Scan(&seq)
	switch {
	case errors.Is(err, sql.ErrNoRows) && after != nil:
		// The only caller, CreateRun, inserted its run in the session first: the session is there, and
		// its last Seq is another.
		return 0, fmt.Errorf("%w: session %q has records after %d", store.ErrStale, sessionID, *after)
	case errors.Is(err, sql.ErrNoRows):
		return 0, notFound("session", sessionID)
	}
	return seq, err
}

// pair enforces the invariant: a tool record answers an open call of its parent; any other record waits
// until no call of the session is open.
func pair(ctx context.Context, tx txn, rec *store.Record) error {
	if rec.Role == store.RoleTool {
		res, err := tx.ExecContext(ctx, claimCallSQL, rec.ID, rec.ParentID, rec.ToolCallID, rec.SessionID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return conflict("record %q of session %q holds no open tool call %q",
				rec.ParentID, rec.SessionID, rec.ToolCallID)
		}
		return nil
	}
	var open bool
	if err := tx.QueryRowContext(ctx, openCallsSQL, rec.SessionID).Scan(&open); err != nil {
		return err
	}
	if open {
		return conflict("session %q has tool calls without a tool record; a %s record must wait for them",
			rec.SessionID, rec.Role)
	}
	return nil
}

func insertRecord(ctx context.Context, tx txn, user string, rec *store.Record) error {
	var attachments, payload, usage, replay, parsed any // NULL when absent
	if b, err := store.EncodeParsed(rec); err != nil {
		return err
	} else if b != nil {
		parsed = string(b)
	}
	if rec.Replay != nil {
		b, err := json.Marshal(rec.Replay)
		if err != nil {
			return err
		}
		replay = string(b)
	}
	if rec.Attachments != nil {
		b, err := json.Marshal(rec.Attachments)
		if err != nil {
			return err
		}
		attachments = string(b)
	}
	if rec.Payload != nil {
		payload = string(rec.Payload)
	}
	if rec.Usage != nil {
		b, err := json.Marshal(rec.Usage)
		if err != nil {
			return err
		}
		usage = string(b)
	}
	_, err := tx.ExecContext(ctx, insertRecordSQL, rec.ID, rec.SessionID, user, rec.Seq, nullable(rec.RunID),
		rec.Role, rec.Content, attachments, rec.Reasoning, nullable(rec.ParentID), nullable(rec.ToolCallID),
		rec.Name, rec.Success, rec.DurationMS, payload, rec.Model, rec.FinishReason, usage,
		rec.CreatedAt.UnixMicro(), replay, nullable(rec.SummaryThrough), nullable(rec.Retracts), parsed)
	return err
}

// Attachment returns attachment n of one record, reading that record's attachments only.
func (db *DB) Attachment(ctx context.Context, user, sessionID, recordID string, n int) (*store.Attachment, error) {
	var raw sql.NullString
	err := db.read(ctx, "attachment", func(tx txn) error {
		return tx.QueryRowContext(ctx, selectAttachmentsSQL, recordID, sessionID, user).Scan(&raw)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("record", recordID)
	}
	if err != nil {
		return nil, err
	}
	var all []store.Attachment
	if raw.Valid {
		if err := json.Unmarshal([]byte(raw.String), &all); err != nil {
			return nil, fmt.Errorf("sqlite: attachments of record %s: %w", recordID, err)
		}
	}
	if n < 0 || n >= len(all) {
		return nil, notFound("attachment", strconv.Itoa(n))
	}
	return &all[n], nil
}

// Transcript reads the session, its records and its running run in one read transaction.
func (db *DB) Transcript(ctx context.Context, user, sessionID string) (*store.Transcript, error) {
	var t store.Transcript
	err := db.read(ctx, "transcript", func(tx txn) error {
		s, err := scanSession(tx.QueryRowContext(ctx, selectSessionSQL, sessionID, user))
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("session", sessionID)
		}
		if err != nil {
			return err
		}
		t.Session = *s
		if t.Records, err = loadRecords(ctx, tx, user, sessionID, 0, s.LastSeq); err != nil {
			return err
		}
		err = tx.QueryRowContext(ctx, runningInSQL, sessionID, user).Scan(&t.RunningRunID)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// Records returns the session's records, oldest first, read from one snapshot.
func (db *DB) Records(ctx context.Context, user, sessionID string) ([]store.Record, error) {
	return db.RecordsAfter(ctx, user, sessionID, 0)
}

// RecordsAfter returns the session's records with Seq > after, oldest first, read from one snapshot.
func (db *DB) RecordsAfter(ctx context.Context, user, sessionID string, after int64) ([]store.Record, error) {
	var recs []store.Record
	err := db.read(ctx, "records", func(tx txn) error {
		var n int64
		err := tx.QueryRowContext(ctx, sessionSizeSQL, sessionID, user).Scan(&n)
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("session", sessionID)
		}
		if err != nil {
			return err
		}
		size := max(n-max(after, 0), 0) // at most n, whatever after is
		recs, err = loadRecords(ctx, tx, user, sessionID, after, size)
		return err
	})
	if err != nil {
		return nil, err
	}
	return recs, nil
}

// loadRecords reads the session's records with Seq > after, oldest first, with their tool calls. size
// is how many there are at most (the session's last Seq − after, read in the same transaction).
func loadRecords(ctx context.Context, tx txn, user, sessionID string, after, size int64) ([]store.Record, error) {
	recs, err := selectRecords(ctx, tx, user, sessionID, after, size)
	if err != nil {
		return nil, err
	}
	return recs, addToolCalls(ctx, tx, user, sessionID, after, recs)
}

func selectRecords(ctx context.Context, tx txn, user, sessionID string, after, size int64) ([]store.Record, error) {
	rows, err := tx.QueryContext(ctx, selectRecordsSQL, sessionID, user, after)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	// One slice of the right size (a larger session grows it as usual) and one set of scan
	// destinations for every row: a slice grown by doubling and the destinations of each row were more
	// than half of what reading a history allocated (BenchmarkRecords).
	recs := make([]store.Record, 0, min(size, 100_000))
	var sc recordScanner
	dest := sc.dest()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		recs = append(recs, store.Record{})
		if err := sc.record(&recs[len(recs)-1]); err != nil {
			return nil, err
		}
		recs[len(recs)-1].SessionID = sessionID
	}
	return recs, rows.Err()
}

// addToolCalls fills in the ToolCalls of recs, which are ordered by seq as the calls are.
func addToolCalls(ctx context.Context, tx txn, user, sessionID string, after int64, recs []store.Record) error {
	byID := make(map[string]int, len(recs))
	for i, r := range recs {
		byID[r.ID] = i
	}
	rows, err := tx.QueryContext(ctx, selectToolCallsSQL, sessionID, user, after)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var recordID, args string
		var c store.ToolCall
		if err := rows.Scan(&recordID, &c.ID, &c.Name, &args); err != nil {
			return err
		}
		c.Arguments = json.RawMessage(args)
		if i, ok := byID[recordID]; ok {
			recs[i].ToolCalls = append(recs[i].ToolCalls, c)
		}
	}
	return rows.Err()
}

// recordScanner holds the columns of one row of selectRecordsSQL, so that one set of scan
// destinations serves every row of a query.
type recordScanner struct {
	id, role, content, reasoning, name, model, finish                                           string
	runID, attachments, parentID, toolCallID, payload, usage, replay, through, retracts, parsed sql.NullString
	seq, created                                                                                int64
	success                                                                                     sql.NullBool
	duration                                                                                    sql.NullInt64
}

// dest is what rows.Scan reads a row of selectRecordsSQL into.
func (sc *recordScanner) dest() []any {
	return []any{&sc.id, &sc.seq, &sc.runID, &sc.role, &sc.content, &sc.attachments, &sc.reasoning, &sc.parentID,
		&sc.toolCallID, &sc.name, &sc.success, &sc.duration, &sc.payload, &sc.model, &sc.finish, &sc.usage, &sc.created,
		&sc.replay, &sc.through, &sc.retracts, &sc.parsed}
}

// record fills in r (a zero Record) from the row last scanned; NULL columns become nil or "".
func (sc *recordScanner) record(r *store.Record) error {
	r.ID, r.Seq, r.Role, r.Content, r.Reasoning, r.Name = sc.id, sc.seq, sc.role, sc.content, sc.reasoning, sc.name
	r.Model, r.FinishReason = sc.model, sc.finish
	r.RunID, r.ParentID, r.ToolCallID = sc.runID.String, sc.parentID.String, sc.toolCallID.String
	r.SummaryThrough, r.Retracts = sc.through.String, sc.retracts.String
	r.CreatedAt = fromMicros(sc.created)
	if sc.success.Valid {
		r.Success = new(sc.success.Bool)
	}
	if sc.duration.Valid {
		r.DurationMS = new(sc.duration.Int64)
	}
	if sc.payload.Valid {
		r.Payload = json.RawMessage(sc.payload.String)
	}
	if sc.attachments.Valid {
		if err := json.Unmarshal([]byte(sc.attachments.String), &r.Attachments); err != nil {
			return fmt.Errorf("record %s: attachments: %w", r.ID, err)
		}
	}
	if sc.parsed.Valid {
		if err := store.DecodeParsed(r, []byte(sc.parsed.String)); err != nil {
			return fmt.Errorf("record %s: parsed: %w", r.ID, err)
		}
	}
	if sc.replay.Valid {
		r.Replay = new(store.Replay)
		if err := json.Unmarshal([]byte(sc.replay.String), r.Replay); err != nil {
			return fmt.Errorf("record %s: replay: %w", r.ID, err)
		}
	}
	if sc.usage.Valid {
		r.Usage = new(store.Usage)
		if err := store.DecodeUsage(sc.usage.String, r.Usage); err != nil {
			return fmt.Errorf("record %s: usage: %w", r.ID, err)
		}
	}
	return nil
}

// newID is a new record's id: a UUIDv7, ordered by time.
func newID() string { return uuid.Must(uuid.NewV7()).String() }
