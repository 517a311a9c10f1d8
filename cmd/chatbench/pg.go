package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

// With -postgres, chatd runs on PostgreSQL: chatbench makes a database of its own on the server the URL
// names (its user must be allowed CREATE DATABASE), every chatd of the run uses it as the SQLite runs
// use their file, and chatbench drops it at the end. The URL's own database is only connected to.

// createDatabase makes the run's database on the server of admin and returns chatd's URL for it.
func createDatabase(ctx context.Context, admin string) (dbURL, name string, err error) {
	u, err := url.Parse(admin)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", "", fmt.Errorf("-postgres: want a postgres://USER@HOST:PORT/DB URL")
	}
	name = fmt.Sprintf("chatbench_%d", time.Now().UnixNano())
	if err := adminExec(ctx, admin, "CREATE DATABASE "+name); err != nil {
		return "", "", fmt.Errorf("-postgres %s: create database %s: %w", u.Redacted(), name, err)
	}
	u.Path = "/" + name
	return u.String(), name, nil
}

// dropDatabase drops the run's database, ending what still uses it.
func dropDatabase(admin, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return adminExec(ctx, admin, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
}

func adminExec(ctx context.Context, admin, stmt string) error {
	db, err := sql.Open("pgx", admin)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, stmt)
	return err
}

// redactArgs is the command line with the password of a -postgres URL replaced, for the report.
func redactArgs(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		flagValue, isFlag := strings.CutPrefix(strings.TrimPrefix(a, "-"), "-postgres=")
		switch {
		case isFlag:
			out[i] = a[:len(a)-len(flagValue)] + redactURL(flagValue)
		case i > 0 && (args[i-1] == "-postgres" || args[i-1] == "--postgres"):
			out[i] = redactURL(a)
		}
	}
	return strings.Join(out, " ")
}

func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(a URL that does not parse)"
}
