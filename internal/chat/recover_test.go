package chat_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/chat"
	"chatd/internal/llm/llmtest"
	"chatd/internal/runevent"
	"chatd/internal/store"
	"chatd/internal/store/sqlite"
)

// deadProcess writes, through the store, what a chatd process killed mid-run leaves in its database:
// runs it had stored, the records of their turns, and the part of their event logs it had flushed.
type deadProcess struct {
	t  *testing.T
	db *sqlite.DB
}

func newDeadProcess(t *testing.T, path string) *deadProcess {
	db, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &deadProcess{t: t, db: db}
}

// die closes the database, as the kill did.
func (p *deadProcess) die() {
	if err := p.db.Close(); err != nil {
		p.t.Fatal(err)
	}
}

func (p *deadProcess) session() string {
	s := &store.Session{Agent: "default", Title: "before the crash"}
	if err := p.db.CreateSession(p.t.Context(), user, s); err != nil {
		p.t.Fatal(err)
	}
	return s.ID
}

// deadRun is a run of the dead process and its log as far as it was flushed.
type deadRun struct {
	p   *deadProcess
	run *store.Run
	seq int64
}

// running stores a running run with its user message, and logs its first events as the run did. The
// run has no reservation, as a run stored before reservations were kept.
func (p *deadProcess) running(sessionID, message string) *deadRun {
	return p.runningReserved(sessionID, message, 0)
}

// runningReserved is running with a reservation: the Seqs a client may have been sent.
func (p *deadProcess) runningReserved(sessionID, message string, reserved int64) *deadRun {
	r := &deadRun{p: p, run: &store.Run{SessionID: sessionID, Agent: "default", Model: "x/m", ReservedSeq: reserved}}
	first := &store.Record{SessionID: sessionID, Role: store.RoleUser, Content: message}
	if err := p.db.CreateRun(p.t.Context(), user, r.run, first); err != nil {
		p.t.Fatal(err)
	}
	r.log(runevent.TypeRunStart, map[string]string{"run_id": r.run.ID, "session_id": sessionID, "model": "x/m", "agent": "default"})
	r.log(runevent.TypeRecord, map[string]any{"message": first})
	r.log(runevent.TypeStatus, map[string]string{"message": "Thinking…"})
	return r
}

// queued stores a run queued behind the session's running one, with its first events.
func (p *deadProcess) queued(sessionID, message string) *deadRun {
	req, err := json.Marshal(chat.Request{SessionID: sessionID, Message: message})
	if err != nil {
		p.t.Fatal(err)
	}
	r := &deadRun{p: p, run: &store.Run{SessionID: sessionID, Agent: "default", Model: "x/m", Status: store.RunQueued, Request: req}}
	if err := p.db.CreateRun(p.t.Context(), user, r.run, nil); err != nil {
		p.t.Fatal(err)
	}
	r.log(runevent.TypeRunStart, map[string]string{"run_id": r.run.ID, "session_id": sessionID, "model": "x/m", "agent": "default"})
	r.log(runevent.TypeStatus, map[string]string{"message": "Waiting for the active run to end…"})
	return r
}

// log appends one event that was flushed before the process died.
func (r *deadRun) log(typ string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		r.p.t.Fatal(err)
	}
	r.seq++
	if err := r.p.db.AppendEvents(r.p.t.Context(), []store.Event{{RunID: r.run.ID, Seq: r.seq, Type: typ, Data: b}}, nil); err != nil {
		r.p.t.Fatal(err)
	}
}

// text logs streamed text.
func (r *deadRun) text(s string) { r.log(runevent.TypeTextDelta, map[string]string{"text": s}) }

// record stores a record of the run; logged tells whether its record event was flushed before the
// process died.
func (r *deadRun) record(rec *store.Record, logged bool) *store.Record {
	rec.SessionID, rec.RunID = r.run.SessionID, r.run.ID
	if err := r.p.db.AppendRecord(r.p.t.Context(), user, rec); err != nil {
		r.p.t.Fatal(err)
	}
	if logged {
		r.log(runevent.TypeRecord, map[string]any{"message": rec})
	}
	return rec
}

var ok, failed = true, false

// TestRecoverInterruptedRun: at start-up, a run left running by a killed process ends as interrupted: the
// text it had streamed becomes an assistant record (unless a stored turn already holds it), its open calls
// are closed, and its log continues without a gap with the records, then error and done interrupted — so
// that the log names every record of the run. Recovering again changes nothing, and the session's next
// message gets a history the model accepts.
func TestRecoverInterruptedRun(t *testing.T) {
	for _, tc := range []struct {
		name    string
		crash   func(r *deadRun)
		want    []string // the session's records after recovery
		partial []string // content|reasoning of the records with finish reason interrupted
		added   []string // the events recovery appends
	}{{
		name: "mid-answer",
		crash: func(r *deadRun) {
			r.log(runevent.TypeReasoningDelta, map[string]string{"text": "A story…"})
			r.text("Once upon")
			r.text(" a time")
		},
		want:    []string{"user:tell me", "assistant:Once upon a time"},
		partial: []string{"Once upon a time|A story…"},
		added:   []string{runevent.TypeRecord, runevent.TypeError, runevent.TypeDone},
	}, {
		name:  "before any output",
		crash: func(r *deadRun) {},
		want:  []string{"user:tell me"},
		added: []string{runevent.TypeError, runevent.TypeDone},
	}, {
		name: "tool call open",
		crash: func(r *deadRun) {
			r.text("Let me check.")
			r.record(&store.Record{Role: store.RoleAssistant, Content: "Let me check.", FinishReason: "tool_calls",
				ToolCalls: []store.ToolCall{{ID: "call_1", Name: "wait_for_it", Arguments: json.RawMessage(`{}`)}}}, true)
			r.log(runevent.TypeToolStart, map[string]any{"tool_call_id": "call_1", "name": "wait_for_it", "arguments": map[string]any{}})
		},
		want:  []string{"user:tell me", "assistant:Let me check.→call_1", "tool:call_1:failed"},
		added: []string{runevent.TypeRecord, runevent.TypeError, runevent.TypeDone},
	}, {
		name: "mid-answer after a tool result",
		crash: func(r *deadRun) {
			call := r.record(&store.Record{Role: store.RoleAssistant, FinishReason: "tool_calls",
				ToolCalls: []store.ToolCall{{ID: "call_1", Name: "wait_for_it", Arguments: json.RawMessage(`{}`)}}}, true)
			r.record(&store.Record{Role: store.RoleTool, ParentID: call.ID, ToolCallID: "call_1", Name: "wait_for_it",
				Content: "done", Success: &ok}, true)
			r.text("It is")
		},
		want:    []string{"user:tell me", "assistant:→call_1", "tool:call_1:ok", "assistant:It is"},
		partial: []string{"It is|"},
		added:   []string{runevent.TypeRecord, runevent.TypeError, runevent.TypeDone},
	}, {
		// The turn was stored, but the process died before the event log wrote its record event: the
		// streamed text is that turn's, not a partial answer to store again.
		name: "answer stored, its event not written",
		crash: func(r *deadRun) {
			r.text("Hello, ")
			r.text("wor")
			r.record(&store.Record{Role: store.RoleAssistant, Content: "Hello, world", FinishReason: "stop"}, false)
		},
		want:  []string{"user:tell me", "assistant:Hello, world"},
		added: []string{runevent.TypeRecord, runevent.TypeError, runevent.TypeDone},
	}, {
		name: "tool result stored, no event written",
		crash: func(r *deadRun) {
			r.text("Let me check.")
			call := r.record(&store.Record{Role: store.RoleAssistant, Content: "Let me check.", FinishReason: "tool_calls",
				ToolCalls: []store.ToolCall{{ID: "call_1", Name: "wait_for_it", Arguments: json.RawMessage(`{}`)}}}, false)
			r.record(&store.Record{Role: store.RoleTool, ParentID: call.ID, ToolCallID: "call_1", Name: "wait_for_it",
				Content: "done", Success: &ok}, false)
		},
		want:  []string{"user:tell me", "assistant:Let me check.→call_1", "tool:call_1:ok"},
		added: []string{runevent.TypeRecord, runevent.TypeRecord, runevent.TypeError, runevent.TypeDone},
	}, {
		// An earlier recovery stored the partial answer, then the process died again before it ended the
		// run.
		name: "recovery stopped half-way",
		crash: func(r *deadRun) {
			r.text("Once upon")
			r.record(&store.Record{Role: store.RoleAssistant, Content: "Once upon", FinishReason: chat.FinishInterrupted}, false)
		},
		want:    []string{"user:tell me", "assistant:Once upon"},
		partial: []string{"Once upon|"},
		added:   []string{runevent.TypeRecord, runevent.TypeError, runevent.TypeDone},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			path := dbPath(t)
			dead := newDeadProcess(t, path)
			r := dead.running(dead.session(), "tell me")
			tc.crash(r)
			usage := store.UsageEntry{RunID: r.run.ID, SessionID: r.run.SessionID, Agent: "default", Model: "x/m",
				Usage: store.Usage{InputTokens: 42, OutputTokens: 7}}
			if err := dead.db.AddUsage(t.Context(), user, usage); err != nil {
				t.Fatal(err)
			}
			before := stored(t, dead.db, r.run.ID)
			dead.die()

			f := newFixture(t, setup{Path: path, Respond: echo})
			for range 2 {
				if err := f.svc.Recover(t.Context()); err != nil {
					t.Fatalf("recover: %v", err)
				}
			}
			recs := records(t, f.db, r.run.SessionID)
			if diff := cmp.Diff(tc.want, transcript(recs)); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
			checkPaired(t, recs)
			var partial []string
			for _, rec := range recs {
				if rec.FinishReason == chat.FinishInterrupted {
					partial = append(partial, rec.Content+"|"+rec.Reasoning)
				}
			}
			if diff := cmp.Diff(tc.partial, partial); diff != "" {
				t.Errorf("partial answers, content|reasoning (-want +got):\n%s", diff)
			}
			run := storedRun(t, f.db, r.run.ID)
			if run.Status != store.RunInterrupted || run.FinishReason != chat.FinishInterrupted || run.EndedAt == nil ||
				run.Usage != usage.Usage {
				t.Errorf("stored run: %+v", run)
			}

			log := stored(t, f.db, r.run.ID)
			checkLog(t, "recovered log", log)
			if diff := cmp.Diff(before, log[:len(before)]); diff != "" {
				t.Errorf("the log before the crash changed (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(tc.added, typeList(log[len(before):])); diff != "" {
				t.Errorf("events added (-want +got):\n%s", diff)
			}
			checkEnds(t, log, runevent.TypeError, "", store.RunInterrupted)
			if info, err := runevent.Decode[runevent.Error](log[len(log)-2].Data); err != nil || info.Code != "interrupted" || !info.Retryable {
				t.Errorf("error event: %s", log[len(log)-2].Data)
			}
			if diff := cmp.Diff(runRecordIDs(recs, r.run.ID), loggedRecordIDs(t, log)); diff != "" {
				t.Errorf("records named by the log (-stored +logged):\n%s", diff)
			}

			// The next message: the strict model refuses a history with an unanswered call.
			next := f.send(t, chat.Request{SessionID: r.run.SessionID, Message: "go on"}, chat.StartOptions{})
			if o := f.wait(t, next.RunID); o.Status != store.RunCompleted || o.Message.Content != "re: go on" {
				t.Errorf("the next message: %+v", o)
			}
		})
	}
}

func typeList(events []chat.Event) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.Type)
	}
	return out
}

// runRecordIDs are the ids of the run's records, in order.
func runRecordIDs(recs []store.Record, runID string) []string {
	var ids []string
	for _, r := range recs {
		if r.RunID == runID {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// loggedRecordIDs are the ids of the records the log's record events carry, in order.
func loggedRecordIDs(t *testing.T, log []chat.Event) []string {
	t.Helper()
	var ids []string
	for _, e := range log {
		if e.Type != runevent.TypeRecord {
			continue
		}
		d, err := runevent.Decode[runevent.RecordEvent](e.Data)
		if err != nil {
			t.Fatalf("record event %d: %v", e.Seq, err)
		}
		ids = append(ids, d.Message.ID)
	}
	return ids
}

// TestRecoverQueuedRuns: runs a killed process left queued start at start-up — behind the interrupted run
// of their session, or at once in an idle session — and complete; each log goes on from what was stored.
func TestRecoverQueuedRuns(t *testing.T) {
	path := dbPath(t)
	dead := newDeadProcess(t, path)
	busy := dead.session()
	interrupted := dead.running(busy, "first")
	interrupted.text("half an ans")
	behind := dead.queued(busy, "second")
	alone := dead.queued(dead.session(), "alone")
	before := map[string][]chat.Event{}
	for _, r := range []*deadRun{behind, alone} {
		before[r.run.ID] = stored(t, dead.db, r.run.ID)
	}
	dead.die()

	f := newFixture(t, setup{Path: path, Respond: echo})
	if err := f.svc.Recover(t.Context()); err != nil {
		t.Fatalf("recover: %v", err)
	}
	for _, r := range []*deadRun{behind, alone} {
		o := f.wait(t, r.run.ID)
		var req chat.Request
		json.Unmarshal(r.run.Request, &req)
		if o.Status != store.RunCompleted || o.Message == nil || o.Message.Content != "re: "+req.Message {
			t.Errorf("recovered queued run %q: %+v", req.Message, o)
		}
		log := stored(t, f.db, r.run.ID)
		checkLog(t, "recovered queued run", log)
		checkEnds(t, log, runevent.TypeComplete, "", store.RunCompleted)
		if diff := cmp.Diff(before[r.run.ID], log[:len(before[r.run.ID])]); diff != "" {
			t.Errorf("the log before the crash changed (-before +after):\n%s", diff)
		}
		if diff := cmp.Diff(log, f.follow(t, r.run.ID, 0).all()); diff != "" {
			t.Errorf("followed log (-stored +followed):\n%s", diff)
		}
	}
	if r := storedRun(t, f.db, interrupted.run.ID); r.Status != store.RunInterrupted {
		t.Errorf("the running run: %+v", r)
	}
	want := []string{"user:first", "assistant:half an ans", "user:second", "assistant:re: second"}
	if diff := cmp.Diff(want, transcript(records(t, f.db, busy))); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if unfinished, err := f.db.UnfinishedRuns(t.Context()); err != nil || len(unfinished) != 0 {
		t.Errorf("unfinished runs: %+v %v", unfinished, err)
	}
}

// TestRecoverThenFollow: a reader that saw part of an interrupted run before the crash comes back after
// the restart with its last event id and gets the rest of the log, ending with done interrupted. A reader
// whose id lies in what recovery wrote — ids the dead process may have used for events it never stored —
// gets recovery's events in full, and so learns how the run ended.
func TestRecoverThenFollow(t *testing.T) {
	path := dbPath(t)
	dead := newDeadProcess(t, path)
	r := dead.running(dead.session(), "tell me")
	r.text("Once upon")
	r.text(" a time")
	written := r.seq
	dead.die()

	f := newFixture(t, setup{Path: path, Turns: []llmtest.Turn{}})
	if err := f.svc.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	log := stored(t, f.db, r.run.ID)
	recovery := log[written:]
	if diff := cmp.Diff([]string{runevent.TypeRecord, runevent.TypeError, runevent.TypeDone}, typeList(recovery)); diff != "" {
		t.Fatalf("recovery's events (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		after int64
		want  []chat.Event
	}{
		{0, log},
		{written - 1, log[written-1:]},
		{written, recovery},
		{written + 1, recovery},
		{int64(len(log)), recovery},
		{int64(len(log)) + 3, recovery},
	} {
		if diff := cmp.Diff(tc.want, f.follow(t, r.run.ID, tc.after).all()); diff != "" {
			t.Errorf("resumed after %d (-want +got):\n%s", tc.after, diff)
		}
	}
	if o := f.wait(t, r.run.ID); o.Status != store.RunInterrupted || o.Message == nil || o.Message.Content != "Once upon a time" ||
		o.Error == nil || o.Error.Code != "interrupted" {
		t.Errorf("outcome: %+v", o)
	}
}

// TestRecoveryNeverRewindsResumedStreams: a client of a killed process may have been sent events the
// process never stored, under any id up to the run's reservation. Recovery numbers its events after the
// reservation — an id a client saw never names another event — and its first event says that events
// were lost. A client resuming from the last id it saw, in the stored log or past it, gets what the log
// has from there on: the notice, the partial answer and done interrupted.
func TestRecoveryNeverRewindsResumedStreams(t *testing.T) {
	const reserved = 256
	path := dbPath(t)
	dead := newDeadProcess(t, path)
	r := dead.runningReserved(dead.session(), "tell me", reserved)
	r.text("Once upon")
	r.text(" a time")
	written := r.seq // the client saw up to, say, 44: the events after written died with the process
	dead.die()

	f := newFixture(t, setup{Path: path, Turns: []llmtest.Turn{}})
	if err := f.svc.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	log := stored(t, f.db, r.run.ID)
	recovery := log[written:]
	if diff := cmp.Diff([]string{runevent.TypeError, runevent.TypeRecord, runevent.TypeError, runevent.TypeDone}, typeList(recovery)); diff != "" {
		t.Fatalf("recovery's events (-want +got):\n%s", diff)
	}
	for i, e := range recovery {
		if e.Seq != reserved+1+int64(i) {
			t.Errorf("recovery's event %d has Seq %d, want %d: past every id the dead process may have sent", i, e.Seq, reserved+1+int64(i))
		}
	}
	if lost, err := runevent.Decode[runevent.Error](recovery[0].Data); err != nil || lost.Code != chat.EventsLost {
		t.Errorf("the first event after the gap: %s %s; want an error with code %s", recovery[0].Type, recovery[0].Data, chat.EventsLost)
	}
	if run := storedRun(t, f.db, r.run.ID); run.LastEventSeq != reserved+4 || run.RecoveredFrom != reserved+1 {
		t.Errorf("the recovered run: last event %d, recovered from %d; want %d and %d", run.LastEventSeq, run.RecoveredFrom, reserved+4, reserved+1)
	}
	for _, tc := range []struct {
		after int64
		want  []chat.Event
	}{
		{0, log},
		{written - 1, log[written-1:]},
		{written, recovery},
		{44, recovery},
		{reserved, recovery},
		{reserved + 1, recovery[1:]},
		{reserved + 3, recovery[3:]},
		{reserved + 4, nil},
		{reserved + 99, recovery[3:]}, // past the end: done, which says how the run ended
	} {
		if diff := cmp.Diff(tc.want, f.follow(t, r.run.ID, tc.after).all()); diff != "" {
			t.Errorf("resumed after %d (-want +got):\n%s", tc.after, diff)
		}
	}
	if o := f.wait(t, r.run.ID); o.Status != store.RunInterrupted || o.Message == nil || o.Message.Content != "Once upon a time" ||
		o.Error == nil || o.Error.Code != "interrupted" {
		t.Errorf("outcome: %+v", o)
	}
}

// TestRecoveredQueuedRunNumbersPastItsReservation: a queued run a killed process left, whose log the
// process had reserved further than it stored, goes on after the reservation.
func TestRecoveredQueuedRunNumbersPastItsReservation(t *testing.T) {
	path := dbPath(t)
	dead := newDeadProcess(t, path)
	q := dead.queued(dead.session(), "alone")
	if err := dead.db.AppendEvents(t.Context(), nil, []store.Reservation{{RunID: q.run.ID, Seq: 40}}); err != nil {
		t.Fatal(err)
	}
	dead.die()

	f := newFixture(t, setup{Path: path, Respond: echo})
	if err := f.svc.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	if o := f.wait(t, q.run.ID); o.Status != store.RunCompleted {
		t.Fatalf("the recovered queued run: %+v", o)
	}
	log := stored(t, f.db, q.run.ID)
	if len(log) < 4 || log[0].Seq != 1 || log[1].Seq != 2 || log[2].Seq != 41 {
		t.Fatalf("the log's Seqs: %v; want 1, 2, then 41 on", seqs(log))
	}
	for i := 3; i < len(log); i++ {
		if log[i].Seq != log[i-1].Seq+1 {
			t.Fatalf("the log's Seqs: %v; want no gap after 41", seqs(log))
		}
	}
	if diff := cmp.Diff(log, f.follow(t, q.run.ID, 0).all()); diff != "" {
		t.Errorf("followed log (-stored +followed):\n%s", diff)
	}
}

func seqs(events []chat.Event) []int64 {
	var out []int64
	for _, e := range events {
		out = append(out, e.Seq)
	}
	return out
}

// TestRecoverLogsNameTheRun: the lines recovery writes about a run carry its run_id, session_id and
// user, as the run's own lines do, so that a search by any of them finds them.
func TestRecoverLogsNameTheRun(t *testing.T) {
	path := dbPath(t)
	dead := newDeadProcess(t, path)
	r := dead.running(dead.session(), "tell me")
	r.text("Let me check.")
	r.record(&store.Record{Role: store.RoleAssistant, Content: "Let me check.", FinishReason: "tool_calls",
		ToolCalls: []store.ToolCall{{ID: "call_1", Name: "wait_for_it", Arguments: json.RawMessage(`{}`)}}}, true)
	r.text(" More.")
	dead.die()

	var logs bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewJSONHandler(lockedWriter{&logMu, &logs}, nil))
	f := newFixture(t, setup{Path: path, Respond: echo, Logger: log})
	if err := f.svc.Recover(t.Context()); err != nil {
		t.Fatalf("recover: %v", err)
	}
	logMu.Lock()
	out := logs.String()
	logMu.Unlock()
	found := 0
	for line := range strings.Lines(out) {
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if msg, _ := l["msg"].(string); !strings.Contains(msg, "interrupted") {
			continue
		}
		found++
		if l["run_id"] != r.run.ID || l["session_id"] != r.run.SessionID || l["user"] != user {
			t.Errorf("line %s: want run_id %s, session_id %s, user %s", strings.TrimSpace(line), r.run.ID, r.run.SessionID, user)
		}
	}
	if found < 2 {
		t.Errorf("%d lines about the interrupted run, want 2 (its end, its partial answer not stored):\n%s", found, out)
	}
}
