package chat_test

import (
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"

	"chatd/internal/chat"
	"chatd/internal/llm/llmtest"
	"chatd/internal/store"
)

// TestRegenerate: asking for the last answer again retracts it — the model is sent the conversation
// without it, the new answer follows the same user message, and the old one stays stored.
func TestRegenerate(t *testing.T) {
	n := 0
	f := newFixture(t, setup{Respond: func(_ int, req llmtest.Request) llmtest.Turn {
		n++
		return llmtest.Turn{Text: "answer " + strconv.Itoa(n) + " to " + lastUserMessage(req)}
	}})
	first := f.send(t, chat.Request{Message: "first question"}, chat.StartOptions{})
	f.wait(t, first.RunID)
	sid := first.SessionID
	second := f.send(t, chat.Request{SessionID: sid, Message: "second question"}, chat.StartOptions{})
	f.wait(t, second.RunID)

	again := f.send(t, chat.Request{SessionID: sid, Regenerate: true}, chat.StartOptions{})
	out := f.wait(t, again.RunID)
	if out.Message == nil || out.Message.Content != "answer 3 to second question" {
		t.Fatalf("regenerated answer = %+v, want answer 3 to the second question", out.Message)
	}
	reqs := f.up.Requests()
	var roles []string
	for _, m := range reqs[len(reqs)-1].Messages() {
		c, _ := m["content"].(string)
		roles = append(roles, m["role"].(string)+":"+c)
	}
	want := []string{"user:first question", "assistant:answer 1 to first question", "user:second question"}
	if got := roles[len(roles)-3:]; !slices.Equal(got, want) || slices.Contains(roles, "assistant:answer 2 to second question") {
		t.Errorf("the regenerating run sent %q; want it to end with %q and hold no retracted answer", roles, want)
	}

	recs := records(t, f.db, sid)
	if got := transcript(store.Current(recs)); !slices.Equal(got, []string{"user:first question",
		"assistant:answer 1 to first question", "user:second question", "assistant:answer 3 to second question"}) {
		t.Errorf("current conversation = %q", got)
	}
	if got := transcript(recs); !slices.Contains(got, "assistant:answer 2 to second question") {
		t.Errorf("the retracted answer is no longer stored: %q", got)
	}
	sess, err := f.db.Session(t.Context(), user, sid)
	if err != nil || sess.Title != "first question" {
		t.Errorf("session title = %q (%v), want it untouched", sess.Title, err)
	}

	// Twice in a row: the second regeneration retracts the first's answer.
	again2 := f.send(t, chat.Request{SessionID: sid, Regenerate: true}, chat.StartOptions{})
	f.wait(t, again2.RunID)
	if got := transcript(store.Current(records(t, f.db, sid))); got[len(got)-1] != "assistant:answer 4 to second question" || len(got) != 4 {
		t.Errorf("after two regenerations: %q", got)
	}
}

func TestRegenerateRefused(t *testing.T) {
	f := newFixture(t, setup{Respond: echo})
	sess := &store.Session{Agent: "default"}
	if err := f.db.CreateSession(t.Context(), user, sess); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  chat.Request
		code string
	}{
		{"no session", chat.Request{Regenerate: true}, "missing_session"},
		{"with a message", chat.Request{SessionID: sess.ID, Regenerate: true, Message: "x"}, "invalid_regenerate"},
		{"nothing asked yet", chat.Request{SessionID: sess.ID, Regenerate: true}, "nothing_to_regenerate"},
		{"unknown session", chat.Request{SessionID: "nope", Regenerate: true}, "session_not_found"},
	}
	for _, tc := range tests {
		_, err := f.svc.Start(t.Context(), user, tc.req, chat.StartOptions{})
		var ce *chat.Error
		if !errors.As(err, &ce) || ce.Code != tc.code {
			t.Errorf("%s: err = %v, want code %s", tc.name, err, tc.code)
		}
	}
}

// TestRegenerateNeverRetractsANewerMessage: a regeneration with interrupt, while a queued message waits
// behind the active run. Whichever starts first, the queued message stays in the conversation: the
// regeneration either answers the question it was asked for, or is refused as conversation_changed.
func TestRegenerateNeverRetractsANewerMessage(t *testing.T) {
	for range 5 {
		var mu sync.Mutex
		seconds := 0
		f := newFixture(t, setup{Respond: func(n int, req llmtest.Request) llmtest.Turn {
			mu.Lock()
			defer mu.Unlock()
			if m := lastUserMessage(req); m == "second" {
				if seconds++; seconds == 1 {
					return llmtest.Turn{Text: "partial " + m, Block: true} // until the interrupt
				}
			}
			return echo(n, req)
		}})
		a := f.send(t, chat.Request{Message: "first"}, chat.StartOptions{})
		f.wait(t, a.RunID)
		b := f.send(t, chat.Request{SessionID: a.SessionID, Message: "second"}, chat.StartOptions{})
		f.follow(t, b.RunID, 0).until(hasText(t, "partial second"))
		q := f.send(t, chat.Request{SessionID: a.SessionID, Message: "third"}, chat.StartOptions{OnActiveRun: chat.OnActiveEnqueue})
		r, err := f.svc.Start(t.Context(), user, chat.Request{SessionID: a.SessionID, Regenerate: true},
			chat.StartOptions{OnActiveRun: chat.OnActiveInterrupt})
		var ce *chat.Error
		switch {
		case err == nil:
			f.wait(t, r.RunID)
		case errors.As(err, &ce) && ce.Code == "conversation_changed":
		default:
			t.Fatalf("regenerate: %v", err)
		}
		f.wait(t, q.RunID)
		cur := transcript(store.Current(records(t, f.db, a.SessionID)))
		if !slices.Contains(cur, "user:third") {
			t.Fatalf("the queued message is gone from the conversation: %q (regenerate err %v)", cur, err)
		}
	}
}

// TestRegenerateOfAStaleAnswer: a client that shows an older answer (another tab) cannot retract the
// answer it has not seen.
func TestRegenerateOfAStaleAnswer(t *testing.T) {
	f := newFixture(t, setup{Respond: echo})
	a := f.send(t, chat.Request{Message: "first"}, chat.StartOptions{})
	f.wait(t, a.RunID)
	b := f.send(t, chat.Request{SessionID: a.SessionID, Message: "second"}, chat.StartOptions{})
	f.wait(t, b.RunID)
	_, err := f.svc.Start(t.Context(), user, chat.Request{SessionID: a.SessionID, Regenerate: true, ReplacesRun: a.RunID}, chat.StartOptions{})
	var ce *chat.Error
	if !errors.As(err, &ce) || ce.Code != "conversation_changed" {
		t.Fatalf("regenerating the first answer after a second question: %v, want conversation_changed", err)
	}
	r := f.send(t, chat.Request{SessionID: a.SessionID, Regenerate: true, ReplacesRun: b.RunID}, chat.StartOptions{})
	f.wait(t, r.RunID)
	// Again: the answer now shown is r's; b's (retracted) still names the same question.
	for _, run := range []string{r.RunID, b.RunID} {
		again := f.send(t, chat.Request{SessionID: a.SessionID, Regenerate: true, ReplacesRun: run}, chat.StartOptions{})
		f.wait(t, again.RunID)
	}
}
