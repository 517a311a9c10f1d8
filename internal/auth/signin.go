package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"chatd/internal/store"
)

// SignIn exchanges an API key for a web UI sign-in: it returns the cookie's value, which only its hash
// is stored of, the caller as the cookie makes it, and when the sign-in expires.
func (a *Authenticator) SignIn(ctx context.Context, secret string) (string, *Principal, time.Time, error) {
	p, err := a.Verify(ctx, secret)
	if err != nil {
		return "", nil, time.Time{}, err
	}
	now := a.opts.Now()
	expires := now.Add(a.opts.SessionTTL)
	if p.ExpiresAt != nil && p.ExpiresAt.Before(expires) {
		expires = *p.ExpiresAt
	}
	value, h := newSecret(cookiePrefix)
	if err := a.opts.Store.CreateAuthSession(ctx, &store.AuthSession{Hash: h[:], KeyID: p.KeyID, CreatedAt: now, ExpiresAt: expires}); err != nil {
		return "", nil, time.Time{}, fmt.Errorf("auth: sign in: %w", err)
	}
	cp := *p
	cp.Method, cp.ExpiresAt = MethodCookie, &expires
	return value, &cp, expires, nil
}

// SignOut ends the sign-in of a cookie's value.
func (a *Authenticator) SignOut(ctx context.Context, value string) error {
	if !wellFormed(value, cookiePrefix) {
		return nil
	}
	h := hashOf(value)
	err := a.opts.Store.DeleteAuthSession(ctx, h[:])
	a.mu.Lock()
	a.gen++
	delete(a.cache, h)
	a.mu.Unlock()
	return err
}

// verifySignIn returns the caller of a sign-in cookie, cached like a key.
func (a *Authenticator) verifySignIn(ctx context.Context, value string) (*Principal, error) {
	if !wellFormed(value, cookiePrefix) {
		return nil, unauthorized("invalid_session", "the sign-in cookie is not chatd's; sign in again")
	}
	h := hashOf(value)
	now := a.opts.Now()
	if c := a.lookup(&h, now); c != nil {
		return c.result(now)
	}
	return a.fetchSignIn(ctx, h, now)
}

// fetchSignIn asks the store for the sign-in of hash h and caches the answer; it takes h by value for
// the reason fetchKey does.
func (a *Authenticator) fetchSignIn(ctx context.Context, h [sha256.Size]byte, now time.Time) (*Principal, error) {
	gen := a.generation()
	s, k, err := a.opts.Store.AuthSession(ctx, h[:])
	c := &cached{hash: h, fetched: now}
	switch {
	case errors.Is(err, store.ErrNotFound):
		c.err = unauthorized("invalid_session", "this sign-in ended (signed out, or its key was revoked); sign in again")
	case err != nil:
		return nil, fmt.Errorf("auth: verify sign-in: %w", err)
	default:
		a.fromKey(c, k)
		if c.p != nil {
			c.p.Method, c.p.ExpiresAt, c.expires = MethodCookie, &s.ExpiresAt, s.ExpiresAt
		}
	}
	a.keep(c, gen)
	return c.result(now)
}
