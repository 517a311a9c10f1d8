package auth

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/store"
)

func TestCreateKeyRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		spec KeySpec
	}{
		{"no user", KeySpec{}},
		{"user with a space in front", KeySpec{User: " alice"}},
		{"user with a control character", KeySpec{User: "ali\x01ce"}},
		{"user too long", KeySpec{User: strings.Repeat("a", MaxUserLen+1)}},
		{"name too long", KeySpec{User: "alice", Name: strings.Repeat("n", MaxKeyName+1)}},
		{"expiry in the past", KeySpec{User: "alice", ExpiresIn: -time.Second}},
		{"negative runs", KeySpec{User: "alice", Limits: store.Limits{ConcurrentRuns: -1}}},
		{"negative requests", KeySpec{User: "alice", Limits: store.Limits{RequestsPerMinute: -1}}},
		{"negative tokens", KeySpec{User: "alice", Limits: store.Limits{TokensPerDay: -1}}},
		{"negative spend", KeySpec{User: "alice", Limits: store.Limits{SpendUSD: -0.01}}},
		{"unknown period", KeySpec{User: "alice", Limits: store.Limits{SpendUSD: 1, SpendPeriod: "year"}}},
		// A name is shown in lists and logs: control characters would be a terminal's commands.
		{"name with ESC", KeySpec{User: "alice", Name: "laptop\x1b[2J"}},
		{"name with a newline", KeySpec{User: "alice", Name: "laptop\nlevel=INFO msg=forged"}},
		{"name with C1 CSI", KeySpec{User: "alice", Name: "laptop\u009b2J"}},
		{"name not UTF-8", KeySpec{User: "alice", Name: "laptop\xff"}},
		{"too many agents", KeySpec{User: "alice", Agents: make([]string, MaxKeyAgents+1)}},
		{"spend under a micro-dollar", KeySpec{User: "alice", Limits: store.Limits{SpendUSD: MinSpendUSD / 10}}},
		{"spend over a billion", KeySpec{User: "alice", Limits: store.Limits{SpendUSD: MaxSpendUSD * 10}}},
		{"spend NaN", KeySpec{User: "alice", Limits: store.Limits{SpendUSD: math.NaN()}}},
		{"spend +Inf", KeySpec{User: "alice", Limits: store.Limits{SpendUSD: math.Inf(1)}}},
	}
	a, db := newAuth(t, newClock(), Options{Loopback: true})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			secret, k, err := a.CreateKey(t.Context(), tt.spec)
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("err = %v, want ErrInvalidSpec", err)
			}
			if secret != "" || k != nil {
				t.Errorf("refused, yet returned %q and %+v", secret, k)
			}
		})
	}
	if a.Required() {
		t.Error("Required() after only refused keys")
	}
	if has, err := db.HasKeys(t.Context()); err != nil || has {
		t.Errorf("HasKeys = %v, %v after only refused keys", has, err)
	}
}

func TestCreateKeyLimits(t *testing.T) {
	t.Parallel()
	a, _ := newAuth(t, newClock(), Options{Loopback: true})
	for _, spec := range []KeySpec{
		{User: "alice", Name: strings.Repeat("n", MaxKeyName)},
		{User: strings.Repeat("a", MaxUserLen)},
		{User: "alice", Limits: store.Limits{ConcurrentRuns: 1, RequestsPerMinute: 1, TokensPerDay: 1, SpendUSD: 1, SpendPeriod: "week"}},
		{User: "alice", Name: "Zoë's laptop – 2 ☕"},
		{User: "alice", Agents: slices.Repeat([]string{"writer"}, MaxKeyAgents)},
		{User: "alice", Limits: store.Limits{SpendUSD: MinSpendUSD}},
		{User: "alice", Limits: store.Limits{SpendUSD: MaxSpendUSD}},
	} {
		if _, _, err := a.CreateKey(t.Context(), spec); err != nil {
			t.Errorf("CreateKey(%+v) = %v", spec, err)
		}
	}
}

func TestParseExpiry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want time.Duration // 0: refused
	}{
		{"90d", 90 * 24 * time.Hour},
		{"1d", 24 * time.Hour},
		{"36500d", 36500 * 24 * time.Hour},
		{"720h", 720 * time.Hour},
		{"90m", 90 * time.Minute},
		{"1h30m", 90 * time.Minute},
		{"", 0},
		{"d", 0},
		{"0d", 0},
		{"-1d", 0},
		{"36501d", 0},
		{"1.5d", 0},
		{"90D", 0},
		{"ninety days", 0},
		{"0", 0},
		{"0s", 0},
		{"-5h", 0},
		{"90", 0},
	}
	for _, tt := range tests {
		got, err := ParseExpiry(tt.in)
		switch {
		case tt.want == 0 && !errors.Is(err, ErrInvalidSpec):
			t.Errorf("ParseExpiry(%q) = %v, %v; want ErrInvalidSpec", tt.in, got, err)
		case tt.want != 0 && (err != nil || got != tt.want):
			t.Errorf("ParseExpiry(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestCheckLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		limits store.Limits
		ok     bool
	}{
		{store.Limits{}, true},
		{store.Limits{ConcurrentRuns: 1, RequestsPerMinute: 2, TokensPerDay: 3, SpendUSD: 4}, true},
		{store.Limits{SpendUSD: 1, SpendPeriod: "day"}, true},
		{store.Limits{SpendUSD: 1, SpendPeriod: "week"}, true},
		{store.Limits{SpendUSD: 1, SpendPeriod: "month"}, true},
		{store.Limits{ConcurrentRuns: -1}, false},
		{store.Limits{RequestsPerMinute: -1}, false},
		{store.Limits{TokensPerDay: -1}, false},
		{store.Limits{SpendUSD: -1}, false},
		{store.Limits{SpendPeriod: "Month"}, false},
		{store.Limits{SpendPeriod: "year"}, false},
		{store.Limits{SpendUSD: MinSpendUSD}, true},
		{store.Limits{SpendUSD: MaxSpendUSD}, true},
		{store.Limits{SpendUSD: 1e-7}, false},
		{store.Limits{SpendUSD: 1e10}, false},
		{store.Limits{SpendUSD: math.NaN()}, false},
		{store.Limits{SpendUSD: math.Inf(1)}, false},
		{store.Limits{SpendUSD: math.Inf(-1)}, false},
	}
	for _, tt := range tests {
		err := CheckLimits(tt.limits)
		if tt.ok && err != nil || !tt.ok && !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("CheckLimits(%+v) = %v, want ok %v", tt.limits, err, tt.ok)
		}
	}
}

func TestCreateKeyKeepsNoSecret(t *testing.T) {
	t.Parallel()
	clk := newClock()
	a, db := newAuth(t, clk, Options{Loopback: true})
	secret, k := createKey(t, a, KeySpec{User: "alice", Name: "laptop", Agents: []string{"writer"}, ExpiresIn: time.Hour})
	other, _ := createKey(t, a, KeySpec{User: "alice"})

	if !wellFormed(secret, KeyPrefix) {
		t.Fatalf("secret %q is not chd_ and 43 base64url characters", secret)
	}
	if secret == other {
		t.Fatal("two keys with the same secret")
	}
	if k.Prefix != secret[:10] {
		t.Errorf("Prefix %q, want the secret's first 10 characters %q", k.Prefix, secret[:10])
	}
	sum := sha256.Sum256([]byte(secret))
	if !bytes.Equal(k.Hash, sum[:]) {
		t.Errorf("Hash %x is not the secret's SHA-256 %x", k.Hash, sum)
	}

	stored, err := db.Keys(t.Context(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 2 {
		t.Fatalf("%d keys stored, want 2", len(stored))
	}
	byHash, err := db.KeyByHash(t.Context(), sum[:])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(k, byHash); diff != "" {
		t.Errorf("stored key differs from CreateKey's (-returned +stored):\n%s", diff)
	}
	// Past the prefix, nothing of the secret is kept: not in any field, not in any encoding of the hash.
	rest := secret[10:]
	for _, key := range append(stored, *k) {
		dump := fmt.Sprintf("%+v %#v %x %s", key, key, key.Hash, key.Hash)
		for _, part := range []string{rest, rest[:16], rest[len(rest)-16:]} {
			if strings.Contains(dump, part) {
				t.Errorf("key %s keeps part of the secret: %s", key.ID, dump)
			}
		}
		if bytes.Contains(key.Hash, []byte(secret[len(KeyPrefix):])) {
			t.Errorf("key %s's Hash carries the secret", key.ID)
		}
	}
}

func TestCreateKeyWithoutAuthenticator(t *testing.T) {
	t.Parallel()
	// cmd/chatd makes keys with the package's CreateKey before any Authenticator runs.
	db := openStore(t)
	secret, k, err := CreateKey(t.Context(), db, KeySpec{User: "alice", ExpiresIn: 48 * time.Hour}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if k.ExpiresAt == nil || !k.ExpiresAt.Equal(t0.Add(48*time.Hour)) {
		t.Errorf("ExpiresAt = %v, want %v", k.ExpiresAt, t0.Add(48*time.Hour))
	}
	clk := newClock()
	a, err := New(t.Context(), Options{Store: db, Loopback: true, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Authenticate(bearer(secret))
	checkUser(t, p, err, "alice", MethodBearer)
}
