package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"

	"chatd/internal/llm"
	"chatd/internal/llm/upstream"
	"chatd/internal/sse"
)

// decoder turns the events of one streamed message into llm events. It is used once.
type decoder struct {
	ctx      context.Context
	provider string
	key      string      // removed from the messages of in-band errors
	ev       streamEvent // reused across events
	// json decodes one event at a time into the reused value, allocating almost nothing.
	json   upstream.EventDecoder
	blocks []blockState
	calls  int // tool_use blocks seen: the next call's index
	finish llm.FinishReason
	sent   bool // the finish reason was yielded
	usage  usage
	counts bool // the stream reported some usage
}

// blockState is what the decoder keeps of one content block, by the block's index.
type blockState struct {
	kind      name
	open      bool
	call      int             // tool_use: chatd's index of the call
	args      bool            // tool_use: a non-empty argument fragment was yielded
	input     json.RawMessage // tool_use: the input content_block_start gave
	signature string          // thinking
}

// maxBlocks bounds a content block index, so that a broken stream cannot make the decoder allocate
// without end.
const maxBlocks = 1 << 16

// maxSignature bounds a thinking block's signature as it accumulates from its deltas (real ones are a
// few hundred bytes): a broken stream must not grow it without bound before the block ends.
const maxSignature = 1 << 20

// run decodes body until message_stop, EOF, an error, or the consumer stops.
func (d *decoder) run(body io.Reader, yield func(llm.Event, error) bool) {
	for ev, err := range sse.Scan(body) {
		if err != nil {
			yield(llm.Event{}, upstream.ReadError(d.ctx, d.provider, err))
			return
		}
		data := bytes.TrimSpace(ev.Data)
		if len(data) == 0 {
			continue
		}
		more, ok := d.event(data, yield)
		if !ok {
			return
		}
		if !more {
			d.end(yield)
			return
		}
	}
	if d.ctx.Err() != nil {
		yield(llm.Event{}, d.ctx.Err())
		return
	}
	if d.finish == "" {
		// Without a stop reason and without message_stop the answer may be cut anywhere.
		yield(llm.Event{}, upstream.Cut(d.provider))
		return
	}
	d.end(yield)
}

// event decodes one event and yields its llm events. more is false after message_stop; ok is false
// when the stream must stop.
func (d *decoder) event(data []byte, yield func(llm.Event, error) bool) (more, ok bool) {
	d.ev = streamEvent{}
	if err := d.json.Decode(data, &d.ev); err != nil {
		if skippable(err, data) {
			return true, true
		}
		yield(llm.Event{}, &llm.Error{Provider: d.provider, Kind: llm.KindStream, Message: "cannot decode an event", Err: err})
		return false, false
	}
	ev := &d.ev
	switch ev.Type {
	case evMessageStart:
		d.count(ev.Message.Usage)
	case evContentBlockStart:
		return true, d.blockStart(yield)
	case evContentBlockDelta:
		return true, d.blockDelta(yield)
	case evContentBlockStop:
		if ev.Index >= 0 && ev.Index < len(d.blocks) {
			return true, d.blockStop(&d.blocks[ev.Index], yield)
		}
	case evMessageDelta:
		d.count(ev.Usage)
		if ev.Delta.StopReason != "" && d.finish == "" {
			d.finish = finishReason(ev.Delta.StopReason)
			if !d.closeBlocks(yield) {
				return false, false
			}
			d.sent = true
			return true, yield(llm.Event{Kind: llm.EventFinish, FinishReason: d.finish}, nil)
		}
	case evMessageStop:
		return false, true
	case evError:
		yield(llm.Event{}, inBandError(d.provider, &ev.Error, d.key))
		return false, false
	}
	// ping, and the event types of later API versions.
	return true, true
}

// skippable reports whether an event that failed to decode into streamEvent is one chatd does not
// read anyway: an event, block or delta type of a later API version whose fields have other shapes.
// Only a value of the wrong type can be skipped; the Decoder goes on after it, not after bad JSON.
func skippable(err error, data []byte) bool {
	if _, ok := errors.AsType[*json.UnmarshalTypeError](err); !ok {
		return false
	}
	var probe struct {
		Type         string `json:"type"`
		ContentBlock struct {
			Type string `json:"type"`
		} `json:"content_block"`
		Delta struct {
			Type string `json:"type"`
		} `json:"delta"`
	}
	if json.Unmarshal(data, &probe) != nil {
		return false
	}
	switch name(probe.Type) {
	case evContentBlockStart:
		return !known(name(probe.ContentBlock.Type))
	case evContentBlockDelta:
		return !known(name(probe.Delta.Type))
	case evMessageStart, evContentBlockStop, evMessageDelta, evMessageStop, evError:
		return false
	}
	return true
}

func known(n name) bool {
	for _, k := range knownNames {
		if n == k {
			return true
		}
	}
	return false
}

// count folds in a usage report: the latest non-zero value of each count wins, since output_tokens
// is a running total and later API versions repeat the input counts in message_delta.
func (d *decoder) count(u usage) {
	if u != (usage{}) {
		d.counts = true
	}
	if u.InputTokens != 0 {
		d.usage.InputTokens = u.InputTokens
	}
	if u.OutputTokens != 0 {
		d.usage.OutputTokens = u.OutputTokens
	}
	if u.CacheCreationInputTokens != 0 {
		d.usage.CacheCreationInputTokens = u.CacheCreationInputTokens
	}
	if u.CacheReadInputTokens != 0 {
		d.usage.CacheReadInputTokens = u.CacheReadInputTokens
	}
}

func (d *decoder) blockStart(yield func(llm.Event, error) bool) bool {
	i, cb := d.ev.Index, &d.ev.ContentBlock
	if i < 0 || i >= maxBlocks {
		yield(llm.Event{}, &llm.Error{Provider: d.provider, Kind: llm.KindStream, Message: "a content block has an impossible index"})
		return false
	}
	for len(d.blocks) <= i {
		d.blocks = append(d.blocks, blockState{})
	}
	b := &d.blocks[i]
	*b = blockState{kind: cb.Type, open: true}
	switch cb.Type {
	case blockText:
		// The API starts a text block empty; a compatible server may not.
		return cb.Text == "" || yield(llm.Event{Kind: llm.EventText, Text: cb.Text}, nil)
	case blockThinking:
		b.signature = cb.Signature
		return cb.Thinking == "" || yield(llm.Event{Kind: llm.EventReasoning, Text: cb.Thinking}, nil)
	case blockRedactedThinking:
		b.open = false
		return yield(llm.Event{Kind: llm.EventReasoningEnd, Redacted: true, Signature: cb.Data}, nil)
	case blockToolUse:
		b.call = d.calls
		d.calls++
		b.input = cb.Input
		return yield(llm.Event{Kind: llm.EventToolCallDelta, Index: b.call, ID: cb.ID, Name: cb.Name}, nil)
	}
	// Server tools, their results, and the block types of later API versions: not chatd's to read.
	b.open = false
	return true
}

func (d *decoder) blockDelta(yield func(llm.Event, error) bool) bool {
	dl := &d.ev.Delta
	var b *blockState
	if i := d.ev.Index; i >= 0 && i < len(d.blocks) {
		b = &d.blocks[i]
	}
	switch dl.Type {
	case deltaText:
		return dl.Text == "" || yield(llm.Event{Kind: llm.EventText, Text: dl.Text}, nil)
	case deltaThinking:
		return dl.Thinking == "" || yield(llm.Event{Kind: llm.EventReasoning, Text: dl.Thinking}, nil)
	case deltaSignature:
		if b != nil && b.kind == blockThinking {
			if len(b.signature)+len(dl.Signature) > maxSignature {
				yield(llm.Event{}, &llm.Error{Provider: d.provider, Kind: llm.KindStream, Message: "a thinking signature is impossibly long"})
				return false
			}
			b.signature += dl.Signature
		}
	case deltaInputJSON:
		// Server tools (web search, code execution) stream their input too: only tool_use is a call.
		if b == nil || b.kind != blockToolUse || !b.open || dl.PartialJSON == "" {
			return true
		}
		b.args = true
		return yield(llm.Event{Kind: llm.EventToolCallDelta, Index: b.call, Text: dl.PartialJSON}, nil)
	}
	// citations_delta, and the delta types of later API versions.
	return true
}

// blockStop ends a block: a thinking block yields its signature, a tool call its end.
func (d *decoder) blockStop(b *blockState, yield func(llm.Event, error) bool) bool {
	if !b.open {
		return true
	}
	b.open = false
	switch b.kind {
	case blockThinking:
		return yield(llm.Event{Kind: llm.EventReasoningEnd, Signature: b.signature}, nil)
	case blockToolUse:
		if !b.args {
			// A call without arguments streams none, or only "": consumers need a whole object.
			if !yield(llm.Event{Kind: llm.EventToolCallDelta, Index: b.call, Text: startInput(b.input)}, nil) {
				return false
			}
		}
		return yield(llm.Event{Kind: llm.EventToolCallEnd, Index: b.call}, nil)
	}
	return true
}

// startInput is the arguments of a call that streamed none: the input its start gave when that is an
// object (a compatible server may send it whole there), else {}.
func startInput(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '{' {
		return string(raw)
	}
	return "{}"
}

// closeBlocks ends the blocks still open, in order: the stream finished without their
// content_block_stop.
func (d *decoder) closeBlocks(yield func(llm.Event, error) bool) bool {
	for i := range d.blocks {
		if !d.blockStop(&d.blocks[i], yield) {
			return false
		}
	}
	return true
}

// end finishes a stream that ended cleanly: it ends open blocks, yields a finish reason when the
// server sent none, and the usage.
func (d *decoder) end(yield func(llm.Event, error) bool) {
	if !d.closeBlocks(yield) {
		return
	}
	if !d.sent {
		if d.finish == "" {
			d.finish = llm.FinishStop
			if d.calls > 0 {
				d.finish = llm.FinishToolCalls
			}
		}
		if !yield(llm.Event{Kind: llm.EventFinish, FinishReason: d.finish}, nil) {
			return
		}
	}
	if d.counts {
		u := d.usage
		yield(llm.Event{Kind: llm.EventUsage, Usage: llm.Usage{
			InputTokens:      u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens,
			OutputTokens:     u.OutputTokens,
			CacheReadTokens:  u.CacheReadInputTokens,
			CacheWriteTokens: u.CacheCreationInputTokens,
		}}, nil)
	}
}

// finishReason maps a stop reason to llm's normalized finish reasons. One chatd does not know (a stop
// reason added to the API since) passes through as it is, unnormalized, and so reaches clients raw:
// naming it beats folding it into "stop", which would hide why the answer ended.
func finishReason(s string) llm.FinishReason {
	switch s {
	case "end_turn", "stop_sequence":
		return llm.FinishStop
	case "tool_use":
		return llm.FinishToolCalls
	case "max_tokens", "model_context_window_exceeded":
		return llm.FinishLength
	case "refusal":
		return llm.FinishContentFilter
	case "pause_turn":
		return llm.FinishPause
	}
	return llm.FinishReason(s)
}
