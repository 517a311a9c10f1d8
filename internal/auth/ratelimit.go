package auth

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"chatd/internal/store"
)

// LimitRequests names the per-minute request limit.
const LimitRequests = "requests_per_minute"

// Limiter holds callers to their requests per minute.
type Limiter interface {
	// Allow counts a request of the caller (a key, when keyID is set, else the user) against perMinute,
	// and returns 0 when it may go, or how long to wait before asking again. now is the caller's clock;
	// a limiter that counts in the database uses the database's instead.
	Allow(ctx context.Context, user, keyID string, perMinute int, now time.Time) time.Duration
}

var (
	_ Limiter = (*RateLimiter)(nil)
	_ Limiter = (*StoreLimiter)(nil)
)

// NewLimiter returns the request limiter for st: one that counts in the database when the store can
// (store.RateLimits: PostgreSQL, where every chatd instance on the database then shares one count per
// caller), else one in this process's memory (SQLite, which one process has to itself). log receives
// the errors of the database's count.
func NewLimiter(st store.Store, log *slog.Logger) Limiter {
	if rl, ok := st.(store.RateLimits); ok {
		return NewStoreLimiter(rl, log)
	}
	return NewRateLimiter()
}

// RateLimiter holds callers to a number of requests per minute with the generic cell rate algorithm: a
// caller may send its whole minute's allowance at once, and then one more each 1/n of a minute. It
// keeps one time per caller and forgets callers idle for a minute. It lives in memory: each instance
// counts its own requests, and a restart forgets at most the last minute.
type RateLimiter struct {
	mu    sync.Mutex
	tat   map[rateKey]time.Time // per caller, the theoretical arrival time of its next request
	swept time.Time
}

type rateKey struct {
	user, keyID string
}

// NewRateLimiter returns an empty limiter in memory.
func NewRateLimiter() *RateLimiter {
	return &RateLimiter{tat: map[rateKey]time.Time{}}
}

// Allow counts a request of the caller (a key, when keyID is set, else the user) against perMinute, and
// returns 0 when it may go, or how long to wait before asking again.
func (l *RateLimiter) Allow(_ context.Context, user, keyID string, perMinute int, now time.Time) time.Duration {
	if perMinute <= 0 {
		return 0
	}
	interval := time.Minute / time.Duration(perMinute)
	burst := time.Minute - interval // how far ahead of now the next arrival may be
	k := rateKey{user, keyID}
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) > time.Minute {
		l.sweep(now)
	}
	tat := l.tat[k]
	if tat.Before(now) {
		tat = now
	}
	if wait := tat.Sub(now) - burst; wait > 0 {
		return wait
	}
	l.tat[k] = tat.Add(interval)
	return 0
}

// sweep forgets callers whose allowance is whole again.
func (l *RateLimiter) sweep(now time.Time) {
	for k, t := range l.tat {
		if t.Before(now) {
			delete(l.tat, k)
		}
	}
	l.swept = now
}

// StoreLimiter holds callers to their requests per minute with the store's count (store.RateLimits),
// which every chatd instance on the database shares, on the database's clock. Its arithmetic is
// RateLimiter's.
//
// When the database cannot count a request, the request goes (fails open) and the error is logged: a
// database that is down fails the request's own work anyway, while refusing every caller for it would
// turn an outage of the limiter into one of the whole API.
type StoreLimiter struct {
	rl  store.RateLimits
	log *slog.Logger
}

// NewStoreLimiter returns a limiter counting in rl; log (nil: discarded) receives rl's errors.
func NewStoreLimiter(rl store.RateLimits, log *slog.Logger) *StoreLimiter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &StoreLimiter{rl: rl, log: log}
}

// Allow counts a request of the caller against perMinute in the store; now is not used.
func (l *StoreLimiter) Allow(ctx context.Context, user, keyID string, perMinute int, _ time.Time) time.Duration {
	if perMinute <= 0 {
		return 0
	}
	wait, err := l.rl.AllowRequest(ctx, rateKeyOf(user, keyID), perMinute, time.Minute)
	if err != nil {
		if ctx.Err() == nil { // else the caller left, and nobody waits for the answer
			l.log.Error("requests_per_minute: the database could not count a request; it goes uncounted",
				"user", user, "key_id", keyID, "err", err)
		}
		return 0
	}
	return wait
}

// rateKeyOf is a caller's key in the store's count: the user and key id, quoted, so that no two callers
// share one (the same key id under another user is another caller, as in RateLimiter).
func rateKeyOf(user, keyID string) string {
	return "rpm " + strconv.Quote(user) + " " + strconv.Quote(keyID)
}
