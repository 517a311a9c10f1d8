package auth

import (
	"sync"
	"time"
)

// LimitRequests names the per-minute request limit.
const LimitRequests = "requests_per_minute"

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

// NewRateLimiter returns an empty limiter.
func NewRateLimiter() *RateLimiter {
	return &RateLimiter{tat: map[rateKey]time.Time{}}
}

// Allow counts a request of the caller (a key, when keyID is set, else the user) against perMinute, and
// returns 0 when it may go, or how long to wait before asking again.
func (l *RateLimiter) Allow(user, keyID string, perMinute int, now time.Time) time.Duration {
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
