package chat

import (
	"context"
	"fmt"
	"time"

	"chatd/internal/agent"
	"chatd/internal/store"
)

// usageReader is what budget checks read: the sender's usage since a time.
type usageReader interface {
	UsageSince(ctx context.Context, user, keyID string, since time.Time) (tokens, costNanoUSD int64, err error)
}

// budgetReached returns the first token or spend limit of quota that the user's (or its key's) usage
// has reached, or nil. Concurrent-run limits are the store's to count when a run is created.
func budgetReached(ctx context.Context, st usageReader, user string, quota []store.Limit) (*store.LimitError, error) {
	for _, l := range quota {
		if (l.Name != store.LimitTokens && l.Name != store.LimitSpend) || l.Max <= 0 {
			continue
		}
		tokens, cost, err := st.UsageSince(ctx, user, l.KeyID, l.Since)
		if err != nil {
			return nil, err
		}
		used := tokens
		if l.Name == store.LimitSpend {
			used = cost
		}
		if used >= l.Max {
			return &store.LimitError{Limit: l, Used: used}, nil
		}
	}
	return nil, nil
}

// overBudget refuses a send whose token or spend budget is used up (a *store.LimitError), before it
// interrupts anything or starts a queued run.
func (s *Service) overBudget(ctx context.Context, user string, acct Account) error {
	e, err := budgetReached(ctx, s.opts.Store, user, acct.Quota)
	if err != nil {
		return err
	}
	if e != nil {
		return e
	}
	return nil
}

// budgetError is the failure of a run whose budget ran out.
func budgetError(e *store.LimitError) *agent.LimitError {
	if e.Name == store.LimitSpend {
		return &agent.LimitError{Code: e.Name, Message: fmt.Sprintf(
			"the spend budget of $%.2f is used up; what the run said is kept", float64(e.Max)/1e9)}
	}
	return &agent.LimitError{Code: e.Name, Message: fmt.Sprintf(
		"the limit of %d tokens a day is used up (%d used today, UTC); what the run said is kept", e.Max, e.Used)}
}
