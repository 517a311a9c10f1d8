package openai

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"chatd/internal/llm"
	"chatd/internal/llm/upstream"
	"chatd/internal/sse"
)

var doneMarker = []byte("[DONE]")

// decoder turns the chunks of one streamed completion into llm events. It is used once.
type decoder struct {
	provider string
	key      string // removed from the messages of in-band errors
	c        chunk  // reused across chunks so that decoding reuses its slices
	// json decodes one chunk at a time into the reused value, allocating almost nothing.
	json     upstream.EventDecoder
	fast     fastChunk // the common chunks, without encoding/json
	calls    []call
	finish   llm.FinishReason
	usage    llm.Usage
	hasUsage bool
	answered bool        // a choice came: the server said something, if only a finish reason
	byIndex  map[int]int // a call's position by the server's index
}

// maxCalls bounds the calls of one answer, so that a broken stream cannot grow the decoder without
// bound (the agent keeps far fewer).
const maxCalls = 1024

// call is the state of one streamed tool call, at the position chatd numbers it by.
type call struct {
	upstream int // the index the server numbers it by; -1 when the server sends none
	id       string
	ended    bool
}

// run decodes body until [DONE], EOF, an error, or the consumer stops.
func (d *decoder) run(ctx context.Context, body io.Reader, yield func(llm.Event, error) bool) {
	for ev, err := range sse.Scan(body) {
		if err != nil {
			yield(llm.Event{}, upstream.ReadError(ctx, d.provider, err))
			return
		}
		data := bytes.TrimSpace(ev.Data)
		if bytes.Equal(data, doneMarker) {
			if !d.answered {
				// [DONE] with no choice before it: nothing was answered, and an empty "completed" answer
				// would hide it.
				yield(llm.Event{}, &llm.Error{Provider: d.provider, Kind: llm.KindStream, Message: "the server ended the stream without an answer"})
				return
			}
			d.end(yield)
			return
		}
		if len(data) == 0 {
			continue
		}
		if !d.chunk(data, yield) {
			return
		}
	}
	if ctx.Err() != nil {
		yield(llm.Event{}, ctx.Err())
		return
	}
	if d.finish == "" {
		// Without a finish reason and without [DONE] the answer may be cut anywhere.
		yield(llm.Event{}, upstream.Cut(d.provider))
		return
	}
	d.end(yield)
}

// chunk decodes one chunk and yields its events. It returns false when the stream must stop.
func (d *decoder) chunk(data []byte, yield func(llm.Event, error) bool) bool {
	if !d.decode(data, yield) {
		return false
	}
	if d.c.Error != nil {
		yield(llm.Event{}, inBandError(d.provider, d.c.Error, d.key))
		return false
	}
	if u := d.c.Usage; u != nil {
		// Some servers repeat a running total in every chunk: the last one counts.
		d.usage, d.hasUsage = convertUsage(u), true
	}
	for i := range d.c.Choices {
		ch := &d.c.Choices[i]
		if ch.Index != 0 {
			continue // chatd asks for one choice
		}
		d.answered = true
		if !d.delta(&ch.Delta, yield) {
			return false
		}
		if ch.FinishReason != "" && d.finish == "" {
			d.finish = finishReason(ch.FinishReason)
			if !d.endCalls(yield) || !yield(llm.Event{Kind: llm.EventFinish, FinishReason: d.finish}, nil) {
				return false
			}
		}
	}
	return true
}

// decode decodes one chunk into d.c: the common ones by hand, the others with encoding/json. On an error
// it yields it and returns false.
func (d *decoder) decode(data []byte, yield func(llm.Event, error) bool) bool {
	// Decoding into a reused slice does not zero its elements: clear them first.
	clear(d.c.Choices[:cap(d.c.Choices)])
	d.c.Choices, d.c.Usage, d.c.Error = d.c.Choices[:0], nil, nil
	if d.fast.decode(data, &d.c) {
		return true
	}
	clear(d.c.Choices[:cap(d.c.Choices)])
	d.c.Choices, d.c.Usage, d.c.Error = d.c.Choices[:0], nil, nil
	if err := d.json.Decode(data, &d.c); err != nil {
		yield(llm.Event{}, &llm.Error{Provider: d.provider, Kind: llm.KindStream, Message: "cannot decode a chunk", Err: err})
		return false
	}
	return true
}

func (d *decoder) delta(dl *delta, yield func(llm.Event, error) bool) bool {
	// Some servers send both names with the same text during a migration from one to the other.
	if r := cmp.Or(dl.ReasoningContent, dl.Reasoning); r != "" {
		if !yield(llm.Event{Kind: llm.EventReasoning, Text: r}, nil) {
			return false
		}
	}
	if dl.Content != "" {
		if !yield(llm.Event{Kind: llm.EventText, Text: dl.Content}, nil) {
			return false
		}
	}
	if dl.Refusal != "" {
		if !yield(llm.Event{Kind: llm.EventText, Text: dl.Refusal}, nil) {
			return false
		}
	}
	for i := range dl.ToolCalls {
		if !d.toolCall(&dl.ToolCalls[i], yield) {
			return false
		}
	}
	return true
}

func (d *decoder) toolCall(tc *toolCallDelta, yield func(llm.Event, error) bool) bool {
	idx := d.position(tc)
	if idx < 0 {
		yield(llm.Event{}, &llm.Error{Provider: d.provider, Kind: llm.KindStream,
			Message: fmt.Sprintf("the answer holds more than %d tool calls", maxCalls)})
		return false
	}
	args, whole := arguments(tc.Function.Arguments)
	ev := llm.Event{Kind: llm.EventToolCallDelta, Index: idx, ID: tc.ID, Name: tc.Function.Name, Text: args}
	if !yield(ev, nil) {
		return false
	}
	if whole {
		d.calls[idx].ended = true
		return yield(llm.Event{Kind: llm.EventToolCallEnd, Index: idx}, nil)
	}
	return true
}

// position maps a tool-call delta to chatd's index of the call, starting a new call when needed.
// Servers number calls 0, 1, 2 …; a few (Gemini's compatibility API) omit the index and send an empty
// id: then a delta with a name or a new id starts a new call, and any other continues the last one.
// It returns -1 past maxCalls.
func (d *decoder) position(tc *toolCallDelta) int {
	if tc.Index != nil {
		if i, ok := d.byIndex[*tc.Index]; ok {
			return i
		}
		if len(d.calls) >= maxCalls {
			return -1
		}
		if d.byIndex == nil {
			d.byIndex = map[int]int{}
		}
		d.byIndex[*tc.Index] = len(d.calls)
		d.calls = append(d.calls, call{upstream: *tc.Index, id: tc.ID})
		return len(d.calls) - 1
	}
	if n := len(d.calls); n > 0 && tc.Function.Name == "" && (tc.ID == "" || tc.ID == d.calls[n-1].id) {
		return n - 1
	}
	if len(d.calls) >= maxCalls {
		return -1
	}
	d.calls = append(d.calls, call{upstream: -1, id: tc.ID})
	return len(d.calls) - 1
}

// endCalls ends the calls still open. Only the finish says a call is complete: some servers interleave
// the argument fragments of parallel calls, so a new call does not end the previous one.
func (d *decoder) endCalls(yield func(llm.Event, error) bool) bool {
	for i := range d.calls {
		if !d.calls[i].ended {
			d.calls[i].ended = true
			if !yield(llm.Event{Kind: llm.EventToolCallEnd, Index: i}, nil) {
				return false
			}
		}
	}
	return true
}

// end finishes a stream that ended cleanly: it ends open calls, yields the finish reason when the server
// sent none, and the usage.
func (d *decoder) end(yield func(llm.Event, error) bool) {
	if !d.endCalls(yield) {
		return
	}
	if d.finish == "" {
		d.finish = llm.FinishStop
		if len(d.calls) > 0 {
			d.finish = llm.FinishToolCalls
		}
		if !yield(llm.Event{Kind: llm.EventFinish, FinishReason: d.finish}, nil) {
			return
		}
	}
	if d.hasUsage {
		yield(llm.Event{Kind: llm.EventUsage, Usage: d.usage}, nil)
	}
}

// arguments returns a fragment of the arguments' JSON text. OpenAI sends a string; a few servers send the
// whole arguments object at once, which is then complete.
func arguments(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s, false
		}
		return "", false
	}
	return string(raw), true
}

func finishReason(s string) llm.FinishReason {
	switch s {
	case "stop", "end_turn", "eos":
		return llm.FinishStop
	case "tool_calls", "function_call":
		return llm.FinishToolCalls
	case "length", "max_tokens":
		return llm.FinishLength
	case "content_filter":
		return llm.FinishContentFilter
	}
	return llm.FinishReason(s)
}

func convertUsage(u *usage) llm.Usage {
	out := llm.Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
	if u.PromptTokensDetails != nil {
		out.CacheReadTokens = u.PromptTokensDetails.CachedTokens
	}
	if u.CompletionTokensDetails != nil {
		out.ReasoningTokens = u.CompletionTokensDetails.ReasoningTokens
	}
	return out
}
