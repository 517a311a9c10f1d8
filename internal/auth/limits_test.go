package auth

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/store"
)

func date(y int, m time.Month, d, h, min int) time.Time {
	return time.Date(y, m, d, h, min, 0, 0, time.UTC)
}

func TestQuota(t *testing.T) {
	t.Parallel()
	now := date(2026, 3, 4, 18, 30) // a Wednesday
	midnight, monday, first := date(2026, 3, 4, 0, 0), date(2026, 3, 2, 0, 0), date(2026, 3, 1, 0, 0)
	all := store.Limits{ConcurrentRuns: 3, RequestsPerMinute: 60, TokensPerDay: 5000, SpendUSD: 1.005}

	tests := []struct {
		name string
		p    Principal
		now  time.Time
		want []store.Limit
	}{
		{name: "no limits", p: Principal{User: "alice", KeyID: "k1"}, now: now},
		{name: "only requests per minute", p: Principal{User: "alice", Limits: store.Limits{RequestsPerMinute: 5}}, now: now},
		{name: "the user's", p: Principal{User: "alice", Limits: all}, now: now, want: []store.Limit{
			{Name: store.LimitConcurrentRuns, Max: 3},
			{Name: store.LimitTokens, Max: 5000, Since: midnight},
			{Name: store.LimitSpend, Max: 1_005_000_000, Since: first},
		}},
		{name: "a key's without limits of its own", p: Principal{User: "alice", KeyID: "k1", Limits: all}, now: now, want: []store.Limit{
			{Name: store.LimitConcurrentRuns, Max: 3},
			{Name: store.LimitTokens, Max: 5000, Since: midnight},
			{Name: store.LimitSpend, Max: 1_005_000_000, Since: first},
		}},
		{name: "a key's own tokens and weekly spend",
			p: Principal{User: "alice", KeyID: "k1",
				Limits:    store.Limits{ConcurrentRuns: 3, TokensPerDay: 100, SpendUSD: 19.99, SpendPeriod: "week"},
				keyLimits: store.Limits{TokensPerDay: 100, SpendUSD: 19.99, SpendPeriod: "week"}},
			now: now, want: []store.Limit{
				{Name: store.LimitConcurrentRuns, Max: 3},
				{Name: store.LimitTokens, KeyID: "k1", Max: 100, Since: midnight},
				{Name: store.LimitSpend, KeyID: "k1", Max: 19_990_000_000, Since: monday},
			}},
		{name: "a key's own runs, daily spend",
			p: Principal{User: "alice", KeyID: "k1",
				Limits:    store.Limits{ConcurrentRuns: 1, SpendUSD: 0.000000001, SpendPeriod: "day"},
				keyLimits: store.Limits{ConcurrentRuns: 1}},
			now: now, want: []store.Limit{
				{Name: store.LimitConcurrentRuns, KeyID: "k1", Max: 1},
				{Name: store.LimitSpend, Max: 1, Since: midnight},
			}},
		{name: "negative limits are none",
			p: Principal{User: "alice", Limits: store.Limits{ConcurrentRuns: -1, TokensPerDay: -1, SpendUSD: -1}}, now: now},
		{name: "periods are UTC's",
			// Monday 02:00 at +05:00 is Sunday 21:00 UTC: the day, week and month are Sunday's.
			p:   Principal{User: "alice", Limits: store.Limits{TokensPerDay: 1, SpendUSD: 1, SpendPeriod: "week"}},
			now: time.Date(2026, 3, 2, 2, 0, 0, 0, time.FixedZone("+05", 5*3600)),
			want: []store.Limit{
				{Name: store.LimitTokens, Max: 1, Since: date(2026, 3, 1, 0, 0)},
				{Name: store.LimitSpend, Max: 1_000_000_000, Since: date(2026, 2, 23, 0, 0)},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.p.Quota(tt.now)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Quota (-want +got):\n%s", diff)
			}
			for _, l := range got {
				if !l.Since.IsZero() && l.Since.Location() != time.UTC {
					t.Errorf("%s: Since %v is not in UTC", l.Name, l.Since)
				}
			}
		})
	}
}

func TestPeriodStart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		period string
		now    time.Time
		want   time.Time
	}{
		{"day", date(2026, 3, 4, 18, 30), date(2026, 3, 4, 0, 0)},
		{"day", date(2026, 3, 4, 0, 0), date(2026, 3, 4, 0, 0)},
		{"day", time.Date(2026, 3, 4, 23, 59, 59, 999999999, time.UTC), date(2026, 3, 4, 0, 0)},
		{"day", time.Date(2026, 3, 4, 1, 0, 0, 0, time.FixedZone("+02", 2*3600)), date(2026, 3, 3, 0, 0)},
		{"day", time.Date(2026, 3, 4, 22, 0, 0, 0, time.FixedZone("-03", -3*3600)), date(2026, 3, 5, 0, 0)},
		{"week", date(2026, 3, 2, 0, 0), date(2026, 3, 2, 0, 0)},    // Monday
		{"week", date(2026, 3, 4, 18, 30), date(2026, 3, 2, 0, 0)},  // Wednesday
		{"week", date(2026, 3, 8, 23, 59), date(2026, 3, 2, 0, 0)},  // Sunday
		{"week", date(2026, 1, 1, 12, 0), date(2025, 12, 29, 0, 0)}, // Thursday, over a new year
		{"month", date(2026, 3, 4, 18, 30), date(2026, 3, 1, 0, 0)},
		{"month", date(2026, 3, 1, 0, 0), date(2026, 3, 1, 0, 0)},
		{"", date(2026, 2, 28, 23, 59), date(2026, 2, 1, 0, 0)},
		{"month", time.Date(2026, 3, 1, 1, 0, 0, 0, time.FixedZone("+02", 2*3600)), date(2026, 2, 1, 0, 0)},
	}
	for _, tt := range tests {
		got := PeriodStart(tt.period, tt.now)
		if !got.Equal(tt.want) || got.Location() != time.UTC {
			t.Errorf("PeriodStart(%q, %v) = %v, want %v", tt.period, tt.now, got, tt.want)
		}
	}
}

func TestNanoUSD(t *testing.T) {
	t.Parallel()
	tests := []struct {
		usd  float64
		want int64
	}{
		{0, 0},
		{1, 1_000_000_000},
		{0.1, 100_000_000},
		{1.005, 1_005_000_000}, // 1.005e9 is 1004999999.99… in floating point: rounded, not truncated
		{19.99, 19_990_000_000},
		{0.000000001, 1},
		{0.0000000004, 0},
		{0.0000000006, 1},
		{1000000, 1_000_000_000_000_000},
	}
	for _, tt := range tests {
		if got := NanoUSD(tt.usd); got != tt.want {
			t.Errorf("NanoUSD(%v) = %d, want %d", tt.usd, got, tt.want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := date(2026, 3, 4, 18, 30) // a Wednesday
	tests := []struct {
		name        string
		limit       string
		spendPeriod string
		now         time.Time
		want        time.Duration
	}{
		{"tokens: until UTC midnight", store.LimitTokens, "", now, 5*time.Hour + 30*time.Minute},
		{"tokens at midnight: a whole day", store.LimitTokens, "week", date(2026, 3, 4, 0, 0), 24 * time.Hour},
		{"tokens a second before midnight", store.LimitTokens, "", time.Date(2026, 3, 4, 23, 59, 59, 0, time.UTC), time.Second},
		{"daily spend", store.LimitSpend, "day", now, 5*time.Hour + 30*time.Minute},
		{"weekly spend: until Monday", store.LimitSpend, "week", now, 4*24*time.Hour + 5*time.Hour + 30*time.Minute},
		{"monthly spend: until the first", store.LimitSpend, "month", now, 27*24*time.Hour + 5*time.Hour + 30*time.Minute},
		{"spend with the default period", store.LimitSpend, "", now, 27*24*time.Hour + 5*time.Hour + 30*time.Minute},
		{"spend in February", store.LimitSpend, "month", date(2026, 2, 28, 12, 0), 12 * time.Hour},
		{"concurrent runs", store.LimitConcurrentRuns, "", now, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The limit as Quota made it at now.
			p := Principal{User: "alice", Limits: store.Limits{ConcurrentRuns: 1, TokensPerDay: 1, SpendUSD: 1, SpendPeriod: tt.spendPeriod}}
			var limit *store.Limit
			for _, l := range p.Quota(tt.now) {
				if l.Name == tt.limit {
					limit = &l
				}
			}
			if limit == nil {
				t.Fatalf("Quota has no %s", tt.limit)
			}
			if got := RetryAfter(*limit, tt.spendPeriod, tt.now); got != tt.want {
				t.Errorf("RetryAfter = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestLimitMessage(t *testing.T) {
	t.Parallel()
	since := date(2026, 3, 2, 0, 0)
	tests := []struct {
		err  store.LimitError
		want string
	}{
		{store.LimitError{Limit: store.Limit{Name: store.LimitConcurrentRuns, Max: 2}, Used: 2},
			"your limit of 2 runs at once is reached; wait for one to end"},
		{store.LimitError{Limit: store.Limit{Name: store.LimitTokens, KeyID: "k1", Max: 1000}, Used: 1200},
			"this API key's limit of 1000 tokens a day is used up (1200 used today, UTC)"},
		{store.LimitError{Limit: store.Limit{Name: store.LimitSpend, Max: 19_990_000_000, Since: since}, Used: 20_000_100_000},
			"your spend budget of $19.99 is used up ($20.0001 used since 2026-03-02)"},
	}
	for _, tt := range tests {
		if got := LimitMessage(&tt.err); got != tt.want {
			t.Errorf("LimitMessage(%s) = %q, want %q", tt.err.Name, got, tt.want)
		}
	}
}

// TestQuotaOfKey: Authenticator.Quota gives the limits a send with a key (or without one) is admitted
// with — the same as the key's caller's Principal.Quota —, which a resume of a run that key sent is
// checked against.
func TestQuotaOfKey(t *testing.T) {
	t.Parallel()
	clk := newClock()
	a, _ := newAuth(t, clk, Options{DefaultLimits: store.Limits{ConcurrentRuns: 5, TokensPerDay: 1000},
		UserLimits: map[string]store.Limits{"bob": {TokensPerDay: 2000}}})
	secret, k := createKey(t, a, KeySpec{User: "bob", Limits: store.Limits{ConcurrentRuns: 1}})
	p, err := a.Verify(t.Context(), secret)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, user, keyID string
		want              []store.Limit
	}{
		{"the key's", "bob", k.ID, p.Quota(clk.Now())},
		{"the user's, without a key", "bob", "", []store.Limit{{Name: store.LimitConcurrentRuns, Max: 5},
			{Name: store.LimitTokens, Max: 2000, Since: PeriodStart("day", clk.Now())}}},
		{"the user's, for a key the user does not have", "carol", k.ID, []store.Limit{{Name: store.LimitConcurrentRuns, Max: 5},
			{Name: store.LimitTokens, Max: 1000, Since: PeriodStart("day", clk.Now())}}},
	} {
		got, err := a.Quota(t.Context(), tt.user, tt.keyID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: (-want +got)\n%s", tt.name, diff)
		}
	}
	if want := (store.Limit{Name: store.LimitConcurrentRuns, KeyID: k.ID, Max: 1}); !cmp.Equal(p.Quota(clk.Now())[0], want) {
		t.Errorf("the key's concurrent runs: %+v, want %+v", p.Quota(clk.Now())[0], want)
	}
}
