package chat_test

import (
	"context"
	"errors"
	"iter"
	"sync"
	"testing"
	"time"

	"chatd/internal/chat"
	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
	"chatd/internal/llm/openai"
	"chatd/internal/store"
	"chatd/internal/store/sqlite"
)

type oneModel struct{ p llm.Provider }

func (m oneModel) Resolve(string) (llm.Provider, string, error) { return m.p, "m", nil }

func newService(t *testing.T, turn llmtest.Turn) (*chat.Service, store.Store) {
	t.Helper()
	up := llmtest.NewServer(t)
	up.Respond = func(int, llmtest.Request) llmtest.Turn { return turn }
	client, err := openai.New(openai.Options{BaseURL: up.BaseURL()})
	if err != nil {
		t.Fatal(err)
	}
	db, err := sqlite.Open(t.Context(), ":memory:", sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return chat.New(chat.Options{Store: db, Models: oneModel{client}, DefaultModel: "x/m"}), db
}

// TestCloseWhileStarting: runs start while the service closes. Every run that started ends with its
// events and a terminal status in the store; every later start is refused; nothing panics or leaks.
func TestCloseWhileStarting(t *testing.T) {
	svc, db := newService(t, llmtest.Turn{Text: "a slow answer", Delay: 5 * time.Millisecond})
	var mu sync.Mutex
	var runs []*chat.Run
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			run, err := svc.Start(t.Context(), "local", chat.Request{Message: "hi"})
			if err != nil {
				var ce *chat.Error
				if !errors.As(err, &ce) || ce.Code != "shutting_down" {
					t.Errorf("start: %v", err)
				}
				return
			}
			mu.Lock()
			runs = append(runs, run)
			mu.Unlock()
		})
	}
	time.Sleep(20 * time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := svc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, run := range runs {
		select {
		case <-run.Done():
		default:
			t.Fatalf("run %s has not ended after Close", run.ID)
		}
		stored, err := db.Run(t.Context(), "local", run.ID)
		if err != nil || stored.Status == store.RunRunning {
			t.Errorf("run %s: %+v %v", run.ID, stored, err)
		}
		events, ended := run.Events(0)
		if !ended || events[len(events)-1].Type != chat.EventDone {
			t.Errorf("run %s does not end with done", run.ID)
		}
	}
	if _, err := svc.Start(t.Context(), "local", chat.Request{Message: "late"}); err == nil {
		t.Error("a run started after Close")
	}
}

// TestRecoverAfterCrash: a process died after storing a turn with a tool call and before its result. At
// the next start the run is interrupted, the call closed, and the session takes the next message with a
// history the model accepts (every call answered).
func TestRecoverAfterCrash(t *testing.T) {
	svc, db := newService(t, llmtest.Turn{Text: "back again"})
	ctx, user := t.Context(), "local"
	sess := &store.Session{Agent: "default"}
	if err := db.CreateSession(ctx, user, sess); err != nil {
		t.Fatal(err)
	}
	dead := &store.Run{SessionID: sess.ID, Agent: "default", Model: "x/m"}
	if err := db.CreateRun(ctx, user, dead); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*store.Record{
		{SessionID: sess.ID, RunID: dead.ID, Role: store.RoleUser, Content: "what time is it?"},
		{SessionID: sess.ID, RunID: dead.ID, Role: store.RoleAssistant, ToolCalls: []store.ToolCall{{ID: "call_1", Name: "current_time", Arguments: []byte(`{}`)}}},
	} {
		if err := db.AppendRecord(ctx, user, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.Start(ctx, user, chat.Request{SessionID: sess.ID, Message: "hello?"}); err == nil {
		t.Fatal("the session took a message while a call was open")
	}
	if err := svc.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := db.Run(ctx, user, dead.ID); r.Status != store.RunInterrupted {
		t.Fatalf("dead run after Recover: %+v", r)
	}
	run, err := svc.Start(ctx, user, chat.Request{SessionID: sess.ID, Message: "hello?"})
	if err != nil {
		t.Fatalf("after Recover: %v", err)
	}
	<-run.Done()
	if o := run.Outcome(); o.Status != "completed" || o.Message.Content != "back again" {
		t.Fatalf("outcome = %+v", o)
	}
}

// panicky is a provider with a bug.
type panicky struct{}

func (panicky) Stream(context.Context, *llm.Request) iter.Seq2[llm.Event, error] {
	return func(func(llm.Event, error) bool) { panic("bug in an adapter") }
}

// TestPanicEndsOnlyTheRun: a panic inside a run fails that run — stored as failed, with error and done
// events — and the process and the service go on.
func TestPanicEndsOnlyTheRun(t *testing.T) {
	db, err := sqlite.Open(t.Context(), ":memory:", sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	svc := chat.New(chat.Options{Store: db, Models: oneModel{panicky{}}, DefaultModel: "x/m"})
	defer svc.Close(t.Context())
	run, err := svc.Start(t.Context(), "local", chat.Request{Message: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	<-run.Done()
	events, _ := run.Events(0)
	n := len(events)
	if events[n-2].Type != chat.EventError || string(events[n-1].Data) != `{"status":"failed"}` {
		t.Fatalf("last events: %s %s", events[n-2].Type, events[n-1].Data)
	}
	if r, err := db.Run(t.Context(), "local", run.ID); err != nil || r.Status != store.RunFailed {
		t.Fatalf("stored run: %+v %v", r, err)
	}
	if _, err := svc.Start(t.Context(), "local", chat.Request{Message: "still here?"}); err != nil {
		t.Fatalf("the service stopped taking runs: %v", err)
	}
}
