package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// Prepared statements. SQLite compiles a statement before it runs it, and the store's statements are
// a fixed set run again and again: compiling each on every call cost a seventh of chatd's CPU under 200
// concurrent chats (perf). Each pool keeps its statements prepared, and a transaction (txn) runs them by
// text; database/sql prepares a statement once per connection and keeps it.
//
// A statement is prepared on the pool, which needs a free connection; a transaction holds one (the
// writer pool has only that one), so a statement first seen in a transaction runs unprepared there,
// and a goroutine prepares it for the next time, once a connection is free.

// maxStmts bounds the statements a pool keeps prepared; a statement past it runs unprepared.
const maxStmts = 256

// stmtCache is one pool's prepared statements, by their text.
type stmtCache struct {
	pool *sql.DB
	mu   sync.Mutex
	m    map[string]*sql.Stmt // nil value: being prepared
	wg   sync.WaitGroup
}

func newStmtCache(pool *sql.DB) *stmtCache {
	return &stmtCache{pool: pool, m: map[string]*sql.Stmt{}}
}

// get returns the prepared statement of query, or nil when it is not prepared yet (it is then
// prepared in the background) or the cache is full.
func (c *stmtCache) get(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, seen := c.m[query]
	if seen || len(c.m) >= maxStmts {
		return s
	}
	c.m[query] = nil
	c.wg.Go(func() { c.prepare(query) })
	return nil
}

func (c *stmtCache) prepare(query string) {
	s, err := c.pool.PrepareContext(context.Background(), query)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		return // it stays unprepared: it runs as text, where its error is reported
	}
	c.m[query] = s
}

// queryRow runs a query of one row on the pool, outside a transaction.
func (c *stmtCache) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	if s := c.get(query); s != nil {
		return s.QueryRowContext(ctx, args...)
	}
	return c.pool.QueryRowContext(ctx, query, args...)
}

// query runs a query on the pool, outside a transaction.
func (c *stmtCache) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if s := c.get(query); s != nil {
		return s.QueryContext(ctx, args...)
	}
	return c.pool.QueryContext(ctx, query, args...)
}

// close waits for the statements being prepared, and closes them all.
func (c *stmtCache) close() {
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.m {
		if s != nil {
			s.Close()
		}
	}
	clear(c.m)
}

// txn is a transaction of the store: its queries run as prepared statements of its pool.
type txn struct {
	*sql.Tx
	stmts *stmtCache
}

func (t txn) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	s := t.stmts.get(query)
	if s == nil {
		return nil, nil
	}
	return t.Tx.StmtContext(ctx, s), nil
}

// prepared returns query as a statement to run several times in the transaction: the pool's prepared
// one, or, until it is, one prepared for the transaction alone. The caller closes it.
func (t txn) prepared(ctx context.Context, query string) (*sql.Stmt, error) {
	if s, err := t.stmt(ctx, query); s != nil || err != nil {
		return s, err
	}
	return t.Tx.PrepareContext(ctx, query)
}

// ExecContext runs a statement that returns no rows.
func (t txn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	s, err := t.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return t.Tx.ExecContext(ctx, query, args...)
	}
	return s.ExecContext(ctx, args...)
}

// QueryContext runs a query.
func (t txn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	s, err := t.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return t.Tx.QueryContext(ctx, query, args...)
	}
	return s.QueryContext(ctx, args...)
}

// QueryRowContext runs a query of one row.
func (t txn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	s, err := t.stmt(ctx, query)
	if err != nil || s == nil {
		return t.Tx.QueryRowContext(ctx, query, args...)
	}
	return s.QueryRowContext(ctx, args...)
}
