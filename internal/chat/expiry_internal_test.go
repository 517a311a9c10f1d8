package chat

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
)

// TestExpiryMemory logs what this process keeps for each of 1,000 runs awaiting approval: its expiry
// timer and its entry in the service's map (the run itself is in the store only). A figure for the
// README, not a pass/fail test: set CHATD_MEMORY_FIGURE=1.
func TestExpiryMemory(t *testing.T) {
	if os.Getenv("CHATD_MEMORY_FIGURE") == "" {
		t.Skip("set CHATD_MEMORY_FIGURE=1 to measure")
	}
	const n = 1000
	s := New(Options{FlushInterval: -1})
	defer s.Close(context.Background())
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("019ab3c4-5d6e-7f80-9a1b-%012d", i) // as long as a run id
	}
	user := "user-0123456789"
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	for _, id := range ids {
		s.keepExpiry(user, id, time.Now().Add(24*time.Hour))
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	t.Logf("%d runs awaiting approval: %d bytes of heap each (timer and map entry)", n, (int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/n)
}
