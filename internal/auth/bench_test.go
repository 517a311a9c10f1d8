package auth

import (
	"testing"
)

// cachedKey returns an Authenticator whose cache holds a verified key, and the key.
func cachedKey(tb testing.TB) (*Authenticator, string) {
	tb.Helper()
	clk := newClock()
	a, _ := newAuth(tb, clk, Options{Loopback: true})
	secret, _ := createKey(tb, a, KeySpec{User: "alice", Agents: []string{"writer"}})
	if _, err := a.Verify(tb.Context(), secret); err != nil {
		tb.Fatal(err)
	}
	return a, secret
}

func BenchmarkVerifyCached(b *testing.B) {
	a, secret := cachedKey(b)
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Verify(ctx, secret); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAuthenticateBearer(b *testing.B) {
	a, secret := cachedKey(b)
	r := bearer(secret)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Authenticate(r); err != nil {
			b.Fatal(err)
		}
	}
}
