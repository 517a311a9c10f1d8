// Package auth knows who a caller is: API keys (made, hashed, verified with a short cache), the web UI's
// sign-in cookies, a trusted proxy's identity header, and each caller's limits, with the per-minute
// request limiter. It imports store and the standard library only; httpapi asks it about every request,
// and cmd/chatd uses it to make and revoke keys.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"chatd/internal/store"
)

// Prefixes of the secrets chatd makes: an API key, and a web UI sign-in cookie. Each is followed by 43
// base64url characters, 256 random bits.
const (
	KeyPrefix    = "chd_"
	cookiePrefix = "chs_"
	secretLen    = 4 + 43
)

// CookieName is the web UI's sign-in cookie.
const CookieName = "chatd_session"

// Ways a caller is authenticated.
const (
	MethodLocal   = "local"          // no auth: chatd has no keys and listens on loopback only
	MethodBearer  = "bearer"         // an API key in Authorization
	MethodCookie  = "cookie"         // the web UI's sign-in cookie
	MethodTrusted = "trusted_header" // a trusted proxy's identity header
)

// LocalUser is the identity of every caller while chatd runs without auth.
const LocalUser = "local"

// Principal is an authenticated caller. It is shared by the requests of one key while cached: never
// change it.
type Principal struct {
	User   string
	Method string
	KeyID  string // "" without a key
	Admin  bool
	// Agents the caller may use; empty: every agent.
	Agents []string
	// Limits are the caller's limits: the user's, each replaced by the key's when the key sets it.
	Limits store.Limits
	// keyLimits are the ones the key sets: those are counted over the key's use, the rest over the user's.
	keyLimits store.Limits
	// ExpiresAt is when the key or sign-in expires; nil: never.
	ExpiresAt *time.Time
}

// AllowsAgent reports whether the caller may use the agent.
func (p *Principal) AllowsAgent(name string) bool {
	return len(p.Agents) == 0 || slices.Contains(p.Agents, name)
}

// LimitKey returns the key id a limit is counted over — the key's when the key sets it — or "" for the
// user's. name is one of store's limit names, or "requests_per_minute".
func (p *Principal) LimitKey(name string) string {
	if p.KeyID == "" {
		return ""
	}
	k := p.keyLimits
	set := false
	switch name {
	case store.LimitConcurrentRuns:
		set = k.ConcurrentRuns != 0
	case store.LimitTokens:
		set = k.TokensPerDay != 0
	case store.LimitSpend:
		set = k.SpendUSD != 0
	case LimitRequests:
		set = k.RequestsPerMinute != 0
	}
	if set {
		return p.KeyID
	}
	return ""
}

// Error is a refused authentication: Status 401 or 403, Code for clients.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

func unauthorized(code, msg string) *Error {
	return &Error{Status: http.StatusUnauthorized, Code: code, Message: msg}
}

// Options configure an Authenticator.
type Options struct {
	Store store.Accounts
	// TrustedHeader names the header a trusted proxy puts the signed-in user in (X-Forwarded-Email);
	// it is read only from TrustedProxies.
	TrustedHeader  string
	TrustedProxies []netip.Prefix
	// Admins are the users of the trusted header who are admins.
	Admins []string
	// Loopback says chatd listens on loopback addresses only: without keys and a trusted header, callers
	// need no auth.
	Loopback bool
	// UserLimits are the limits of named users; DefaultLimits those of the others.
	UserLimits    map[string]store.Limits
	DefaultLimits store.Limits
	// CacheTTL is how long a verified key or sign-in is trusted without asking the store again (default
	// 10s): a key revoked by another process stops working within it.
	CacheTTL time.Duration
	// SessionTTL is how long a web sign-in lasts (default 7 days), never past its key's expiry.
	SessionTTL time.Duration
	Now        func() time.Time
	Logger     *slog.Logger
}

// Authenticator authenticates requests.
type Authenticator struct {
	opts     Options
	required atomic.Bool

	// localP is the caller while no auth is required, made once: it is on every request's path.
	localP *Principal

	mu sync.RWMutex
	// cache holds verified keys and sign-ins, misses the refusals of unknown ones, each bounded: a
	// flood of made-up keys empties misses, never the cache of the keys in use.
	cache, misses map[[sha256.Size]byte]*cached
	// gen counts forgets: an answer the store gave before one is not cached after it, so a key revoked
	// while it was being read is not trusted again for CacheTTL.
	gen uint64
}

// cached is a verified key or sign-in: p, or the refusal err.
type cached struct {
	hash    [sha256.Size]byte
	p       *Principal
	err     *Error
	expires time.Time // of the key or sign-in; zero: never
	fetched time.Time
}

// maxCached and maxMisses bound the cache and the misses; past its bound, each starts over.
const (
	maxCached = 10000
	maxMisses = 1000
)

// New returns an Authenticator. It asks the store whether keys exist, to know whether auth is required.
func New(ctx context.Context, opts Options) (*Authenticator, error) {
	if opts.CacheTTL <= 0 {
		opts.CacheTTL = 10 * time.Second
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = 7 * 24 * time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	a := &Authenticator{opts: opts, cache: map[[sha256.Size]byte]*cached{}, misses: map[[sha256.Size]byte]*cached{}}
	has, err := opts.Store.HasKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	a.required.Store(has || !opts.Loopback || opts.TrustedHeader != "")
	local := *Local
	local.Limits = a.userLimits(LocalUser)
	a.localP = &local
	return a, nil
}

// Required reports whether callers must authenticate: once chatd has a key, listens beyond loopback,
// or trusts a proxy's header.
func (a *Authenticator) Required() bool { return a.required.Load() }

// Describe says, for the log, how callers are authenticated.
func (a *Authenticator) Describe() string {
	if !a.Required() {
		return "no auth: chatd has no API keys and listens on loopback only"
	}
	var ways []string
	ways = append(ways, "API keys (Authorization: Bearer chd_…, or the web UI's sign-in cookie)")
	if a.opts.TrustedHeader != "" {
		var nets []string
		for _, p := range a.opts.TrustedProxies {
			nets = append(nets, p.String())
		}
		ways = append(ways, fmt.Sprintf("the %s header from proxies at %s", a.opts.TrustedHeader, strings.Join(nets, ", ")))
	}
	return strings.Join(ways, "; ")
}

// Authenticate returns the caller of r: from a trusted proxy's header, an API key, or a sign-in
// cookie — or the local user when no auth is required. A request with none of them, when auth is
// required, or with a bad one, is refused with an *Error.
func (a *Authenticator) Authenticate(r *http.Request) (*Principal, error) {
	if p := a.trusted(r); p != nil {
		return p, nil
	}
	if h := r.Header.Get("Authorization"); h != "" {
		secret, ok := cutBearer(h)
		if !ok {
			return nil, unauthorized("invalid_authorization", "the Authorization header must be \"Bearer \" followed by an API key")
		}
		return a.Verify(r.Context(), secret)
	}
	if c, err := r.Cookie(CookieName); err == nil && c.Value != "" {
		return a.verifySignIn(r.Context(), c.Value)
	}
	if a.Required() {
		return nil, unauthorized("auth_required", "this chatd requires an API key: send it as \"Authorization: Bearer chd_…\", or sign in to the web UI with it")
	}
	return a.localP, nil
}

func cutBearer(h string) (string, bool) {
	if len(h) < 7 || !strings.EqualFold(h[:7], "bearer ") {
		return "", false
	}
	s := strings.TrimSpace(h[7:])
	return s, s != ""
}

// Local is the caller of a chatd without auth: the local user, an admin, without limits. An
// Authenticator's local caller has the local user's limits.
var Local = &Principal{User: LocalUser, Method: MethodLocal, Admin: true}

// trusted returns the user a trusted proxy signed in, or nil when the request has none or comes from
// an address that is not a trusted proxy (whose header is ignored). A header sent twice is ignored too:
// a proxy that adds its own rather than replacing the client's leaves the client's first.
func (a *Authenticator) trusted(r *http.Request) *Principal {
	if a.opts.TrustedHeader == "" {
		return nil
	}
	values := r.Header.Values(a.opts.TrustedHeader)
	if len(values) != 1 {
		return nil
	}
	user := strings.TrimSpace(values[0])
	if user == "" || !validUser(user) {
		return nil
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return nil
	}
	addr := ap.Addr().Unmap()
	if !slices.ContainsFunc(a.opts.TrustedProxies, func(p netip.Prefix) bool { return p.Contains(addr) }) {
		return nil
	}
	return &Principal{User: user, Method: MethodTrusted, Admin: slices.Contains(a.opts.Admins, user), Limits: a.userLimits(user)}
}

// MaxUserLen bounds a user name.
const MaxUserLen = 256

// validUser reports whether name can be a user: UTF-8 without control characters (C1's included: a
// terminal showing a log reads U+009B as the start of a command), without spaces at its ends, not too
// long. Invalid UTF-8 is refused because JSON would show it as U+FFFD, a name that is not the user's.
func validUser(name string) bool {
	return name != "" && len(name) <= MaxUserLen && strings.TrimSpace(name) == name && printable(name)
}

// printable reports whether s is UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if unicode.IsControl(c) {
			return false
		}
	}
	return true
}

// ValidUser is validUser for the places users are named: the CLI and the keys API.
func ValidUser(name string) error {
	if !validUser(name) {
		return fmt.Errorf("a user name is 1 to %d bytes of UTF-8 without control characters or spaces at its ends", MaxUserLen)
	}
	return nil
}

func (a *Authenticator) userLimits(user string) store.Limits {
	if l, ok := a.opts.UserLimits[user]; ok {
		return a.opts.DefaultLimits.Over(l)
	}
	return a.opts.DefaultLimits
}

// Verify returns the principal of an API key. A verified key is cached for CacheTTL: on a hit it costs
// a hash and a map lookup, and allocates nothing.
func (a *Authenticator) Verify(ctx context.Context, secret string) (*Principal, error) {
	if !wellFormed(secret, KeyPrefix) {
		return nil, unauthorized("invalid_key", "that is not a chatd API key: keys start with "+KeyPrefix+" and are "+fmt.Sprint(secretLen)+" characters long")
	}
	h := hashOf(secret)
	now := a.opts.Now()
	if c := a.lookup(&h, now); c != nil {
		return c.result(now)
	}
	return a.fetchKey(ctx, h, now)
}

// fetchKey asks the store for the key of hash h and caches the answer. It takes h by value: the store
// is an interface, so the slice of h it gets escapes, and h with it; here that costs a miss, not a hit.
func (a *Authenticator) fetchKey(ctx context.Context, h [sha256.Size]byte, now time.Time) (*Principal, error) {
	gen := a.generation()
	k, err := a.opts.Store.KeyByHash(ctx, h[:])
	c := &cached{hash: h, fetched: now}
	switch {
	case errors.Is(err, store.ErrNotFound):
		c.err = unauthorized("invalid_key", "no such API key")
	case err != nil:
		return nil, fmt.Errorf("auth: verify key: %w", err)
	default:
		a.fromKey(c, k)
	}
	a.keep(c, gen)
	return c.result(now)
}

// fromKey fills c with the principal of k, or its refusal when it is revoked.
func (a *Authenticator) fromKey(c *cached, k *store.APIKey) {
	if k.RevokedAt != nil {
		c.err = unauthorized("key_revoked", "this API key was revoked; ask for a new one")
		return
	}
	p := &Principal{User: k.User, Method: MethodBearer, KeyID: k.ID, Admin: k.Admin, Agents: k.Agents,
		Limits: a.userLimits(k.User).Over(k.Limits), keyLimits: k.Limits, ExpiresAt: k.ExpiresAt}
	c.p = p
	if k.ExpiresAt != nil {
		c.expires = *k.ExpiresAt
	}
}

func (c *cached) result(now time.Time) (*Principal, error) {
	if c.err != nil {
		return nil, c.err
	}
	if !c.expires.IsZero() && !now.Before(c.expires) {
		if c.p.Method == MethodCookie {
			return nil, unauthorized("session_expired", "the sign-in expired; sign in again")
		}
		return nil, unauthorized("key_expired", "this API key expired; ask for a new one")
	}
	return c.p, nil
}

// lookup returns the cached entry of hash h, or nil when there is none or it is older than CacheTTL.
func (a *Authenticator) lookup(h *[sha256.Size]byte, now time.Time) *cached {
	a.mu.RLock()
	c := a.cache[*h]
	if c == nil {
		c = a.misses[*h]
	}
	a.mu.RUnlock()
	if c == nil || now.Sub(c.fetched) >= a.opts.CacheTTL || subtle.ConstantTimeCompare(c.hash[:], h[:]) != 1 {
		return nil
	}
	return c
}

// keep caches c, an answer the store gave at generation gen, unless something was forgotten since.
func (a *Authenticator) keep(c *cached, gen uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gen != gen {
		return
	}
	m, limit := a.cache, maxCached
	if c.p == nil {
		m, limit = a.misses, maxMisses
	}
	if len(m) >= limit {
		clear(m)
	}
	m[c.hash] = c
}

func (a *Authenticator) generation() uint64 {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.gen
}

// forget drops every cached entry of a key: its own and its sign-ins'.
func (a *Authenticator) forget(keyID string) {
	a.mu.Lock()
	a.gen++
	for h, c := range a.cache {
		if c.p != nil && c.p.KeyID == keyID {
			delete(a.cache, h)
		}
	}
	a.mu.Unlock()
}

// wellFormed reports whether s looks like a secret of chatd with this prefix.
func wellFormed(s, prefix string) bool {
	if len(s) != secretLen || !strings.HasPrefix(s, prefix) {
		return false
	}
	for i := len(prefix); i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// hashOf is the SHA-256 of a secret, computed without allocating.
func hashOf(s string) [sha256.Size]byte {
	var buf [secretLen]byte
	n := copy(buf[:], s)
	return sha256.Sum256(buf[:n])
}

// newSecret returns a new random secret with the prefix, and its hash.
func newSecret(prefix string) (string, [sha256.Size]byte) {
	var b [32]byte
	rand.Read(b[:])
	s := prefix + base64.RawURLEncoding.EncodeToString(b[:])
	return s, hashOf(s)
}
