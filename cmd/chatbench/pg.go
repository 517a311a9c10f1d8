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
	// Not cut short by a Ctrl-C: a database made and not reported would never be dropped.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := adminExec(ctx, admin, "CREATE DATABASE "+name); err != nil {
		return "", "", fmt.Errorf("-postgres %s: create database %s: %w", redactURL(admin), name, err)
	}
	return runDatabaseURL(u, name), name, nil
}

// runDatabaseURL is admin's URL for the database name: its path, without the dbname (or database)
// parameter that would override it.
func runDatabaseURL(admin *url.URL, name string) string {
	u := *admin
	u.Path = "/" + name
	q := u.Query()
	q.Del("dbname")
	q.Del("database")
	u.RawQuery = q.Encode()
	return u.String()
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
		name, value, hasValue := strings.Cut(a, "=")
		switch {
		case hasValue && (name == "-postgres" || name == "--postgres"):
			out[i] = name + "=" + redactURL(value)
		case i > 0 && (args[i-1] == "-postgres" || args[i-1] == "--postgres"):
			out[i] = redactURL(a)
		}
	}
	return strings.Join(out, " ")
}

// redactURL hides a URL's password, in its user part or in a password parameter.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(a URL that does not parse)"
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}
