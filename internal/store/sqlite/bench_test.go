package sqlite

import (
	"context"
	"encoding/json"
	"runtime"
	"testing"

	"chatd/internal/store"
)

// BenchmarkAppendRecord measures one tool round as the agent stores it: an assistant record with two
// tool calls, then its two tool records (three write transactions per op).
func BenchmarkAppendRecord(b *testing.B) {
	for _, bc := range []struct{ name, path string }{{"File", ""}, {"Memory", MemoryPath}} {
		b.Run(bc.name, func(b *testing.B) {
			path := bc.path
			if path == "" {
				path = tempPath(b)
			}
			benchmarkAppend(b, openTest(b, path, Options{}))
		})
	}
}

func benchmarkAppend(b *testing.B, db *DB) {
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
// and user message, in one CreateRun — with 50 senders at once on a file, synchronous=FULL: each op
// is one acknowledged send. Group commit lets the senders share fsyncs.
func BenchmarkConcurrentNewChats(b *testing.B) {
	db := openTest(b, tempPath(b), Options{})
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
