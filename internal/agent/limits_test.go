package agent_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/llm/anthropic"
	"chatd/internal/llm/llmtest"
)

// TestToolArgumentsOverTheLimit: a call whose arguments pass the per-call limit, or the limit of one
// answer's calls together, is not run: its result says why, it is stored with empty arguments, no more
// of its arguments reach the sink, and the other calls run. The model is told and goes on.
func TestToolArgumentsOverTheLimit(t *testing.T) {
	big := `{"text":"` + strings.Repeat("a", 5000) + `"}`
	mid := `{"text":"` + strings.Repeat("b", 700) + `"}`
	srv := llmtest.NewServer(t,
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{
			{ID: "call_big", Name: "write_note", Arguments: big},
			{ID: "call_ok", Name: "write_note", Arguments: mid},
			{ID: "call_turn", Name: "write_note", Arguments: mid}, // the two mids pass the answer's limit
		}},
		llmtest.Turn{Text: "Sorry, that note was too long."})
	cfg := config(t, srv, fakeTools{"write_note": echo})
	cfg.Limits = agent.Limits{ArgumentBytes: 1024, TurnArgumentBytes: 1200}
	rec := &recorder{}
	sink := &argCounter{Sink: rec}
	res := runTo(t.Context(), cfg, rec, sink)
	if res.Status != agent.StatusCompleted {
		t.Fatalf("result = %+v", res)
	}
	turn := rec.turns[0]
	for _, c := range turn.ToolCalls {
		want := "{}"
		if c.ID == "call_ok" {
			want = mid
		}
		if string(c.Arguments) != want {
			t.Errorf("stored call %s has arguments of %d bytes, want %d", c.ID, len(c.Arguments), len(want))
		}
	}
	for _, id := range []string{"call_big", "call_turn"} {
		r := rec.results[id]
		if r.Success || !strings.Contains(r.Content, "limit of 1 KiB") || r.Arguments != nil {
			t.Errorf("result of %s = %+v; want a failed result naming the limit, the call not run", id, r)
		}
	}
	if r := rec.results["call_ok"]; !r.Success {
		t.Errorf("the call within the limits: %+v", r)
	}
	if sink.shown > 1024+1200 {
		t.Errorf("the sink was shown %d bytes of arguments; the limits allow %d", sink.shown, 1024+1200)
	}
	if n := len(srv.Requests()); n != 2 {
		t.Errorf("%d model calls, want 2: the model is told and answers", n)
	}
}

// argCounter is a sink that counts the argument bytes it is shown before passing events on. Tool-call
// deltas come from the loop's goroutine only.
type argCounter struct {
	agent.Sink
	shown int
}

func (a *argCounter) Emit(e agent.Event) {
	if d, ok := e.(*agent.ToolCallDelta); ok {
		a.shown += len(d.ArgumentsDelta)
	}
	a.Sink.Emit(e)
}

// TestModelOutputLimit: a model call that streams more than the output limit fails the run with
// output_limit; the answer is kept up to the limit, and calls of that answer do not run.
func TestModelOutputLimit(t *testing.T) {
	srv := llmtest.NewServer(t, llmtest.Turn{Text: strings.Repeat("word ", 2000), ChunkRunes: 50})
	cfg := config(t, srv, fakeTools{})
	cfg.Limits = agent.Limits{OutputBytes: 4096}
	rec := &recorder{}
	res := run(t.Context(), cfg, rec)
	var lim *agent.LimitError
	if res.Status != agent.StatusFailed || !errors.As(res.Err, &lim) || lim.Code != "output_limit" {
		t.Fatalf("result = %+v; want failed with output_limit", res)
	}
	if len(rec.turns) != 1 || len(rec.turns[0].Text) > 4096 || !strings.HasPrefix(strings.Repeat("word ", 2000), rec.turns[0].Text) ||
		len(rec.turns[0].Text) < 4000 {
		t.Errorf("stored %d turns, the first with %d bytes; want the answer kept up to 4096", len(rec.turns), len(rec.turns[0].Text))
	}
}

// TestRunOutputLimit: the output limit of a run counts every model call of it.
func TestRunOutputLimit(t *testing.T) {
	srv := llmtest.NewServer(t,
		llmtest.Turn{Text: strings.Repeat("a", 3000), ChunkRunes: 100, ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "read_time", Arguments: `{}`}}},
		llmtest.Turn{Text: strings.Repeat("b", 3000), ChunkRunes: 100})
	cfg := config(t, srv, fakeTools{"read_time": echo})
	cfg.Limits = agent.Limits{RunOutputBytes: 5000}
	rec := &recorder{}
	res := run(t.Context(), cfg, rec)
	var lim *agent.LimitError
	if res.Status != agent.StatusFailed || !errors.As(res.Err, &lim) || lim.Code != "output_limit" {
		t.Fatalf("result = %+v; want failed with output_limit", res)
	}
	if len(rec.turns) != 2 || len(rec.turns[1].Text) > 2000 {
		t.Errorf("turns: %d, the second %d bytes; want the second cut at the run's limit", len(rec.turns), len(rec.turns[1].Text))
	}
}

// quiet is a provider that streams its events, then sends nothing until the call is cancelled.
type quiet struct {
	events []llm.Event
	calls  int
}

func (q *quiet) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		q.calls++
		for _, ev := range q.events {
			if !yield(ev, nil) {
				return
			}
		}
		<-ctx.Done()
		yield(llm.Event{}, ctx.Err())
	}
}

// TestQuietModelStream: a model stream that sends nothing for the idle limit fails as a transport
// failure — retried before any output, failing the run after it, with what was said kept.
func TestQuietModelStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := &quiet{events: []llm.Event{{Kind: llm.EventText, Text: "Hel"}}}
		cfg := agent.Config{Models: []agent.Model{{Provider: q, Name: "m", ProviderName: "p"}}, RetryBase: time.Millisecond,
			Limits: agent.Limits{IdleTime: time.Minute}}
		rec := &recorder{}
		start := time.Now()
		res := run(t.Context(), cfg, rec)
		var e *llm.Error
		if res.Status != agent.StatusFailed || !errors.As(res.Err, &e) || e.Kind != llm.KindTransport ||
			!strings.Contains(e.Message, "nothing for 1m0s") {
			t.Fatalf("result = %+v; want failed: the model sent nothing for 1m0s", res)
		}
		if waited := time.Since(start); waited != time.Minute {
			t.Errorf("the run failed after %s, want the idle limit, 1m", waited)
		}
		if len(rec.turns) != 1 || rec.turns[0].Text != "Hel" || q.calls != 1 {
			t.Errorf("turns %+v after %d calls; want the partial answer kept, no retry after output", rec.turns, q.calls)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		q := &quiet{}
		cfg := agent.Config{Models: []agent.Model{{Provider: q, Name: "m", ProviderName: "p"}}, RetryBase: time.Millisecond, Retries: 2, RetryWindow: 10 * time.Minute,
			Limits: agent.Limits{IdleTime: time.Minute}}
		res := run(t.Context(), cfg, &recorder{})
		if res.Status != agent.StatusFailed || q.calls != 3 {
			t.Errorf("result %+v after %d calls; want 3 calls (2 retries), then failed", res, q.calls)
		}
	})
}

// drip is a provider that streams a token a second until the call is cancelled.
type drip struct{}

func (drip) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		for {
			select {
			case <-ctx.Done():
				yield(llm.Event{}, ctx.Err())
				return
			case <-time.After(time.Second):
			}
			if !yield(llm.Event{Kind: llm.EventText, Text: "."}, nil) {
				return
			}
		}
	}
}

// TestLimitCancelsTheRun: a run whose context a limit cancels (the run's wall time, its events) fails
// with that limit, not as a cancel, and keeps what the model said; the tokens of a drip keep the idle
// limit from firing.
func TestLimitCancelsTheRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeoutCause(t.Context(), 10*time.Minute,
			&agent.LimitError{Code: "run_timeout", Message: "the run passed its time limit of 10m"})
		defer cancel()
		cfg := agent.Config{Models: []agent.Model{{Provider: drip{}, Name: "m", ProviderName: "p"}}, Limits: agent.Limits{IdleTime: time.Minute}}
		rec := &recorder{}
		res := run(ctx, cfg, rec)
		var lim *agent.LimitError
		if res.Status != agent.StatusFailed || !errors.As(res.Err, &lim) || lim.Code != "run_timeout" || res.FinishReason != "error" {
			t.Fatalf("result = %+v; want failed with run_timeout", res)
		}
		if len(rec.turns) != 1 || len(rec.turns[0].Text) < 590 || rec.turns[0].FinishReason != "error" {
			t.Errorf("turns: %+v; want the dripped answer kept", len(rec.turns))
		}
	})
}

// TestOpaqueOutputCountsTowardTheLimits: the opaque data a provider sends to get back later — redacted
// thinking, signatures, encrypted reasoning — counts toward the output limits like text: an
// Anthropic-compatible upstream streaming 4 MiB of redacted_thinking fails the run at the 4 KiB limit
// (it once completed, storing all of it).
func TestOpaqueOutputCountsTowardTheLimits(t *testing.T) {
	const blocks, size = 64, 64 << 10 // 4 MiB of opaque data
	data := strings.Repeat("A", size)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n")
		for i := range blocks {
			fmt.Fprintf(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":%d,\"content_block\":{\"type\":\"redacted_thinking\",\"data\":%q}}\n\n", i, data)
			fmt.Fprintf(w, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":%d}\n\n", i)
		}
		fmt.Fprintf(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":%d,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n", blocks)
		fmt.Fprintf(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":%d,\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\n", blocks)
		fmt.Fprintf(w, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":%d}\n\n", blocks)
		fmt.Fprint(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":5}}\n\n")
		fmt.Fprint(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	}))
	defer srv.Close()
	c, err := anthropic.New(anthropic.Options{BaseURL: srv.URL, APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := agent.Config{Models: []agent.Model{{Provider: c, Name: "m", ProviderName: "anthropic"}}, RetryBase: time.Millisecond,
		Limits: agent.Limits{OutputBytes: 4096, RunOutputBytes: 8192}}
	rec := &recorder{}
	res := run(t.Context(), cfg, rec)
	held := 0
	for _, tr := range rec.turns {
		for _, p := range tr.Parts {
			held += len(p.Signature) + len(p.Text)
		}
	}
	var lim *agent.LimitError
	if res.Status != agent.StatusFailed || !errors.As(res.Err, &lim) || lim.Code != "output_limit" || held > 4096 {
		t.Errorf("status %s, err %v, the stored turn holds %d bytes; want output_limit, at most 4 KiB kept", res.Status, res.Err, held)
	}
}

// emptyCalls is a provider that streams tool-call deltas with no content for an index past the kept
// calls: no output is counted, nothing reaches the sink, but each event pokes the idle watchdog.
type emptyCalls struct{ n int }

func (e *emptyCalls) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		for {
			select {
			case <-ctx.Done():
				yield(llm.Event{}, ctx.Err())
				return
			case <-time.After(30 * time.Second):
			}
			e.n++
			if !yield(llm.Event{Kind: llm.EventToolCallDelta, Index: 500}, nil) {
				return
			}
		}
	}
}

// TestEmptyDeltasDoNotHoldTheIdleLimit: events that bring nothing (empty tool-call deltas, for an index
// chatd drops) do not count as the model saying something: the idle limit stops the call. (They once
// kept a run waiting until its wall-time limit.)
func TestEmptyDeltasDoNotHoldTheIdleLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeoutCause(t.Context(), 15*time.Minute,
			&agent.LimitError{Code: "run_timeout", Message: "the run passed its time limit of 15m"})
		defer cancel()
		p := &emptyCalls{}
		cfg := agent.Config{Models: []agent.Model{{Provider: p, Name: "m", ProviderName: "p"}}, Retries: -1, Limits: agent.Limits{IdleTime: time.Minute}}
		start := time.Now()
		res := run(ctx, cfg, &recorder{})
		if took := time.Since(start); took != time.Minute || res.Status != agent.StatusFailed {
			t.Errorf("status %s, err %v after %s and %d empty deltas; want failed at the 1m idle limit", res.Status, res.Err, took, p.n)
		}
	})
}

// patient is a quiet provider configured to wait long for its model (llm.Patient).
type patient struct{ quiet }

func (p *patient) Patience() time.Duration { return 10 * time.Minute }

// TestIdleLimitLeavesPatientProvidersTheirTime: the idle limit does not undercut a provider configured
// to wait longer for its model (a slow local server with idle_timeout: 10m).
func TestIdleLimitLeavesPatientProvidersTheirTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &patient{}
		cfg := agent.Config{Models: []agent.Model{{Provider: p, Name: "m", ProviderName: "p"}}, Retries: -1, Limits: agent.Limits{IdleTime: time.Minute}}
		start := time.Now()
		res := run(t.Context(), cfg, &recorder{})
		if took := time.Since(start); took != 10*time.Minute || res.Status != agent.StatusFailed {
			t.Errorf("status %s after %s; want failed after the provider's 10m", res.Status, took)
		}
	})
}
