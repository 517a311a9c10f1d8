package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"

	"chatd/internal/config"
	"chatd/internal/store"
	"chatd/internal/store/postgres"
	"chatd/internal/store/sqlite"
)

// openStore opens the database db names: PostgreSQL for a postgres:// or postgresql:// URL, else a SQLite
// file (sqlite:PATH or a bare path), locked for this process and named after owner. PostgreSQL takes no
// such lock: several chatd share it, each opening it as an instance (openServeStore); the commands that
// open it otherwise (keys, usage) own no run.
func openStore(ctx context.Context, db string, log *slog.Logger, owner string) (store.Store, error) {
	return openDB(ctx, db, log, owner, postgres.Options{Logger: log})
}

// openServeStore opens the database of chatd serve: on PostgreSQL as one instance among several, whose
// runs are owned by leases of cfg.LeaseTTL.
func openServeStore(ctx context.Context, cfg *config.Config, log *slog.Logger, owner string) (store.Store, error) {
	host, _ := os.Hostname()
	instance := fmt.Sprintf("%s-%d-%s", host, os.Getpid(), rand.Text()[:8])
	return openDB(ctx, cfg.DB, log, owner, postgres.Options{Logger: log, Instance: instance, LeaseTTL: cfg.LeaseTTL})
}

func openDB(ctx context.Context, db string, log *slog.Logger, owner string, pgOpts postgres.Options) (store.Store, error) {
	c := &config.Config{DB: db}
	if c.Postgres() {
		st, err := postgres.Open(ctx, db, pgOpts)
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
