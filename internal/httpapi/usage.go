package httpapi

import (
	"net/http"
	"slices"
	"time"

	"chatd/internal/store"
)

// usageJSON is one group of GET /v1/usage.
type usageJSON struct {
	Group            string  `json:"group"`
	Calls            int64   `json:"calls"`
	InputTokens      int64   `json:"input_tokens"`
	OutputTokens     int64   `json:"output_tokens"`
	CacheReadTokens  int64   `json:"cache_read_tokens"`
	CacheWriteTokens int64   `json:"cache_write_tokens"`
	ReasoningTokens  int64   `json:"reasoning_tokens"`
	CostUSD          float64 `json:"cost_usd"`
}

// usageOf is a usage total on the wire.
func usageOf(t store.UsageTotal) usageJSON {
	return usageJSON{Group: t.Group, Calls: t.Calls, InputTokens: t.InputTokens, OutputTokens: t.OutputTokens,
		CacheReadTokens: t.CacheReadTokens, CacheWriteTokens: t.CacheWriteTokens, ReasoningTokens: t.ReasoningTokens,
		CostUSD: float64(t.CostNanoUSD) / 1e9}
}

// usage answers GET /v1/usage?from=&to=&group_by=user|key|agent|model|day[&user=]: token and cost totals
// of model calls made in [from, to). A user sees their own; an admin everyone's, or one user's.
func (s *server) usage(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p := principal(r.Context())
	uq := store.UsageQuery{User: user(r.Context()), GroupBy: q.Get("group_by")}
	if uq.GroupBy == "" {
		uq.GroupBy = store.GroupByModel
	}
	if !slices.Contains(store.GroupBys, uq.GroupBy) {
		return &apiError{status: http.StatusBadRequest, code: "invalid_group_by", message: "group_by is user, key, agent, model or day"}
	}
	if p.Admin && r.Header.Get(AsUserHeader) == "" {
		uq.User = q.Get("user") // "" is everyone
	}
	for _, b := range []struct {
		name string
		t    *time.Time
	}{{"from", &uq.From}, {"to", &uq.To}} {
		v := q.Get(b.name)
		if v == "" {
			continue
		}
		t, err := parseWhen(v)
		if err != nil {
			return &apiError{status: http.StatusBadRequest, code: "invalid_" + b.name,
				message: b.name + " is a time (RFC 3339, 2026-11-25T00:00:00Z) or a day (2026-11-25, UTC)"}
		}
		*b.t = t
	}
	totals, err := s.Store.UsageTotals(r.Context(), uq)
	if err != nil {
		return err
	}
	out := make([]usageJSON, 0, len(totals))
	for _, t := range totals {
		out = append(out, usageOf(t))
	}
	return writeJSON(w, http.StatusOK, map[string]any{"group_by": uq.GroupBy, "usage": out})
}

// parseWhen reads an RFC 3339 time or a UTC day.
func parseWhen(v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	return time.Parse(time.DateOnly, v)
}
