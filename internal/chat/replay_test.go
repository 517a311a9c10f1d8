package chat_test

import (
	"context"
	"iter"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/chat"
	"chatd/internal/llm"
	"chatd/internal/store"
	"chatd/internal/tool"
)

// signer is a provider that answers every call with signed thinking, redacted thinking, text and one
// signed call of current_time, then (after the tool result) with text; it keeps the requests.
type signer struct {
	mu   sync.Mutex
	reqs []*llm.Request
}

func (s *signer) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		s.mu.Lock()
		s.reqs = append(s.reqs, req)
		s.mu.Unlock()
		evs := []llm.Event{
			{Kind: llm.EventReasoning, Text: "Check the clock."},
			{Kind: llm.EventReasoningEnd, Signature: "EqQBCkgIARABGAIiQL"},
			{Kind: llm.EventReasoningEnd, Redacted: true, Signature: "EmwKAhgBEgy3va3pzix"},
			{Kind: llm.EventText, Text: "One moment."},
			{Kind: llm.EventToolCallDelta, ID: "toolu_01", Name: "current_time", Text: "{}", Signature: "CiQBjz1rX2"},
			{Kind: llm.EventFinish, FinishReason: llm.FinishToolCalls},
		}
		if last := req.Messages[len(req.Messages)-1]; last.Role == llm.RoleTool {
			evs = []llm.Event{{Kind: llm.EventText, Text: "Noon.", Signature: "text-sig"}, {Kind: llm.EventFinish, FinishReason: llm.FinishStop}}
		}
		for _, ev := range evs {
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// byPrefix resolves "claude/…" to the signer and anything else to other.
type byPrefix struct{ claude, other llm.Provider }

func (m byPrefix) Resolve(name string) (llm.Provider, string, error) {
	if model, ok := strings.CutPrefix(name, "claude/"); ok {
		return m.claude, model, nil
	}
	return m.other, name, nil
}

// TestReplayAcrossRuns: what the provider signed is stored with the turn, hidden from clients, and sent
// back verbatim with the turn's origin on the next run's requests; the tool call keeps its signature.
func TestReplayAcrossRuns(t *testing.T) {
	p := &signer{}
	db := openStore(t, "")
	reg := tool.NewRegistry(tool.Options{})
	t.Cleanup(reg.Close)
	if err := reg.Register(tool.CurrentTime(nil)); err != nil {
		t.Fatal(err)
	}
	svc := chat.New(chat.Options{TitleModel: chat.TitleNone, Store: db, Models: byPrefix{claude: p}, Tools: reg, DefaultModel: "claude/sonnet"})
	t.Cleanup(func() { svc.Close(context.Background()) })

	first, err := svc.Start(t.Context(), user, chat.Request{Message: "What time is it?"}, chat.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := svc.Wait(t.Context(), user, first.RunID); err != nil || out.Status != "completed" {
		t.Fatalf("first run: %+v %v", out, err)
	}
	recs, err := db.Records(t.Context(), user, first.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	want := &store.Replay{Model: "claude/sonnet", Parts: []store.ReplayPart{
		{Kind: store.PartReasoning, Text: "Check the clock.", Signature: "EqQBCkgIARABGAIiQL"},
		{Kind: store.PartRedactedReasoning, Signature: "EmwKAhgBEgy3va3pzix"},
		{Kind: store.PartText, Text: "One moment."},
		{Kind: store.PartToolCall, ID: "toolu_01", Signature: "CiQBjz1rX2"},
	}}
	if diff := cmp.Diff(want, recs[1].Replay); diff != "" {
		t.Errorf("stored replay (-want +got):\n%s", diff)
	}
	if recs[1].Reasoning != "Check the clock." || recs[1].Content != "One moment." || recs[1].Model != "claude/sonnet" {
		t.Errorf("assistant record = %+v", recs[1])
	}

	second, err := svc.Start(t.Context(), user, chat.Request{SessionID: first.SessionID, Message: "And now?"}, chat.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := svc.Wait(t.Context(), user, second.RunID); err != nil || out.Status != "completed" {
		t.Fatalf("second run: %+v %v", out, err)
	}
	p.mu.Lock()
	req := p.reqs[2] // run 2's first call
	p.mu.Unlock()
	sent := req.Messages[1]
	wantParts := []llm.Part{
		{Kind: llm.PartReasoning, Text: "Check the clock.", Signature: "EqQBCkgIARABGAIiQL"},
		{Kind: llm.PartRedactedReasoning, Signature: "EmwKAhgBEgy3va3pzix"},
		{Kind: llm.PartText, Text: "One moment."},
	}
	if diff := cmp.Diff(wantParts, sent.Parts); diff != "" || sent.Origin != "claude/sonnet" || sent.ToolCalls[0].Signature != "CiQBjz1rX2" {
		t.Errorf("the stored turn went back as %+v (parts -want +got):\n%s", sent, diff)
	}
	if answer := req.Messages[3]; answer.Parts[0].Signature != "text-sig" || answer.Text() != "Noon." {
		t.Errorf("the signed answer went back as %+v", answer)
	}
}
