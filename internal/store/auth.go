package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrLimit: a send would pass one of the caller's limits (CreateRun with Quota). The error is a
// *LimitError naming the limit.
var ErrLimit = errors.New("limit reached")

// Names of the limits a Quota checks.
const (
	LimitConcurrentRuns = "concurrent_runs" // runs running or queued
	LimitTokens         = "tokens_per_day"  // input + output tokens since Since
	LimitSpend          = "spend"           // cost since Since
)

// Limit is one limit CreateRun checks in its transaction, so that concurrent sends cannot all pass it.
// It counts, with KeyID, the runs or usage of one of the user's keys; without, the user's, leaving out
// those of the keys that set their own limit of the kind (they count over the key alone).
type Limit struct {
	Name  string // LimitConcurrentRuns, LimitTokens or LimitSpend
	KeyID string // "": the user's
	Max   int64  // runs, tokens, or nano-USD
	Since time.Time
}

// LimitError is a limit CreateRun found reached: Used of Max, counted since Since.
type LimitError struct {
	Limit
	Used int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s: %d of %d used", e.Name, e.Used, e.Max)
}

func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// Limits are what a user may use, set in the config per user and overridden per key; zero means no
// limit. They are stored with a key as JSON, which is why they carry tags.
type Limits struct {
	ConcurrentRuns    int     `json:"concurrent_runs,omitempty"`
	RequestsPerMinute int     `json:"requests_per_minute,omitempty"`
	TokensPerDay      int64   `json:"tokens_per_day,omitempty"`
	SpendUSD          float64 `json:"spend_usd,omitempty"`
	// SpendPeriod is the period SpendUSD counts over: "day", "week" (from Monday) or "month" (the
	// default), in UTC.
	SpendPeriod string `json:"spend_period,omitempty"`
}

// The range of a spend budget: costs are counted in nano-dollars, in 63 bits.
const (
	MinSpendUSD = 1e-6
	MaxSpendUSD = 1e9
)

// Check refuses limits that cannot be meant: negative ones, a spend budget out of range (NaN and
// infinities too), an unknown spend period.
func (l Limits) Check() error {
	if l.ConcurrentRuns < 0 || l.RequestsPerMinute < 0 || l.TokensPerDay < 0 || l.SpendUSD < 0 {
		return errors.New("limits are positive numbers (0: no limit)")
	}
	if l.SpendUSD != 0 && !(l.SpendUSD >= MinSpendUSD && l.SpendUSD <= MaxSpendUSD) {
		return fmt.Errorf("spend_usd is from $%g to $%g (0: no budget)", MinSpendUSD, MaxSpendUSD)
	}
	switch l.SpendPeriod {
	case "", "day", "week", "month":
		return nil
	}
	return fmt.Errorf("spend_period is day, week or month, not %q", l.SpendPeriod)
}

// Over returns l with every limit o sets replacing l's.
func (l Limits) Over(o Limits) Limits {
	if o.ConcurrentRuns != 0 {
		l.ConcurrentRuns = o.ConcurrentRuns
	}
	if o.RequestsPerMinute != 0 {
		l.RequestsPerMinute = o.RequestsPerMinute
	}
	if o.TokensPerDay != 0 {
		l.TokensPerDay = o.TokensPerDay
	}
	if o.SpendUSD != 0 {
		l.SpendUSD, l.SpendPeriod = o.SpendUSD, o.SpendPeriod
	}
	return l
}

// APIKey is a stored API key. The secret itself is never stored: Hash is its SHA-256.
type APIKey struct {
	ID     string
	User   string
	Name   string // a label
	Prefix string // the first characters of the secret, to tell keys apart in a list
	Hash   []byte
	Admin  bool
	// Agents the key may use; empty: every agent.
	Agents []string
	// Limits override the user's limits for requests made with the key, counted over the key's use.
	Limits    Limits
	CreatedAt time.Time
	ExpiresAt *time.Time
	RevokedAt *time.Time
}

// AuthSession is a web UI sign-in: a cookie whose SHA-256 is Hash, made from a key.
type AuthSession struct {
	Hash      []byte
	KeyID     string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// Groupings of usage totals.
const (
	GroupByUser  = "user"
	GroupByKey   = "key"
	GroupByAgent = "agent"
	GroupByModel = "model"
	GroupByDay   = "day"
)

// GroupBys are the groupings of usage totals, in the order they are offered.
var GroupBys = []string{GroupByUser, GroupByKey, GroupByAgent, GroupByModel, GroupByDay}

// UsageQuery selects usage entries: of User ("" every user's), created in [From, To) (zero: open),
// summed per GroupBy.
type UsageQuery struct {
	User     string
	From, To time.Time
	GroupBy  string
}

// UsageTotal is the sum of the usage entries of one group.
type UsageTotal struct {
	Group string // the user, key id, agent, model, or day (YYYY-MM-DD, UTC)
	Calls int64
	Usage
	CostNanoUSD int64
}

// Accounts is the part of the store that knows users' keys and sign-ins, and sums their usage.
type Accounts interface {
	// CreateKey stores k, assigning ID (when empty) and CreatedAt.
	CreateKey(ctx context.Context, k *APIKey) error
	// KeyByHash returns the key whose Hash is hash, revoked or expired included, or ErrNotFound.
	KeyByHash(ctx context.Context, hash []byte) (*APIKey, error)
	// Keys lists the keys of user ("" every user's), newest first.
	Keys(ctx context.Context, user string) ([]APIKey, error)
	// RevokeKey revokes one of user's keys ("" any user's); a key already revoked stays as it was.
	// The key's sign-ins end with it. ErrNotFound when there is no such key.
	RevokeKey(ctx context.Context, user, id string) (*APIKey, error)
	// HasKeys reports whether any key was ever created.
	HasKeys(ctx context.Context) (bool, error)

	// CreateAuthSession stores a sign-in, made at s.CreatedAt (zero: now). It may forget sign-ins
	// expired by then, and a key's oldest ones past a bound.
	CreateAuthSession(ctx context.Context, s *AuthSession) error
	// AuthSession returns the sign-in whose Hash is hash with its key, or ErrNotFound.
	AuthSession(ctx context.Context, hash []byte) (*AuthSession, *APIKey, error)
	// DeleteAuthSession ends a sign-in; one that does not exist is not an error.
	DeleteAuthSession(ctx context.Context, hash []byte) error

	// UsageTotals sums usage entries as q asks, groups in ascending order.
	UsageTotals(ctx context.Context, q UsageQuery) ([]UsageTotal, error)
	// UsageSince sums the tokens (input + output) and cost of the user's usage entries created at or
	// after since: only those made with keyID, when not ""; else all but the tokens of the keys that set
	// their own TokensPerDay and the cost of those that set their own SpendUSD.
	UsageSince(ctx context.Context, user, keyID string, since time.Time) (tokens, costNanoUSD int64, err error)
}

// RateLimits is a store that counts requests against rate limits itself, so that every process on the
// database shares one count per caller: an optional capability (PostgreSQL's), found by type assertion.
// A store without it (SQLite, one process) leaves the counting to that process's memory.
type RateLimits interface {
	// AllowRequest counts a request of key against a limit of n requests per period (n > 0) with the
	// generic cell rate algorithm, on the database's clock: a key may send a whole period's n at once,
	// and then one more each period/n. It returns 0 when the request may go, else how long to wait before
	// asking again; a refused request is not counted.
	AllowRequest(ctx context.Context, key string, n int, per time.Duration) (wait time.Duration, err error)
}
