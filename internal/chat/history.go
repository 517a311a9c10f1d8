package chat

import (
	"cmp"
	"encoding/json"
	"slices"
	"strings"

	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/store"
)

// history turns stored records into the messages the model sees. Tool records are stored as their calls
// end; the model gets them in call order after their assistant message, as the loop sent them.
func history(records []store.Record) []llm.Message {
	msgs := make([]llm.Message, 0, len(records))
	var calls []store.ToolCall // of the last assistant record
	var results int            // tool messages since it
	for i := range records {
		r := &records[i]
		switch r.Role {
		case store.RoleUser:
			msgs = append(msgs, userMessage(r))
			calls, results = nil, 0
		case store.RoleAssistant:
			msgs = append(msgs, assistantMessage(r))
			calls, results = r.ToolCalls, 0
		case store.RoleTool:
			m := llm.TextMessage(llm.RoleTool, r.Content)
			m.ToolCallID, m.ToolName, m.IsError = r.ToolCallID, r.Name, r.Success == nil || !*r.Success
			msgs = append(msgs, m)
			results++
			sortResults(msgs[len(msgs)-results:], calls)
		}
	}
	return msgs
}

// sortResults orders the tool messages of one turn as the turn's calls.
func sortResults(results []llm.Message, calls []store.ToolCall) {
	slices.SortStableFunc(results, func(a, b llm.Message) int {
		return cmp.Compare(callIndex(calls, a.ToolCallID), callIndex(calls, b.ToolCallID))
	})
}

func callIndex(calls []store.ToolCall, id string) int {
	return slices.IndexFunc(calls, func(c store.ToolCall) bool { return c.ID == id })
}

func userMessage(r *store.Record) llm.Message {
	m := llm.Message{Role: llm.RoleUser}
	if r.Content != "" {
		m.Parts = append(m.Parts, llm.Part{Kind: llm.PartText, Text: r.Content})
	}
	for _, a := range r.Attachments {
		m.Parts = append(m.Parts, llm.Part{Kind: llm.PartImage, MediaType: a.MediaType, Data: a.Data})
	}
	return m
}

func assistantMessage(r *store.Record) llm.Message {
	m := llm.Message{Role: llm.RoleAssistant}
	if r.Replay != nil && replayText(r.Replay) == r.Content {
		return replayMessage(r)
	}
	// Without a replay, or with one whose text no longer matches the record (it was edited), the
	// record's own fields are the message; unsigned reasoning is kept for the providers that read it.
	if r.Reasoning != "" {
		m.Parts = append(m.Parts, llm.Part{Kind: llm.PartReasoning, Text: r.Reasoning})
	}
	if r.Content != "" {
		m.Parts = append(m.Parts, llm.Part{Kind: llm.PartText, Text: r.Content})
	}
	for _, c := range r.ToolCalls {
		m.ToolCalls = append(m.ToolCalls, llm.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	return m
}

// replayMessage is an assistant record as its provider wrote it: parts in order, with signatures.
func replayMessage(r *store.Record) llm.Message {
	m := llm.Message{Role: llm.RoleAssistant, Origin: r.Replay.Model}
	sigs := map[string]string{}
	for _, p := range r.Replay.Parts {
		switch p.Kind {
		case store.PartText:
			m.Parts = append(m.Parts, llm.Part{Kind: llm.PartText, Text: p.Text, Signature: p.Signature})
		case store.PartReasoning:
			m.Parts = append(m.Parts, llm.Part{Kind: llm.PartReasoning, Text: p.Text, Signature: p.Signature, ID: p.ID})
		case store.PartRedactedReasoning:
			m.Parts = append(m.Parts, llm.Part{Kind: llm.PartRedactedReasoning, Signature: p.Signature})
		case store.PartToolCall:
			sigs[p.ID] = p.Signature
		}
	}
	for _, c := range r.ToolCalls {
		m.ToolCalls = append(m.ToolCalls, llm.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments, Signature: sigs[c.ID]})
	}
	return m
}

func replayText(rp *store.Replay) string {
	var b strings.Builder
	for _, p := range rp.Parts {
		if p.Kind == store.PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

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

// systemPrompt is the agent's prompt, followed by the request's context when it has one.
func systemPrompt(p *plan) string {
	var b strings.Builder
	b.WriteString(cmp.Or(p.agent.SystemPrompt, "You are a helpful assistant."))
	if len(p.req.Context) > 0 {
		ctx, err := json.MarshalIndent(p.req.Context, "", "  ")
		if err == nil {
			b.WriteString("\n\n# Context\nThe user's application state, as JSON:\n")
			b.Write(ctx)
		}
	}
	return b.String()
}
