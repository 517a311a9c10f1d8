package chat_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"chatd/internal/chat"
	"chatd/internal/llm/llmtest"
	"chatd/internal/metrics"
	"chatd/internal/runevent"
	"chatd/internal/store"
	"chatd/internal/tool"
)

// heldCommit is a store whose CreateRun waits for release before it commits (or fails with fail), and
// that counts the writes a run makes after it.
type heldCommit struct {
	store.Store
	creating chan struct{} // receives when a CreateRun waits
	release  chan struct{}
	fail     error
	writes   atomic.Int64 // records, events, usage and ends written
}

func (h *heldCommit) CreateRun(ctx context.Context, user string, r *store.Run, first *store.Record) error {
	h.creating <- struct{}{}
	<-h.release
	if h.fail != nil {
		return h.fail
	}
	return h.Store.CreateRun(ctx, user, r, first)
}

func (h *heldCommit) AppendRecord(ctx context.Context, user string, r *store.Record) error {
	h.writes.Add(1)
	return h.Store.AppendRecord(ctx, user, r)
}

func (h *heldCommit) AppendEvents(ctx context.Context, events []store.Event, reserved []store.Reservation) error {
	h.writes.Add(1)
	return h.Store.AppendEvents(ctx, events, reserved)
}

func (h *heldCommit) AddUsage(ctx context.Context, user string, u store.UsageEntry) error {
	h.writes.Add(1)
	return h.Store.AddUsage(ctx, user, u)
}

func (h *heldCommit) FinishRun(ctx context.Context, user, runID string, end store.RunEnd) ([]store.Record, error) {
	h.writes.Add(1)
	return h.Store.FinishRun(ctx, user, runID, end)
}

// earlyService is a service on a heldCommit store whose model reports each request on asked.
func earlyService(t *testing.T, fail error) (*chat.Service, *heldCommit, chan struct{}) {
	t.Helper()
	return earlyServiceObserved(t, fail, nil, nil)
}

// earlyServiceObserved is earlyService counting into m and logging to log.
func earlyServiceObserved(t *testing.T, fail error, m *metrics.Metrics, log *slog.Logger) (*chat.Service, *heldCommit, chan struct{}) {
	t.Helper()
	asked := make(chan struct{}, 4)
	up := llmtest.NewServer(t)
	up.Strict = true
	up.Respond = func(n int, req llmtest.Request) llmtest.Turn {
		asked <- struct{}{}
		return echo(n, req)
	}
	client, err := newClient(up, "")
	if err != nil {
		t.Fatal(err)
	}
	db := &heldCommit{Store: openStore(t, ""), creating: make(chan struct{}, 1), release: make(chan struct{}), fail: fail}
	svc := chat.New(chat.Options{TitleModel: chat.TitleNone, Store: db, Models: oneModel{client}, DefaultModel: "x/m",
		FlushInterval: 5 * time.Millisecond, RetryBase: time.Millisecond, Metrics: m, Logger: log})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		if err := svc.Close(ctx); err != nil {
			t.Errorf("close service: %v", err)
		}
	})
	return svc, db, asked
}

// recv waits for one value of ch.
func recv(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(patience):
		t.Fatalf("waited %s for %s", patience, what)
	}
}

// TestNewSessionAsksTheModelWhileItCommits: the first message of a new session goes to the model while
// the transaction that stores it has not committed, and yet the run's events are all there, in order,
// once it has: the commit's fsync costs the first token nothing, and nothing is seen before it.
func TestNewSessionAsksTheModelWhileItCommits(t *testing.T) {
	svc, db, asked := earlyService(t, nil)
	started := make(chan *chat.Started, 1)
	go func() {
		st, err := svc.Start(context.Background(), user, chat.Request{Message: "hello"}, chat.StartOptions{})
		if err != nil {
			t.Error(err)
		}
		started <- st
	}()
	recv(t, db.creating, "the commit")
	recv(t, asked, "the model's request while the commit waits") // the model is asked before the commit
	if n := db.writes.Load(); n != 0 {
		t.Errorf("%d writes of the run before its commit", n)
	}
	close(db.release)
	st := <-started
	if st == nil {
		t.FailNow()
	}
	events := collect(t, svc, user, st.RunID)
	want := "run_start record status text_delta"
	if got := types(events); len(got) < len(want) || got[:len(want)] != want {
		t.Errorf("events %s, want them to begin with %s", got, want)
	}
	if text(t, events) != "re: hello" {
		t.Errorf("text %q", text(t, events))
	}
	recs := records(t, db, st.SessionID)
	if got := transcript(recs); len(got) != 2 || recs[0].Content != "hello" || recs[1].Content != "re: hello" {
		t.Errorf("stored %q", got)
	}
	if events[len(events)-1].Type != runevent.TypeDone {
		t.Errorf("the run does not end with done: %s", types(events))
	}
}

// TestNewSessionRunAbandoned: when the commit of a run that asked its model early fails, the sender gets
// the failure, the model call is dropped, and nothing of the run is stored or left running.
func TestNewSessionRunAbandoned(t *testing.T) {
	failure := errors.New("disk full")
	m := metrics.New()
	var logs bytes.Buffer
	var logMu sync.Mutex
	svc, db, asked := earlyServiceObserved(t, failure, m, slog.New(slog.NewJSONHandler(lockedWriter{&logMu, &logs}, nil)))
	done := make(chan error, 1)
	go func() {
		_, err := svc.Start(context.Background(), user, chat.Request{Message: "hello"}, chat.StartOptions{})
		done <- err
	}()
	recv(t, db.creating, "the commit")
	recv(t, asked, "the model's request")
	close(db.release)
	if err := <-done; !errors.Is(err, failure) {
		t.Fatalf("start: %v, want %v", err, failure)
	}
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	if err := svc.Close(ctx); err != nil { // the abandoned run's goroutine is counted, and ends
		t.Fatal(err)
	}
	if n := db.writes.Load(); n != 0 {
		t.Errorf("%d writes of an abandoned run", n)
	}
	if sessions, _, err := db.Sessions(t.Context(), user, store.Page{}); err != nil || len(sessions) != 0 {
		t.Errorf("sessions %v, %v; want none", sessions, err)
	}
	// The client was told the run does not exist: it is neither counted nor logged as one that ended.
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if name := f.GetName(); (name == "chatd_runs_started_total" || name == "chatd_runs_ended_total") && len(f.GetMetric()) > 0 {
			t.Errorf("%s counts the abandoned run: %v", name, f.GetMetric())
		}
	}
	logMu.Lock()
	defer logMu.Unlock()
	if strings.Contains(logs.String(), `"run ended"`) {
		t.Errorf("the abandoned run is logged as ended:\n%s", logs.String())
	}
}

// failsToolResults refuses to store tool records.
type failsToolResults struct{ store.Store }

func (f failsToolResults) AppendRecord(ctx context.Context, user string, r *store.Record) error {
	if r.Role == store.RoleTool {
		return errors.New("disk full")
	}
	return f.Store.AppendRecord(ctx, user, r)
}

// TestToolResultNotStored: a call whose result cannot be stored is closed at the run's end with a
// failed result, which the run's readers get as a record before done, and the history stays valid.
func TestToolResultNotStored(t *testing.T) {
	up := llmtest.NewServer(t)
	up.Strict = true
	up.Respond = func(n int, req llmtest.Request) llmtest.Turn {
		if n == 0 {
			return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "lookup", Arguments: `{}`}}}
		}
		return echo(n, req)
	}
	client, err := newClient(up, "")
	if err != nil {
		t.Fatal(err)
	}
	reg := tool.NewRegistry(tool.Options{})
	t.Cleanup(reg.Close)
	if err := reg.Register(namedTool{name: "lookup"}); err != nil {
		t.Fatal(err)
	}
	db := openStore(t, "")
	svc := chat.New(chat.Options{TitleModel: chat.TitleNone, Store: failsToolResults{db}, Models: oneModel{client}, Tools: reg, DefaultModel: "x/m",
		FlushInterval: 5 * time.Millisecond, RetryBase: time.Millisecond})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		if err := svc.Close(ctx); err != nil {
			t.Errorf("close service: %v", err)
		}
	})
	st, err := svc.Start(t.Context(), user, chat.Request{Message: "look it up"}, chat.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	events := collect(t, svc, user, st.RunID)
	checkLog(t, "live", events)
	var closed bool
	for _, e := range events {
		closed = closed || e.Type == runevent.TypeRecord && strings.Contains(string(e.Data), `"role":"tool"`)
	}
	if !closed {
		t.Errorf("no tool record reached the readers: %s", types(events))
	}
	recs := records(t, db, st.SessionID)
	checkPaired(t, recs)
	if last := recs[len(recs)-1]; last.Role != store.RoleTool || last.Success == nil || *last.Success {
		t.Errorf("the call is not closed with a failed result: %q", transcript(recs))
	}
}

// firstTokenSamples returns the count and sum of chatd_time_to_first_token_seconds.
func firstTokenSamples(t *testing.T, m *metrics.Metrics) (uint64, float64) {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	var sum float64
	for _, f := range fams {
		if f.GetName() == "chatd_time_to_first_token_seconds" {
			for _, mm := range f.GetMetric() {
				n += mm.GetHistogram().GetSampleCount()
				sum += mm.GetHistogram().GetSampleSum()
			}
		}
	}
	return n, sum
}

// TestEarlyRunFirstTokenCountsTheCommit: the first token of a run started before its commit is held
// unseen until the commit ends, so its time to first token is counted to the commit, not to when the
// token reached the held run: a slow commit shows in the metric as the client sees it.
func TestEarlyRunFirstTokenCountsTheCommit(t *testing.T) {
	m := metrics.New()
	svc, db, asked := earlyServiceObserved(t, nil, m, nil)
	started := make(chan *chat.Started, 1)
	go func() {
		st, err := svc.Start(context.Background(), user, chat.Request{Message: "hello"}, chat.StartOptions{})
		if err != nil {
			t.Error(err)
		}
		started <- st
	}()
	recv(t, db.creating, "the commit")
	recv(t, asked, "the model's request")
	askedAt := time.Now() // after the run started its clock, which it did before asking
	eventually(t, "the first token held in the run", func() bool { return svc.HeldText(user) })
	if n, _ := firstTokenSamples(t, m); n != 0 {
		t.Errorf("%d first-token samples while the commit waits; the client has seen nothing", n)
	}
	committing := time.Now()
	close(db.release)
	st := <-started
	if st == nil {
		t.FailNow()
	}
	collect(t, svc, user, st.RunID)
	n, sum := firstTokenSamples(t, m)
	if least := committing.Sub(askedAt).Seconds(); n != 1 || sum < least {
		t.Errorf("first token: %d samples, %.6f s; want 1 of at least %.6f s (the commit's wait, which the client waited)", n, sum, least)
	}
}

// TestAbandonedRunHasNoFirstToken: a run whose commit failed does not exist for its client: a token it
// held is not counted as a first token.
func TestAbandonedRunHasNoFirstToken(t *testing.T) {
	m := metrics.New()
	svc, db, asked := earlyServiceObserved(t, errors.New("disk full"), m, nil)
	done := make(chan error, 1)
	go func() {
		_, err := svc.Start(context.Background(), user, chat.Request{Message: "hello"}, chat.StartOptions{})
		done <- err
	}()
	recv(t, db.creating, "the commit")
	recv(t, asked, "the model's request")
	eventually(t, "the first token held in the run", func() bool { return svc.HeldText(user) })
	close(db.release)
	if err := <-done; err == nil {
		t.Fatal("the run started although its commit failed")
	}
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	if err := svc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := firstTokenSamples(t, m); n != 0 {
		t.Errorf("the abandoned run is counted in chatd_time_to_first_token_seconds: %d samples", n)
	}
}
