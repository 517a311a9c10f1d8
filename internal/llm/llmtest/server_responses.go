package llmtest

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// responsesWire is OpenAI's Responses API. Its errors have the shape of Chat Completions'.
var responsesWire = protocol{
	name:     ProtocolResponses,
	validate: func(_ string, body map[string]any) *APIError { return ValidateResponses(body) },
	tooLong: func(int, int) *APIError {
		return &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "input", Code: "context_length_exceeded",
			Message: "Your input exceeds the context window of this model. Please adjust your input and try again."}
	},
	statusError: openaiWireError,
	writeError:  writeOpenAIWireError,
	events:      responsesWireEvents,
}

// responsesWireEvents streams turn as the Responses API does: response.created and response.in_progress;
// then one output item after the other, each opened by response.output_item.added and closed by
// response.output_item.done with the whole item — a reasoning item (summary deltas, encrypted
// content), a message (text deltas), a function call a tool call (argument deltas); and
// response.completed with the usage, or response.incomplete when the turn is cut.
func responsesWireEvents(turn Turn, model string, n int) []streamEvent {
	r := responsesWireStream{id: fmt.Sprintf("resp_llmtest%d", n), model: model, n: n}
	reason := turn.finishReason()
	incomplete := ""
	switch reason {
	case "length":
		incomplete = "max_output_tokens"
	case "content_filter":
		incomplete = "content_filter"
	}
	r.event("response.created", `"response":`+r.response("in_progress", "", nil, nil))
	r.event("response.in_progress", `"response":`+r.response("in_progress", "", nil, nil))
	if turn.Reasoning != "" {
		r.reasoning(turn.Reasoning, turn.chunkRunes())
	}
	if turn.Text != "" {
		status := "completed"
		if incomplete != "" && len(turn.ToolCalls) == 0 {
			status = "incomplete"
		}
		r.message(turn.Text, turn.chunkRunes(), status)
	}
	for i, tc := range turn.ToolCalls {
		r.call(i, tc, turn.CutArguments && i == len(turn.ToolCalls)-1)
	}
	if turn.InBandError != "" {
		r.event("error", `"code":"server_error","message":`+quote(turn.InBandError)+`,"param":null`)
		return r.out
	}
	var usage *responsesWireUsage
	if !turn.NoUsage {
		u := turn.usage()
		usage = &responsesWireUsage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, TotalTokens: u.InputTokens + u.OutputTokens}
		usage.InputTokensDetails.CachedTokens = u.CacheReadTokens
		usage.OutputTokensDetails.ReasoningTokens = u.ReasoningTokens
	}
	name, status := "response.completed", "completed"
	if incomplete != "" {
		name, status = "response.incomplete", "incomplete"
	}
	r.event(name, `"response":`+r.response(status, incomplete, r.output, usage))
	r.out[len(r.out)-1].finish = true
	return r.out
}

// responsesWireUsage is the usage of a response.
type responsesWireUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int64 `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int64 `json:"total_tokens"`
}

// responsesWireStream builds the events of one response, numbering them and its output items.
type responsesWireStream struct {
	out       []streamEvent
	seq       int
	id, model string
	n         int               // the turn's number, which makes the item ids unique across turns
	output    []json.RawMessage // the items done, for the terminal response
}

// event adds an event of type name whose other fields are fields (JSON object members, without braces).
func (r *responsesWireStream) event(name, fields string) {
	r.out = append(r.out, streamEvent{name: name, data: fmt.Sprintf(`{"type":%q,"sequence_number":%d,%s}`, name, r.seq, fields)})
	r.seq++
}

// response is the response object of the created, in_progress and terminal events.
func (r *responsesWireStream) response(status, incomplete string, output []json.RawMessage, usage *responsesWireUsage) string {
	details := "null"
	if incomplete != "" {
		details = `{"reason":` + quote(incomplete) + `}`
	}
	if output == nil {
		output = []json.RawMessage{}
	}
	out, _ := json.Marshal(output)
	u, _ := json.Marshal(usage)
	return fmt.Sprintf(`{"id":%q,"object":"response","created_at":1767225600,"status":%q,"background":false,"error":null,"incomplete_details":%s,"model":%s,"output":%s,"parallel_tool_calls":true,"store":false,"usage":%s}`,
		r.id, status, details, quote(r.model), out, u)
}

// added opens the next output item and returns its output_index.
func (r *responsesWireStream) added(item string) int {
	index := len(r.output)
	r.event("response.output_item.added", fmt.Sprintf(`"output_index":%d,"item":%s`, index, item))
	return index
}

// done closes output item index with the whole item.
func (r *responsesWireStream) done(index int, item string) {
	r.event("response.output_item.done", fmt.Sprintf(`"output_index":%d,"item":%s`, index, item))
	r.output = append(r.output, json.RawMessage(item))
}

// reasoning adds a reasoning item of one summary part, streamed, and its encrypted content.
func (r *responsesWireStream) reasoning(text string, size int) {
	id := fmt.Sprintf("rs_llmtest%d_%d", r.n, len(r.output))
	enc := quote(madeUpSignature(text))
	index := r.added(fmt.Sprintf(`{"id":%q,"type":"reasoning","encrypted_content":%s,"summary":[]}`, id, enc))
	at := fmt.Sprintf(`"item_id":%q,"output_index":%d,"summary_index":0`, id, index)
	r.event("response.reasoning_summary_part.added", at+`,"part":{"type":"summary_text","text":""}`)
	for _, piece := range split(text, size) {
		r.event("response.reasoning_summary_text.delta", at+`,"delta":`+quote(piece))
	}
	r.event("response.reasoning_summary_text.done", at+`,"text":`+quote(text))
	r.event("response.reasoning_summary_part.done", at+`,"part":{"type":"summary_text","text":`+quote(text)+`}`)
	r.done(index, fmt.Sprintf(`{"id":%q,"type":"reasoning","encrypted_content":%s,"summary":[{"type":"summary_text","text":%s}]}`, id, enc, quote(text)))
}

// message adds a message item of one output_text part, streamed.
func (r *responsesWireStream) message(text string, size int, status string) {
	id := fmt.Sprintf("msg_llmtest%d_%d", r.n, len(r.output))
	index := r.added(fmt.Sprintf(`{"id":%q,"type":"message","status":"in_progress","content":[],"role":"assistant"}`, id))
	at := fmt.Sprintf(`"item_id":%q,"output_index":%d,"content_index":0`, id, index)
	part := `{"type":"output_text","annotations":[],"logprobs":[],"text":` + quote(text) + `}`
	r.event("response.content_part.added", at+`,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}`)
	for _, piece := range split(text, size) {
		r.event("response.output_text.delta", at+`,"delta":`+quote(piece)+`,"logprobs":[]`)
	}
	r.event("response.output_text.done", at+`,"text":`+quote(text)+`,"logprobs":[]`)
	r.event("response.content_part.done", at+`,"part":`+part)
	r.done(index, fmt.Sprintf(`{"id":%q,"type":"message","status":%q,"content":[%s],"role":"assistant"}`, id, status, part))
}

// call adds function call i, its arguments streamed in odd fragments. A cut call streams half its
// arguments and is never done: the response ends incomplete while it is still open.
func (r *responsesWireStream) call(i int, tc ToolCall, cut bool) {
	id := fmt.Sprintf("fc_llmtest%d_%d", r.n, len(r.output))
	callID := tc.ID
	if callID == "" {
		callID = fmt.Sprintf("call_llmtest%d_%d", r.n, i)
	}
	index := r.added(fmt.Sprintf(`{"id":%q,"type":"function_call","status":"in_progress","arguments":"","call_id":%s,"name":%s}`, id, quote(callID), quote(tc.Name)))
	at := fmt.Sprintf(`"item_id":%q,"output_index":%d`, id, index)
	args := tc.Arguments
	if cut {
		args = args[:len(args)/2]
	}
	for _, piece := range oddSplit(args) {
		r.event("response.function_call_arguments.delta", at+`,"delta":`+quote(piece))
	}
	if cut {
		r.output = append(r.output, json.RawMessage(fmt.Sprintf(`{"id":%q,"type":"function_call","status":"incomplete","arguments":%s,"call_id":%s,"name":%s}`, id, quote(args), quote(callID), quote(tc.Name))))
		return
	}
	r.event("response.function_call_arguments.done", at+`,"arguments":`+quote(args))
	r.done(index, fmt.Sprintf(`{"id":%q,"type":"function_call","status":"completed","arguments":%s,"call_id":%s,"name":%s}`, id, quote(args), quote(callID), quote(tc.Name)))
}
