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

// A key verified once is served from the cache without allocating: every request pays this.
func TestVerifyCachedAllocates0(t *testing.T) {
	a, secret := cachedKey(t)
	r := bearer(secret)
	tests := []struct {
		name string
		f    func()
	}{
		{"Verify", func() { _, _ = a.Verify(r.Context(), secret) }},
		{"Authenticate", func() { _, _ = a.Authenticate(r) }},
	}
	for _, tt := range tests {
		if n := testing.AllocsPerRun(100, tt.f); n != 0 {
			t.Errorf("%s of a cached key: %v allocations, want 0", tt.name, n)
		}
	}
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
