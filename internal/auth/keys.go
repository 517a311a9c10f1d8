package auth

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"chatd/internal/store"
)

// KeySpec is what a new key is made for.
type KeySpec struct {
	User      string
	Name      string
	Admin     bool
	Agents    []string
	Limits    store.Limits
	ExpiresIn time.Duration // 0: never
}

// MaxKeyName bounds a key's label, MaxKeyAgents the agents it names.
const (
	MaxKeyName   = 200
	MaxKeyAgents = 100
)

// ErrInvalidSpec is the kind of every refusal of a KeySpec: the caller's mistake.
var ErrInvalidSpec = errors.New("invalid key")

func invalidSpec(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidSpec, fmt.Sprintf(format, args...))
}

// ParseExpiry reads a key's lifetime: days ("90d") or a Go duration ("720h").
func ParseExpiry(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 || n > 100*365 {
			return 0, invalidSpec("expiry %q: days are a whole number from 1 to 36500, such as 90d", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, invalidSpec("expiry %q: give days (90d) or a duration (720h)", s)
	}
	return d, nil
}

// CreateKey makes a key for spec and stores its hash. It returns the secret, which nothing keeps: the
// caller shows it once. From then on callers must authenticate.
func CreateKey(ctx context.Context, st store.Accounts, spec KeySpec, now time.Time) (string, *store.APIKey, error) {
	if err := ValidUser(spec.User); err != nil {
		return "", nil, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	if len(spec.Name) > MaxKeyName || !printable(spec.Name) {
		return "", nil, invalidSpec("a key's name is at most %d bytes of printable text", MaxKeyName)
	}
	if len(spec.Agents) > MaxKeyAgents {
		return "", nil, invalidSpec("a key names at most %d agents", MaxKeyAgents)
	}
	if spec.ExpiresIn < 0 {
		return "", nil, invalidSpec("a key cannot expire in the past")
	}
	if err := CheckLimits(spec.Limits); err != nil {
		return "", nil, err
	}
	secret, h := newSecret(KeyPrefix)
	k := &store.APIKey{User: spec.User, Name: spec.Name, Prefix: secret[:len(KeyPrefix)+6], Hash: h[:],
		Admin: spec.Admin, Agents: spec.Agents, Limits: spec.Limits}
	if spec.ExpiresIn > 0 {
		t := now.Add(spec.ExpiresIn)
		k.ExpiresAt = &t
	}
	if err := st.CreateKey(ctx, k); err != nil {
		return "", nil, err
	}
	return secret, k, nil
}

// The range of a spend budget (store.Limits.Check).
const (
	MinSpendUSD = store.MinSpendUSD
	MaxSpendUSD = store.MaxSpendUSD
)

// CheckLimits refuses a key's limits as store.Limits.Check does, as ErrInvalidSpec.
func CheckLimits(l store.Limits) error {
	if err := l.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	return nil
}

// CreateKey makes a key as the package's CreateKey does; from then on callers must authenticate.
func (a *Authenticator) CreateKey(ctx context.Context, spec KeySpec) (string, *store.APIKey, error) {
	secret, k, err := CreateKey(ctx, a.opts.Store, spec, a.opts.Now())
	if err == nil {
		a.required.Store(true)
	}
	return secret, k, err
}

// RevokeKey revokes one of user's keys ("": anyone's) and forgets it at once, with its sign-ins.
func (a *Authenticator) RevokeKey(ctx context.Context, user, id string) (*store.APIKey, error) {
	k, err := a.opts.Store.RevokeKey(ctx, user, id)
	if err != nil {
		return nil, err
	}
	a.forget(id)
	return k, nil
}
