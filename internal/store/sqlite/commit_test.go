package sqlite

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"chatd/internal/store"
)

// holdCommitter makes the committer busy with a write that waits until release is called, so that the
// writes made meanwhile wait together for its next batch.
func holdCommitter(t *testing.T, db *DB) (release func()) {
	t.Helper()
	started, gate := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- db.write(context.Background(), "hold", func(txn) error {
			close(started)
			<-gate
			return nil
		})
	}()
	<-started
	return func() {
		close(gate)
		if err := <-done; err != nil {
			t.Errorf("the holding write: %v", err)
		}
	}
}

// waitQueued waits until n writes wait for the committer.
func waitQueued(db *DB, n int) {
	for len(db.writes) < n {
		runtime.Gosched()
	}
}

// TestGroupCommit: writes that wait together commit in one transaction; one that fails — a broken
// invariant, a panic, a cancelled context — fails alone, and the others are stored.
func TestGroupCommit(t *testing.T) {
	db := openTest(t, tempPath(t), Options{})
	ctx := context.Background()
	sess := &store.Session{}
	if err := db.CreateSession(ctx, "alice", sess); err != nil {
		t.Fatal(err)
	}
	release := holdCommitter(t, db)
	before := db.commits.Load()

	const n = 20
	cancelled, cancel := context.WithCancel(ctx)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			switch i {
			case 3: // a tool record for a call that does not exist: ErrConflict
				ok := true
				errs[i] = db.AppendRecord(ctx, "alice", &store.Record{SessionID: sess.ID, Role: store.RoleTool,
					ParentID: "nope", ToolCallID: "call_1", Name: "x", Success: &ok})
			case 7:
				errs[i] = db.write(ctx, "panics", func(txn) error { panic("boom") })
			case 11:
				errs[i] = db.write(cancelled, "cancelled", func(txn) error {
					return errors.New("a write whose context ended before it was taken ran")
				})
			default:
				errs[i] = db.AppendRecord(ctx, "alice", &store.Record{SessionID: sess.ID, Role: store.RoleUser,
					Content: fmt.Sprint("message ", i)})
			}
		})
	}
	waitQueued(db, n)
	cancel()
	release()
	wg.Wait()

	for i, err := range errs {
		switch i {
		case 3:
			if !errors.Is(err, store.ErrConflict) {
				t.Errorf("the bad tool record: %v; want ErrConflict", err)
			}
		case 7:
			if err == nil {
				t.Error("the panicking write succeeded")
			}
		case 11:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("the cancelled write: %v; want context.Canceled", err)
			}
		default:
			if err != nil {
				t.Errorf("write %d: %v", i, err)
			}
		}
	}
	recs, err := db.Records(ctx, "alice", sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n-3 {
		t.Errorf("%d records stored, want %d: every write but the three that failed", len(recs), n-3)
	}
	for i, r := range recs {
		if r.Seq != int64(i+1) {
			t.Errorf("record %d has Seq %d: the failed writes left a gap", i, r.Seq)
		}
	}
	if got := db.commits.Load() - before; got != 1 {
		t.Errorf("the %d writes that waited together took %d commits, want 1", n, got)
	}
}

// TestCloseRunsWaitingWrites: Close runs the writes already waiting, and a write after Close fails at
// once rather than hang.
func TestCloseRunsWaitingWrites(t *testing.T) {
	db, err := Open(context.Background(), tempPath(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sess := &store.Session{}
	if err := db.CreateSession(ctx, "alice", sess); err != nil {
		t.Fatal(err)
	}
	release := holdCommitter(t, db)
	errc := make(chan error, 1)
	go func() {
		errc <- db.AppendRecord(ctx, "alice", &store.Record{SessionID: sess.ID, Role: store.RoleUser, Content: "late"})
	}()
	waitQueued(db, 1)
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	release()
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-errc; err != nil {
		t.Errorf("the write waiting at Close: %v; want it stored", err)
	}
	if err := db.AppendRecord(ctx, "alice", &store.Record{SessionID: sess.ID, Role: store.RoleUser, Content: "after"}); !errors.Is(err, errClosed) {
		t.Errorf("a write after Close: %v; want errClosed", err)
	}
}
