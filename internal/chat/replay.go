package chat

import (
	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/store"
)

// replayOf keeps what only the turn's provider can read back; nil when the turn has nothing of the sort.
func replayOf(t *agent.Turn) *store.Replay {
	if !t.HasReplay() {
		return nil
	}
	rp := &store.Replay{Model: t.Origin}
	for _, p := range t.Parts {
		part := store.ReplayPart{Text: p.Text, Signature: p.Signature, ID: p.ID}
		switch p.Kind {
		case llm.PartText:
			part.Kind = store.PartText
		case llm.PartReasoning:
			part.Kind = store.PartReasoning
		case llm.PartRedactedReasoning:
			part.Kind = store.PartRedactedReasoning
		default:
			continue
		}
		rp.Parts = append(rp.Parts, part)
	}
	for _, c := range t.ToolCalls {
		if c.Signature != "" {
			rp.Parts = append(rp.Parts, store.ReplayPart{Kind: store.PartToolCall, ID: c.ID, Signature: c.Signature})
		}
	}
	return rp
}
