package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"chatd/internal/config"
	"chatd/internal/store"
	"chatd/internal/store/postgres"
	"chatd/internal/store/sqlite"
)

const migrateUsage = `Usage:
  chatd migrate --from sqlite:PATH --to postgres://USER:PASSWORD@HOST/DB

Copies every session, record (with its tool calls and attachments), run, run event, usage entry, API key,
sign-in and model call (what runs' diagnostics show) of a SQLite database into a PostgreSQL database, then
checks the row counts and the pairing of tool calls and results on the PostgreSQL side. It can be run again: rows already copied are skipped,
and rows that change (a session's title, a run's status, a key's revocation) are brought up to date.
Stop chatd first: a SQLite database a chatd runs on is refused.
`

// migrate runs chatd migrate.
func migrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, migrateUsage) }
	from := fs.String("from", "", "the SQLite database to copy: sqlite:PATH")
	to := fs.String("to", "", "the PostgreSQL database to copy into: postgres://…")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	src := &config.Config{DB: *from}
	if *from == "" || src.Postgres() {
		return errors.New("migrate: --from names the SQLite database to copy, e.g. --from sqlite:./chatd.db")
	}
	if !postgres.IsDSN(*to) {
		return errors.New("migrate: --to names the PostgreSQL database to copy into, e.g. --to postgres://chatd@db/chatd")
	}
	path, err := src.SQLitePath()
	if err != nil {
		return err
	}
	if path == sqlite.MemoryPath {
		return errors.New("migrate: --from must name a SQLite file")
	}
	sdb, err := sqlite.Open(ctx, path, sqlite.Options{Owner: "chatd migrate"})
	if errors.Is(err, sqlite.ErrLocked) {
		return fmt.Errorf("%w; stop it before migrating, so that nothing it writes meanwhile is left behind", err)
	}
	if err != nil {
		return err
	}
	defer sdb.Close()
	pdb, err := postgres.Open(ctx, *to, postgres.Options{})
	if err != nil {
		return err // without the password: Open says so
	}
	defer pdb.Close()
	fmt.Fprintf(stdout, "copying %s into %s\n", path, postgres.Redact(*to))
	for _, part := range store.TransferParts {
		n, err := copyPart(ctx, sdb, pdb, part)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		fmt.Fprintf(stdout, "  %-14s %d\n", part, n)
	}
	return checkMigration(ctx, sdb, pdb, stdout)
}

// copyPart copies one part of the database in one transaction on the PostgreSQL side.
func copyPart(ctx context.Context, sdb *sqlite.DB, pdb *postgres.DB, part string) (int64, error) {
	var l *postgres.Loader
	var n int64
	err := sdb.Dump(ctx, part, func(cols []string, vals []any) error {
		if l == nil {
			var err error
			if l, err = pdb.Load(ctx, part, cols); err != nil {
				return err
			}
		}
		n++
		return l.Row(ctx, vals)
	})
	if l == nil {
		return 0, err
	}
	if err != nil {
		l.Rollback()
		return 0, err
	}
	return n, l.Commit(ctx)
}

// checkMigration compares the row counts of both databases and checks the pairing invariant on the
// PostgreSQL side.
func checkMigration(ctx context.Context, sdb *sqlite.DB, pdb *postgres.DB, stdout io.Writer) error {
	want, err := sdb.Counts(ctx)
	if err != nil {
		return err
	}
	got, err := pdb.Counts(ctx)
	if err != nil {
		return err
	}
	var short []error
	for _, part := range store.TransferParts {
		switch {
		case got[part] < want[part]:
			short = append(short, fmt.Errorf("%s: %d in SQLite, only %d in PostgreSQL", part, want[part], got[part]))
		case got[part] > want[part]:
			fmt.Fprintf(stdout, "note: PostgreSQL holds %d %s, SQLite %d: it had rows of its own\n", got[part], part, want[part])
		}
	}
	if err := errors.Join(short...); err != nil {
		return fmt.Errorf("migrate: the copy is incomplete: %w", err)
	}
	if err := pdb.CheckPairing(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	fmt.Fprintln(stdout, "done: the counts match and every tool call is paired with its result")
	return nil
}
