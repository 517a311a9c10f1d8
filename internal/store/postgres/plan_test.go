package postgres

import (
	"strings"
	"testing"

	"chatd/internal/store/postgres/pgtest"
)

// TestKeyRunsPlan: a page of a revoked key's active runs is read from runs_active_by_key in its order,
// from where the page starts (the row comparison is the index's condition), and is not sorted: a page
// costs its own rows, not every active run of the key. The planner is kept off the plans an empty
// table would make it prefer (a scan of the whole table, a bitmap scan and a sort).
func TestKeyRunsPlan(t *testing.T) {
	db := openTest(t, pgtest.NewSchema(t))
	conn, err := db.pool.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, set := range []string{"SET enable_seqscan = off", "SET enable_bitmapscan = off", "SET enable_sort = off"} {
		if _, err := conn.ExecContext(t.Context(), set); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := conn.QueryContext(t.Context(), "EXPLAIN (COSTS OFF) "+keyRunsSQL, "u", "k", "queued", "r1", 100)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	if !strings.Contains(text, "Index Scan using runs_active_by_key") || !strings.Contains(text, "ROW(status, id) > ROW(") ||
		strings.Contains(text, "Sort") {
		t.Errorf("a page of a key's active runs is not read in the index's order from where it starts:\n%s", text)
	}
}
