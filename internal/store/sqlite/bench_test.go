package sqlite

import (
	"context"
	"encoding/json"
	"runtime"
	"strconv"
	"strings"
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

// BenchmarkRecords measures reading a session's history, as every run does at its start, for sessions
// of 10, 1,000 and 10,000 records (alternating user and assistant records of about 200 bytes).
func BenchmarkRecords(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			db := openTest(b, tempPath(b), Options{})
			ctx := context.Background()
			sess := &store.Session{Title: "bench"}
			if err := db.CreateSession(ctx, "alice", sess); err != nil {
				b.Fatal(err)
			}
			text := strings.Repeat("lorem ipsum ", 16)
			for i := range n {
				r := store.Record{SessionID: sess.ID, Role: store.RoleUser, Content: text}
				if i%2 == 1 {
					r.Role, r.Model, r.FinishReason = store.RoleAssistant, "m", "stop"
					r.Usage = &store.Usage{InputTokens: 100, OutputTokens: 40}
				}
				if err := db.AppendRecord(ctx, "alice", &r); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				recs, err := db.Records(ctx, "alice", sess.ID)
				if err != nil || len(recs) != n {
					b.Fatal(len(recs), err)
				}
			}
		})
	}
}

// BenchmarkNewChat is BenchmarkConcurrentNewChats with one sender: the latency of one acknowledged
// send to a new conversation, one commit and fsync each.
func BenchmarkNewChat(b *testing.B) {
	db := openTest(b, tempPath(b), Options{})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		run := &store.Run{NewSession: &store.Session{}}
		first := &store.Record{Role: store.RoleUser, Content: "hello"}
		if err := db.CreateRun(ctx, "alice", run, first); err != nil {
			b.Fatal(err)
		}
	}
}
