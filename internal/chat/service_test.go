package chat_test

import (
	"context"
	"errors"
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
