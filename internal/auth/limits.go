package auth

import (
	"context"
	"fmt"
	"math"
	"time"

	"chatd/internal/store"
)

// Quota returns the limits a new run of the caller is checked against at now: concurrent runs, tokens
// today and spend this period (UTC), each counted over the key when the key sets it, else over the user.
func (p *Principal) Quota(now time.Time) []store.Limit {
	var q []store.Limit
	l := p.Limits
	if l.ConcurrentRuns > 0 {
		q = append(q, store.Limit{Name: store.LimitConcurrentRuns, KeyID: p.LimitKey(store.LimitConcurrentRuns), Max: int64(l.ConcurrentRuns)})
	}
	if l.TokensPerDay > 0 {
		q = append(q, store.Limit{Name: store.LimitTokens, KeyID: p.LimitKey(store.LimitTokens), Max: l.TokensPerDay,
			Since: PeriodStart("day", now)})
	}
	if l.SpendUSD > 0 {
		q = append(q, store.Limit{Name: store.LimitSpend, KeyID: p.LimitKey(store.LimitSpend), Max: NanoUSD(l.SpendUSD),
			Since: PeriodStart(l.SpendPeriod, now)})
	}
	return q
}

// Quota returns the limits a send of user with the API key keyID ("" without a key: a sign-in by the
// trusted header, or chatd without keys) is admitted with now, as Principal.Quota gives them to that
// caller: the user's, each replaced by the key's when the key sets it. A key the user no longer has
// counts as none: its own refusal (revoked) is the caller's to give. It is chat.Options.Quota.
func (a *Authenticator) Quota(ctx context.Context, user, keyID string) ([]store.Limit, error) {
	p := &Principal{User: user, Limits: a.userLimits(user)}
	if keyID != "" {
		keys, err := a.opts.Store.Keys(ctx, user)
		if err != nil {
			return nil, fmt.Errorf("auth: limits of key %s: %w", keyID, err)
		}
		for _, k := range keys {
			if k.ID == keyID {
				p.KeyID, p.Limits, p.keyLimits = k.ID, p.Limits.Over(k.Limits), k.Limits
			}
		}
	}
	return p.Quota(a.opts.Now()), nil
}

// NanoUSD converts dollars to the nano-dollars costs are counted in.
func NanoUSD(usd float64) int64 {
	return int64(math.Round(usd * 1e9))
}

// PeriodStart is the start, in UTC, of the day, week (from Monday) or month ("" too) holding now.
func PeriodStart(period string, now time.Time) time.Time {
	now = now.UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	switch period {
	case "day":
		return day
	case "week":
		return day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
	}
	return time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// periodEnd is the end of the period that started at start.
func periodEnd(period string, start time.Time) time.Time {
	switch period {
	case "day":
		return start.AddDate(0, 0, 1)
	case "week":
		return start.AddDate(0, 0, 7)
	}
	return start.AddDate(0, 1, 0)
}

// concurrentRetry is the Retry-After of a refusal for too many runs: when one ends is not known.
const concurrentRetry = 5 * time.Second

// RetryAfter is how long a caller refused by a limit should wait: until the period it counts ends.
func RetryAfter(l store.Limit, spendPeriod string, now time.Time) time.Duration {
	switch l.Name {
	case store.LimitTokens:
		return periodEnd("day", l.Since).Sub(now)
	case store.LimitSpend:
		return periodEnd(spendPeriod, l.Since).Sub(now)
	}
	return concurrentRetry
}

// LimitMessage says, for a person, which limit a refusal hit.
func LimitMessage(e *store.LimitError) string {
	whose := "your"
	if e.KeyID != "" {
		whose = "this API key's"
	}
	switch e.Name {
	case store.LimitConcurrentRuns:
		return fmt.Sprintf("%s limit of %d runs at once is reached; wait for one to end", whose, e.Max)
	case store.LimitTokens:
		return fmt.Sprintf("%s limit of %d tokens a day is used up (%d used today, UTC)", whose, e.Max, e.Used)
	case store.LimitSpend:
		return fmt.Sprintf("%s spend budget of $%.2f is used up ($%.4f used since %s)", whose,
			float64(e.Max)/1e9, float64(e.Used)/1e9, e.Since.Format("2006-01-02"))
	}
	return e.Error()
}
