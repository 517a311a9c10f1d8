package auth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"chatd/internal/store"
	"chatd/internal/store/sqlite"
)

// t0 is a Wednesday morning, UTC, on whole seconds so that times survive the store's microseconds.
var t0 = time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)

// clock is the injected Now: it moves only when a test says so.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: t0} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func openStore(t testing.TB) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "chatd.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// newAuth returns an Authenticator on a new store, with opts' Store and Now filled in.
func newAuth(t testing.TB, clk *clock, opts Options) (*Authenticator, *sqlite.DB) {
	t.Helper()
	db := openStore(t)
	opts.Store, opts.Now = db, clk.Now
	a, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return a, db
}

func createKey(t testing.TB, a *Authenticator, spec KeySpec) (string, *store.APIKey) {
	t.Helper()
	secret, k, err := a.CreateKey(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return secret, k
}

// request is a GET from httptest's RemoteAddr (192.0.2.1:1234) with the header pairs.
func request(header ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/v1/sessions", nil)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	return r
}

func bearer(secret string) *http.Request { return request("Authorization", "Bearer "+secret) }

func withCookie(value string) *http.Request {
	r := request()
	r.AddCookie(&http.Cookie{Name: CookieName, Value: value})
	return r
}

// checkRefused fails unless err is an *Error with status and code.
func checkRefused(t *testing.T, err error, status int, code string) {
	t.Helper()
	e, ok := errors.AsType[*Error](err)
	if !ok {
		t.Fatalf("err = %v, want *auth.Error %d %s", err, status, code)
	}
	if e.Status != status || e.Code != code {
		t.Fatalf("refused with %d %s (%q), want %d %s", e.Status, e.Code, e.Message, status, code)
	}
	if e.Message == "" {
		t.Errorf("refusal %s has no message for the client", code)
	}
}

func checkUser(t *testing.T, p *Principal, err error, user, method string) {
	t.Helper()
	if err != nil {
		t.Fatalf("err = %v, want %s by %s", err, user, method)
	}
	if p.User != user || p.Method != method {
		t.Fatalf("principal %s by %s, want %s by %s", p.User, p.Method, user, method)
	}
}

// cmpPrincipal compares Principals, unexported key limits included; a key's empty Agents are
// stored as [] and read back as such, which means every agent, as nil does.
// cacheLen is how many keys and sign-ins a holds verified or refused.
func cacheLen(a *Authenticator) int {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return len(a.cache) + len(a.misses)
}

var cmpPrincipal = cmp.Options{cmp.AllowUnexported(Principal{}), cmpopts.EquateEmpty()}

func TestAuthenticateLocal(t *testing.T) {
	t.Parallel()
	limits := store.Limits{RequestsPerMinute: 30, TokensPerDay: 1000}
	a, _ := newAuth(t, newClock(), Options{Loopback: true, DefaultLimits: limits})
	if a.Required() {
		t.Fatal("Required() with no keys on loopback")
	}
	p, err := a.Authenticate(request())
	if err != nil {
		t.Fatal(err)
	}
	want := &Principal{User: LocalUser, Method: MethodLocal, Admin: true, Limits: limits}
	if diff := cmp.Diff(want, p, cmpPrincipal); diff != "" {
		t.Errorf("local principal (-want +got):\n%s", diff)
	}
}

func TestRequiredWithoutLoopback(t *testing.T) {
	t.Parallel()
	a, _ := newAuth(t, newClock(), Options{Loopback: false})
	if !a.Required() {
		t.Fatal("Required() false for a chatd listening beyond loopback")
	}
	_, err := a.Authenticate(request())
	checkRefused(t, err, http.StatusUnauthorized, "auth_required")
}

func TestRequiredOnceAKeyExists(t *testing.T) {
	t.Parallel()
	clk := newClock()
	a, db := newAuth(t, clk, Options{Loopback: true})
	createKey(t, a, KeySpec{User: "alice"})
	if !a.Required() {
		t.Fatal("Required() false after CreateKey")
	}
	_, err := a.Authenticate(request())
	checkRefused(t, err, http.StatusUnauthorized, "auth_required")

	// A later chatd on the same store knows from the store that keys exist.
	b, err := New(t.Context(), Options{Store: db, Loopback: true, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if !b.Required() {
		t.Fatal("Required() false for a new Authenticator on a store with keys")
	}
}

func TestAuthenticateRefusals(t *testing.T) {
	t.Parallel()
	clk := newClock()
	a, _ := newAuth(t, clk, Options{Loopback: true})
	secret, _ := createKey(t, a, KeySpec{User: "alice"})
	tail := secret[len(KeyPrefix):]

	tests := []struct {
		name string
		r    *http.Request
		code string
	}{
		{"no credentials", request(), "auth_required"},
		{"empty cookie", withCookie(""), "auth_required"},
		{"basic", request("Authorization", "Basic YWxpY2U6c2VjcmV0"), "invalid_authorization"},
		{"bearer without key", request("Authorization", "Bearer "), "invalid_authorization"},
		{"bearer of spaces", request("Authorization", "Bearer    "), "invalid_authorization"},
		{"bearer alone", request("Authorization", "Bearer"), "invalid_authorization"},
		{"key without scheme", request("Authorization", secret), "invalid_authorization"},
		{"wrong prefix", bearer("chx_" + tail), "invalid_key"},
		{"cookie value as key", bearer(cookiePrefix + tail), "invalid_key"},
		{"upper-case prefix", bearer("CHD_" + tail), "invalid_key"},
		{"one short", bearer(secret[:len(secret)-1]), "invalid_key"},
		{"one long", bearer(secret + "A"), "invalid_key"},
		{"prefix only", bearer(KeyPrefix), "invalid_key"},
		{"plus", bearer(secret[:20] + "+" + secret[21:]), "invalid_key"},
		{"slash", bearer(secret[:20] + "/" + secret[21:]), "invalid_key"},
		{"padding", bearer(secret[:len(secret)-1] + "="), "invalid_key"},
		{"inner space", bearer(secret[:20] + " " + secret[21:]), "invalid_key"},
		{"non-ASCII of the same length", bearer(secret[:len(secret)-2] + "é"), "invalid_key"},
		{"unknown key", bearer(KeyPrefix + strings.Repeat("A", 43)), "invalid_key"},
		{"malformed cookie", withCookie("chs_short"), "invalid_session"},
		{"key as cookie", withCookie(secret), "invalid_session"},
		{"unknown cookie", withCookie(cookiePrefix + strings.Repeat("A", 43)), "invalid_session"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := cacheLen(a)
			p, err := a.Authenticate(tt.r)
			if p != nil {
				t.Errorf("principal %+v with a refusal", p)
			}
			checkRefused(t, err, http.StatusUnauthorized, tt.code)
			// A well-formed secret's refusal is cached; a malformed one never reaches the store or the cache.
			wantCached := before
			if strings.HasPrefix(tt.name, "unknown") {
				wantCached++
			}
			if n := cacheLen(a); n != wantCached {
				t.Errorf("%d entries cached after the refusal, want %d", n, wantCached)
			}
			// The refusal is the same when it comes from the cache.
			_, err = a.Authenticate(tt.r)
			checkRefused(t, err, http.StatusUnauthorized, tt.code)
		})
	}
}

func TestAuthenticateBearer(t *testing.T) {
	t.Parallel()
	a, _ := newAuth(t, newClock(), Options{Loopback: true})
	secret, k := createKey(t, a, KeySpec{User: "alice"})
	for _, h := range []string{"Bearer " + secret, "bearer " + secret, "BEARER " + secret, "Bearer   " + secret + " "} {
		p, err := a.Authenticate(request("Authorization", h))
		checkUser(t, p, err, "alice", MethodBearer)
		if p.KeyID != k.ID {
			t.Errorf("Authorization %q: KeyID %q, want %q", h, p.KeyID, k.ID)
		}
	}
}

func TestRevokeKey(t *testing.T) {
	t.Parallel()
	const ttl = 10 * time.Second
	clk := newClock()
	a, db := newAuth(t, clk, Options{Loopback: true, CacheTTL: ttl})
	ctx := t.Context()

	t.Run("through the Authenticator", func(t *testing.T) {
		secret, k := createKey(t, a, KeySpec{User: "alice"})
		p, err := a.Authenticate(bearer(secret))
		checkUser(t, p, err, "alice", MethodBearer) // now cached
		if _, err := a.RevokeKey(ctx, "alice", k.ID); err != nil {
			t.Fatal(err)
		}
		_, err = a.Authenticate(bearer(secret))
		checkRefused(t, err, http.StatusUnauthorized, "key_revoked")
	})

	t.Run("by another process", func(t *testing.T) {
		secret, k := createKey(t, a, KeySpec{User: "bob"})
		p, err := a.Authenticate(bearer(secret))
		checkUser(t, p, err, "bob", MethodBearer)
		if _, err := db.RevokeKey(ctx, "", k.ID); err != nil {
			t.Fatal(err)
		}
		clk.Add(ttl - time.Nanosecond)
		p, err = a.Authenticate(bearer(secret))
		checkUser(t, p, err, "bob", MethodBearer) // trusted from the cache until CacheTTL
		clk.Add(time.Nanosecond)
		_, err = a.Authenticate(bearer(secret))
		checkRefused(t, err, http.StatusUnauthorized, "key_revoked")
		_, err = a.Authenticate(bearer(secret)) // and the refusal is cached
		checkRefused(t, err, http.StatusUnauthorized, "key_revoked")
	})

	t.Run("another user's key", func(t *testing.T) {
		secret, k := createKey(t, a, KeySpec{User: "carol"})
		if _, err := a.RevokeKey(ctx, "mallory", k.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("RevokeKey of another user's key: err = %v, want ErrNotFound", err)
		}
		p, err := a.Authenticate(bearer(secret))
		checkUser(t, p, err, "carol", MethodBearer)
	})
}

func TestExpiredKey(t *testing.T) {
	t.Parallel()
	const ttl = 10 * time.Second
	clk := newClock()
	a, _ := newAuth(t, clk, Options{Loopback: true, CacheTTL: ttl})
	secret, k := createKey(t, a, KeySpec{User: "alice", ExpiresIn: time.Hour})
	if k.ExpiresAt == nil || !k.ExpiresAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("ExpiresAt = %v, want %v", k.ExpiresAt, t0.Add(time.Hour))
	}
	p, err := a.Authenticate(bearer(secret))
	checkUser(t, p, err, "alice", MethodBearer)

	clk.Add(time.Hour - time.Nanosecond)
	p, err = a.Authenticate(bearer(secret)) // fetched again: the cached one is older than CacheTTL
	checkUser(t, p, err, "alice", MethodBearer)

	clk.Add(time.Nanosecond) // the cached key, fetched 1ns ago, expires
	_, err = a.Authenticate(bearer(secret))
	checkRefused(t, err, http.StatusUnauthorized, "key_expired")

	clk.Add(ttl) // and from the store
	_, err = a.Authenticate(bearer(secret))
	checkRefused(t, err, http.StatusUnauthorized, "key_expired")
}

func TestKeyPrincipal(t *testing.T) {
	t.Parallel()
	defaults := store.Limits{ConcurrentRuns: 2, RequestsPerMinute: 60, TokensPerDay: 1000, SpendUSD: 10}
	alice := store.Limits{TokensPerDay: 5000, SpendUSD: 20, SpendPeriod: "week"}
	clk := newClock()
	a, _ := newAuth(t, clk, Options{Loopback: true, DefaultLimits: defaults,
		UserLimits: map[string]store.Limits{"alice": alice}})
	expiry := t0.Add(24 * time.Hour)

	tests := []struct {
		name string
		spec KeySpec
		want Principal // without KeyID, filled in from the key
		// limits counted over the key; the others are counted over the user
		keyCounted []string
	}{{
		name: "default user, key without limits",
		spec: KeySpec{User: "bob"},
		want: Principal{User: "bob", Method: MethodBearer, Limits: defaults},
	}, {
		name: "user limits over the defaults",
		spec: KeySpec{User: "alice", Agents: []string{"writer"}},
		want: Principal{User: "alice", Method: MethodBearer, Agents: []string{"writer"},
			Limits: store.Limits{ConcurrentRuns: 2, RequestsPerMinute: 60, TokensPerDay: 5000, SpendUSD: 20, SpendPeriod: "week"}},
	}, {
		name: "key limits over the user's",
		spec: KeySpec{User: "alice", Admin: true, Agents: []string{"writer", "coder"}, ExpiresIn: 24 * time.Hour,
			Limits: store.Limits{RequestsPerMinute: 5, SpendUSD: 1, SpendPeriod: "day"}},
		want: Principal{User: "alice", Method: MethodBearer, Admin: true, Agents: []string{"writer", "coder"},
			Limits:    store.Limits{ConcurrentRuns: 2, RequestsPerMinute: 5, TokensPerDay: 5000, SpendUSD: 1, SpendPeriod: "day"},
			keyLimits: store.Limits{RequestsPerMinute: 5, SpendUSD: 1, SpendPeriod: "day"},
			ExpiresAt: &expiry},
		keyCounted: []string{LimitRequests, store.LimitSpend},
	}, {
		name: "key spend without a period counts over a month",
		spec: KeySpec{User: "alice", Limits: store.Limits{ConcurrentRuns: 1, TokensPerDay: 10, SpendUSD: 3}},
		want: Principal{User: "alice", Method: MethodBearer,
			Limits:    store.Limits{ConcurrentRuns: 1, RequestsPerMinute: 60, TokensPerDay: 10, SpendUSD: 3},
			keyLimits: store.Limits{ConcurrentRuns: 1, TokensPerDay: 10, SpendUSD: 3}},
		keyCounted: []string{store.LimitConcurrentRuns, store.LimitTokens, store.LimitSpend},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			secret, k := createKey(t, a, tt.spec)
			p, err := a.Authenticate(bearer(secret))
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			want.KeyID = k.ID
			if diff := cmp.Diff(&want, p, cmpPrincipal); diff != "" {
				t.Errorf("principal (-want +got):\n%s", diff)
			}
			for _, name := range []string{store.LimitConcurrentRuns, store.LimitTokens, store.LimitSpend, LimitRequests, "no_such_limit"} {
				want := ""
				for _, c := range tt.keyCounted {
					if c == name {
						want = k.ID
					}
				}
				if got := p.LimitKey(name); got != want {
					t.Errorf("LimitKey(%s) = %q, want %q", name, got, want)
				}
			}
		})
	}
}

func TestAllowsAgent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		agents []string
		name   string
		want   bool
	}{
		{nil, "writer", true},
		{[]string{}, "anything", true},
		{[]string{"writer", "coder"}, "writer", true},
		{[]string{"writer", "coder"}, "coder", true},
		{[]string{"writer", "coder"}, "reviewer", false},
		{[]string{"writer"}, "Writer", false},
		{[]string{"writer"}, "", false},
	}
	for _, tt := range tests {
		p := &Principal{User: "alice", Agents: tt.agents}
		if got := p.AllowsAgent(tt.name); got != tt.want {
			t.Errorf("Agents %q: AllowsAgent(%q) = %v, want %v", tt.agents, tt.name, got, tt.want)
		}
	}
}

func TestLimitKeyWithoutKey(t *testing.T) {
	t.Parallel()
	// A caller without a key (trusted header, local) counts every limit over the user, whatever it holds.
	p := &Principal{User: "alice", Limits: store.Limits{ConcurrentRuns: 1, RequestsPerMinute: 1, TokensPerDay: 1, SpendUSD: 1},
		keyLimits: store.Limits{ConcurrentRuns: 1, RequestsPerMinute: 1, TokensPerDay: 1, SpendUSD: 1}}
	for _, name := range []string{store.LimitConcurrentRuns, store.LimitTokens, store.LimitSpend, LimitRequests} {
		if got := p.LimitKey(name); got != "" {
			t.Errorf("LimitKey(%s) = %q without a key, want \"\"", name, got)
		}
	}
}

func TestTrustedHeader(t *testing.T) {
	t.Parallel()
	const header = "X-Forwarded-Email"
	defaults := store.Limits{RequestsPerMinute: 60}
	rootLimits := store.Limits{ConcurrentRuns: 9}
	clk := newClock()
	a, _ := newAuth(t, clk, Options{Loopback: true, TrustedHeader: header,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")},
		Admins:         []string{"root@example.com"},
		DefaultLimits:  defaults, UserLimits: map[string]store.Limits{"root@example.com": rootLimits}})
	if !a.Required() {
		t.Fatal("Required() false with a trusted header")
	}
	secret, _ := createKey(t, a, KeySpec{User: "keyholder"})
	long := strings.Repeat("a", MaxUserLen)

	tests := []struct {
		name   string
		remote string
		user   string // the header's value
		extra  []string
		want   *Principal // nil: refused with auth_required
	}{
		{name: "from a proxy", remote: "10.1.2.3:5000", user: "alice@example.com",
			want: &Principal{User: "alice@example.com", Method: MethodTrusted, Limits: defaults}},
		{name: "admin", remote: "10.1.2.3:5000", user: "root@example.com",
			want: &Principal{User: "root@example.com", Method: MethodTrusted, Admin: true, Limits: defaults.Over(rootLimits)}},
		{name: "IPv6 proxy", remote: "[fd00::1]:443", user: "alice@example.com",
			want: &Principal{User: "alice@example.com", Method: MethodTrusted, Limits: defaults}},
		{name: "IPv4-mapped IPv6", remote: "[::ffff:10.1.2.3]:5000", user: "alice@example.com",
			want: &Principal{User: "alice@example.com", Method: MethodTrusted, Limits: defaults}},
		{name: "spaces around the name", remote: "10.1.2.3:5000", user: "  alice@example.com ",
			want: &Principal{User: "alice@example.com", Method: MethodTrusted, Limits: defaults}},
		{name: "longest name", remote: "10.1.2.3:5000", user: long,
			want: &Principal{User: long, Method: MethodTrusted, Limits: defaults}},
		{name: "over a key", remote: "10.1.2.3:5000", user: "alice@example.com", extra: []string{"Authorization", "Bearer " + secret},
			want: &Principal{User: "alice@example.com", Method: MethodTrusted, Limits: defaults}},

		{name: "from elsewhere", remote: "192.0.2.1:1234", user: "alice@example.com"},
		{name: "from loopback", remote: "127.0.0.1:1234", user: "root@example.com"},
		{name: "from elsewhere over IPv6", remote: "[2001:db8::1]:1234", user: "alice@example.com"},
		{name: "mapped, from elsewhere", remote: "[::ffff:192.0.2.1]:1234", user: "alice@example.com"},
		{name: "no port", remote: "10.1.2.3", user: "alice@example.com"},
		{name: "unparsable address", remote: "proxy:80", user: "alice@example.com"},
		{name: "empty", remote: "10.1.2.3:5000", user: ""},
		{name: "only spaces", remote: "10.1.2.3:5000", user: "   "},
		{name: "too long", remote: "10.1.2.3:5000", user: long + "a"},
		{name: "NUL", remote: "10.1.2.3:5000", user: "alice\x00@example.com"},
		{name: "newline", remote: "10.1.2.3:5000", user: "alice\n@example.com"},
		{name: "escape", remote: "10.1.2.3:5000", user: "alice\x1b[31m@example.com"},
		{name: "DEL", remote: "10.1.2.3:5000", user: "alice\x7f@example.com"},
		{name: "C1 control", remote: "10.1.2.3:5000", user: "alice\u009b31m@example.com"},
		{name: "not UTF-8", remote: "10.1.2.3:5000", user: "jos\xe9@example.com"},

		// From elsewhere the header is ignored, not refused: the key decides.
		{name: "ignored before a key", remote: "192.0.2.1:1234", user: "root@example.com", extra: []string{"Authorization", "Bearer " + secret},
			want: &Principal{User: "keyholder", Method: MethodBearer, Limits: defaults}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := request(append([]string{header, tt.user}, tt.extra...)...)
			r.RemoteAddr = tt.remote
			p, err := a.Authenticate(r)
			if tt.want == nil {
				checkRefused(t, err, http.StatusUnauthorized, "auth_required")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, p, cmpPrincipal, cmp.FilterPath(func(p cmp.Path) bool {
				return p.Last().String() == ".KeyID"
			}, cmp.Ignore())); diff != "" {
				t.Errorf("principal (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTrustedHeaderTwice(t *testing.T) {
	t.Parallel()
	// A proxy that adds its header rather than replacing it leaves the client's copy first: with two,
	// which one the proxy set is not known, so neither is believed.
	a, _ := newAuth(t, newClock(), Options{Loopback: true, TrustedHeader: "X-Forwarded-Email",
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Admins: []string{"root@example.com"}})
	tests := [][]string{
		{"root@example.com", "alice@example.com"},
		{"alice@example.com", "alice@example.com"},
		{"", "alice@example.com"},
	}
	for _, values := range tests {
		r := request()
		r.RemoteAddr = "10.1.2.3:5000"
		for _, v := range values {
			r.Header.Add("X-Forwarded-Email", v)
		}
		p, err := a.Authenticate(r)
		if err == nil {
			t.Errorf("header %q: authenticated as %s (admin %v), want it ignored", values, p.User, p.Admin)
			continue
		}
		checkRefused(t, err, http.StatusUnauthorized, "auth_required")
	}
}

func TestTrustedHeaderWithoutProxies(t *testing.T) {
	t.Parallel()
	// A header named but no proxies trusted: nobody can set it.
	a, _ := newAuth(t, newClock(), Options{Loopback: true, TrustedHeader: "X-Forwarded-Email"})
	r := request("X-Forwarded-Email", "root@example.com")
	r.RemoteAddr = "127.0.0.1:1234"
	_, err := a.Authenticate(r)
	checkRefused(t, err, http.StatusUnauthorized, "auth_required")
}

func TestValidUser(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ok   bool
	}{
		{"alice", true},
		{"alice@example.com", true},
		{"Ålice Ünïcode", true},
		{strings.Repeat("x", MaxUserLen), true},
		{"", false},
		{strings.Repeat("x", MaxUserLen+1), false},
		{" alice", false},
		{"alice\t", false},
		{"al\x00ice", false},
		{"al\nice", false},
		{"al\x7fice", false},
		{"al\u0085ice", false},         // NEL, a C1 control
		{"al\u009b31mice", false},      // CSI: a terminal reads what follows as a command
		{"al\xffice", false},           // not UTF-8: JSON would show it as U+FFFD, another name
		{"jos\xe9@example.com", false}, // Latin-1, not UTF-8
	}
	for _, tt := range tests {
		err := ValidUser(tt.name)
		if (err == nil) != tt.ok {
			t.Errorf("ValidUser(%q) = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

// TestRevokeWhileVerifying: a key revoked while a Verify is reading it from the store is not cached
// by that Verify afterwards: the next request is refused at once, not after CacheTTL.
func TestRevokeWhileVerifying(t *testing.T) {
	t.Parallel()
	a, db := newAuth(t, newClock(), Options{Loopback: true})
	secret, k := createKey(t, a, KeySpec{User: "alice"})
	h := hashOf(secret)
	gen := a.generation() // the Verify reads this, then the store: the key is not revoked yet
	stale, err := db.KeyByHash(t.Context(), h[:])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.RevokeKey(t.Context(), "", k.ID); err != nil {
		t.Fatal(err)
	}
	c := &cached{hash: h, fetched: a.opts.Now()}
	a.fromKey(c, stale)
	a.keep(c, gen) // the Verify caches what it read, after the revoke forgot the key
	_, err = a.Verify(t.Context(), secret)
	checkRefused(t, err, http.StatusUnauthorized, "key_revoked")
}

// TestUnknownKeysDoNotFlushTheCache: refusals of made-up keys are kept apart, so a flood of them
// never pushes the keys in use out of the cache.
func TestUnknownKeysDoNotFlushTheCache(t *testing.T) {
	t.Parallel()
	a, _ := newAuth(t, newClock(), Options{Loopback: true})
	secret, _ := createKey(t, a, KeySpec{User: "alice"})
	if _, err := a.Verify(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	for range maxMisses + 10 {
		made, _ := newSecret(KeyPrefix)
		_, err := a.Verify(t.Context(), made)
		checkRefused(t, err, http.StatusUnauthorized, "invalid_key")
	}
	h := hashOf(secret)
	if a.lookup(&h, a.opts.Now()) == nil {
		t.Error("the key in use left the cache after a flood of unknown keys")
	}
}
