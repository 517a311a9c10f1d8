package auth

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"chatd/internal/store"
)

// sharedCount is a store that counts requests itself (store.RateLimits), as PostgreSQL does for every
// instance on it: one GCRA per key on one clock, the store's. Its other methods are not there.
type sharedCount struct {
	store.Store
	mu   sync.Mutex
	tat  map[string]time.Time
	now  time.Time
	keys map[string]bool // every key asked
	err  error           // when set, every count fails with it
}

func newSharedCount() *sharedCount {
	return &sharedCount{tat: map[string]time.Time{}, now: t0, keys: map[string]bool{}}
}

func (s *sharedCount) AllowRequest(_ context.Context, key string, n int, per time.Duration) (time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, s.err
	}
	s.keys[key] = true
	interval := per / time.Duration(n)
	tat := s.tat[key]
	if tat.Before(s.now) {
		tat = s.now
	}
	if wait := tat.Sub(s.now) - (per - interval); wait > 0 {
		return wait, nil
	}
	s.tat[key] = tat.Add(interval)
	return 0, nil
}

// TestNewLimiter: a store that counts requests itself gets a limiter counting in it; SQLite, which does
// not, gets the in-memory one.
func TestNewLimiter(t *testing.T) {
	t.Parallel()
	if l, ok := NewLimiter(openStore(t), nil).(*RateLimiter); !ok {
		t.Errorf("NewLimiter(SQLite) = %T, want *RateLimiter", l)
	}
	shared := newSharedCount()
	if l, ok := NewLimiter(shared, nil).(*StoreLimiter); !ok || l.rl != shared {
		t.Errorf("NewLimiter(a store.RateLimits) = %#v, want a *StoreLimiter on the store", l)
	}
}

// TestStoreLimiterShared: two limiters on one store are two instances on one database: they share each
// caller's allowance, and the store's answer is the HTTP layer's. Callers stay apart as in memory.
func TestStoreLimiterShared(t *testing.T) {
	t.Parallel()
	shared := newSharedCount()
	instances := []Limiter{NewLimiter(shared, nil), NewLimiter(shared, nil)}
	// Another clock on each instance: the store's is the one that counts.
	clocks := []time.Time{t0.Add(time.Hour), t0.Add(-time.Hour)}
	callers := []struct{ user, keyID string }{{"alice", ""}, {"alice", "k1"}, {"alice", "k2"}, {"bob", ""}, {"bob", "k1"}}
	for _, c := range callers {
		passed, wait := 0, time.Duration(0)
		for i := range 12 {
			if w := instances[i%2].Allow(t.Context(), c.user, c.keyID, 5, clocks[i%2]); w == 0 {
				passed++
			} else {
				wait = w
			}
		}
		if passed != 5 || wait != 12*time.Second {
			t.Errorf("caller %s/%q: %d of 12 passed on two instances, then wait %v; want 5, 12s", c.user, c.keyID, passed, wait)
		}
	}
	if len(shared.keys) != len(callers) {
		t.Errorf("the store counted %d keys for %d callers: %v", len(shared.keys), len(callers), shared.keys)
	}
	shared.now = shared.now.Add(12 * time.Second)
	if w := instances[1].Allow(t.Context(), "alice", "", 5, t0); w != 0 {
		t.Errorf("12 s later on the store's clock: wait %v, want one more to pass", w)
	}
	if w := instances[0].Allow(t.Context(), "alice", "", 0, t0); w != 0 || len(shared.keys) != len(callers) {
		t.Errorf("no limit: wait %v, keys %d; want 0, the store not asked", w, len(shared.keys))
	}
}

// TestStoreLimiterFailsOpen: when the store cannot count a request, the request goes, and the log says
// why; a caller that left is not logged.
func TestStoreLimiterFailsOpen(t *testing.T) {
	t.Parallel()
	shared := newSharedCount()
	shared.err = errors.New("postgres: count a request: connection refused")
	var logged bytes.Buffer
	l := NewLimiter(shared, slog.New(slog.NewTextHandler(&logged, nil)))
	for range 10 {
		if w := l.Allow(t.Context(), "alice", "k1", 1, t0); w != 0 {
			t.Fatalf("a failed count: wait %v, want the request to go", w)
		}
	}
	if n := strings.Count(logged.String(), "connection refused"); n != 10 {
		t.Errorf("logged %d failed counts, want 10:\n%s", n, logged.String())
	}
	if !strings.Contains(logged.String(), "user=alice key_id=k1") {
		t.Errorf("the log does not name the caller:\n%s", logged.String())
	}

	logged.Reset()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if w := l.Allow(ctx, "alice", "k1", 1, t0); w != 0 || logged.Len() != 0 {
		t.Errorf("a caller that left: wait %v, logged %q; want 0 and nothing", w, logged.String())
	}
}
