package responses

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"chatd/internal/llm"
	"chatd/internal/llm/upstream"
	"chatd/internal/sse"
)

// decoder turns the events of one streamed response into llm events. It is used once.
//
// The Responses API streams output items (messages, reasoning, function calls) one after the other, each
// opened by response.output_item.added, filled by deltas that name it by item_id and output_index, and
// closed by response.output_item.done with the whole item. The decoder keeps a little state per item:
// which reasoning summary part is open, which call index a function call has, what was already yielded.
type decoder struct {
	provider string
	key      string      // removed from error messages
	ev       streamEvent // reused across events so that decoding reuses its buffers
	// json decodes one event at a time into the reused value, allocating almost nothing.
	json  upstream.EventDecoder
	items []item
	calls int // function calls so far: the next call's index
	// refused says the answer holds a refusal: it streams as text, and the response finishes
	// content_filter, as llm.FinishContentFilter says refusals do.
	refused bool
	// cutShort is the error of an event whose JSON ended early, held until the next read tells a
	// dropped connection (EOF: the stream was cut) from a broken event (more data follows).
	cutShort error
}

// item is the decoder's state of one output item.
type item struct {
	kind   string // the item's type: "message", "reasoning", "function_call", …
	id     string
	output int // its output_index; -1 when unknown
	// reasoning
	open int // the key of the reasoning part still open in the consumer's fold, or noPart
	// parts is one past the highest summary_index streamed: the done event yields the summaries from
	// there on. A count would be wrong when a summary part streams no delta (an empty one).
	parts int
	// message: whether text was yielded; function call: whether argument text was
	streamed bool
	// function call
	call  int
	ended bool
}

// noPart says no reasoning part is open. Summary parts are keyed by their summary_index, raw reasoning
// text by rawPart plus its content_index.
const (
	noPart  = -1
	rawPart = 1 << 20
)

// run decodes body until the response ends, fails, the body ends, or the consumer stops.
func (d *decoder) run(ctx context.Context, body io.Reader, yield func(llm.Event, error) bool) {
	for ev, err := range sse.Scan(body) {
		if err != nil {
			yield(llm.Event{}, upstream.ReadError(ctx, d.provider, err))
			return
		}
		if d.cutShort != nil {
			// An event cut short, yet more came: it was broken, not the last one of a dropped stream.
			yield(llm.Event{}, d.cutShort)
			return
		}
		data := bytes.TrimSpace(ev.Data)
		if len(data) == 0 || data[0] != '{' {
			continue // "[DONE]" from a compatible server; a response ends with its terminal event
		}
		if !d.event(data, ev.Type, yield) {
			return
		}
	}
	if ctx.Err() != nil {
		yield(llm.Event{}, ctx.Err())
		return
	}
	yield(llm.Event{}, upstream.Cut(d.provider))
}

// event decodes one event and yields what it says. It returns false when the stream must stop: the
// response ended, failed, or the consumer stopped.
func (d *decoder) event(data []byte, sseType string, yield func(llm.Event, error) bool) bool {
	e := &d.ev
	e.Type, e.ItemID, e.Code = e.Type[:0], e.ItemID[:0], e.Code[:0]
	e.OutputIndex, e.SummaryIndex, e.ContentIndex = -1, 0, 0
	e.Delta, e.Arguments, e.Message = "", "", ""
	e.Item, e.Response, e.Error = nil, nil, nil
	err := d.json.Decode(data, &d.ev)
	typ := eventTypeOf(unquote(e.Type))
	if len(e.Type) == 0 {
		typ = eventTypeOf([]byte(sseType))
	}
	if err != nil {
		if _, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && !d.reads(typ) {
			return true // an event chatd does not read, whose fields have other types than ours
		}
		bad := &llm.Error{Provider: d.provider, Kind: llm.KindStream, Message: "cannot decode an event", Err: err}
		if errors.Is(err, upstream.ErrCutShort) {
			// The last event of a dropped connection ends mid-value: whether it was, the next read says.
			d.cutShort = bad
			return true
		}
		yield(llm.Event{}, bad)
		return false
	}
	if len(d.items) > maxItems {
		// A broken stream must not grow the decoder, nor each event's lookup among the items, without
		// bound.
		yield(llm.Event{}, &llm.Error{Provider: d.provider, Kind: llm.KindStream,
			Message: fmt.Sprintf("the response holds more than %d output items", maxItems)})
		return false
	}
	switch typ {
	case evTextDelta:
		return d.text(yield)
	case evRefusalDelta:
		d.refused = true
		return d.text(yield)
	case evSummaryDelta:
		return d.reasoning(e.SummaryIndex, true, yield)
	case evReasoningTextDelta:
		return d.reasoning(rawPart+e.ContentIndex, false, yield)
	case evItemAdded:
		return e.Item == nil || d.itemAdded(e.Item, yield)
	case evItemDone:
		return e.Item == nil || d.itemDone(e.Item, yield)
	case evArgumentsDelta:
		return d.argumentsDelta(yield)
	case evArgumentsDone:
		if it := d.find(e.ItemID, e.OutputIndex); it != nil && it.kind == "function_call" {
			return d.endCall(it, e.Arguments, yield)
		}
		return true
	case evCompleted, evIncomplete:
		d.finish(e.Response, yield)
		return false
	case evFailed:
		apiErr := &apiError{Message: "the response failed", Type: "response_failed"}
		if e.Response != nil && e.Response.Error != nil {
			apiErr = e.Response.Error
		}
		yield(llm.Event{}, streamError(d.provider, apiErr, d.key))
		return false
	case evError:
		apiErr := e.Error
		if apiErr == nil {
			apiErr = &apiError{Message: e.Message, Code: e.Code}
		}
		yield(llm.Event{}, streamError(d.provider, apiErr, d.key))
		return false
	}
	return true // created, in_progress, content parts, the .done of text, and what chatd does not use
}

// reads reports whether the decoder uses an event of type typ: not the event types it skips, nor the
// items of kinds it does not know (a server's own tools, whose fields may have other types).
func (d *decoder) reads(typ eventType) bool {
	switch typ {
	case evOther:
		return false
	case evItemAdded, evItemDone:
		if it := d.ev.Item; it != nil {
			return it.Type == "message" || it.Type == "reasoning" || it.Type == "function_call"
		}
	}
	return true
}

type eventType uint8

const (
	evOther eventType = iota
	evTextDelta
	evRefusalDelta
	evSummaryDelta
	evReasoningTextDelta
	evItemAdded
	evItemDone
	evArgumentsDelta
	evArgumentsDone
	evCompleted
	evIncomplete
	evFailed
	evError
)

func eventTypeOf(t []byte) eventType {
	switch string(t) { // a switch on string(t) does not allocate
	case "response.output_text.delta":
		return evTextDelta
	case "response.refusal.delta":
		return evRefusalDelta
	case "response.reasoning_summary_text.delta":
		return evSummaryDelta
	case "response.reasoning_text.delta":
		return evReasoningTextDelta
	case "response.output_item.added":
		return evItemAdded
	case "response.output_item.done":
		return evItemDone
	case "response.function_call_arguments.delta":
		return evArgumentsDelta
	case "response.function_call_arguments.done":
		return evArgumentsDone
	case "response.completed":
		return evCompleted
	case "response.incomplete":
		return evIncomplete
	case "response.failed":
		return evFailed
	case "error":
		return evError
	}
	return evOther
}

// unquote returns the text of a raw JSON string without its quotes. Event types and item ids hold no
// escapes.
func unquote(raw []byte) []byte {
	if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' {
		return raw[1 : len(raw)-1]
	}
	return raw
}

// find returns the item an event names: by item_id, or by output_index when the server sends no id.
func (d *decoder) find(id []byte, output int) *item {
	if id = unquote(id); len(id) > 0 {
		for i := len(d.items) - 1; i >= 0; i-- {
			if d.items[i].id == string(id) {
				return &d.items[i]
			}
		}
	}
	if output >= 0 {
		for i := len(d.items) - 1; i >= 0; i-- {
			if d.items[i].output == output {
				return &d.items[i]
			}
		}
	}
	return nil
}

// maxItems bounds the output items of one response.
const maxItems = 4096

// add starts the state of an item first seen in a delta or a done event, or announced by
// response.output_item.added.
func (d *decoder) add(kind, id string, output int) *item {
	it := item{kind: kind, id: id, output: output, open: noPart}
	if kind == "function_call" {
		it.call = d.calls
		d.calls++
	}
	d.items = append(d.items, it)
	return &d.items[len(d.items)-1]
}

// lookup returns the item an event names, starting it when no event announced it.
func (d *decoder) lookup(kind string) *item {
	if it := d.find(d.ev.ItemID, d.ev.OutputIndex); it != nil {
		return it
	}
	return d.add(kind, string(unquote(d.ev.ItemID)), d.ev.OutputIndex)
}

// text yields a fragment of a message's text or refusal, and marks the message streamed so that its
// done event does not yield the text again, even when the deltas came before the item was announced.
func (d *decoder) text(yield func(llm.Event, error) bool) bool {
	if d.ev.Delta == "" {
		return true
	}
	if len(unquote(d.ev.ItemID)) > 0 || d.ev.OutputIndex >= 0 {
		d.lookup("message").streamed = true
	}
	return yield(llm.Event{Kind: llm.EventText, Text: d.ev.Delta}, nil)
}

// reasoning yields a fragment of the reasoning part key of an item. Each summary part is one llm part;
// the part before it ends when it starts. The end of the last part waits for the item's end, which
// signs it with the item's encrypted content.
func (d *decoder) reasoning(key int, summary bool, yield func(llm.Event, error) bool) bool {
	if d.ev.Delta == "" {
		return true
	}
	it := d.lookup("reasoning")
	if it.open != key {
		if it.open != noPart && !yield(llm.Event{Kind: llm.EventReasoningEnd, ID: it.id}, nil) {
			return false
		}
		it.open = key
	}
	if summary {
		it.parts = max(it.parts, key+1)
	}
	return yield(llm.Event{Kind: llm.EventReasoning, Text: d.ev.Delta, ID: it.id}, nil)
}

func (d *decoder) itemAdded(oi *outputItem, yield func(llm.Event, error) bool) bool {
	it := d.findItem(oi)
	if it != nil {
		// Its deltas came first, or it is announced twice: name the call, adding no arguments.
		if it.kind != "function_call" {
			return true
		}
		return yield(llm.Event{Kind: llm.EventToolCallDelta, Index: it.call, ID: oi.CallID, Name: oi.Name}, nil)
	}
	it = d.add(oi.Type, oi.ID, d.ev.OutputIndex)
	if it.kind != "function_call" {
		return true
	}
	it.streamed = oi.Arguments != ""
	return yield(llm.Event{Kind: llm.EventToolCallDelta, Index: it.call, ID: oi.CallID, Name: oi.Name, Text: oi.Arguments}, nil)
}

// findItem returns the state of the item an output_item event carries: by its id, or by its
// output_index (servers that change an item's id between its events).
func (d *decoder) findItem(oi *outputItem) *item {
	if oi.ID != "" {
		if it := d.findID(oi.ID); it != nil {
			return it
		}
	}
	return d.find(nil, d.ev.OutputIndex)
}

func (d *decoder) findID(id string) *item {
	for i := range d.items {
		if d.items[i].id == id {
			return &d.items[i]
		}
	}
	return nil
}

func (d *decoder) itemDone(oi *outputItem, yield func(llm.Event, error) bool) bool {
	it := d.findItem(oi)
	if it == nil {
		// Done without added: a server that sends whole items only.
		it = d.add(oi.Type, oi.ID, d.ev.OutputIndex)
		if it.kind == "function_call" {
			if !yield(llm.Event{Kind: llm.EventToolCallDelta, Index: it.call, ID: oi.CallID, Name: oi.Name}, nil) {
				return false
			}
		}
	}
	switch oi.Type {
	case "reasoning":
		return d.reasoningDone(it, oi, yield)
	case "function_call":
		return d.endCall(it, oi.Arguments, yield)
	case "message":
		return d.messageDone(it, oi, yield)
	}
	return true
}

// reasoningDone yields the summary parts no delta streamed, then ends the item's last part with the
// item's id and encrypted content: folded, the parts make the item again.
func (d *decoder) reasoningDone(it *item, oi *outputItem, yield func(llm.Event, error) bool) bool {
	// The id the deltas carried, so that every part of the item has one id.
	id := it.id
	if id == "" {
		id = oi.ID
	}
	for i := it.parts; i < len(oi.Summary); i++ {
		if oi.Summary[i].Text == "" {
			continue
		}
		if it.open != noPart && !yield(llm.Event{Kind: llm.EventReasoningEnd, ID: id}, nil) {
			return false
		}
		it.open, it.parts = i, i+1
		if !yield(llm.Event{Kind: llm.EventReasoning, Text: oi.Summary[i].Text, ID: id}, nil) {
			return false
		}
	}
	if it.open == noPart && oi.EncryptedContent == "" {
		return true // nothing to keep
	}
	it.open = noPart
	return yield(llm.Event{Kind: llm.EventReasoningEnd, ID: id, Signature: oi.EncryptedContent}, nil)
}

// messageDone yields the text of a message no delta streamed, and notes a refusal in it.
func (d *decoder) messageDone(it *item, oi *outputItem, yield func(llm.Event, error) bool) bool {
	for _, c := range oi.Content {
		if c.Type == "refusal" && c.Refusal != "" {
			d.refused = true
		}
	}
	if it.streamed {
		return true
	}
	it.streamed = true
	for _, c := range oi.Content {
		text := c.Text
		if c.Type == "refusal" {
			text = c.Refusal
		}
		if text != "" && !yield(llm.Event{Kind: llm.EventText, Text: text}, nil) {
			return false
		}
	}
	return true
}

func (d *decoder) argumentsDelta(yield func(llm.Event, error) bool) bool {
	it := d.lookup("function_call")
	if it.kind != "function_call" || it.ended || d.ev.Delta == "" {
		return true
	}
	it.streamed = true
	return yield(llm.Event{Kind: llm.EventToolCallDelta, Index: it.call, Text: d.ev.Delta}, nil)
}

// endCall ends a function call. When no delta carried its arguments, they are the whole arguments the
// done event gives, or an empty object.
func (d *decoder) endCall(it *item, args string, yield func(llm.Event, error) bool) bool {
	if it.ended {
		return true
	}
	it.ended = true
	if !it.streamed {
		it.streamed = true
		if args == "" {
			args = "{}"
		}
		if !yield(llm.Event{Kind: llm.EventToolCallDelta, Index: it.call, Text: args}, nil) {
			return false
		}
	}
	return yield(llm.Event{Kind: llm.EventToolCallEnd, Index: it.call}, nil)
}

// finish ends the open calls and yields the finish reason and the usage of a completed or incomplete
// response.
func (d *decoder) finish(r *responseState, yield func(llm.Event, error) bool) {
	for i := range d.items {
		if it := &d.items[i]; it.kind == "function_call" && !d.endCall(it, "", yield) {
			return
		}
	}
	if r == nil {
		r = &responseState{Status: "completed"}
	}
	reason := llm.FinishStop
	switch {
	case d.refused:
		// Before length: continuing a refused answer gains nothing. Before tool calls: the agent runs
		// the calls whatever the finish.
		reason = llm.FinishContentFilter
	case r.Status == "incomplete" || r.IncompleteDetails != nil && r.IncompleteDetails.Reason != "":
		reason = llm.FinishLength
		if r.IncompleteDetails != nil {
			switch r.IncompleteDetails.Reason {
			case "max_output_tokens", "":
			case "content_filter":
				reason = llm.FinishContentFilter
			default:
				reason = llm.FinishReason(r.IncompleteDetails.Reason)
			}
		}
	case d.calls > 0:
		reason = llm.FinishToolCalls
	}
	if !yield(llm.Event{Kind: llm.EventFinish, FinishReason: reason}, nil) {
		return
	}
	if u := r.Usage; u != nil {
		yield(llm.Event{Kind: llm.EventUsage, Usage: convertUsage(u)}, nil)
	}
}

func convertUsage(u *usage) llm.Usage {
	out := llm.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens}
	if d := u.InputTokensDetails; d != nil {
		out.CacheReadTokens, out.CacheWriteTokens = d.CachedTokens, d.CacheWriteTokens
	}
	if d := u.OutputTokensDetails; d != nil {
		out.ReasoningTokens = d.ReasoningTokens
	}
	return out
}
