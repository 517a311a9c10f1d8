package gemini

import (
	"bytes"
	"context"
	"io"
	"strings"

	"chatd/internal/llm"
	"chatd/internal/llm/upstream"
	"chatd/internal/sse"
)

// decoder turns the chunks of one streamGenerateContent answer into llm events. It is used once.
type decoder struct {
	provider string
	key      string // removed from the messages of in-band errors
	c        chunk  // reused across chunks so that decoding reuses its slices
	// json decodes one chunk at a time into the reused value, allocating almost nothing.
	json  upstream.EventDecoder
	calls int // function calls streamed so far: the next call's index
	// signedThought says the reasoning part being streamed already has a signature, so that a thought
	// part with a signature of its own starts a new part instead of overwriting it.
	signedThought bool
	finish        llm.FinishReason
	usage         llm.Usage
	hasUsage      bool
}

// run decodes body until its end, an error, or the consumer stops.
func (d *decoder) run(ctx context.Context, body io.Reader, yield func(llm.Event, error) bool) {
	for ev, err := range sse.Scan(body) {
		if err != nil {
			yield(llm.Event{}, upstream.ReadError(ctx, d.provider, err))
			return
		}
		data := bytes.TrimSpace(ev.Data)
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
	// Gemini ends a stream by closing it after the chunk with the finish reason; without one the
	// answer may be cut anywhere.
	if d.finish == "" {
		yield(llm.Event{}, upstream.Cut(d.provider))
		return
	}
	if d.hasUsage {
		yield(llm.Event{Kind: llm.EventUsage, Usage: d.usage}, nil)
	}
}

// chunk decodes one chunk and yields its events. It returns false when the stream must stop.
func (d *decoder) chunk(data []byte, yield func(llm.Event, error) bool) bool {
	d.reset()
	if err := d.json.Decode(data, &d.c); err != nil {
		yield(llm.Event{}, &llm.Error{Provider: d.provider, Kind: llm.KindStream, Message: "cannot decode a chunk", Err: err})
		return false
	}
	if d.c.Error != nil {
		yield(llm.Event{}, inBandError(d.provider, d.c.Error, d.key))
		return false
	}
	if u := d.c.UsageMetadata; u != (usageMetadata{}) {
		d.usage, d.hasUsage = convertUsage(&u), true
	}
	if len(d.c.Candidates) == 0 {
		// A prompt the API blocks gets no candidate at all, only the feedback.
		if f := d.c.PromptFeedback; f != nil && f.BlockReason != "" {
			return d.end(llm.FinishContentFilter, yield)
		}
		return true
	}
	// chatd asks for one candidate: the first is the answer.
	cand := &d.c.Candidates[0]
	for i := range cand.Content.Parts {
		if !d.part(&cand.Content.Parts[i], yield) {
			return false
		}
	}
	if cand.FinishReason == "" || d.finish != "" {
		return true
	}
	switch cand.FinishReason {
	case "MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL":
		yield(llm.Event{}, badCall(d.provider, cand))
		return false
	}
	return d.end(finishReason(cand.FinishReason, d.calls > 0), yield)
}

// reset empties d.c for the next chunk. Decoding into a reused slice does not zero its elements, so
// they are zeroed here, keeping the parts' backing arrays for reuse.
func (d *decoder) reset() {
	cands := d.c.Candidates[:cap(d.c.Candidates)]
	for i := range cands {
		parts := cands[i].Content.Parts
		clear(parts[:cap(parts)])
		cands[i] = candidate{Content: candidateContent{Parts: parts[:0]}}
	}
	d.c.Candidates = cands[:0]
	d.c.PromptFeedback, d.c.Error = nil, nil
	d.c.UsageMetadata = usageMetadata{}
}

// part yields the events of one content part. Gemini sends each part whole within a chunk, a text
// answer as a run of text parts over several chunks, and each function call complete in one part.
func (d *decoder) part(p *responsePart, yield func(llm.Event, error) bool) bool {
	switch {
	case p.FunctionCall != nil:
		return d.functionCall(p, yield)
	case p.Text == "" && p.ThoughtSignature == "":
		return true // Gemini ends some streams with an empty text part
	case p.Thought:
		if p.ThoughtSignature != "" && d.signedThought {
			// Two signed thoughts are two parts: each signature goes back with its own text.
			if !yield(llm.Event{Kind: llm.EventReasoningEnd}, nil) {
				return false
			}
		}
		d.signedThought = d.signedThought || p.ThoughtSignature != ""
		return yield(llm.Event{Kind: llm.EventReasoning, Text: p.Text, Signature: p.ThoughtSignature}, nil)
	default:
		d.signedThought = false // a text part closes the reasoning part
		return yield(llm.Event{Kind: llm.EventText, Text: p.Text, Signature: p.ThoughtSignature}, nil)
	}
}

// functionCall yields one whole call. Gemini's call id, when it sends one, is not passed on: chatd's
// agent assigns ids, and requests pair calls with responses by order and name.
func (d *decoder) functionCall(p *responsePart, yield func(llm.Event, error) bool) bool {
	fc := p.FunctionCall
	if fc.Name == "" {
		return true // not a call: Vertex's streamed-argument fragments, which chatd does not ask for
	}
	args := "{}"
	if a := bytes.TrimSpace(fc.Args); len(a) > 0 && string(a) != "null" {
		args = string(a)
	}
	idx := d.calls
	d.calls++
	ev := llm.Event{Kind: llm.EventToolCallDelta, Index: idx, Name: fc.Name, Text: args, Signature: p.ThoughtSignature}
	return yield(ev, nil) && yield(llm.Event{Kind: llm.EventToolCallEnd, Index: idx}, nil)
}

// end records the finish reason and yields it. Usage follows at the end of the stream: a later chunk
// may still carry a higher running total.
func (d *decoder) end(reason llm.FinishReason, yield func(llm.Event, error) bool) bool {
	if d.finish != "" {
		return true
	}
	d.finish = reason
	return yield(llm.Event{Kind: llm.EventFinish, FinishReason: reason}, nil)
}

// badCall is the error of a turn Gemini ended because the model's function call was unusable. It is
// not retryable as such: the same request tends to make the same call.
func badCall(provider string, cand *candidate) *llm.Error {
	msg := "the model produced a malformed function call"
	if cand.FinishReason == "UNEXPECTED_TOOL_CALL" {
		msg = "the model called a tool that was not offered"
	}
	if m := strings.TrimPrefix(cand.FinishMessage, "Malformed function call: "); m != "" {
		msg += ": " + m
	}
	return &llm.Error{Provider: provider, Kind: llm.KindStream, Code: cand.FinishReason, Message: msg}
}

// finishReason maps Gemini's finish reason. Gemini 3 ends a turn that called functions with STOP;
// older servers and mocks say FUNCTION_CALL.
func finishReason(s string, called bool) llm.FinishReason {
	switch s {
	case "STOP", "FUNCTION_CALL":
		if called || s == "FUNCTION_CALL" {
			return llm.FinishToolCalls
		}
		return llm.FinishStop
	case "MAX_TOKENS":
		return llm.FinishLength
	case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY", "LANGUAGE",
		"IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION":
		return llm.FinishContentFilter
	}
	return llm.FinishReason(strings.ToLower(s))
}

// convertUsage follows llm's convention: InputTokens is the whole prompt, tool-use prompt included, and
// OutputTokens counts the thoughts, which Gemini counts apart from the candidates.
func convertUsage(u *usageMetadata) llm.Usage {
	return llm.Usage{
		InputTokens:     u.PromptTokenCount + u.ToolUsePromptTokenCount,
		OutputTokens:    u.CandidatesTokenCount + u.ThoughtsTokenCount,
		CacheReadTokens: u.CachedContentTokenCount,
		ReasoningTokens: u.ThoughtsTokenCount,
	}
}
