package store

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The checks both stores make of what they are given, before they store it: one set, so that the two
// stores refuse the same records and sessions with the same errors.

// conflict reports a record or session that breaks a rule of their shape.
func conflict(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrConflict, fmt.Sprintf(format, args...))
}

// NewRecord checks r and returns the copy to store: ID assigned (by newID, when r has none), empty
// optional fields nil (as they read back), tool call arguments {} when absent. It never changes r or
// the slices r shares with the caller.
func NewRecord(r *Record, newID func() string) (Record, error) {
	rec := *r
	if err := checkRole(&rec); err != nil {
		return rec, err
	}
	calls, err := toolCalls(rec.ToolCalls)
	if err != nil {
		return rec, err
	}
	rec.ToolCalls = calls
	if len(rec.Payload) == 0 {
		rec.Payload = nil
	} else if !json.Valid(rec.Payload) {
		return rec, conflict("payload is not valid JSON")
	}
	if len(rec.Attachments) == 0 {
		rec.Attachments = nil
	}
	if rec.Replay != nil && rec.Role != RoleAssistant {
		return rec, conflict("only an assistant record holds a replay")
	}
	if rec.SummaryThrough != "" && rec.Role != RoleSystem {
		return rec, conflict("only a system record summarizes records")
	}
	if rec.Retracts != "" && (rec.Role != RoleSystem || rec.SummaryThrough != "") {
		return rec, conflict("only a system record that summarizes nothing retracts an answer")
	}
	if rec.ID == "" {
		rec.ID = newID()
	}
	return rec, nil
}

// checkRole checks the fields that depend on the record's role.
func checkRole(r *Record) error {
	switch r.Role {
	case RoleTool:
		if r.ParentID == "" || r.ToolCallID == "" {
			return conflict("a tool record needs ParentID and ToolCallID")
		}
		if len(r.ToolCalls) > 0 {
			return conflict("a tool record cannot hold tool calls")
		}
	case RoleUser, RoleAssistant, RoleSystem:
		if r.ParentID != "" || r.ToolCallID != "" {
			return conflict("a %s record answers no tool call", r.Role)
		}
		if r.Role != RoleAssistant && len(r.ToolCalls) > 0 {
			return conflict("only an assistant record holds tool calls")
		}
	default:
		return conflict("unknown role %q", r.Role)
	}
	return nil
}

// toolCalls checks an assistant record's calls and returns a copy with absent arguments as {}.
func toolCalls(calls []ToolCall) ([]ToolCall, error) {
	if len(calls) == 0 {
		return nil, nil
	}
	out := make([]ToolCall, len(calls))
	seen := make(map[string]bool, len(calls))
	for i, c := range calls {
		switch {
		case c.ID == "":
			return nil, conflict("tool call %d has no id", i)
		case seen[c.ID]:
			return nil, conflict("tool call id %q appears twice in one record", c.ID)
		case len(c.Arguments) == 0:
			c.Arguments = json.RawMessage("{}")
		case !isObject(c.Arguments):
			return nil, conflict("arguments of tool call %q are not a JSON object", c.ID)
		}
		seen[c.ID] = true
		out[i] = c
	}
	return out, nil
}

// SessionMetadata checks a session's metadata: nil when absent (or JSON null), else a JSON object.
func SessionMetadata(m json.RawMessage) (json.RawMessage, error) {
	t := bytes.TrimSpace(m)
	if len(t) == 0 || string(t) == "null" {
		return nil, nil
	}
	if !isObject(t) {
		return nil, conflict("session metadata must be a JSON object")
	}
	return m, nil
}

// isObject reports whether b is one valid JSON object.
func isObject(b []byte) bool {
	t := bytes.TrimSpace(b)
	return len(t) > 0 && t[0] == '{' && json.Valid(t)
}

// A cursor is the sort key of the last session of a page: "updated_at:id", base64url so clients treat
// it as opaque.
func EncodeCursor(updatedAt int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(updatedAt, 10) + ":" + id))
}

// DecodeCursor reports a cursor this store did not make as ErrNotFound: it names no page.
func DecodeCursor(c string) (int64, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		at, id, ok := strings.Cut(string(b), ":")
		if n, perr := strconv.ParseInt(at, 10, 64); ok && perr == nil {
			return n, id, nil
		}
	}
	return 0, "", fmt.Errorf("%w: page cursor %q", ErrNotFound, c)
}

// NewSession checks s and returns the copy to store: metadata {} when absent, ID assigned (by newID,
// when s has none), created and updated at now.
func NewSession(s *Session, now time.Time, newID func() string) (Session, error) {
	meta, err := SessionMetadata(s.Metadata)
	if err != nil {
		return Session{}, err
	}
	if meta == nil {
		meta = json.RawMessage("{}")
	}
	created := *s
	created.Metadata = meta
	if created.ID == "" {
		created.ID = newID()
	}
	created.CreatedAt, created.UpdatedAt = now, now
	return created, nil
}

// NewRun checks what CreateRun is given and returns the copies to store, all made at now: the run (ID
// assigned by newID when empty, status running when empty, its end cleared), its new session when
// r.NewSession is set (r.SessionID names it), and its first record when first is not nil (in the run's
// session, RunID set). As CreateRun has always done, an r.NewSession without an id takes r.SessionID,
// and a first record without a session takes the new session's.
func NewRun(r *Run, first *Record, now time.Time, newID func() string) (Run, Session, Record, error) {
	run := *r
	if run.ID == "" {
		run.ID = newID()
	}
	switch run.Status {
	case "":
		run.Status = RunRunning
	case RunRunning, RunQueued:
	default:
		return run, Session{}, Record{}, conflict("a run cannot be created %s", run.Status)
	}
	if first != nil && run.Status == RunQueued {
		return run, Session{}, Record{}, conflict("a queued run stores its first record when it starts")
	}
	var sess Session
	if run.NewSession != nil {
		if run.NewSession.ID == "" {
			run.NewSession.ID = run.SessionID
		}
		var err error
		if sess, err = NewSession(run.NewSession, now, newID); err != nil {
			return run, Session{}, Record{}, err
		}
		run.SessionID = sess.ID
	}
	var rec Record
	if first != nil {
		if first.SessionID == "" && run.NewSession != nil {
			first.SessionID = run.SessionID
		}
		var err error
		if rec, err = NewRecord(first, newID); err != nil {
			return run, Session{}, Record{}, err
		}
		if rec.SessionID != run.SessionID {
			return run, Session{}, Record{}, conflict("the first record belongs to another session")
		}
		rec.RunID = run.ID
	}
	run.FinishReason, run.Error, run.Usage, run.EndedAt, run.LastEventSeq = "", "", Usage{}, nil, 0
	run.CreatedAt, run.StartedAt = now, nil
	if run.Status == RunRunning {
		run.StartedAt = &run.CreatedAt
	}
	return run, sess, rec, nil
}

// StoredCall completes c from the columns both stores keep a model call's text in: system NULL (valid
// false) when it is the run's previous call's, tools a JSON array, output NULL when there is none.
func StoredCall(c *ModelCall, system string, systemSet bool, tools, settings string, output string, outputSet bool) error {
	c.System, c.SameSystem = system, !systemSet
	if err := json.Unmarshal([]byte(tools), &c.Tools); err != nil {
		return fmt.Errorf("tools: %w", err)
	}
	c.Settings = json.RawMessage(settings)
	if outputSet {
		c.Output = json.RawMessage(output)
	}
	return nil
}
