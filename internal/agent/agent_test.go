package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
	"chatd/internal/llm/openai"
)

// recorder is a run's Sink, Recorder and Context at once, as chat's observer and conversation are: it
// keeps a readable log of every step, stores the turns and their results, and builds every model call's
// conversation from what it stored, after the history it was given.
type recorder struct {
	mu      sync.Mutex
	log     []string
	grew    chan struct{} // closed, and replaced, when the log grows
	history []llm.Message // the conversation before the run, the user's new message last
	stored  []*storedTurn
	turns   []agent.Turn
	results map[string]agent.ToolResult // by call id, the last turn's
	failOn  string                      // "turn" or "tool": storing fails
}

// storedTurn is a turn the recorder stored, with the results stored for its calls.
type storedTurn struct {
	at      *agent.Turn // the turn as the loop passes it
	turn    agent.Turn
	results map[string]agent.ToolResult
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, fmt.Sprintf(format, args...))
	if r.grew != nil {
		close(r.grew)
		r.grew = nil
	}
}

func (r *recorder) Emit(e agent.Event) {
	switch e := e.(type) {
	case agent.StatusMessage:
		r.add("status %s", e.Message)
	case *agent.TextDelta:
		r.add("text %s", e.Text)
	case *agent.ReasoningDelta:
		r.add("reasoning %s", e.Text)
	case agent.Usage:
		r.add("usage %s in=%d out=%d", e.Model.Name, e.Usage.InputTokens, e.Usage.OutputTokens)
	case *agent.ToolCallDelta:
		r.add("tool_call_delta %d", e.Index)
	case agent.ToolStart:
		r.add("tool_start %s %s %s", e.Call.ID, e.Call.Name, e.Call.Arguments)
	case agent.ToolComplete:
		r.add("tool_complete %s %v %s", e.Call.ID, e.Result.Success, e.Result.Content)
	case agent.ApprovalRequired:
		r.add("approval_required %s %s", e.Call.ID, e.Reason)
	default:
		r.add("unknown event %T", e)
	}
}

func (r *recorder) RecordTurn(ctx context.Context, t *agent.Turn) error {
	if ctx.Err() != nil {
		return errors.New("RecordTurn got a cancelled context")
	}
	if r.failOn == "turn" {
		return errors.New("disk full")
	}
	r.add("turn %q calls=%d finish=%s", t.Text, len(t.ToolCalls), t.FinishReason)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.turns = append(r.turns, *t)
	r.stored = append(r.stored, &storedTurn{at: t, turn: *t, results: map[string]agent.ToolResult{}})
	return nil
}

func (r *recorder) RecordToolResult(ctx context.Context, t *agent.Turn, c llm.ToolCall, res agent.ToolResult) error {
	if ctx.Err() != nil {
		return errors.New("RecordToolResult got a cancelled context")
	}
	if r.failOn == "tool" {
		return errors.New("disk full")
	}
	r.add("tool_result %s %v", c.ID, res.Success)
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.IndexFunc(r.stored, func(s *storedTurn) bool { return s.at == t })
	if i < 0 {
		return fmt.Errorf("result of %s for a turn that was not stored", c.ID)
	}
	if _, ok := r.stored[i].results[c.ID]; ok {
		return fmt.Errorf("second result for %s", c.ID)
	}
	r.stored[i].results[c.ID] = res
	if r.results == nil {
		r.results = map[string]agent.ToolResult{}
	}
	r.results[c.ID] = res
	return nil
}

// Messages builds the conversation the way chat's does: the history, then each stored turn followed by
// the results of its calls in call order.
func (r *recorder) Messages(ctx context.Context, compact bool) ([]llm.Message, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	msgs := slices.Clone(r.history)
	for _, s := range r.stored {
		t := &s.turn
		msgs = append(msgs, llm.Message{Role: llm.RoleAssistant, Parts: t.Parts, ToolCalls: t.ToolCalls, Origin: t.Origin})
		for _, c := range t.ToolCalls {
			if res, ok := s.results[c.ID]; ok {
				m := llm.TextMessage(llm.RoleTool, res.Content)
				m.ToolCallID, m.ToolName, m.IsError = c.ID, c.Name, !res.Success
				msgs = append(msgs, m)
			}
		}
	}
	return msgs, nil
}

// waitFor waits until a step starting with prefix is logged, or ctx is done.
func (r *recorder) waitFor(ctx context.Context, prefix string) error {
	for {
		r.mu.Lock()
		found := slices.ContainsFunc(r.log, func(l string) bool { return strings.HasPrefix(l, prefix) })
		if r.grew == nil {
			r.grew = make(chan struct{})
		}
		grew := r.grew
		r.mu.Unlock()
		if found {
			return nil
		}
		select {
		case <-grew:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %q: %w", prefix, context.Cause(ctx))
		}
	}
}

// run runs cfg on the user's "hello" with rec as the run's recorder, sink and context.
func run(ctx context.Context, cfg agent.Config, rec *recorder) agent.Result {
	return runTo(ctx, cfg, rec, rec)
}

// runTo is run with another sink.
func runTo(ctx context.Context, cfg agent.Config, rec *recorder, sink agent.Sink) agent.Result {
	rec.history = hello
	cfg.Context = rec
	return agent.Run(ctx, cfg, rec, sink)
}

func (r *recorder) has(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, l := range r.log {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

func (r *recorder) index(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, l := range r.log {
		if strings.HasPrefix(l, prefix) {
			return i
		}
	}
	return -1
}

// fakeTools runs functions by name; names starting with "read_" are read-only.
type fakeTools map[string]func(ctx context.Context, args json.RawMessage) agent.ToolResult

func (f fakeTools) ReadOnly(name string) bool { return strings.HasPrefix(name, "read_") }

func (f fakeTools) Call(ctx context.Context, c llm.ToolCall) agent.ToolResult {
	fn, ok := f[c.Name]
	if !ok {
		return agent.ToolResult{Content: "unknown tool " + c.Name}
	}
	return fn(ctx, c.Arguments)
}

func echo(ctx context.Context, args json.RawMessage) agent.ToolResult {
	return agent.ToolResult{Arguments: args, Content: "ok " + string(args), Success: true}
}

func config(t *testing.T, srv *llmtest.Server, tools agent.Tools) agent.Config {
	t.Helper()
	c, err := openai.New(openai.Options{BaseURL: srv.BaseURL()})
	if err != nil {
		t.Fatal(err)
	}
	return agent.Config{
		Models:    []agent.Model{{Provider: c, Name: "llmtest-1"}},
		ToolSpecs: []llm.ToolSpec{{Name: "read_time"}, {Name: "write_note"}},
		Tools:     tools,
		RetryBase: time.Millisecond,
	}
}

var hello = []llm.Message{llm.TextMessage(llm.RoleUser, "hello")}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestTextAnswer(t *testing.T) {
	srv := llmtest.NewServer(t, llmtest.Turn{Reasoning: "think", Text: "Hello there!", ChunkRunes: 5})
	rec := &recorder{}
	res := run(t.Context(), config(t, srv, fakeTools{}), rec)
	if res.Status != agent.StatusCompleted || res.FinishReason != "stop" || res.Err != nil {
		t.Fatalf("result = %+v", res)
	}
	want := []string{
		"status Thinking…", "reasoning think", "text Hello", "text  ther", "text e!",
		"usage llmtest-1 in=42 out=8", `turn "Hello there!" calls=0 finish=stop`,
	}
	if diff := cmp.Diff(want, rec.log); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	if res.Final == nil || res.Final.Reasoning != "think" || res.Usage.InputTokens != 42 {
		t.Errorf("final = %+v usage = %+v", res.Final, res.Usage)
	}
}

// TestReadOnlyToolsStartWhileStreaming: the server holds the finish chunk until both read-only calls
// have started, so the test deadlocks (and fails) unless they start while the model streams; the
// other call must wait for the end of the turn.
func TestReadOnlyToolsStartWhileStreaming(t *testing.T) {
	started := make(chan string, 3)
	var finishSent atomic.Bool
	tools := fakeTools{
		"read_time": func(ctx context.Context, a json.RawMessage) agent.ToolResult {
			started <- "read_time"
			return echo(ctx, a)
		},
		"write_note": func(ctx context.Context, a json.RawMessage) agent.ToolResult {
			if !finishSent.Load() {
				return agent.ToolResult{Content: "started before the turn ended"}
			}
			return echo(ctx, a)
		},
	}
	turn := llmtest.Turn{
		ToolCalls: []llmtest.ToolCall{
			{ID: "call_1", Name: "read_time", Arguments: `{"timezone":"Europe/Paris"}`},
			{ID: "call_2", Name: "read_time", Arguments: `{"timezone":"Asia/Tokyo"}`},
			{ID: "call_3", Name: "write_note", Arguments: `{"text":"hi"}`},
		},
		BeforeFinish: func() {
			for range 2 {
				select {
				case <-started:
				case <-time.After(20 * time.Second):
					return // the test fails below: calls did not start early
				}
			}
			finishSent.Store(true)
		},
	}
	srv := llmtest.NewServer(t, turn, llmtest.Turn{Text: "Done."})
	rec := &recorder{}
	res := run(t.Context(), config(t, srv, tools), rec)
	if res.Status != agent.StatusCompleted {
		t.Fatalf("result = %+v", res)
	}
	if !finishSent.Load() {
		t.Fatal("the read-only calls did not start while the model was streaming")
	}
	for _, id := range []string{"call_1", "call_2", "call_3"} {
		if r := rec.results[id]; !r.Success {
			t.Errorf("%s: %+v", id, r)
		}
	}
	if i, j := rec.index("tool_start call_1"), rec.index("turn "); i < 0 || i > j {
		t.Errorf("tool_start of call_1 at %d, turn stored at %d: want it before", i, j)
	}
	if i, j := rec.index("tool_start call_3"), rec.index("turn "); i < j {
		t.Errorf("write_note started at %d before the turn was stored at %d", i, j)
	}
	// The second request carries the assistant turn and the three results in call order.
	msgs := srv.Requests()[1].Messages()
	var roles []string
	for _, m := range msgs {
		roles = append(roles, fmt.Sprint(m["role"], m["tool_call_id"]))
	}
	if diff := cmp.Diff([]string{"user<nil>", "assistant<nil>", "toolcall_1", "toolcall_2", "toolcall_3"}, roles); diff != "" {
		t.Errorf("second request (-want +got):\n%s", diff)
	}
}

func TestMaxIterations(t *testing.T) {
	calls := llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "write_note", Arguments: `{}`}}}
	srv := llmtest.NewServer(t, calls, calls, calls)
	cfg := config(t, srv, fakeTools{"write_note": echo})
	cfg.MaxIterations = 2
	rec := &recorder{}
	res := run(t.Context(), cfg, rec)
	if res.Status != agent.StatusMaxIterations {
		t.Fatalf("status = %s, want max_iterations (%v)", res.Status, res.Err)
	}
	reqs := srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model calls, want 3 (2 rounds and a last turn)", len(reqs))
	}
	if reqs[0].Body["tool_choice"] != nil || reqs[2].Body["tool_choice"] != "none" {
		t.Errorf("tool_choice = %v, %v; want unset then none", reqs[0].Body["tool_choice"], reqs[2].Body["tool_choice"])
	}
	// The model called a tool anyway on the last turn: stored with a failed result, not run.
	if n := rec.has("tool_result call_1 true"); n != 2 {
		t.Errorf("%d successful results, want 2", n)
	}
	if n := rec.has("tool_complete call_1 false Not run: the run reached its limit of 2 tool rounds"); n != 1 {
		t.Errorf("log:\n%s", strings.Join(rec.log, "\n"))
	}
}

func TestLengthContinues(t *testing.T) {
	srv := llmtest.NewServer(t,
		llmtest.Turn{Text: "Once upon a ", FinishReason: "length"},
		llmtest.Turn{Text: "time, the ", FinishReason: "length"},
		llmtest.Turn{Text: "end.", FinishReason: "stop"},
	)
	rec := &recorder{}
	res := run(t.Context(), config(t, srv, fakeTools{}), rec)
	if res.Status != agent.StatusCompleted || res.FinishReason != "stop" {
		t.Fatalf("result = %+v", res)
	}
	if len(rec.turns) != 1 || rec.turns[0].Text != "Once upon a time, the end." {
		t.Fatalf("turns = %+v", rec.turns)
	}
	if rec.turns[0].Usage.InputTokens != 3*42 {
		t.Errorf("usage = %+v, want the sum of three calls", rec.turns[0].Usage)
	}
	msgs := srv.Requests()[2].Messages()
	last := msgs[len(msgs)-2:]
	if last[0]["role"] != "assistant" || last[0]["content"] != "Once upon a time, the " || last[1]["role"] != "user" {
		t.Errorf("continuation request ends with %v", last)
	}
}

func TestLengthContinuesAtMostThreeTimes(t *testing.T) {
	cut := llmtest.Turn{Text: "more ", FinishReason: "length"}
	srv := llmtest.NewServer(t, cut, cut, cut, cut, cut)
	rec := &recorder{}
	res := run(t.Context(), config(t, srv, fakeTools{}), rec)
	if n := len(srv.Requests()); n != 4 {
		t.Fatalf("%d model calls, want 4", n)
	}
	if res.FinishReason != "length" || len(rec.turns) != 1 || rec.turns[0].Text != "more more more more " {
		t.Fatalf("result = %+v turns = %+v", res, rec.turns)
	}
}

func TestTruncatedCallNeverRuns(t *testing.T) {
	var ran atomic.Int32
	tools := fakeTools{"write_note": func(ctx context.Context, a json.RawMessage) agent.ToolResult {
		ran.Add(1)
		return echo(ctx, a)
	}}
	srv := llmtest.NewServer(t,
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{
			{ID: "call_ok", Name: "write_note", Arguments: `{"text":"a"}`},
			{ID: "call_cut", Name: "write_note", Arguments: `{"text":"a long note"}`},
		}, FinishReason: "length", CutArguments: true},
		llmtest.Turn{Text: "ok"},
	)
	rec := &recorder{}
	res := run(t.Context(), config(t, srv, tools), rec)
	if res.Status != agent.StatusCompleted {
		t.Fatalf("result = %+v", res)
	}
	if ran.Load() != 1 || !rec.results["call_ok"].Success || rec.results["call_cut"].Success {
		t.Fatalf("ran %d; results %+v", ran.Load(), rec.results)
	}
	if got := string(rec.turns[0].ToolCalls[1].Arguments); got != "{}" {
		t.Errorf("stored arguments of the cut call = %s, want {}", got)
	}
	if !strings.Contains(rec.results["call_cut"].Content, "cut off by the output token limit") {
		t.Errorf("cut call result = %q", rec.results["call_cut"].Content)
	}
}

func TestCancelKeepsPartialAnswer(t *testing.T) {
	srv := llmtest.NewServer(t, llmtest.Turn{
		Text:      "Partial answer",
		ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "read_time", Arguments: `{}`}, {ID: "call_2", Name: "write_note", Arguments: `{}`}},
		Block:     true,
	})
	ctx, cancel := context.WithCancel(t.Context())
	rec := &recorder{}
	tools := fakeTools{"read_time": func(ctx context.Context, a json.RawMessage) agent.ToolResult {
		// Wait for call_2 to stream: the server sends it before it blocks.
		if err := rec.waitFor(ctx, "tool_call_delta 1"); err != nil {
			return agent.ToolResult{Content: err.Error()}
		}
		cancel() // the user cancels while the read-only tool runs
		<-ctx.Done()
		return agent.ToolResult{Content: "cancelled"}
	}}
	res := run(ctx, config(t, srv, tools), rec)
	if res.Status != agent.StatusCancelled {
		t.Fatalf("status = %s", res.Status)
	}
	if len(rec.turns) != 1 || rec.turns[0].Text != "Partial answer" || rec.turns[0].FinishReason != "cancelled" {
		t.Fatalf("turns = %+v", rec.turns)
	}
	// The cancel landed after call_2 streamed: every call the turn holds has a result, call_2's
	// saying it never ran.
	calls := rec.turns[0].ToolCalls
	if len(calls) != 2 || len(rec.results) != len(calls) || rec.results["call_1"].Success {
		t.Fatalf("results = %+v for calls %+v", rec.results, calls)
	}
	if r := rec.results["call_2"]; r.Content != "The run was cancelled before this call ran." {
		t.Errorf("call_2 result = %+v", r)
	}
}

func TestRetryBeforeOutput(t *testing.T) {
	srv := llmtest.NewServer(t,
		llmtest.Turn{Status: 429, RetryAfter: "0", ErrorMessage: "Rate limit reached"},
		llmtest.Turn{Status: 503, ErrorMessage: "overloaded"},
		llmtest.Turn{Text: "finally"},
	)
	rec := &recorder{}
	res := run(t.Context(), config(t, srv, fakeTools{}), rec)
	if res.Status != agent.StatusCompleted || res.Final.Text != "finally" {
		t.Fatalf("result = %+v", res)
	}
	if n := rec.has("status The model is unavailable; retrying"); n != 2 {
		t.Errorf("%d retry statuses, want 2", n)
	}
}

func TestNoRetryOfBadRequest(t *testing.T) {
	srv := llmtest.NewServer(t, llmtest.Turn{Status: 400, ErrorMessage: "bad"}, llmtest.Turn{Text: "never"})
	res := run(t.Context(), config(t, srv, fakeTools{}), &recorder{})
	var e *llm.Error
	if res.Status != agent.StatusFailed || !errors.As(res.Err, &e) || e.Status != 400 || len(srv.Requests()) != 1 {
		t.Fatalf("result = %+v after %d requests", res, len(srv.Requests()))
	}
	if res.Final != nil {
		t.Errorf("a turn was stored for a call without output: %+v", res.Final)
	}
}

func TestFailureAfterOutputKeepsText(t *testing.T) {
	srv := llmtest.NewServer(t, llmtest.Turn{Text: "Half an ans", InBandError: "The server had an error"}, llmtest.Turn{Text: "never"})
	rec := &recorder{}
	res := run(t.Context(), config(t, srv, fakeTools{}), rec)
	if res.Status != agent.StatusFailed || res.Err == nil || len(srv.Requests()) != 1 {
		t.Fatalf("result = %+v", res)
	}
	if len(rec.turns) != 1 || rec.turns[0].Text != "Half an ans" || rec.turns[0].FinishReason != "error" {
		t.Fatalf("turns = %+v", rec.turns)
	}
}

func TestCutConnectionClosesCalls(t *testing.T) {
	srv := llmtest.NewServer(t, llmtest.Turn{
		ToolCalls:      []llmtest.ToolCall{{ID: "call_1", Name: "write_note", Arguments: `{"text":"x"}`}},
		CutAfterChunks: 4,
	})
	rec := &recorder{}
	res := run(t.Context(), config(t, srv, fakeTools{"write_note": echo}), rec)
	if res.Status != agent.StatusFailed {
		t.Fatalf("result = %+v", res)
	}
	r, ok := rec.results["call_1"]
	if !ok || r.Success || !strings.Contains(r.Content, "broke off") {
		t.Fatalf("results = %+v", rec.results)
	}
}

func TestMissingAndRepeatedIDsAreMadeUnique(t *testing.T) {
	srv := llmtest.NewServer(t,
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{
			{ID: "", Name: "write_note", Arguments: `{"n":1}`},
			{ID: "dup", Name: "write_note", Arguments: `{"n":2}`},
			{ID: "dup", Name: "write_note", Arguments: `{"n":3}`},
		}},
		llmtest.Turn{Text: "ok"},
	)
	rec := &recorder{}
	run(t.Context(), config(t, srv, fakeTools{"write_note": echo}), rec)
	seen := map[string]bool{}
	for _, c := range rec.turns[0].ToolCalls {
		if c.ID == "" || seen[c.ID] {
			t.Fatalf("ids not unique: %+v", rec.turns[0].ToolCalls)
		}
		seen[c.ID] = true
	}
	if len(rec.results) != 3 {
		t.Errorf("results = %+v", rec.results)
	}
}

func TestStoreFailureEndsTheRun(t *testing.T) {
	for _, failOn := range []string{"turn", "tool"} {
		t.Run(failOn, func(t *testing.T) {
			srv := llmtest.NewServer(t, llmtest.Turn{ToolCalls: []llmtest.ToolCall{
				{ID: "c1", Name: "read_time", Arguments: `{}`}, {ID: "c2", Name: "write_note", Arguments: `{}`},
			}}, llmtest.Turn{Text: "never"})
			rec := &recorder{failOn: failOn}
			res := run(t.Context(), config(t, srv, fakeTools{"read_time": echo, "write_note": echo}), rec)
			if res.Status != agent.StatusFailed || !strings.Contains(fmt.Sprint(res.Err), "disk full") || len(srv.Requests()) != 1 {
				t.Fatalf("result = %+v", res)
			}
		})
	}
}

func TestToolsRunInParallel(t *testing.T) {
	const n = 4
	var running, peak atomic.Int32
	barrier := make(chan struct{})
	var once sync.Once
	slow := func(ctx context.Context, a json.RawMessage) agent.ToolResult {
		if running.Add(1) == n {
			once.Do(func() { close(barrier) })
		}
		select {
		case <-barrier:
		case <-time.After(20 * time.Second):
		}
		peak.Store(max(peak.Load(), running.Load()))
		running.Add(-1)
		return echo(ctx, a)
	}
	var calls []llmtest.ToolCall
	for i := range n {
		calls = append(calls, llmtest.ToolCall{ID: fmt.Sprint("c", i), Name: "write_note", Arguments: `{}`})
	}
	srv := llmtest.NewServer(t, llmtest.Turn{ToolCalls: calls}, llmtest.Turn{Text: "ok"})
	res := run(t.Context(), config(t, srv, fakeTools{"write_note": slow}), &recorder{})
	if res.Status != agent.StatusCompleted || peak.Load() != n {
		t.Fatalf("status %s, %d calls ran at once; want all %d", res.Status, peak.Load(), n)
	}
}

// TestCallCutBeforeItsArgumentsNeverRuns: the token limit cut the turn right after the call's name, with
// no arguments at all; the call must not run as if it had none.
func TestCallCutBeforeItsArgumentsNeverRuns(t *testing.T) {
	var ran atomic.Int32
	tools := fakeTools{
		"write_note": func(ctx context.Context, a json.RawMessage) agent.ToolResult { ran.Add(1); return echo(ctx, a) },
		"read_time":  func(ctx context.Context, a json.RawMessage) agent.ToolResult { ran.Add(1); return echo(ctx, a) },
	}
	for _, name := range []string{"write_note", "read_time"} {
		t.Run(name, func(t *testing.T) {
			srv := llmtest.NewServer(t,
				llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_cut", Name: name, Arguments: `{`}}, FinishReason: "length", CutArguments: true},
				llmtest.Turn{Text: "ok"},
			)
			rec := &recorder{}
			run(t.Context(), config(t, srv, tools), rec)
			if ran.Load() != 0 || rec.results["call_cut"].Success {
				t.Fatalf("the cut call ran %d time(s); result %+v", ran.Load(), rec.results["call_cut"])
			}
		})
	}
}

// TestWholeArgumentsDoubleEncoded: arguments sent as a JSON string holding the object are stored and
// shown as the object the tool ran with.
func TestWholeArgumentsDoubleEncoded(t *testing.T) {
	srv := llmtest.NewServer(t,
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "read_time", Arguments: `"{\"timezone\":\"Europe/Paris\"}"`}}},
		llmtest.Turn{Text: "ok"},
	)
	rec := &recorder{}
	run(t.Context(), config(t, srv, fakeTools{"read_time": echo}), rec)
	if got := string(rec.turns[0].ToolCalls[0].Arguments); got != `{"timezone":"Europe/Paris"}` {
		t.Errorf("stored arguments = %s", got)
	}
	if rec.index(`tool_start c1 read_time {"timezone":"Europe/Paris"}`) < 0 {
		t.Errorf("tool_start did not show the object:\n%s", strings.Join(rec.log, "\n"))
	}
}

// TestToolCompleteWhileTheModelIsQuiet: a read-only call that ends while the model streams nothing is
// reported at once, not at the model's next chunk.
func TestToolCompleteWhileTheModelIsQuiet(t *testing.T) {
	rec := &recorder{}
	reported := make(chan struct{})
	var once sync.Once
	turn := llmtest.Turn{
		ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "read_time", Arguments: `{}`}},
		BeforeFinish: func() {
			// The model is silent until tool_complete has been reported.
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			if rec.waitFor(ctx, "tool_complete c1") == nil {
				once.Do(func() { close(reported) })
			}
		},
	}
	srv := llmtest.NewServer(t, turn, llmtest.Turn{Text: "ok"})
	run(t.Context(), config(t, srv, fakeTools{"read_time": echo}), rec)
	select {
	case <-reported:
	default:
		t.Fatal("tool_complete waited for the model's next chunk")
	}
}

// TestRunNeedsModelsAndContext: a run without a model or a Context fails at once; a nil sink is
// allowed.
func TestRunNeedsModelsAndContext(t *testing.T) {
	srv := llmtest.NewServer(t, llmtest.Turn{Text: "Hi."})
	rec := &recorder{history: hello}
	cfg := config(t, srv, fakeTools{})
	if res := agent.Run(t.Context(), cfg, rec, rec); res.Status != agent.StatusFailed || res.Err == nil {
		t.Errorf("without a Context: %+v", res)
	}
	cfg.Context = rec
	noModel := cfg
	noModel.Models = nil
	if res := agent.Run(t.Context(), noModel, rec, rec); res.Status != agent.StatusFailed || res.Err == nil {
		t.Errorf("without a model: %+v", res)
	}
	if len(srv.Requests()) != 0 || len(rec.log) != 0 {
		t.Fatalf("a run that cannot start called the model or emitted: %q", rec.log)
	}
	if res := agent.Run(t.Context(), cfg, rec, nil); res.Status != agent.StatusCompleted || res.Final.Text != "Hi." {
		t.Errorf("with no sink: %+v", res)
	}
}
