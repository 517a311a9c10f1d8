package postgres

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

// recordColumns are the columns every insert of a record fills, $1 … $23 in this order.
const recordColumns = `id, session_id, user_id, seq, run_id, role, content, attachments, reasoning, parent_id,
tool_call_id, name, success, duration_ms, payload, model, finish_reason, usage, created_at, replay,
summary_through, retracts, parsed`

// recordValues are $1 … $23 typed, for an INSERT … SELECT, where PostgreSQL would type a bare parameter
// as text.
const recordValues = `$1::text, $2::text, $3::text, $4::bigint, $5::text, $6::text, $7::text, $8::json,
$9::text, $10::text, $11::text, $12::text, $13::boolean, $14::bigint, $15::json, $16::text, $17::text, $18::json,
$19::timestamptz, $20::json, $21::text, $22::text, $23::json`

const (
	// bumpSeqSQL assigns the next Seq. Updating the session row also checks that the session is the
	// user's, touches its UpdatedAt and takes its lock, in one statement: the statements after it see
	// every record written before.
	bumpSeqSQL = `UPDATE sessions SET last_seq = last_seq + 1, updated_at = $3
WHERE id = $1 AND user_id = $2
RETURNING last_seq`
	// bumpSeqAfterSQL is bumpSeqSQL for a writer that built on the session's records up to Seq $4: it
	// assigns nothing once another record came since.
	bumpSeqAfterSQL = `UPDATE sessions SET last_seq = last_seq + 1, updated_at = $3
WHERE id = $1 AND user_id = $2 AND last_seq = $4
RETURNING last_seq`

	// noOpenCall is the condition every record but a tool record is inserted under.
	noOpenCall = `NOT EXISTS (SELECT 1 FROM tool_calls WHERE session_id = $2 AND answer_id IS NULL)`

	// insertIdleRecordSQL inserts a record that answers no call, unless a call of the session is open.
	insertIdleRecordSQL = `INSERT INTO records (` + recordColumns + `) SELECT ` + recordValues + ` WHERE ` + noOpenCall

	// insertCallsRecordSQL inserts an assistant record and its tool calls ($24 ids, $25 names, $26
	// arguments, in call order), unless a call of the session is open.
	insertCallsRecordSQL = `WITH rec AS (
INSERT INTO records (` + recordColumns + `) SELECT ` + recordValues + ` WHERE ` + noOpenCall + `
RETURNING id)
INSERT INTO tool_calls (record_id, call_id, session_id, run_id, idx, name, arguments)
SELECT rec.id, c.call_id, $2, $5, c.idx - 1, c.name, c.arguments::json
FROM rec, unnest($24::text[], $25::text[], $26::text[]) WITH ORDINALITY AS c (call_id, name, arguments, idx)`

	// insertAnswerSQL marks a call answered and inserts the tool record answering it. It matches only a
	// call that the parent record holds, in this session, and that is still open, so no row means the
	// tool record answers nothing it may answer.
	insertAnswerSQL = `WITH claim AS (
UPDATE tool_calls SET answer_id = $1
WHERE record_id = $10 AND call_id = $11 AND session_id = $2 AND answer_id IS NULL
RETURNING 1)
INSERT INTO records (` + recordColumns + `) SELECT ` + recordValues + ` FROM claim`

	// lastUserRecordSQL finds whether a record is the session's last user record: a marker retracts only
	// the answer to that one (an older one would take the newer messages with it).
	lastUserRecordSQL = `SELECT EXISTS (SELECT 1 FROM records r WHERE r.id = $1 AND r.session_id = $2 AND r.role = 'user'
AND NOT EXISTS (SELECT 1 FROM records n WHERE n.session_id = r.session_id AND n.role = 'user' AND n.seq > r.seq))`

	// sessionSizeSQL reads whether the session is the user's, and how many records it has, to size the
	// slice they are read into.
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
		return fmt.Errorf("postgres: append record: %w", err)
	}
	err = db.write(ctx, "append record", func(tx *sql.Tx) error {
		now := db.clock()
		if err := appendRecord(ctx, tx, user, &rec, now); err != nil {
			return err
		}
		for _, u := range usage {
			if _, err := tx.ExecContext(ctx, insertUsageSQL, usageArgs(user, u, now)...); err != nil {
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

// appendRecord is AppendRecord inside a transaction; CreateRun, StartRun and FinishRun use it too. It
// takes the session's lock first (bumpSeqSQL), so the pairing checks that follow see every record the
// session has, whoever wrote it.
func appendRecord(ctx context.Context, tx *sql.Tx, user string, rec *store.Record, now time.Time) error {
	return appendRecordAfter(ctx, tx, user, rec, now, nil)
}

// appendRecordAfter is appendRecord for a writer that built on the session's records up to Seq *after
// (nil: whatever they are): store.ErrStale once another record came since.
func appendRecordAfter(ctx context.Context, tx *sql.Tx, user string, rec *store.Record, now time.Time, after *int64) error {
	seq, err := nextSeq(ctx, tx, user, rec.SessionID, now, after)
	if err != nil {
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
	return insertRecord(ctx, tx, user, rec)
}

// nextSeq takes the session's next Seq, when its last is still *after (nil: any).
func nextSeq(ctx context.Context, tx *sql.Tx, user, sessionID string, now time.Time, after *int64) (int64, error) {
	var row *sql.Row
	if after == nil {
		row = tx.QueryRowContext(ctx, bumpSeqSQL, sessionID, user, now)
	} else {
		row = tx.QueryRowContext(ctx, bumpSeqAfterSQL, sessionID, user, now, *after)
	}
	var seq int64
	err := row.Scan(&seq)
	switch {
	case errors.Is(err, sql.ErrNoRows) && after != nil:
		// The only caller, CreateRun, locked the session and inserted its run in it first: the session
		// is there, and its last Seq is another.
		return 0, fmt.Errorf("%w: session %q has records after %d", store.ErrStale, sessionID, *after)
	case errors.Is(err, sql.ErrNoRows):
		return 0, notFound("session", sessionID)
	}
	return seq, err
}

// insertRecord inserts a record, with its tool calls, under the pairing invariant: a tool record answers
// an open call of its parent; any other record waits until no call of the session is open.
func insertRecord(ctx context.Context, tx *sql.Tx, user string, rec *store.Record) error {
	args, err := recordArgs(user, rec)
	if err != nil {
		return err
	}
	query := insertIdleRecordSQL
	switch {
	case rec.Role == store.RoleTool:
		query = insertAnswerSQL
	case len(rec.ToolCalls) > 0:
		query = insertCallsRecordSQL
		ids := make([]string, len(rec.ToolCalls))
		names := make([]string, len(rec.ToolCalls))
		arguments := make([]string, len(rec.ToolCalls))
		for i, c := range rec.ToolCalls {
			ids[i], names[i], arguments[i] = c.ID, c.Name, string(c.Arguments)
		}
		args = append(args, ids, names, arguments)
	}
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n > 0 {
		return nil
	}
	if rec.Role == store.RoleTool {
		return conflict("record %q of session %q holds no open tool call %q", rec.ParentID, rec.SessionID, rec.ToolCallID)
	}
	return conflict("session %q has tool calls without a tool record; a %s record must wait for them",
		rec.SessionID, rec.Role)
}

// recordArgs are the arguments $1 … $23 of an insert of rec.
func recordArgs(user string, rec *store.Record) ([]any, error) {
	var attachments, payload, usage, replay, parsed any // NULL when absent
	if b, err := store.EncodeParsed(rec); err != nil {
		return nil, err
	} else if b != nil {
		parsed = string(b)
	}
	if rec.Replay != nil {
		b, err := json.Marshal(rec.Replay)
		if err != nil {
			return nil, err
		}
		replay = string(b)
	}
	if rec.Attachments != nil {
		b, err := json.Marshal(rec.Attachments)
		if err != nil {
			return nil, err
		}
		attachments = string(b)
	}
	if rec.Payload != nil {
		payload = string(rec.Payload)
	}
	if rec.Usage != nil {
		b, err := json.Marshal(rec.Usage)
		if err != nil {
			return nil, err
		}
		usage = string(b)
	}
	args := make([]any, 23, 26)
	copy(args, []any{rec.ID, rec.SessionID, user, rec.Seq, nullable(rec.RunID),
		rec.Role, rec.Content, attachments, rec.Reasoning, nullable(rec.ParentID), nullable(rec.ToolCallID),
		rec.Name, rec.Success, rec.DurationMS, payload, rec.Model, rec.FinishReason, usage,
		rec.CreatedAt, replay, nullable(rec.SummaryThrough), nullable(rec.Retracts), parsed})
	return args, nil
}

// Attachment returns attachment n of one record, reading that record's attachments only.
func (db *DB) Attachment(ctx context.Context, user, sessionID, recordID string, n int) (*store.Attachment, error) {
	var raw []byte
	err := db.pool.QueryRowContext(ctx, selectAttachmentsSQL, recordID, sessionID, user).Scan(&raw)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("record", recordID)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: attachment: %w", err)
	}
	var all []store.Attachment
	if raw != nil {
		if err := json.Unmarshal(raw, &all); err != nil {
			return nil, fmt.Errorf("postgres: attachments of record %s: %w", recordID, err)
		}
	}
	if n < 0 || n >= len(all) {
		return nil, notFound("attachment", strconv.Itoa(n))
	}
	return &all[n], nil
}

// Transcript reads the session, its records and its running run in one snapshot.
func (db *DB) Transcript(ctx context.Context, user, sessionID string) (*store.Transcript, error) {
	var t store.Transcript
	err := db.read(ctx, "transcript", func(tx *sql.Tx) error {
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
	err := db.read(ctx, "records", func(tx *sql.Tx) error {
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

// loadRecords reads the session's records, oldest first, with their tool calls: two queries, whatever
// the number of records. size, when known, is how many there are.
func loadRecords(ctx context.Context, tx *sql.Tx, user, sessionID string, after, size int64) ([]store.Record, error) {
	recs, err := selectRecords(ctx, tx, user, sessionID, after, size)
	if err != nil {
		return nil, err
	}
	return recs, addToolCalls(ctx, tx, user, sessionID, after, recs)
}

func selectRecords(ctx context.Context, tx *sql.Tx, user, sessionID string, after, size int64) ([]store.Record, error) {
	rows, err := tx.QueryContext(ctx, selectRecordsSQL, sessionID, user, after)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	recs := make([]store.Record, 0, min(size, 100_000))
	var sc recordScanner // one set of scan destinations for every row
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
func addToolCalls(ctx context.Context, tx *sql.Tx, user, sessionID string, after int64, recs []store.Record) error {
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
		var recordID string
		var c store.ToolCall
		if err := rows.Scan(&recordID, &c.ID, &c.Name, (*[]byte)(&c.Arguments)); err != nil {
			return err
		}
		if i, ok := byID[recordID]; ok {
			recs[i].ToolCalls = append(recs[i].ToolCalls, c)
		}
	}
	return rows.Err()
}

// recordScanner holds the columns of one row of selectRecordsSQL, so that one set of scan
// destinations serves every row of a query.
type recordScanner struct {
	id, role, content, reasoning, name, model, finish string
	seq                                               int64
	created                                           time.Time
	runID, parentID, toolCallID, through, retracts    sql.NullString
	usage                                             sql.NullString
	attachments, payload, replay, parsed              []byte
	success                                           sql.NullBool
	duration                                          sql.NullInt64
}

// dest is what rows.Scan reads a row of selectRecordsSQL into. database/sql gives each []byte
// column a copy of its own, so a record may keep it.
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
	r.CreatedAt = sc.created.UTC()
	if sc.success.Valid {
		r.Success = new(sc.success.Bool)
	}
	if sc.duration.Valid {
		r.DurationMS = new(sc.duration.Int64)
	}
	if sc.payload != nil {
		r.Payload = json.RawMessage(sc.payload)
	}
	if sc.attachments != nil {
		if err := json.Unmarshal(sc.attachments, &r.Attachments); err != nil {
			return fmt.Errorf("record %s: attachments: %w", r.ID, err)
		}
	}
	if err := store.DecodeParsed(r, sc.parsed); err != nil {
		return fmt.Errorf("record %s: parsed: %w", r.ID, err)
	}
	if sc.replay != nil {
		r.Replay = new(store.Replay)
		if err := json.Unmarshal(sc.replay, r.Replay); err != nil {
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
