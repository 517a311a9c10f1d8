package auth

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// allowN asks n times at now and returns how many passed and the wait of the last refusal.
func allowN(l *RateLimiter, user, keyID string, perMinute, n int, now time.Time) (passed int, wait time.Duration) {
	for range n {
		if w := l.Allow(context.Background(), user, keyID, perMinute, now); w == 0 {
			passed++
		} else {
			wait = w
		}
	}
	return passed, wait
}

func TestRateLimiterBurstThenSteady(t *testing.T) {
	t.Parallel()
	l := NewRateLimiter()
	steps := []struct {
		at   time.Duration // after t0
		want time.Duration // 0: passes
	}{
		{0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}, // the minute's 5 at once
		{0, 12 * time.Second},                // then one each 12s
		{0, 12 * time.Second},                // a refusal costs nothing
		{11 * time.Second, time.Second},      // not yet
		{12 * time.Second, 0},                // one more
		{12 * time.Second, 12 * time.Second}, // and only one
		{23*time.Second + 999*time.Millisecond, time.Millisecond},
		{24 * time.Second, 0},
		{2 * time.Minute, 0}, // idle a while: the whole allowance is back
		{2 * time.Minute, 0},
		{2 * time.Minute, 0},
		{2 * time.Minute, 0},
		{2 * time.Minute, 0},
		{2 * time.Minute, 12 * time.Second},
	}
	for i, s := range steps {
		if got := l.Allow(t.Context(), "alice", "", 5, t0.Add(s.at)); got != s.want {
			t.Fatalf("step %d at +%v: Allow = %v, want %v", i, s.at, got, s.want)
		}
	}
}

func TestRateLimiterPerMinute(t *testing.T) {
	t.Parallel()
	tests := []struct {
		perMinute int
		passes    int
		wait      time.Duration
	}{
		{1, 1, time.Minute},
		{2, 2, 30 * time.Second},
		{60, 60, time.Second},
		{600, 600, 100 * time.Millisecond},
		{0, 1000, 0},  // no limit
		{-1, 1000, 0}, // no limit
	}
	for _, tt := range tests {
		l := NewRateLimiter()
		passed, wait := allowN(l, "alice", "", tt.perMinute, 1000, t0)
		if passed != tt.passes || wait != tt.wait {
			t.Errorf("perMinute %d: %d of 1000 passed, then wait %v; want %d, %v", tt.perMinute, passed, wait, tt.passes, tt.wait)
		}
	}
}

func TestRateLimiterCallersApart(t *testing.T) {
	t.Parallel()
	l := NewRateLimiter()
	callers := []struct{ user, keyID string }{
		{"alice", ""},
		{"alice", "k1"},
		{"alice", "k2"},
		{"bob", ""},
		{"bob", "k1"}, // the same key id under another user is another caller
	}
	for _, c := range callers {
		if passed, wait := allowN(l, c.user, c.keyID, 5, 6, t0); passed != 5 || wait != 12*time.Second {
			t.Errorf("caller %s/%q: %d of 6 passed, then wait %v; want 5, 12s", c.user, c.keyID, passed, wait)
		}
	}
}

func TestRateLimiterConcurrent(t *testing.T) {
	t.Parallel()
	l := NewRateLimiter()
	var passed atomic.Int64
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if l.Allow(t.Context(), "alice", "k1", 5, t0) == 0 {
				passed.Add(1)
			}
		})
	}
	wg.Wait()
	if n := passed.Load(); n != 5 {
		t.Errorf("%d of 50 concurrent requests passed a limit of 5", n)
	}
}

// The sweep cannot be seen from Allow — a caller forgotten and a caller whose allowance is whole are
// treated alike, which is why forgetting is safe — so this looks at how many callers the limiter holds.
func TestRateLimiterForgetsIdleCallers(t *testing.T) {
	t.Parallel()
	l := NewRateLimiter()
	held := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.tat)
	}
	for i := range 100 {
		l.Allow(t.Context(), "user", fmt.Sprintf("k%d", i), 5, t0)
	}
	allowN(l, "busy", "", 5, 5, t0) // its allowance is whole again at t0+60s
	if n := held(); n != 101 {
		t.Fatalf("holds %d callers, want 101", n)
	}

	// Within the minute nothing is swept.
	l.Allow(t.Context(), "late", "", 5, t0.Add(time.Minute))
	if n := held(); n != 102 {
		t.Fatalf("holds %d callers a minute on, want 102", n)
	}
	// Past it, callers whose allowance is whole are forgotten; one still owed time is kept.
	allowN(l, "late", "", 5, 4, t0.Add(time.Minute))
	l.Allow(t.Context(), "new", "", 5, t0.Add(time.Minute+time.Nanosecond))
	if n := held(); n != 2 {
		t.Fatalf("holds %d callers after the sweep, want 2 (late, new)", n)
	}
	// Forgotten or not, a caller gets its allowance as before.
	if passed, wait := allowN(l, "busy", "", 5, 6, t0.Add(time.Minute+time.Nanosecond)); passed != 5 || wait != 12*time.Second {
		t.Errorf("a forgotten caller: %d of 6 passed, then wait %v; want 5, 12s", passed, wait)
	}
	if passed, _ := allowN(l, "late", "", 5, 1, t0.Add(time.Minute+time.Nanosecond)); passed != 0 {
		t.Errorf("a kept caller lost its count: %d passed", passed)
	}
}
