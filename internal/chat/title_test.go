package chat_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"chatd/internal/chat"
	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
	"chatd/internal/store"
)

// isTitleCall reports whether a request is the call that titles a session.
func isTitleCall(req llmtest.Request) bool {
	msgs := req.Messages()
	if len(msgs) == 0 {
		return false
	}
	sys, _ := msgs[0]["content"].(string)
	return strings.Contains(sys, "You name conversations")
}

// titler answers title calls with title (or the turn titleTurn gives) and every other call with answer;
// it keeps the title calls it got.
type titler struct {
	mu     sync.Mutex
	title  llmtest.Turn
	answer string
	asked  []llmtest.Request
	hold   func() // called in a title call before it answers
}

func (tt *titler) respond(_ int, req llmtest.Request) llmtest.Turn {
	if !isTitleCall(req) {
		return llmtest.Turn{Text: tt.answer}
	}
	tt.mu.Lock()
	tt.asked = append(tt.asked, req)
	hold := tt.hold
	tt.mu.Unlock()
	if hold != nil {
		hold()
	}
	return tt.title
}

func (tt *titler) calls() []llmtest.Request {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	return append([]llmtest.Request(nil), tt.asked...)
}

// drain waits for the service's runs and title calls to end, as a shutdown does before it cancels them.
func drain(t *testing.T, svc *chat.Service) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	if err := svc.Drain(ctx); err != nil {
		t.Fatal(err)
	}
}

func sessionTitle(t *testing.T, db store.Store, id string) string {
	t.Helper()
	s, err := db.Session(t.Context(), user, id)
	if err != nil {
		t.Fatal(err)
	}
	return s.Title
}

// TestTitleFromFirstExchange: after the first answer of a session, the title model titles it from the
// question and the answer; the call's usage is in the ledger with the run's; a second message does not
// title it again.
func TestTitleFromFirstExchange(t *testing.T) {
	tt := &titler{title: llmtest.Turn{Text: "Title: \"Météo à Paris\".\n"}, answer: "Il fait beau à Paris."}
	f := newFixture(t, setup{Respond: tt.respond, TitleModel: "x/m"})
	st := f.send(t, chat.Request{Message: "Quel temps fait-il à Paris aujourd'hui ?"}, chat.StartOptions{})
	if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
		t.Fatalf("run %s", o.Status)
	}
	second := f.send(t, chat.Request{SessionID: st.SessionID, Message: "Et demain ?"}, chat.StartOptions{})
	f.wait(t, second.RunID)
	drain(t, f.svc)
	if got := sessionTitle(t, f.db, st.SessionID); got != "Météo à Paris" {
		t.Errorf("title %q, want the model's, cleaned", got)
	}
	calls := tt.calls()
	if len(calls) != 1 {
		t.Fatalf("%d title calls, want 1 (the first exchange only)", len(calls))
	}
	prompt := string(calls[0].Raw)
	for _, want := range []string{"Quel temps fait-il", "Il fait beau", "language of the user"} {
		if !strings.Contains(prompt, want) {
			t.Errorf("the title call does not carry %q: %s", want, prompt)
		}
	}
	totals, err := f.db.UsageTotals(t.Context(), store.UsageQuery{User: user, GroupBy: store.GroupByModel})
	if err != nil {
		t.Fatal(err)
	}
	if len(totals) != 1 || totals[0].Calls != 3 {
		t.Errorf("usage %+v, want 3 calls: two runs and the title", totals)
	}
}

// TestTitleKeepsUserTitle: a title the user set while the title call ran is kept (the store's update
// checks it, not a read before); the run's end did not wait for the title call.
func TestTitleKeepsUserTitle(t *testing.T) {
	asked, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	tt := &titler{title: llmtest.Turn{Text: "Generated"}, answer: "An answer.", hold: func() {
		asked <- struct{}{}
		<-release
	}}
	f := newFixture(t, setup{Respond: tt.respond, TitleModel: "x/m"})
	t.Cleanup(open) // before the fixture's cleanups: a failed test must not leave the upstream held
	st := f.send(t, chat.Request{Message: "A question"}, chat.StartOptions{})
	select {
	case <-asked:
	case <-time.After(patience):
		t.Fatal("no title call")
	}
	// The title call is held, and the run has ended all the same.
	if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
		t.Fatalf("run %s", o.Status)
	}
	mine := "My own title"
	if _, err := f.db.UpdateSession(t.Context(), user, st.SessionID, store.SessionPatch{Title: &mine}); err != nil {
		t.Fatal(err)
	}
	open()
	drain(t, f.svc)
	if got := sessionTitle(t, f.db, st.SessionID); got != mine {
		t.Errorf("title %q, want the user's %q", got, mine)
	}
}

// TestTitleSkipped: a failed title call, title_model none, an empty answer, and a session the user
// titled before its first message keep the title cut from the message; none makes no call.
func TestTitleSkipped(t *testing.T) {
	const question = "Where is the station?"
	for _, tc := range []struct {
		name       string
		titleModel string
		title      llmtest.Turn
		session    string // a title the session has before its first message
		wantCalls  int
		want       string
	}{
		{"failed", "x/m", llmtest.Turn{Status: 400, ErrorMessage: "no"}, "", 1, question},
		{"empty", "x/m", llmtest.Turn{Text: " \n\"\""}, "", 1, question},
		{"none", chat.TitleNone, llmtest.Turn{Text: "Unused"}, "", 0, question},
		{"titled before", "x/m", llmtest.Turn{Text: "Unused"}, "Given", 0, "Given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tt := &titler{title: tc.title, answer: "Down the road."}
			f := newFixture(t, setup{Respond: tt.respond, TitleModel: tc.titleModel})
			req := chat.Request{Message: question}
			if tc.session != "" {
				s := &store.Session{Title: tc.session}
				if err := f.svc.CreateSession(t.Context(), user, s); err != nil {
					t.Fatal(err)
				}
				req.SessionID = s.ID
			}
			st := f.send(t, req, chat.StartOptions{})
			f.wait(t, st.RunID)
			drain(t, f.svc)
			if got := sessionTitle(t, f.db, st.SessionID); got != tc.want {
				t.Errorf("title %q, want %q", got, tc.want)
			}
			if n := len(tt.calls()); n != tc.wantCalls {
				t.Errorf("%d title calls, want %d", n, tc.wantCalls)
			}
		})
	}
}

// TestTitleCallUsage: a title call refused before it streamed anything (401) is not charged; one whose
// provider reports no usage is estimated from the prompt it was really sent (a short exchange: well
// under the thousand tokens its longest prompt would be).
func TestTitleCallUsage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		title llmtest.Turn
		calls int64 // usage rows of the title call
		maxIn int64
	}{
		{"refused", llmtest.Turn{Status: 401, ErrorMessage: "bad key"}, 0, 0},
		{"no usage reported", llmtest.Turn{Text: "Station directions", NoUsage: true}, 1, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tt := &titler{title: tc.title, answer: "Down the road."}
			respond := func(n int, req llmtest.Request) llmtest.Turn {
				turn := tt.respond(n, req)
				if !isTitleCall(req) {
					turn.Usage = &llm.Usage{InputTokens: 10, OutputTokens: 3}
				}
				return turn
			}
			f := newFixture(t, setup{Respond: respond, TitleModel: "x/m"})
			st := f.send(t, chat.Request{Message: "Where is the station?"}, chat.StartOptions{})
			f.wait(t, st.RunID)
			drain(t, f.svc)
			if len(tt.calls()) != 1 {
				t.Fatalf("%d title calls", len(tt.calls()))
			}
			rows, err := f.db.UsageTotals(t.Context(), store.UsageQuery{User: user, GroupBy: store.GroupByModel})
			if err != nil || len(rows) != 1 {
				t.Fatalf("usage %+v, %v", rows, err)
			}
			if got := rows[0].Calls - 1; got != tc.calls {
				t.Errorf("the title call is %d usage rows, want %d: %+v", got, tc.calls, rows)
			}
			if in := rows[0].InputTokens - 10; in > tc.maxIn {
				t.Errorf("the title call is charged %d input tokens, want at most %d", in, tc.maxIn)
			}
		})
	}
}

// TestTitleCancelledByDrain: a drain waits for a title call within its own time only, then cancels it
// (a title call may take 30 s, a drain 20): the session keeps the title cut from its first message.
func TestTitleCancelledByDrain(t *testing.T) {
	asked, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	tt := &titler{title: llmtest.Turn{Text: "Generated"}, answer: "An answer.", hold: func() {
		asked <- struct{}{}
		<-release
	}}
	f := newFixture(t, setup{Respond: tt.respond, TitleModel: "x/m"})
	t.Cleanup(open)
	st := f.send(t, chat.Request{Message: "A question"}, chat.StartOptions{})
	select {
	case <-asked:
	case <-time.After(patience):
		t.Fatal("no title call")
	}
	f.wait(t, st.RunID)
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the drain's time is up
	f.svc.Drain(ctx)
	open() // too late: the call was cancelled when the drain returned
	closeCtx, stop := context.WithTimeout(t.Context(), patience)
	defer stop()
	if err := f.svc.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	if got := sessionTitle(t, f.db, st.SessionID); got != "A question" {
		t.Errorf("title %q, want the cut kept: the drain cancels a title call it cannot wait for", got)
	}
}
