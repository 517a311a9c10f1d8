package sqlite

import (
	"context"
	"strconv"
	"testing"

	"chatd/internal/store"
)

// TestStatementsPrepared: a statement first run inside a transaction runs as text there (the pool's one
// writer connection is the transaction's: preparing on the pool then would wait for itself) and is
// prepared for the next time; the next run uses the prepared statement. On the one-connection memory
// database too.
func TestStatementsPrepared(t *testing.T) {
	for _, path := range []string{MemoryPath, tempPath(t)} {
		db := openTest(t, path, Options{})
		ctx := context.Background()
		sess := &store.Session{}
		if err := db.CreateSession(ctx, "alice", sess); err != nil {
			t.Fatal(err)
		}
		db.writeStmts.wg.Wait() // the statements the first write saw are prepared now
		prepared := func(c *stmtCache, query string) bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.m[query] != nil
		}
		if !prepared(db.writeStmts, insertSessionSQL) {
			t.Errorf("%s: the session insert is not prepared after its first run", path)
		}
		for range 3 {
			if err := db.CreateSession(ctx, "alice", &store.Session{}); err != nil {
				t.Fatalf("%s: with prepared statements: %v", path, err)
			}
		}
		if _, err := db.Session(ctx, "alice", sess.ID); err != nil {
			t.Fatal(err)
		}
		db.readStmts.wg.Wait()
		if !prepared(db.readStmts, selectSessionSQL) {
			t.Errorf("%s: the session select is not prepared after its first run", path)
		}
		if _, err := db.Session(ctx, "alice", sess.ID); err != nil {
			t.Fatalf("%s: read with a prepared statement: %v", path, err)
		}
	}
}

// TestStatementCacheBounded: past maxStmts statements, the rest run as text.
func TestStatementCacheBounded(t *testing.T) {
	db := openTest(t, MemoryPath, Options{})
	c := db.readStmts
	for i := range maxStmts + 10 {
		c.get("SELECT " + strconv.Itoa(i))
	}
	c.wg.Wait()
	c.mu.Lock()
	n := len(c.m)
	c.mu.Unlock()
	if n != maxStmts {
		t.Errorf("%d statements kept, want %d", n, maxStmts)
	}
}
