package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"chatd/internal/auth"
	"chatd/internal/config"
	"chatd/internal/store"
	"chatd/internal/store/sqlite"
)

const keysUsage = `Usage:
  chatd keys create --user NAME [--admin] [--agents a,b] [--expires 90d] [--name LABEL]
                    [--concurrent-runs N] [--requests-per-minute N] [--tokens-per-day N]
                    [--spend-usd X --spend-period day|week|month]
      make an API key; it is printed once, on stdout, and only its hash is stored
  chatd keys list [--user NAME]     the keys, never their secrets
  chatd keys revoke ID              the key stops working, with its web sign-ins

Each takes --db (env CHATD_DB; default ` + config.DefaultDB + `). A SQLite database must not be in use by
a running chatd: while one runs, manage keys with its API (POST/GET/DELETE /v1/keys, an admin's key). A
PostgreSQL database may be; a running chatd stops accepting a revoked key within its auth cache's TTL,
and keys revoke asks the instances to stop the queued and running runs the key started.
`

// keys runs chatd keys.
func keys(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, keysUsage)
		return errUsage
	}
	switch args[0] {
	case "create":
		return createKey(ctx, args[1:], getenv, stdout, stderr)
	case "list":
		return listKeys(ctx, args[1:], getenv, stdout, stderr)
	case "revoke":
		return revokeKey(ctx, args[1:], getenv, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, keysUsage)
		return nil
	}
	fmt.Fprintf(stderr, "chatd keys: unknown command %q\n\n%s", args[0], keysUsage)
	return errUsage
}

func createKey(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("keys create", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", "", "database (env CHATD_DB)")
	var spec auth.KeySpec
	fs.StringVar(&spec.User, "user", "", "the user the key signs in as (required)")
	fs.StringVar(&spec.Name, "name", "", "a label for the key")
	fs.BoolVar(&spec.Admin, "admin", false, "the key may manage keys and read every user's data")
	agents := fs.String("agents", "", "comma-separated agents the key may use (default: every agent)")
	expires := fs.String("expires", "", "lifetime: days (90d) or a duration (720h); default: never")
	fs.IntVar(&spec.Limits.ConcurrentRuns, "concurrent-runs", 0, "runs at once, overriding the user's limit")
	fs.IntVar(&spec.Limits.RequestsPerMinute, "requests-per-minute", 0, "requests a minute, overriding the user's limit")
	fs.Int64Var(&spec.Limits.TokensPerDay, "tokens-per-day", 0, "input and output tokens a day (UTC), overriding the user's limit")
	fs.Float64Var(&spec.Limits.SpendUSD, "spend-usd", 0, "spend budget in US dollars per --spend-period, overriding the user's")
	fs.StringVar(&spec.Limits.SpendPeriod, "spend-period", "", "day, week or month (default month)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if spec.User == "" {
		return errors.New("keys create: --user is required")
	}
	if *agents != "" {
		for _, a := range strings.Split(*agents, ",") {
			if a = strings.TrimSpace(a); a != "" {
				spec.Agents = append(spec.Agents, a)
			}
		}
	}
	if *expires != "" {
		d, err := auth.ParseExpiry(*expires)
		if err != nil {
			return err
		}
		spec.ExpiresIn = d
	}
	st, err := openAccounts(ctx, *db, getenv)
	if err != nil {
		return err
	}
	defer st.Close()
	secret, k, err := auth.CreateKey(ctx, st, spec, time.Now())
	if err != nil {
		return fmt.Errorf("keys create: %w", err)
	}
	fmt.Fprintln(stdout, secret)
	fmt.Fprintf(stderr, "Created key %s for user %s%s. It is shown once, above: keep it now; chatd stores only its hash.\n",
		k.ID, k.User, describeKey(k))
	return nil
}

func describeKey(k *store.APIKey) string {
	var parts []string
	if k.Admin {
		parts = append(parts, "admin")
	}
	if len(k.Agents) > 0 {
		parts = append(parts, "agents "+strings.Join(k.Agents, ", "))
	}
	if k.ExpiresAt != nil {
		parts = append(parts, "expires "+k.ExpiresAt.Format(time.RFC3339))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

func listKeys(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("keys list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", "", "database (env CHATD_DB)")
	user := fs.String("user", "", "only this user's keys")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	st, err := openAccounts(ctx, *db, getenv)
	if err != nil {
		return err
	}
	defer st.Close()
	list, err := st.Keys(ctx, *user)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tUSER\tNAME\tPREFIX\tADMIN\tAGENTS\tCREATED\tEXPIRES\tSTATUS")
	now := time.Now()
	for _, k := range list {
		status := "active"
		switch {
		case k.RevokedAt != nil:
			status = "revoked " + k.RevokedAt.Format(time.DateOnly)
		case k.ExpiresAt != nil && !now.Before(*k.ExpiresAt):
			status = "expired"
		}
		exp := "never"
		if k.ExpiresAt != nil {
			exp = k.ExpiresAt.Format(time.DateOnly)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s…\t%t\t%s\t%s\t%s\t%s\n", k.ID, k.User, cmp.Or(k.Name, "-"), k.Prefix, k.Admin,
			cmp.Or(strings.Join(k.Agents, ","), "all"), k.CreatedAt.Format(time.DateOnly), exp, status)
	}
	return tw.Flush()
}

func revokeKey(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("keys revoke", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", "", "database (env CHATD_DB)")
	var id string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") { // chatd keys revoke ID --db …
		id, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if id == "" && fs.NArg() == 1 {
		id = fs.Arg(0)
	} else if id == "" || fs.NArg() != 0 {
		return errors.New("keys revoke: name one key id (chatd keys list shows them)")
	}
	st, err := openAccounts(ctx, *db, getenv)
	if err != nil {
		return err
	}
	defer st.Close()
	k, err := st.RevokeKey(ctx, "", id)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("keys revoke: no key %q", id)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Revoked key %s of user %s.\n", k.ID, k.User)
	if canceller, ok := st.(runCanceller); ok {
		n, err := cancelKeyRuns(ctx, st, canceller, k)
		if err != nil {
			return fmt.Errorf("keys revoke: the key is revoked, but not every run it started was asked to stop (run the command again): %w", err)
		}
		if n > 0 {
			fmt.Fprintf(stdout, "Asked the chatd instances to stop the %d queued or running runs it started.\n", n)
		}
	}
	return nil
}

// runCanceller is a store that carries a cancel to the chatd instance that runs a run (PostgreSQL).
type runCanceller interface {
	RequestCancel(ctx context.Context, user, runID, reason string) (bool, error)
}

// cancelKeyRuns asks the instances that run them to cancel the queued and running runs a revoked key
// started, as a revoke through the API does (the instances are not told of this revoke otherwise, and
// would let its runs go on). Its runs awaiting approval wait on: a decision on one is refused for the
// key, and its expiry ends it. On SQLite no chatd runs while this command holds the file: the next
// start ends the key's running runs as interrupted and refuses its queued ones.
func cancelKeyRuns(ctx context.Context, st store.Store, c runCanceller, k *store.APIKey) (int, error) {
	const page = 100
	n := 0
	var after *store.Run
	for {
		runs, err := st.ActiveRunsOfKey(ctx, k.User, k.ID, after, page)
		if err != nil {
			return n, err
		}
		for i := range runs {
			asked, err := c.RequestCancel(ctx, k.User, runs[i].ID, "the API key that started the run was revoked")
			if err != nil {
				return n, err
			}
			if asked {
				n++
			}
		}
		if len(runs) < page {
			return n, nil
		}
		after = &runs[len(runs)-1]
	}
}

const usageUsage = `Usage:
  chatd usage [--from DAY|TIME] [--to DAY|TIME] [--group-by user|key|agent|model|day] [--user NAME] [--db DB]

Token and cost totals of the model calls made in [from, to) (days are UTC), by group (default model).
`

// usageTable runs chatd usage: the table GET /v1/usage answers, for an admin.
func usageTable(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("usage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usageUsage) }
	db := fs.String("db", "", "database (env CHATD_DB)")
	from := fs.String("from", "", "first day (2026-11-01) or time (RFC 3339)")
	to := fs.String("to", "", "day or time to stop before")
	q := store.UsageQuery{}
	fs.StringVar(&q.GroupBy, "group-by", store.GroupByModel, "user, key, agent, model or day")
	fs.StringVar(&q.User, "user", "", "only this user's usage")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	for _, b := range []struct {
		v string
		t *time.Time
	}{{*from, &q.From}, {*to, &q.To}} {
		if b.v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, b.v)
		if err != nil {
			if t, err = time.Parse(time.DateOnly, b.v); err != nil {
				return fmt.Errorf("usage: %q is neither a day (2026-11-01) nor an RFC 3339 time", b.v)
			}
		}
		*b.t = t
	}
	if !slices.Contains(store.GroupBys, q.GroupBy) {
		return fmt.Errorf("usage: --group-by is user, key, agent, model or day, not %q", q.GroupBy)
	}
	st, err := openAccounts(ctx, *db, getenv)
	if err != nil {
		return err
	}
	defer st.Close()
	totals, err := st.UsageTotals(ctx, q)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tCALLS\tINPUT\tOUTPUT\tCACHE READ\tCACHE WRITE\tREASONING\tCOST USD\t\n", strings.ToUpper(q.GroupBy))
	var sum store.UsageTotal
	for _, t := range totals {
		printTotal(tw, cmp.Or(t.Group, "-"), t)
		sum.Calls += t.Calls
		sum.Usage.Add(t.Usage)
		sum.CostNanoUSD += t.CostNanoUSD
	}
	printTotal(tw, "total", sum)
	return tw.Flush()
}

func printTotal(w io.Writer, group string, t store.UsageTotal) {
	fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.6f\t\n", group, t.Calls, t.InputTokens, t.OutputTokens,
		t.CacheReadTokens, t.CacheWriteTokens, t.ReasoningTokens, float64(t.CostNanoUSD)/1e9)
}

// parseFlags parses a command's flags; after -h, which printed the help, it returns flag.ErrHelp, which
// run takes as success.
func parseFlags(fs *flag.FlagSet, args []string) error {
	return fs.Parse(args)
}

// openAccounts opens the database of --db (or CHATD_DB, or the default) for the keys and usage commands.
func openAccounts(ctx context.Context, db string, getenv func(string) string) (store.Store, error) {
	st, err := openStore(ctx, cmp.Or(db, getenv("CHATD_DB"), config.DefaultDB), nil, "chatd keys or usage")
	if errors.Is(err, sqlite.ErrLocked) {
		return nil, fmt.Errorf("%w; while it runs, manage keys through its API (POST/GET/DELETE /v1/keys with an admin's key) and read usage from GET /v1/usage", err)
	}
	return st, err
}
