package auth

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/store"
)

const sessionTTL = 24 * time.Hour

func TestSignIn(t *testing.T) {
	t.Parallel()
	limits := store.Limits{RequestsPerMinute: 7}
	clk := newClock()
	a, _ := newAuth(t, clk, Options{Loopback: true, SessionTTL: sessionTTL, CacheTTL: 10 * time.Second})
	forever, k1 := createKey(t, a, KeySpec{User: "alice", Agents: []string{"writer"}, Limits: limits})
	soon, k2 := createKey(t, a, KeySpec{User: "bob", Admin: true, ExpiresIn: 2 * time.Hour})
	sessionEnd, keyEnd := t0.Add(sessionTTL), t0.Add(2*time.Hour)

	tests := []struct {
		name   string
		secret string
		want   *Principal
	}{
		{"a key that never expires", forever, &Principal{User: "alice", Method: MethodCookie, KeyID: k1.ID,
			Agents: []string{"writer"}, Limits: limits, keyLimits: limits, ExpiresAt: &sessionEnd}},
		{"a key that expires before SessionTTL", soon, &Principal{User: "bob", Method: MethodCookie, KeyID: k2.ID,
			Admin: true, ExpiresAt: &keyEnd}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			value, p, expires, err := a.SignIn(t.Context(), tt.secret)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(value, cookiePrefix) || !wellFormed(value, cookiePrefix) {
				t.Errorf("cookie value %q is not chs_ and 43 base64url characters", value)
			}
			if strings.Contains(value, tt.secret[len(KeyPrefix):]) {
				t.Errorf("cookie value %q carries the key", value)
			}
			if !expires.Equal(*tt.want.ExpiresAt) {
				t.Errorf("expires %v, want %v", expires, *tt.want.ExpiresAt)
			}
			if diff := cmp.Diff(tt.want, p, cmpPrincipal); diff != "" {
				t.Errorf("SignIn's principal (-want +got):\n%s", diff)
			}
			got, err := a.Authenticate(withCookie(value))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmpPrincipal); diff != "" {
				t.Errorf("the cookie's principal (-want +got):\n%s", diff)
			}
			// The key's own principal is untouched by the sign-in.
			kp, err := a.Verify(t.Context(), tt.secret)
			if err != nil {
				t.Fatal(err)
			}
			if kp.Method != MethodBearer {
				t.Errorf("the key's principal became %s", kp.Method)
			}
		})
	}
}

func TestSignOut(t *testing.T) {
	t.Parallel()
	clk := newClock()
	a, _ := newAuth(t, clk, Options{Loopback: true, SessionTTL: sessionTTL})
	secret, _ := createKey(t, a, KeySpec{User: "alice"})
	value, _, _, err := a.SignIn(t.Context(), secret)
	if err != nil {
		t.Fatal(err)
	}
	other, _, _, err := a.SignIn(t.Context(), secret)
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Authenticate(withCookie(value)) // cached
	checkUser(t, p, err, "alice", MethodCookie)

	if err := a.SignOut(t.Context(), value); err != nil {
		t.Fatal(err)
	}
	_, err = a.Authenticate(withCookie(value))
	checkRefused(t, err, http.StatusUnauthorized, "invalid_session")

	// Only that sign-in ended: the key's other sign-in and the key itself still work.
	p, err = a.Authenticate(withCookie(other))
	checkUser(t, p, err, "alice", MethodCookie)
	p, err = a.Authenticate(bearer(secret))
	checkUser(t, p, err, "alice", MethodBearer)

	for _, v := range []string{value, "", "garbage", secret} {
		if err := a.SignOut(t.Context(), v); err != nil {
			t.Errorf("SignOut(%q) = %v, want nil", v, err)
		}
	}
}

func TestRevokeEndsSignIns(t *testing.T) {
	t.Parallel()
	const ttl = 10 * time.Second
	clk := newClock()
	a, db := newAuth(t, clk, Options{Loopback: true, SessionTTL: sessionTTL, CacheTTL: ttl})

	t.Run("through the Authenticator", func(t *testing.T) {
		secret, k := createKey(t, a, KeySpec{User: "alice"})
		value, _, _, err := a.SignIn(t.Context(), secret)
		if err != nil {
			t.Fatal(err)
		}
		p, err := a.Authenticate(withCookie(value)) // cached
		checkUser(t, p, err, "alice", MethodCookie)
		if _, err := a.RevokeKey(t.Context(), "", k.ID); err != nil {
			t.Fatal(err)
		}
		_, err = a.Authenticate(withCookie(value))
		checkRefused(t, err, http.StatusUnauthorized, "invalid_session")
	})

	t.Run("by another process", func(t *testing.T) {
		secret, k := createKey(t, a, KeySpec{User: "bob"})
		value, _, _, err := a.SignIn(t.Context(), secret)
		if err != nil {
			t.Fatal(err)
		}
		p, err := a.Authenticate(withCookie(value))
		checkUser(t, p, err, "bob", MethodCookie)
		if _, err := db.RevokeKey(t.Context(), "", k.ID); err != nil {
			t.Fatal(err)
		}
		clk.Add(ttl - time.Nanosecond)
		p, err = a.Authenticate(withCookie(value))
		checkUser(t, p, err, "bob", MethodCookie)
		clk.Add(time.Nanosecond)
		_, err = a.Authenticate(withCookie(value))
		checkRefused(t, err, http.StatusUnauthorized, "invalid_session")
	})
}

func TestSignInExpires(t *testing.T) {
	t.Parallel()
	const ttl = 10 * time.Second
	clk := newClock()
	a, _ := newAuth(t, clk, Options{Loopback: true, SessionTTL: sessionTTL, CacheTTL: ttl})
	secret, _ := createKey(t, a, KeySpec{User: "alice"})
	value, _, _, err := a.SignIn(t.Context(), secret)
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(sessionTTL - time.Nanosecond)
	p, err := a.Authenticate(withCookie(value)) // fetched again, and cached
	checkUser(t, p, err, "alice", MethodCookie)
	clk.Add(time.Nanosecond)
	_, err = a.Authenticate(withCookie(value))
	checkRefused(t, err, http.StatusUnauthorized, "session_expired")
	clk.Add(ttl) // and from the store
	_, err = a.Authenticate(withCookie(value))
	checkRefused(t, err, http.StatusUnauthorized, "session_expired")

	// The key outlives its sign-in.
	p, err = a.Authenticate(bearer(secret))
	checkUser(t, p, err, "alice", MethodBearer)
}

func TestSignInRefused(t *testing.T) {
	t.Parallel()
	clk := newClock()
	a, _ := newAuth(t, clk, Options{Loopback: true, SessionTTL: sessionTTL})
	revoked, k := createKey(t, a, KeySpec{User: "alice"})
	if _, err := a.RevokeKey(t.Context(), "", k.ID); err != nil {
		t.Fatal(err)
	}
	expired, _ := createKey(t, a, KeySpec{User: "alice", ExpiresIn: time.Minute})
	clk.Add(time.Minute)

	tests := []struct {
		name, secret, code string
	}{
		{"empty", "", "invalid_key"},
		{"malformed", "chd_short", "invalid_key"},
		{"unknown", KeyPrefix + strings.Repeat("A", 43), "invalid_key"},
		{"a cookie value", cookiePrefix + strings.Repeat("A", 43), "invalid_key"},
		{"revoked", revoked, "key_revoked"},
		{"expired", expired, "key_expired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			value, p, _, err := a.SignIn(t.Context(), tt.secret)
			if value != "" || p != nil {
				t.Errorf("SignIn refused with a cookie %q and a principal %+v", value, p)
			}
			checkRefused(t, err, http.StatusUnauthorized, tt.code)
		})
	}
}

// TestSignInStampedByItsClock: a sign-in is stored as made at the Authenticator's clock, and signing in
// forgets the sign-ins expired by that clock, not by the store's: one still live by chatd's clock stays.
func TestSignInStampedByItsClock(t *testing.T) {
	t.Parallel()
	// Long ago: by the store's own clock, every sign-in made here has expired.
	made := time.Date(2001, 2, 3, 10, 0, 0, 0, time.UTC)
	clk := &clock{t: made}
	a, db := newAuth(t, clk, Options{Loopback: true, SessionTTL: sessionTTL})
	secret, _ := createKey(t, a, KeySpec{User: "alice"})
	stored := func(value string) (*store.AuthSession, error) {
		h := hashOf(value)
		s, _, err := db.AuthSession(t.Context(), h[:])
		return s, err
	}

	first, _, _, err := a.SignIn(t.Context(), secret)
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Hour)
	second, _, _, err := a.SignIn(t.Context(), secret)
	if err != nil {
		t.Fatal(err)
	}
	s, err := stored(first)
	if err != nil {
		t.Fatalf("the first sign-in after the second, an hour into its day: %v; want it kept", err)
	}
	if !s.CreatedAt.Equal(made) || !s.ExpiresAt.Equal(made.Add(sessionTTL)) {
		t.Errorf("the first sign-in is stored as made at %v, expiring at %v; want %v and %v",
			s.CreatedAt, s.ExpiresAt, made, made.Add(sessionTTL))
	}

	clk.Add(sessionTTL - 30*time.Minute) // past the first's end, before the second's
	if _, _, _, err := a.SignIn(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	if _, err := stored(first); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the expired first sign-in after a third: %v; want it forgotten", err)
	}
	if _, err := stored(second); err != nil {
		t.Errorf("the second sign-in, still live, after a third: %v; want it kept", err)
	}
}
