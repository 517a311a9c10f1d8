package main

import (
	"context"
	"log/slog"

	"chatd/internal/config"
	"chatd/internal/store"
	"chatd/internal/store/postgres"
	"chatd/internal/store/sqlite"
)

// openStore opens the database db names: PostgreSQL for a postgres:// or postgresql:// URL, else a SQLite
// file (sqlite:PATH or a bare path), locked for this process and named after owner. PostgreSQL takes no
// such lock: running several chatd on one PostgreSQL database is not supported yet (runs have no owner
// that another instance could take over from), so it is the operator's to avoid.
func openStore(ctx context.Context, db string, log *slog.Logger, owner string) (store.Store, error) {
	c := &config.Config{DB: db}
	if c.Postgres() {
		st, err := postgres.Open(ctx, db, postgres.Options{Logger: log})
		if err != nil {
			return nil, err
		}
		return st, nil
	}
	path, err := c.SQLitePath()
	if err != nil {
		return nil, err
	}
	st, err := sqlite.Open(ctx, path, sqlite.Options{Logger: log, Owner: owner})
	if err != nil {
		return nil, err // not a nil *sqlite.DB in a non-nil store.Store
	}
	return st, nil
}
