package chat

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"chatd/internal/store"
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

// slowSweepStore is a store shared by instances whose search for expired waits blocks until released,
// and which counts lease renewals. The service calls nothing else of it here.
type slowSweepStore struct {
	store.Store
	searching chan struct{} // closed once the search began
	release   chan struct{}
	once      sync.Once
	renewed   chan struct{} // a send per lease renewal
}

func (f *slowSweepStore) Instance() string        { return "a" }
func (f *slowSweepStore) LeaseTTL() time.Duration { return 30 * time.Second }
func (f *slowSweepStore) RenewLeases(context.Context, []string) ([]store.Leased, error) {
	select {
	case f.renewed <- struct{}{}:
	default: // the test has read what it needs
	}
	return nil, nil
}
func (f *slowSweepStore) ClaimExpired(context.Context) ([]store.Claimed, error) { return nil, nil }
func (f *slowSweepStore) RequestCancel(context.Context, string, string, string) (bool, error) {
	return false, nil
}

func (f *slowSweepStore) ExpiredAwaiting(context.Context, time.Time) ([]store.Run, error) {
	f.once.Do(func() { close(f.searching) })
	<-f.release
	return nil, nil
}

// TestSlowSweepKeepsRenewing: a sweep held up by a slow database (its search for expired waits does not
// return) does not hold back the renewal of this instance's leases, which would let other instances
// take its runs over as if it had died.
func TestSlowSweepKeepsRenewing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &slowSweepStore{searching: make(chan struct{}), release: make(chan struct{}), renewed: make(chan struct{}, 64)}
		s := New(Options{Store: st, FlushInterval: -1, SweepInterval: time.Minute})
		live := &Run{ID: "run-1", user: "alice"} // a lease to renew
		s.mu.Lock()
		s.runs[live.ID] = live
		s.mu.Unlock()
		<-st.searching
		for len(st.renewed) > 0 { // renewals before the sweep began
			<-st.renewed
		}
		// Three renewals are due in a lease's time. Were they held up behind the sweep, every goroutine
		// of the bubble would be blocked and synctest would fail the test as a deadlock.
		start := time.Now()
		for range 3 {
			<-st.renewed
		}
		if took := time.Since(start); took > st.LeaseTTL() {
			t.Errorf("three lease renewals took %s while a sweep was held up, want them within a lease's time (%s)", took, st.LeaseTTL())
		}
		close(st.release)
		s.mu.Lock()
		delete(s.runs, live.ID)
		s.mu.Unlock()
		if err := s.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}
