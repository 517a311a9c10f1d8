package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	"chatd/internal/store"
	"chatd/internal/store/postgres/pgtest"
)

// BenchmarkAppendRecord measures one tool round as the agent stores it: an assistant record with two
// tool calls, then its two tool records (three write transactions per op), as the SQLite store's
// benchmark of the same name does.
func BenchmarkAppendRecord(b *testing.B) {
	db := openTest(b, pgtest.NewSchema(b))
	ctx := context.Background()
	sess := &store.Session{Title: "bench"}
	if err := db.CreateSession(ctx, "alice", sess); err != nil {
		b.Fatal(err)
	}
	args := json.RawMessage(`{"city":"Paris","units":"metric"}`)
	ok, ms := true, int64(12)
	b.ReportAllocs()
	for b.Loop() {
		asst := store.Record{SessionID: sess.ID, Role: store.RoleAssistant, Content: "checking",
			ToolCalls: []store.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: args},
				{ID: "call_2", Name: "get_weather", Arguments: args}}}
		if err := db.AppendRecord(ctx, "alice", &asst); err != nil {
			b.Fatal(err)
		}
		for _, id := range []string{"call_1", "call_2"} {
			tool := store.Record{SessionID: sess.ID, Role: store.RoleTool, ParentID: asst.ID, ToolCallID: id,
				Name: "get_weather", Content: "21°C, sunny", Success: &ok, DurationMS: &ms}
			if err := db.AppendRecord(ctx, "alice", &tool); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkConcurrentNewChats measures what a send to a new conversation stores — its session, run
// and user message, in one CreateRun — with 50 senders at once.
func BenchmarkConcurrentNewChats(b *testing.B) {
	db := openTest(b, pgtest.NewSchema(b))
	ctx := context.Background()
	b.SetParallelism(max(1, 50/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			run := &store.Run{NewSession: &store.Session{}}
			first := &store.Record{Role: store.RoleUser, Content: "hello"}
			if err := db.CreateRun(ctx, "alice", run, first); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRecords reads a conversation of 10,000 records, a third of them assistant records with a
// tool call each: two queries, whatever the length.
func BenchmarkRecords(b *testing.B) {
	db := openTest(b, pgtest.NewSchema(b))
	ctx := context.Background()
	sess := &store.Session{}
	if err := db.CreateSession(ctx, "alice", sess); err != nil {
		b.Fatal(err)
	}
	// Stored with one statement, as 10,000 appends would take long: the rows AppendRecord would write.
	for _, q := range []string{`
INSERT INTO records (id, session_id, user_id, seq, role, content, created_at)
SELECT 'r' || i, $1, 'alice', i, CASE i % 3 WHEN 1 THEN 'user' WHEN 2 THEN 'assistant' ELSE 'system' END,
	'content of record ' || i, now()
FROM generate_series(1, 10000) i`, `
INSERT INTO tool_calls (record_id, call_id, session_id, idx, name, arguments)
SELECT 'r' || i, 'call_1', $1, 0, 'get_weather', '{"city":"Paris"}'
FROM generate_series(2, 10000, 3) i`, `
UPDATE sessions SET last_seq = 10000 WHERE id = $1`} {
		if _, err := db.pool.ExecContext(ctx, q, sess.ID); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		recs, err := db.Records(ctx, "alice", sess.ID)
		if err != nil || len(recs) != 10000 || len(recs[1].ToolCalls) != 1 {
			b.Fatal(fmt.Sprint(len(recs)), err)
		}
	}
}
