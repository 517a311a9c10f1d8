package chat_test

import (
	"os"
	"runtime"
	"sync/atomic"
	"testing"

	"chatd/internal/chat"
	"chatd/internal/llm/llmtest"
	"chatd/internal/store"
	"chatd/internal/tool"
)

// waitingSetup is a fixture whose model asks, in every run, for one destructive call (which waits).
func waitingSetup() setup {
	var sent atomic.Int32
	return setup{
		FlushInterval: -1, // no event log flusher: what is measured is what a waiting run keeps
		Tools:         []tool.Tool{policyTool{info: tool.Info{Name: "mail__send", Description: "Sends mail.", Destructive: true}, calls: &sent}},
		Respond: func(int, llmtest.Request) llmtest.Turn {
			return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "mail__send", Arguments: `{}`}}}
		},
	}
}

// pauseMany starts n runs, each in its own session, and waits until every one awaits approval.
func pauseMany(tb testing.TB, f *fixture, n int) {
	tb.Helper()
	for range n {
		st, err := f.svc.Start(tb.Context(), user, chat.Request{Message: "mail bob"}, chat.StartOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		o, err := f.svc.Wait(tb.Context(), user, st.RunID)
		if err != nil || o.Status != store.RunAwaiting {
			tb.Fatalf("run %s: %+v, %v", st.RunID, o, err)
		}
	}
}

// TestWaitingRunsHoldNoGoroutine: 200 runs awaiting approval hold no goroutine between them (only a
// timer each): the count of goroutines after they paused is what it was before, give or take the
// HTTP client's connections to the model.
func TestWaitingRunsHoldNoGoroutine(t *testing.T) {
	f := newFixture(t, waitingSetup())
	pauseMany(t, f, 5) // the HTTP connections to the model are open from here on
	before := runtime.NumGoroutine()
	pauseMany(t, f, 200)
	if after := runtime.NumGoroutine(); after > before+8 {
		t.Errorf("%d goroutines with 205 runs waiting, %d with 5: a waiting run holds a goroutine", after, before)
	}
}

// TestWaitingRunMemory logs the Go heap a run awaiting approval keeps in chatd's process, with 1,000
// waiting: the heap after they paused, less the heap before, over 1,000 (SQLite's page cache, which is
// bounded, is in it too). A figure for the README, not a pass/fail test: set CHATD_MEMORY_FIGURE=1.
func TestWaitingRunMemory(t *testing.T) {
	if os.Getenv("CHATD_MEMORY_FIGURE") == "" {
		t.Skip("set CHATD_MEMORY_FIGURE=1 to measure")
	}
	const n = 1000
	s := waitingSetup()
	s.Path = dbPath(t) // in memory, the database itself would be on the heap
	f := newFixture(t, s)
	pauseMany(t, f, 5)
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	pauseMany(t, f, n)
	runtime.GC()
	runtime.ReadMemStats(&m1)
	t.Logf("%d runs waiting: heap %+d bytes (%d per run), goroutines %+d", n, int64(m1.HeapAlloc)-int64(m0.HeapAlloc),
		(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/n, runtime.NumGoroutine()-g0)
}
