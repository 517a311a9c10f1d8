package chat_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"chatd/internal/chat"
	"chatd/internal/llm/llmtest"
	"chatd/internal/store"
	"chatd/internal/store/postgres"
	"chatd/internal/store/postgres/pgtest"
	"chatd/internal/tool"
)

// serviceOn is a service on st whose model gives the turns in order, closed when the test ends.
func serviceOn(t *testing.T, st store.Store, opts chat.Options, turns ...llmtest.Turn) (*chat.Service, *llmtest.Server) {
	t.Helper()
	up := llmtest.NewServer(t, turns...)
	client, err := newClient(up, "")
	if err != nil {
		t.Fatal(err)
	}
	reg := tool.NewRegistry(tool.Options{})
	t.Cleanup(reg.Close)
	opts.Store, opts.Models, opts.Tools, opts.DefaultModel = st, oneModel{client}, reg, "x/m"
	opts.TitleModel, opts.FlushInterval, opts.RetryBase = chat.TitleNone, 5*time.Millisecond, time.Millisecond
	svc := chat.New(opts)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		svc.Close(ctx)
	})
	return svc, up
}

// waitOn waits for a run of svc to end.
func waitOn(t *testing.T, svc *chat.Service, runID string) chat.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	o, err := svc.Wait(ctx, user, runID)
	if err != nil {
		t.Fatalf("wait %s: %v", runID, err)
	}
	return o
}

// TestDiagnosticsNULOnPostgreSQL: a payload whose title holds a NUL (JSON \u0000) puts the character in
// the next run's system prompt (the payload manifest); PostgreSQL stores that run's diagnostics all the
// same, the run completes, and the session takes a third message.
func TestDiagnosticsNULOnPostgreSQL(t *testing.T) {
	db, err := postgres.Open(t.Context(), pgtest.NewSchema(t), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	svc, _ := serviceOn(t, db, chat.Options{Agents: map[string]chat.Agent{"default": {Payloads: []chat.PayloadType{{Name: "card", Marker: "CARD:"}}}}},
		llmtest.Turn{Text: "Here.\nCARD: {\"title\": \"a\\u0000b\"}\n"}, llmtest.Turn{Text: "Second."}, llmtest.Turn{Text: "Third."})
	sessionID := ""
	for i, msg := range []string{"card please", "and?", "third"} {
		st, err := svc.Start(t.Context(), user, chat.Request{SessionID: sessionID, Message: msg}, chat.StartOptions{})
		if err != nil {
			t.Fatalf("message %d: %v", i+1, err)
		}
		sessionID = st.SessionID
		if o := waitOn(t, svc, st.RunID); o.Status != store.RunCompleted {
			t.Fatalf("run %d: %s %+v", i+1, o.Status, o.Error)
		}
		if r, err := db.Run(t.Context(), user, st.RunID); err != nil || r.Status != store.RunCompleted {
			t.Fatalf("run %d in the store: %+v, %v", i+1, r, err)
		}
		if calls, err := db.ModelCalls(t.Context(), user, st.RunID); err != nil || len(calls) != 1 {
			t.Errorf("run %d stored %d calls (%v), want 1", i+1, len(calls), err)
		}
	}
}

// refusingStore refuses, as a store refuses what it cannot hold (ErrConflict, nothing stored), every
// write that carries model calls, and the first refuseEnds run ends whatever they carry.
type refusingStore struct {
	store.Store
	mu         sync.Mutex
	refuseEnds int
}

func (s *refusingStore) AppendTurn(ctx context.Context, user string, r *store.Record, u []store.UsageEntry, calls []store.ModelCall) error {
	if len(calls) > 0 {
		return fmt.Errorf("refused: %w", store.ErrConflict)
	}
	return s.Store.AppendTurn(ctx, user, r, u, calls)
}

func (s *refusingStore) FinishRun(ctx context.Context, user, runID string, end store.RunEnd) ([]store.Record, error) {
	s.mu.Lock()
	refuse := s.refuseEnds > 0 || len(end.Calls) > 0
	if s.refuseEnds > 0 {
		s.refuseEnds--
	}
	s.mu.Unlock()
	if refuse {
		return nil, fmt.Errorf("refused: %w", store.ErrConflict)
	}
	return s.Store.FinishRun(ctx, user, runID, end)
}

// TestDiagnosticsNeverFailARun: a store that refuses the writes carrying model calls still gets the
// run's turn and end, without them; an end refused with ErrConflict is not taken for one stored
// already unless the store says the run has ended: the run is completed in the store, its session free.
func TestDiagnosticsNeverFailARun(t *testing.T) {
	for _, refuseEnds := range []int{0, 2} {
		t.Run(fmt.Sprintf("ends refused %d", refuseEnds), func(t *testing.T) {
			db := openStore(t, "")
			svc, _ := serviceOn(t, &refusingStore{Store: db, refuseEnds: refuseEnds}, chat.Options{},
				llmtest.Turn{Text: "First."}, llmtest.Turn{Text: "Second."})
			st, err := svc.Start(t.Context(), user, chat.Request{Message: "hi"}, chat.StartOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if o := waitOn(t, svc, st.RunID); o.Status != store.RunCompleted {
				t.Fatalf("run: %s %+v", o.Status, o.Error)
			}
			if r, err := db.Run(t.Context(), user, st.RunID); err != nil || r.Status != store.RunCompleted {
				t.Fatalf("run in the store: %+v, %v", r, err)
			}
			recs, _ := db.Records(t.Context(), user, st.SessionID)
			if len(recs) != 2 || recs[1].Content != "First." {
				t.Errorf("records %+v, want the question and its answer", recs)
			}
			second, err := svc.Start(t.Context(), user, chat.Request{SessionID: st.SessionID, Message: "again"}, chat.StartOptions{})
			if err != nil {
				t.Fatalf("the session takes no second message: %v", err)
			}
			waitOn(t, svc, second.RunID)
		})
	}
}

// holdStore holds every write that carries model calls until released.
type holdStore struct {
	store.Store
	entered chan struct{}
	release chan struct{}
}

func (h *holdStore) AppendTurn(ctx context.Context, user string, r *store.Record, u []store.UsageEntry, calls []store.ModelCall) error {
	if len(calls) > 0 {
		h.entered <- struct{}{}
		<-h.release
	}
	return h.Store.AppendTurn(ctx, user, r, u, calls)
}

// TestDiagnosticsWhileStored: while the write of a turn's calls is in flight, the run's diagnostics
// still show them (before, the calls were neither in memory nor in the store).
func TestDiagnosticsWhileStored(t *testing.T) {
	hs := &holdStore{Store: openStore(t, ""), entered: make(chan struct{}, 1), release: make(chan struct{})}
	var once sync.Once
	open := func() { once.Do(func() { close(hs.release) }) }
	t.Cleanup(open)
	svc, _ := serviceOn(t, hs, chat.Options{}, llmtest.Turn{Text: "Hello."})
	st, err := svc.Start(t.Context(), user, chat.Request{Message: "Hi"}, chat.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-hs.entered:
	case <-time.After(patience):
		t.Fatal("no AppendTurn with calls")
	}
	d, err := svc.Diagnostics(t.Context(), user, st.RunID, 0)
	_, nerr := svc.Diagnostics(t.Context(), user, st.RunID, 1)
	open()
	if err != nil || nerr != nil || d.ModelCalls != 1 {
		t.Errorf("while its turn is stored, the run's diagnostics: %+v, %v; call 1: %v", d, err, nerr)
	}
	waitOn(t, svc, st.RunID)
}
