package agent_test

import (
	"context"
	"iter"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
	"chatd/internal/llm/openai"
)

func provider(t *testing.T, srv *llmtest.Server) llm.Provider {
	t.Helper()
	c, err := openai.New(openai.Options{BaseURL: srv.BaseURL()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestFallbackAfterRetries: the primary answers 503 to every try; its retries spent, the fallback
// answers, and the turn and its usage name the fallback.
func TestFallbackAfterRetries(t *testing.T) {
	primary := llmtest.NewServer(t)
	primary.Respond = func(n int, req llmtest.Request) llmtest.Turn {
		return llmtest.Turn{Status: http.StatusServiceUnavailable, ErrorMessage: "overloaded"}
	}
	backup := llmtest.NewServer(t, llmtest.Turn{Text: "from the backup"})
	cfg := config(t, primary, fakeTools{})
	cfg.Models[0].ProviderName = "primary"
	cfg.Models = append(cfg.Models, agent.Model{Provider: provider(t, backup), Name: "backup-1", ProviderName: "backup"})
	rec := &recorder{}
	res := run(t.Context(), cfg, rec)
	if res.Status != agent.StatusCompleted || res.Final == nil || res.Final.Text != "from the backup" {
		t.Fatalf("result = %+v", res)
	}
	if got := len(primary.Requests()); got != 3 {
		t.Errorf("the primary got %d requests, want 3 (one and two retries)", got)
	}
	if res.Final.Model != "backup-1" || res.Final.Origin != "backup/backup-1" {
		t.Errorf("the turn names %s (%s), want backup/backup-1", res.Final.Origin, res.Final.Model)
	}
	if rec.has("usage backup-1") != 1 || rec.has("status llmtest-1 is unavailable; trying backup-1") != 1 {
		t.Errorf("steps: %q", rec.log)
	}
	if body := backup.Requests()[0].Body; body["model"] != "backup-1" {
		t.Errorf("the fallback was asked for model %v", body["model"])
	}
}

// TestNoFallbackAfterOutput: once the primary streamed text, its failure ends the turn, text kept.
func TestNoFallbackAfterOutput(t *testing.T) {
	primary := llmtest.NewServer(t, llmtest.Turn{Text: "half an ans", CutAfterChunks: 3})
	backup := llmtest.NewServer(t, llmtest.Turn{Text: "never"})
	cfg := config(t, primary, fakeTools{})
	cfg.Models = append(cfg.Models, agent.Model{Provider: provider(t, backup), Name: "backup-1", ProviderName: "backup"})
	res := run(t.Context(), cfg, &recorder{})
	if res.Status != agent.StatusFailed || res.Final == nil || res.Final.Text == "" {
		t.Fatalf("result = %+v", res)
	}
	if n := len(backup.Requests()); n != 0 {
		t.Errorf("the fallback got %d requests after the primary had answered", n)
	}
}

// TestFallbackOnAuthError: a 401 is not retried, but another provider may still answer.
func TestFallbackOnAuthError(t *testing.T) {
	primary := llmtest.NewServer(t, llmtest.Turn{Status: http.StatusUnauthorized, ErrorMessage: "Incorrect API key provided"})
	backup := llmtest.NewServer(t, llmtest.Turn{Text: "ok"})
	cfg := config(t, primary, fakeTools{})
	cfg.Models = append(cfg.Models, agent.Model{Provider: provider(t, backup), Name: "b", ProviderName: "backup"})
	res := run(t.Context(), cfg, &recorder{})
	if res.Status != agent.StatusCompleted || len(primary.Requests()) != 1 {
		t.Fatalf("result = %+v after %d primary requests", res, len(primary.Requests()))
	}
}

// refusing is a provider that refuses every call with a rate limit asking to retry after a second.
type refusing struct{ calls int }

func (p *refusing) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		p.calls++
		yield(llm.Event{}, &llm.Error{Provider: "p", Kind: llm.KindRateLimit, Status: http.StatusTooManyRequests,
			RetryAfter: time.Second, Message: "slow down"})
	}
}

// TestRetryWindow: a retry that would start after the window is not made. (The clock is synctest's: the
// test once waited a real second and failed when the first call took over half a second.)
func TestRetryWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &refusing{}
		cfg := agent.Config{Models: []agent.Model{{Provider: p, Name: "m", ProviderName: "p"}}, Retries: 5,
			RetryWindow: 1500 * time.Millisecond}
		start := time.Now()
		res := run(t.Context(), cfg, &recorder{})
		if res.Status != agent.StatusFailed {
			t.Fatalf("result = %+v", res)
		}
		if p.calls != 2 || time.Since(start) != time.Second {
			t.Errorf("%d calls over %s, want 2 over 1s: the second retry would start after the 1.5s window", p.calls, time.Since(start))
		}
	})
}

// scripted is a provider that plays event lists, one per call, and keeps the requests.
type scripted struct {
	calls [][]llm.Event
	reqs  []*llm.Request
}

func (s *scripted) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		cp := *req
		s.reqs = append(s.reqs, &cp)
		evs := s.calls[0]
		s.calls = s.calls[1:]
		for _, ev := range evs {
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// TestSignedPartsKept: thinking with its signature, redacted thinking and a signed call end up on the
// turn in stream order, and the next model call sends them back with the turn's origin.
func TestSignedPartsKept(t *testing.T) {
	p := &scripted{calls: [][]llm.Event{{
		{Kind: llm.EventReasoning, Text: "Let me "},
		{Kind: llm.EventReasoning, Text: "think."},
		{Kind: llm.EventReasoningEnd, Signature: "sig-1"},
		{Kind: llm.EventReasoningEnd, Redacted: true, Signature: "opaque"},
		{Kind: llm.EventText, Text: "Checking."},
		{Kind: llm.EventToolCallDelta, Index: 0, ID: "toolu_1", Name: "read_time", Text: `{}`, Signature: "call-sig"},
		{Kind: llm.EventToolCallEnd, Index: 0},
		{Kind: llm.EventFinish, FinishReason: llm.FinishToolCalls},
	}, {
		{Kind: llm.EventText, Text: "Noon."},
		{Kind: llm.EventFinish, FinishReason: llm.FinishStop},
	}}}
	cfg := agent.Config{Models: []agent.Model{{Provider: p, Name: "m", ProviderName: "claude"}}, ToolSpecs: []llm.ToolSpec{{Name: "read_time"}},
		Tools: fakeTools{"read_time": echo}}
	rec := &recorder{}
	res := run(t.Context(), cfg, rec)
	if res.Status != agent.StatusCompleted {
		t.Fatalf("result = %+v", res)
	}
	first := rec.turns[0]
	wantParts := []llm.Part{
		{Kind: llm.PartReasoning, Text: "Let me think.", Signature: "sig-1"},
		{Kind: llm.PartRedactedReasoning, Signature: "opaque"},
		{Kind: llm.PartText, Text: "Checking."},
	}
	if diff := cmp.Diff(wantParts, first.Parts); diff != "" {
		t.Errorf("parts (-want +got):\n%s", diff)
	}
	if first.Reasoning != "Let me think." || first.Text != "Checking." || first.ToolCalls[0].Signature != "call-sig" || !first.HasReplay() {
		t.Errorf("turn = %+v", first)
	}
	sent := p.reqs[1].Messages[1]
	if sent.Origin != "claude/m" || len(sent.Parts) != 3 || sent.Parts[0].Signature != "sig-1" || sent.ToolCalls[0].Signature != "call-sig" {
		t.Errorf("second call sent the turn back as %+v", sent)
	}
}

// TestPauseContinues: a paused turn is sent back as it stands, without a prompt, and the answer is
// one turn.
func TestPauseContinues(t *testing.T) {
	p := &scripted{calls: [][]llm.Event{
		{{Kind: llm.EventText, Text: "Part one, "}, {Kind: llm.EventFinish, FinishReason: llm.FinishPause}},
		{{Kind: llm.EventText, Text: "part two."}, {Kind: llm.EventFinish, FinishReason: llm.FinishStop}},
	}}
	rec := &recorder{}
	res := run(t.Context(), agent.Config{Models: []agent.Model{{Provider: p, Name: "m", ProviderName: "claude"}}}, rec)
	if res.Status != agent.StatusCompleted || len(rec.turns) != 1 || rec.turns[0].Text != "Part one, part two." {
		t.Fatalf("result = %+v turns = %+v", res, rec.turns)
	}
	msgs := p.reqs[1].Messages
	if len(msgs) != 2 || msgs[1].Role != llm.RoleAssistant || msgs[1].Text() != "Part one, " || msgs[1].Origin != "claude/m" {
		t.Errorf("the continuation sent %+v", msgs)
	}
}
