package llm

import (
	"encoding/json"
	"strings"
)

// Collector folds the events of one streamed call into the assistant message they make: text and
// reasoning parts in the order they streamed, with their signatures, and the tool calls by index. It is
// how every consumer reads the part boundaries the event kinds describe.
type Collector struct {
	parts []Part
	open  PartKind // the kind of parts[len(parts)-1] while fragments still go to it; 0 when closed
	text  strings.Builder
	calls []ToolCall
	args  [][]byte // by call: calls' fragments may interleave, so each keeps its own buffer

	Finish FinishReason
	Usage  Usage
}

// Add folds one event in.
func (c *Collector) Add(ev Event) {
	switch ev.Kind {
	case EventText:
		c.fragment(PartText, ev)
	case EventReasoning:
		c.fragment(PartReasoning, ev)
	case EventReasoningEnd:
		switch {
		case ev.Redacted:
			c.close()
			c.parts = append(c.parts, Part{Kind: PartRedactedReasoning, Signature: ev.Signature})
		case c.open == PartReasoning:
			c.sign(ev)
			c.close()
		case ev.Signature != "" || ev.ID != "":
			c.close()
			c.parts = append(c.parts, Part{Kind: PartReasoning, Signature: ev.Signature, ID: ev.ID})
		}
	case EventToolCallDelta:
		for len(c.calls) <= ev.Index {
			c.calls = append(c.calls, ToolCall{})
			c.args = append(c.args, nil)
		}
		tc := &c.calls[ev.Index]
		if tc.ID == "" {
			tc.ID = ev.ID
		}
		if tc.Name == "" {
			tc.Name = ev.Name
		}
		if ev.Signature != "" {
			tc.Signature = ev.Signature
		}
		c.args[ev.Index] = append(c.args[ev.Index], ev.Text...)
	case EventUsage:
		c.Usage = ev.Usage
	case EventFinish:
		c.Finish = ev.FinishReason
	}
}

// fragment appends an event's text to the open part of its kind, opening a new part when the open one
// is of another kind (or closed).
func (c *Collector) fragment(kind PartKind, ev Event) {
	if c.open != kind {
		c.close()
		c.parts = append(c.parts, Part{Kind: kind})
		c.open = kind
	}
	c.text.WriteString(ev.Text)
	c.sign(ev)
}

func (c *Collector) sign(ev Event) {
	p := &c.parts[len(c.parts)-1]
	if ev.Signature != "" {
		p.Signature = ev.Signature
	}
	if ev.ID != "" {
		p.ID = ev.ID
	}
}

func (c *Collector) close() {
	if c.open != 0 {
		c.parts[len(c.parts)-1].Text = c.text.String()
		c.text.Reset()
		c.open = 0
	}
}

// Parts returns the text and reasoning parts. Call it, and Message, Text and Reasoning, once the
// stream has ended: it closes the part being streamed.
func (c *Collector) Parts() []Part {
	c.close()
	return c.parts
}

// Message returns the assistant message the events made. Arguments are the streamed JSON text as is.
func (c *Collector) Message() Message {
	m := Message{Role: RoleAssistant, Parts: c.Parts()}
	for i, tc := range c.calls {
		tc.Arguments = json.RawMessage(c.args[i])
		m.ToolCalls = append(m.ToolCalls, tc)
	}
	return m
}

// Text returns the message's text parts joined.
func (c *Collector) Text() string { return joinParts(c.Parts(), PartText) }

// Reasoning returns the message's reasoning parts joined.
func (c *Collector) Reasoning() string { return joinParts(c.Parts(), PartReasoning) }

func joinParts(parts []Part, kind PartKind) string {
	var b strings.Builder
	for _, p := range parts {
		if p.Kind == kind {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}
