package postgres

import (
	"errors"
	"testing"

	"chatd/internal/store"
	"chatd/internal/store/postgres/pgtest"
)

// TestTextPostgreSQLRefuses: PostgreSQL's text holds no NUL character, which SQLite would store. A
// record carrying one is refused as ErrConflict (a record that breaks the rules of the records' shape),
// not as a failure of the database, and nothing of it is stored.
func TestTextPostgreSQLRefuses(t *testing.T) {
	db := openTest(t, pgtest.NewSchema(t))
	ctx := t.Context()
	sess := &store.Session{}
	if err := db.CreateSession(ctx, "alice", sess); err != nil {
		t.Fatal(err)
	}
	for _, r := range []store.Record{
		{SessionID: sess.ID, Role: store.RoleUser, Content: "a\x00b"},
		{SessionID: sess.ID, Role: store.RoleAssistant, Reasoning: "\x00"},
	} {
		if err := db.AppendRecord(ctx, "alice", &r); !errors.Is(err, store.ErrConflict) {
			t.Errorf("AppendRecord(%q): %v, want ErrConflict", r.Content+r.Reasoning, err)
		}
	}
	err := db.CreateSession(ctx, "alice", &store.Session{Title: "\x00"})
	if !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateSession with a NUL in the title: %v, want ErrConflict", err)
	}
	ok := store.Record{SessionID: sess.ID, Role: store.RoleUser, Content: `a\u0000b, escaped, is fine`}
	if err := db.AppendRecord(ctx, "alice", &ok); err != nil || ok.Seq != 1 {
		t.Errorf("AppendRecord after the refusals: Seq %d, %v; want 1", ok.Seq, err)
	}
}
