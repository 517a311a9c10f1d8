package chat_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"chatd/internal/chat"
	"chatd/internal/llm/llmtest"
	"chatd/internal/runevent"
	"chatd/internal/store"
	"chatd/internal/tool"
)

// currentTimeCall is a call of the built-in current_time tool.
var currentTimeCall = []llmtest.ToolCall{{ID: "call_1", Name: "current_time", Arguments: `{"timezone":"UTC"}`}}

// TestEventLogIsTheStream: the stored log of a run with a tool call is the very stream a live reader got
// — the same events, numbers and bytes — and ends with done; the run's last event id is the log's end.
func TestEventLogIsTheStream(t *testing.T) {
	g := newGate(t)
	f := newFixture(t, setup{Path: dbPath(t), Tools: []tool.Tool{tool.CurrentTime(nil)}, Turns: []llmtest.Turn{
		{Text: "Let me look.", ToolCalls: currentTimeCall},
		{Text: "It is noon.", BeforeFinish: g.hold},
	}})
	st := f.send(t, chat.Request{Message: "what time is it?"}, chat.StartOptions{})
	fl := f.follow(t, st.RunID, 0) // the run cannot end before the gate opens: this reader reads it live
	g.open()
	live := fl.all()

	checkLog(t, "live", live)
	checkEnds(t, live, runevent.TypeComplete, "", store.RunCompleted)
	if diff := cmp.Diff(live, stored(t, f.db, st.RunID)); diff != "" {
		t.Errorf("stored log (-live +stored):\n%s", diff)
	}
	r := storedRun(t, f.db, st.RunID)
	if r.Status != store.RunCompleted || r.LastEventSeq != int64(len(live)) {
		t.Errorf("stored run: status %s, last event %d; want completed, %d", r.Status, r.LastEventSeq, len(live))
	}
	for _, typ := range []string{runevent.TypeRunStart, runevent.TypeToolStart, runevent.TypeToolComplete, runevent.TypeUsage} {
		if !strings.Contains(types(live), typ) {
			t.Errorf("no %s event in %s", typ, types(live))
		}
	}
	want := []string{"user:what time is it?", "assistant:Let me look.→call_1", "tool:call_1:ok", "assistant:It is noon."}
	if diff := cmp.Diff(want, transcript(records(t, f.db, st.SessionID))); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}

	// Once the run has left memory, its outcome is rebuilt from the stored log.
	eventually(t, "the run to leave memory", func() bool { return f.svc.LiveRun(user, st.SessionID) == "" })
	o := f.wait(t, st.RunID)
	if o.Status != store.RunCompleted || o.Message == nil || o.Message.Content != "It is noon." ||
		len(o.ToolHistory) != 1 || o.ToolHistory[0].Name != "current_time" || !o.ToolHistory[0].Success {
		t.Errorf("stored outcome: %+v", o)
	}
}

// TestEventLogWrittenWhileRunning: the event log is written in batches while the run goes on, not only at
// its end, and what the store holds at any moment is a gap-free prefix of the stream.
func TestEventLogWrittenWhileRunning(t *testing.T) {
	first, second := newGate(t), newGate(t)
	text1, text2 := "First: "+strings.Repeat("tick ", 40), "Then: "+strings.Repeat("tock ", 40)
	f := newFixture(t, setup{Path: dbPath(t), Tools: []tool.Tool{tool.CurrentTime(nil)}, Turns: []llmtest.Turn{
		{Text: text1, ToolCalls: currentTimeCall, ChunkRunes: 4, Delay: time.Millisecond, BeforeFinish: first.hold},
		{Text: text2, ChunkRunes: 4, Delay: time.Millisecond, BeforeFinish: second.hold},
	}})
	st := f.send(t, chat.Request{Message: "count"}, chat.StartOptions{})
	fl := f.follow(t, st.RunID, 0)

	// A reader of the store, polling as fast as it can for as long as the run goes on.
	ended := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(ended)
	wg.Go(func() {
		for {
			select {
			case <-ended:
				return
			default:
			}
			evs, err := f.db.Events(t.Context(), user, st.RunID, 0, 10000)
			if err != nil {
				t.Errorf("read the log: %v", err)
				return
			}
			for i, e := range evs {
				if e.Seq != int64(i)+1 {
					t.Errorf("the store holds event %d at place %d: a gap", e.Seq, i+1)
					return
				}
			}
		}
	})

	// midRun checks the store while the model is held before its finish: it holds everything streamed
	// so far, the same as the live stream, and the run is still running.
	midRun := func(wantText string) int {
		t.Helper()
		fl.until(hasText(t, wantText))
		var log []chat.Event
		eventually(t, "the streamed text to be stored", func() bool {
			log = stored(t, f.db, st.RunID)
			return text(t, log) == wantText
		})
		if r := storedRun(t, f.db, st.RunID); r.Status != store.RunRunning || r.EndedAt != nil {
			t.Fatalf("stored run mid-run: %+v", r)
		}
		checkLog(t, "stored mid-run", log)
		live := fl.until(func(evs []chat.Event) bool { return len(evs) >= len(log) })
		if diff := cmp.Diff(live[:len(log)], log); diff != "" {
			t.Fatalf("stored mid-run (-live +stored):\n%s", diff)
		}
		return len(log)
	}
	first.wait(t)
	n1 := midRun(text1)
	first.open()
	second.wait(t)
	n2 := midRun(text1 + text2)
	if n2 <= n1 {
		t.Errorf("the second batch added nothing: %d then %d events", n1, n2)
	}
	second.open()

	live := fl.all()
	checkEnds(t, live, runevent.TypeComplete, "", store.RunCompleted)
	if diff := cmp.Diff(live, stored(t, f.db, st.RunID)); diff != "" {
		t.Errorf("stored log (-live +stored):\n%s", diff)
	}
	if r := storedRun(t, f.db, st.RunID); r.LastEventSeq != int64(len(live)) {
		t.Errorf("last stored event %d, want %d", r.LastEventSeq, len(live))
	}
}

// TestFollowResumes: a reader that comes back with the id of the last event it saw gets every later event
// exactly once — from the live run while it runs, from the store after — and together they hold the
// stored answer. A reader with an id beyond the end of an ended log learns how the run ended.
func TestFollowResumes(t *testing.T) {
	g := newGate(t)
	answer := "The quick brown fox jumps over the lazy dog, twice: the quick brown fox jumps over the lazy dog."
	f := newFixture(t, setup{Path: dbPath(t), Turns: []llmtest.Turn{{Text: answer, ChunkRunes: 2, BeforeFinish: g.hold}}})
	st := f.send(t, chat.Request{Message: "type"}, chat.StartOptions{})

	// A reader that goes away mid-answer, and readers that come back at several points of the log.
	gone := f.follow(t, st.RunID, 0)
	g.wait(t)
	seen := gone.until(hasText(t, answer))
	gone.f.Close()
	k := int64(len(seen) / 2)
	resumed := map[int64]*follower{}
	for _, after := range []int64{0, 1, k, int64(len(seen))} {
		resumed[after] = f.follow(t, st.RunID, after)
		resumed[after].until(func(evs []chat.Event) bool { return int64(len(evs)) >= int64(len(seen))-after })
	}
	if info, err := f.svc.RunInfo(t.Context(), user, st.RunID); err != nil || info.Status != store.RunRunning || info.LastEventSeq < int64(len(seen)) {
		t.Errorf("run info mid-run: %+v %v", info, err)
	}
	g.open()

	all := resumed[0].all()
	checkLog(t, "live", all)
	checkEnds(t, all, runevent.TypeComplete, "", store.RunCompleted)
	for after, fl := range resumed {
		if diff := cmp.Diff(all[after:], fl.all()); diff != "" {
			t.Errorf("resumed after %d (-want +got):\n%s", after, diff)
		}
	}
	rest := resumed[k].all()
	if got := text(t, seen[:k]) + text(t, rest); got != answer {
		t.Errorf("text read in two parts: %q, want %q", got, answer)
	}
	recs := records(t, f.db, st.SessionID)
	if last := recs[len(recs)-1]; last.Role != store.RoleAssistant || last.Content != answer {
		t.Errorf("stored answer: %+v", last)
	}

	// Not live any more: the same from the store.
	eventually(t, "the run to leave memory", func() bool { return f.svc.LiveRun(user, st.SessionID) == "" })
	n := int64(len(all))
	for _, after := range []int64{0, 1, k, n - 1, n} {
		if diff := cmp.Diff(all[after:], f.follow(t, st.RunID, after).all(), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("replayed after %d (-want +got):\n%s", after, diff)
		}
	}
	// Beyond the end: what a reader saw before a crash lost the log's tail. It gets the final done.
	if diff := cmp.Diff(all[n-1:], f.follow(t, st.RunID, n+5).all()); diff != "" {
		t.Errorf("after %d, beyond the end (-want +got):\n%s", n+5, diff)
	}

	for _, id := range []string{"no-such-run", st.RunID} {
		if _, err := f.svc.Follow(t.Context(), "someone-else", id, 0); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("follow %s of another user: %v, want not found", id, err)
		}
		if _, err := f.svc.RunInfo(t.Context(), "someone-else", id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("run info %s of another user: %v, want not found", id, err)
		}
	}
}

// TestEventLogOff: without the durable log (FlushInterval < 0) runs work and end for their live readers —
// also cancelled ones — and store their records and state, but no event.
func TestEventLogOff(t *testing.T) {
	f := newFixture(t, setup{FlushInterval: -1, Tools: []tool.Tool{tool.CurrentTime(nil)}, Turns: []llmtest.Turn{
		{ToolCalls: currentTimeCall},
		{Text: "It is noon."},
		{Text: "I will never fini", Block: true},
	}})
	st := f.send(t, chat.Request{Message: "what time is it?"}, chat.StartOptions{})
	live := f.follow(t, st.RunID, 0).all()
	checkLog(t, "live", live)
	checkEnds(t, live, runevent.TypeComplete, "", store.RunCompleted)

	next := f.send(t, chat.Request{SessionID: st.SessionID, Message: "and now?"}, chat.StartOptions{})
	fl := f.follow(t, next.RunID, 0)
	fl.until(hasText(t, "I will never fini"))
	if _, err := f.svc.Cancel(t.Context(), user, next.RunID, ""); err != nil {
		t.Fatal(err)
	}
	checkEnds(t, fl.all(), runevent.TypeCancelled, `{"reason":"cancelled by the user"}`, store.RunCancelled)

	for id, status := range map[string]string{st.RunID: store.RunCompleted, next.RunID: store.RunCancelled} {
		if r := storedRun(t, f.db, id); r.Status != status || r.LastEventSeq != 0 {
			t.Errorf("stored run %s: status %s, last event %d; want %s, 0", id, r.Status, r.LastEventSeq, status)
		}
		if log := stored(t, f.db, id); len(log) != 0 {
			t.Errorf("run %s: %d events stored with the log off", id, len(log))
		}
	}
	want := []string{"user:what time is it?", "assistant:→call_1", "tool:call_1:ok", "assistant:It is noon.",
		"user:and now?", "assistant:I will never fini"}
	if diff := cmp.Diff(want, transcript(records(t, f.db, st.SessionID))); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}
