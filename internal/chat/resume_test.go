package chat_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"chatd/internal/chat"
	"chatd/internal/store"
)

// closingStore closes the service right after the store resumes a run: Close begins between the
// resume's write and the run's admission.
type closingStore struct {
	store.Store
	svc atomic.Pointer[chat.Service]
}

func (c *closingStore) ResumeRun(ctx context.Context, user, runID string, before json.RawMessage, reserve int64) error {
	if err := c.Store.ResumeRun(ctx, user, runID, before, reserve); err != nil {
		return err
	}
	return c.svc.Load().Close(ctx)
}

// checkStillWaits fails unless the run still waits, with its call undecided.
func checkStillWaits(t *testing.T, db store.Store, runID string) {
	t.Helper()
	r := storedRun(t, db, runID)
	aw := chat.AwaitingOf(r)
	if r.Status != store.RunAwaiting || aw == nil || len(aw.Calls) != 1 || aw.Calls[0].Decision != "" {
		t.Fatalf("the run is %s, waiting for %+v; want it still awaiting approval with its call undecided", r.Status, aw)
	}
}

// TestDecideWhileClosing: a decision that would resume a run on a service that is shutting down is
// refused (shutting_down) and not recorded, and the run still waits — whether the service was closing
// before the decision or began closing as the store resumed the run.
func TestDecideWhileClosing(t *testing.T) {
	t.Run("closed before", func(t *testing.T) {
		counts := map[string]*atomic.Int32{}
		f := newFixture(t, approvalSetup(counts))
		st := pause(t, f, counts)
		if err := f.svc.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		_, err := f.svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_2", Decision: chat.DecisionApprove})
		if !isCode(err, "shutting_down") {
			t.Fatalf("Decide on a closed service: %v, want shutting_down", err)
		}
		checkStillWaits(t, f.db, st.RunID)
	})
	t.Run("closing during the resume", func(t *testing.T) {
		counts := map[string]*atomic.Int32{}
		cs := &closingStore{}
		su := approvalSetup(counts)
		su.Wrap = func(db store.Store) store.Store { cs.Store = db; return cs }
		f := newFixture(t, su)
		cs.svc.Store(f.svc)
		st := pause(t, f, counts)
		_, err := f.svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_2", Decision: chat.DecisionApprove})
		if !isCode(err, "shutting_down") {
			t.Fatalf("Decide as the service closes: %v, want shutting_down", err)
		}
		checkStillWaits(t, f.db, st.RunID)
		if counts["mail__send"].Load() != 0 {
			t.Error("the call ran")
		}
	})
}
