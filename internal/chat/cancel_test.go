package chat_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/chat"
	"chatd/internal/llm/llmtest"
	"chatd/internal/runevent"
	"chatd/internal/store"
	"chatd/internal/tool"
)

// blockingTool is a slow tool: each call runs until its context ends.
type blockingTool struct {
	readOnly bool
	started  chan struct{} // receives when a call starts
	stopped  chan error    // receives why a call's context ended
}

func newBlockingTool(readOnly bool) *blockingTool {
	return &blockingTool{readOnly: readOnly, started: make(chan struct{}, 8), stopped: make(chan error, 8)}
}

func (b *blockingTool) Info() tool.Info {
	return tool.Info{Name: "wait_for_it", Description: "Waits until it is stopped.", ReadOnly: b.readOnly,
		Timeout: time.Hour}
}

func (b *blockingTool) Call(ctx context.Context, _ json.RawMessage) (tool.Result, error) {
	b.started <- struct{}{}
	<-ctx.Done()
	b.stopped <- ctx.Err()
	return tool.Result{}, ctx.Err()
}

// waitStarted waits until a call of the tool runs.
func (b *blockingTool) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-b.started:
	case <-time.After(patience):
		t.Fatal("the tool was not called")
	}
}

// waitStopped checks that a call's context was cancelled — not timed out.
func (b *blockingTool) waitStopped(t *testing.T) {
	t.Helper()
	select {
	case err := <-b.stopped:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the tool's context ended with %v, want context.Canceled", err)
		}
	case <-time.After(patience):
		t.Fatal("the tool's context was not cancelled")
	}
}

var waitCall = []llmtest.ToolCall{{ID: "call_1", Name: "wait_for_it", Arguments: `{}`}}

// checkPaired fails unless every tool call of every assistant record is answered by exactly one tool
// record right after it — the history every provider accepts.
func checkPaired(t *testing.T, recs []store.Record) {
	t.Helper()
	for i, r := range recs {
		if r.Role != store.RoleAssistant || len(r.ToolCalls) == 0 {
			continue
		}
		answered := map[string]int{}
		for j := i + 1; j < len(recs) && recs[j].Role == store.RoleTool; j++ {
			answered[recs[j].ToolCallID]++
		}
		for _, c := range r.ToolCalls {
			if answered[c.ID] != 1 {
				t.Errorf("call %s of record %d is answered %d times: %s", c.ID, i, answered[c.ID], transcript(recs))
			}
		}
	}
}

// TestCancelMidStream: a cancel while the model streams stops the run; the stream ends with cancelled,
// then done cancelled; the partial answer is stored; a second cancel does nothing; the session takes the
// next message.
func TestCancelMidStream(t *testing.T) {
	partial := "Let me tell you a long story about"
	f := newFixture(t, setup{Path: dbPath(t), Respond: func(n int, req llmtest.Request) llmtest.Turn {
		if n == 0 {
			return llmtest.Turn{Text: partial, Block: true}
		}
		return echo(n, req)
	}})
	st := f.send(t, chat.Request{Message: "a story, please"}, chat.StartOptions{})
	fl := f.follow(t, st.RunID, 0)
	fl.until(hasText(t, partial))

	res, err := f.svc.Cancel(t.Context(), user, st.RunID, "")
	if err != nil || res.Status != "cancelling" || res.AlreadyEnded || res.RunID != st.RunID {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	live := fl.all()
	checkLog(t, "live", live)
	checkEnds(t, live, runevent.TypeCancelled, `{"reason":"cancelled by the user"}`, store.RunCancelled)
	if diff := cmp.Diff(live, stored(t, f.db, st.RunID)); diff != "" {
		t.Errorf("stored log (-live +stored):\n%s", diff)
	}
	if r := storedRun(t, f.db, st.RunID); r.Status != store.RunCancelled || r.FinishReason != "cancelled" {
		t.Errorf("stored run: %+v", r)
	}
	recs := records(t, f.db, st.SessionID)
	if diff := cmp.Diff([]string{"user:a story, please", "assistant:" + partial}, transcript(recs)); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if last := recs[len(recs)-1]; last.FinishReason != "cancelled" || last.RunID != st.RunID {
		t.Errorf("partial answer: %+v", last)
	}
	// The outcome, as the batch endpoint gets it once the run has left memory.
	eventually(t, "the run to leave memory", func() bool { return f.svc.LiveRun(user, st.SessionID) == "" })
	if o := f.wait(t, st.RunID); o.Status != store.RunCancelled || o.Message == nil || o.Message.Content != partial {
		t.Errorf("stored outcome: %+v", o)
	}

	again, err := f.svc.Cancel(t.Context(), user, st.RunID, "")
	if err != nil || !again.AlreadyEnded || again.Status != store.RunCancelled {
		t.Errorf("second cancel: %+v %v", again, err)
	}
	for _, c := range []struct{ user, id string }{{user, "no-such-run"}, {"someone-else", st.RunID}} {
		_, err := f.svc.Cancel(t.Context(), c.user, c.id, "")
		if e, ok := errors.AsType[*chat.Error](err); !ok || !errors.Is(err, store.ErrNotFound) || e.Code != "run_not_found" {
			t.Errorf("cancel %s of %s: %v, want run_not_found", c.id, c.user, err)
		}
	}

	next := f.send(t, chat.Request{SessionID: st.SessionID, Message: "go on"}, chat.StartOptions{})
	if o := f.wait(t, next.RunID); o.Status != store.RunCompleted || o.Message.Content != "re: go on" {
		t.Errorf("the next message: %+v", o)
	}
}

// TestCancelMidTool: a cancel while a tool runs cancels the tool's context; the call gets a failed tool
// record, so the history stays valid, and the run ends cancelled. Both kinds of tools: one that starts
// after the model's turn, and a read-only one that starts while the model still streams.
func TestCancelMidTool(t *testing.T) {
	for _, tc := range []struct {
		name     string
		readOnly bool
		turn     llmtest.Turn
		want     []string // the records of the cancelled run
	}{
		{"after the turn", false, llmtest.Turn{Text: "Starting.", ToolCalls: waitCall},
			[]string{"user:do it", "assistant:Starting.→call_1", "tool:call_1:failed"}},
		{"while the model streams", true, llmtest.Turn{Text: "Starting.", ToolCalls: waitCall, Block: true},
			[]string{"user:do it", "assistant:Starting.→call_1", "tool:call_1:failed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bt := newBlockingTool(tc.readOnly)
			f := newFixture(t, setup{Path: dbPath(t), Tools: []tool.Tool{bt}, Respond: func(n int, req llmtest.Request) llmtest.Turn {
				if n == 0 {
					return tc.turn
				}
				return echo(n, req)
			}})
			st := f.send(t, chat.Request{Message: "do it"}, chat.StartOptions{})
			fl := f.follow(t, st.RunID, 0)
			bt.waitStarted(t)
			fl.until(func(evs []chat.Event) bool { return strings.Contains(types(evs), runevent.TypeToolStart) })

			if res, err := f.svc.Cancel(t.Context(), user, st.RunID, ""); err != nil || res.Status != "cancelling" {
				t.Fatalf("cancel: %+v %v", res, err)
			}
			bt.waitStopped(t)
			live := fl.all()
			checkLog(t, "live", live)
			checkEnds(t, live, runevent.TypeCancelled, `{"reason":"cancelled by the user"}`, store.RunCancelled)
			if diff := cmp.Diff(live, stored(t, f.db, st.RunID)); diff != "" {
				t.Errorf("stored log (-live +stored):\n%s", diff)
			}
			var complete runevent.ToolComplete
			for _, e := range live {
				if e.Type == runevent.TypeToolComplete {
					d, err := runevent.Decode[runevent.ToolComplete](e.Data)
					if err != nil {
						t.Fatal(err)
					}
					complete = d
				}
			}
			if complete.ToolCallID != "call_1" || complete.Success {
				t.Errorf("tool_complete: %+v", complete)
			}
			recs := records(t, f.db, st.SessionID)
			if diff := cmp.Diff(tc.want, transcript(recs)); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
			checkPaired(t, recs)
			if r := storedRun(t, f.db, st.RunID); r.Status != store.RunCancelled {
				t.Errorf("stored run: %+v", r)
			}
			eventually(t, "the run to leave memory", func() bool { return f.svc.LiveRun(user, st.SessionID) == "" })
			o := f.wait(t, st.RunID)
			if o.Status != store.RunCancelled || o.Message == nil || o.Message.Content != "Starting." ||
				len(o.ToolHistory) != 1 || o.ToolHistory[0].ToolCallID != "call_1" || o.ToolHistory[0].Success {
				t.Errorf("stored outcome: %+v", o)
			}

			// The model accepts the history: the strict server would refuse a call left unanswered.
			next := f.send(t, chat.Request{SessionID: st.SessionID, Message: "never mind"}, chat.StartOptions{})
			if o := f.wait(t, next.RunID); o.Status != store.RunCompleted || o.Message.Content != "re: never mind" {
				t.Errorf("the next message: %+v", o)
			}
		})
	}
}

// TestCloseCancelsRuns: shutting down stops taking runs while Drain waits for the running ones; Close
// then cancels the running runs (keeping their partial answers) and the queued ones, and leaves nothing
// running or queued in the store.
func TestCloseCancelsRuns(t *testing.T) {
	f := newFixture(t, setup{Path: dbPath(t), Respond: func(n int, req llmtest.Request) llmtest.Turn {
		return llmtest.Turn{Text: "half of " + lastUserMessage(req), Block: true}
	}})
	a := f.send(t, chat.Request{Message: "first"}, chat.StartOptions{})
	queued := f.send(t, chat.Request{SessionID: a.SessionID, Message: "queued"}, chat.StartOptions{OnActiveRun: chat.OnActiveEnqueue})
	b := f.send(t, chat.Request{Message: "other"}, chat.StartOptions{})
	followers := map[string]*follower{}
	for _, st := range []*chat.Started{a, queued, b} {
		followers[st.RunID] = f.follow(t, st.RunID, 0)
	}
	followers[a.RunID].until(hasText(t, "half of first"))
	followers[b.RunID].until(hasText(t, "half of other"))

	drainCtx, stopDraining := context.WithCancel(t.Context())
	drained := make(chan error, 1)
	go func() { drained <- f.svc.Drain(drainCtx) }()
	eventually(t, "Drain to refuse new runs", func() bool {
		_, err := f.svc.Start(t.Context(), user, chat.Request{}, chat.StartOptions{}) // invalid unless refused first
		return errors.Is(err, chat.ErrClosed)
	})
	_, err := f.svc.Start(t.Context(), user, chat.Request{SessionID: a.SessionID, Message: "late"}, chat.StartOptions{OnActiveRun: chat.OnActiveEnqueue})
	if e, ok := errors.AsType[*chat.Error](err); !ok || !errors.Is(err, chat.ErrClosed) || e.Code != "shutting_down" {
		t.Errorf("start while draining: %v", err)
	}
	select {
	case err := <-drained:
		t.Fatalf("Drain returned %v while runs were running", err)
	default:
	}
	stopDraining()
	if err := <-drained; !errors.Is(err, context.Canceled) {
		t.Errorf("Drain stopped early: %v, want context.Canceled", err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	if err := f.svc.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	for _, st := range []*chat.Started{a, queued, b} {
		live := followers[st.RunID].all()
		checkLog(t, st.RunID, live)
		checkEnds(t, live, runevent.TypeCancelled, `{"reason":"chatd is shutting down"}`, store.RunCancelled)
		if diff := cmp.Diff(live, stored(t, f.db, st.RunID)); diff != "" {
			t.Errorf("stored log of %s (-live +stored):\n%s", st.RunID, diff)
		}
		if r := storedRun(t, f.db, st.RunID); r.Status != store.RunCancelled {
			t.Errorf("stored run %s: %+v", st.RunID, r)
		}
	}
	if unfinished, err := f.db.UnfinishedRuns(t.Context()); err != nil || len(unfinished) != 0 {
		t.Errorf("unfinished runs after Close: %+v %v", unfinished, err)
	}
	if diff := cmp.Diff([]string{"user:first", "assistant:half of first"}, transcript(records(t, f.db, a.SessionID))); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if n := len(f.up.Requests()); n != 2 {
		t.Errorf("the model got %d requests, want 2: the queued run must not start", n)
	}
}

// TestDrainLetsRunsEnd: Drain returns once the running runs have ended, without starting the queued
// ones; Close then cancels those.
func TestDrainLetsRunsEnd(t *testing.T) {
	g := newGate(t)
	f := newFixture(t, setup{Path: dbPath(t), Respond: func(n int, req llmtest.Request) llmtest.Turn {
		turn := echo(n, req)
		turn.BeforeFinish = g.hold
		return turn
	}})
	a := f.send(t, chat.Request{Message: "first"}, chat.StartOptions{})
	queued := f.send(t, chat.Request{SessionID: a.SessionID, Message: "queued"}, chat.StartOptions{OnActiveRun: chat.OnActiveEnqueue})
	g.wait(t)

	drained := make(chan error, 1)
	go func() { drained <- f.svc.Drain(t.Context()) }()
	eventually(t, "Drain to refuse new runs", func() bool {
		_, err := f.svc.Start(t.Context(), user, chat.Request{}, chat.StartOptions{})
		return errors.Is(err, chat.ErrClosed)
	})
	g.open()
	select {
	case err := <-drained:
		if err != nil {
			t.Fatalf("drain: %v", err)
		}
	case <-time.After(patience):
		t.Fatal("Drain did not return after the run ended")
	}
	if o := f.wait(t, a.RunID); o.Status != store.RunCompleted {
		t.Errorf("the running run: %+v", o)
	}
	if r := storedRun(t, f.db, queued.RunID); r.Status != store.RunQueued {
		t.Errorf("the queued run after Drain: %+v", r)
	}

	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	if err := f.svc.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	checkEnds(t, f.follow(t, queued.RunID, 0).all(), runevent.TypeCancelled, `{"reason":"chatd is shutting down"}`, store.RunCancelled)
	if diff := cmp.Diff([]string{"user:first", "assistant:re: first"}, transcript(records(t, f.db, a.SessionID))); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}
