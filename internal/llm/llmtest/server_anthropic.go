package llmtest

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
)

// anthropicWire is Anthropic's Messages API.
var anthropicWire = protocol{
	name:     ProtocolAnthropic,
	validate: func(_ string, body map[string]any) *APIError { return ValidateAnthropic(body) },
	tooLong: func(tokens, limit int) *APIError {
		return &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error",
			Message: fmt.Sprintf("prompt is too long: %d tokens > %d maximum", tokens, limit)}
	},
	statusError: anthropicWireError,
	writeError:  writeAnthropicWireError,
	events:      anthropicWireEvents,
}

// anthropicWireErrorTypes are the API's error types by HTTP status.
var anthropicWireErrorTypes = map[int]string{
	http.StatusBadRequest:            "invalid_request_error",
	http.StatusUnauthorized:          "authentication_error",
	http.StatusPaymentRequired:       "billing_error",
	http.StatusForbidden:             "permission_error",
	http.StatusNotFound:              "not_found_error",
	http.StatusRequestEntityTooLarge: "request_too_large",
	http.StatusTooManyRequests:       "rate_limit_error",
	http.StatusInternalServerError:   "api_error",
	http.StatusGatewayTimeout:        "timeout_error",
	529:                              "overloaded_error",
}

// anthropicWireError is the error Anthropic answers a status with.
func anthropicWireError(status int, msg string) *APIError {
	typ, ok := anthropicWireErrorTypes[status]
	switch {
	case ok:
	case status >= 500:
		typ = "api_error"
	default:
		typ = "invalid_request_error"
	}
	if msg == "" {
		msg = http.StatusText(status)
		if status == 529 {
			msg = "Overloaded"
		}
	}
	return &APIError{Status: status, Type: typ, Message: msg}
}

// writeAnthropicWireError sends e as Anthropic does: {"type":"error","error":{"type","message"},"request_id"},
// with the retry-after header. An error made for another API (a type Anthropic does not have) gets the
// type of its status.
func writeAnthropicWireError(w http.ResponseWriter, e *APIError, retryAfter string) {
	typ := e.Type
	if !isAnthropicWireErrorType(typ) {
		typ = anthropicWireError(e.Status, e.Message).Type
	}
	if retryAfter != "" {
		w.Header().Set("retry-after", retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("request-id", "req_llmtest")
	w.WriteHeader(e.Status)
	fmt.Fprintf(w, `{"type":"error","error":{"type":%s,"message":%s},"request_id":"req_llmtest"}`, quote(typ), quote(e.Message))
}

func isAnthropicWireErrorType(typ string) bool {
	for _, t := range anthropicWireErrorTypes {
		if t == typ {
			return true
		}
	}
	return false
}

// anthropicWireStopReasons are the stop reasons of llm's finish reasons.
var anthropicWireStopReasons = map[string]string{
	"stop":           "end_turn",
	"tool_calls":     "tool_use",
	"length":         "max_tokens",
	"content_filter": "refusal",
}

// anthropicWireEvents streams turn as the Messages API does: message_start, a thinking block signed by a
// signature_delta, a text block, one tool_use block a call, message_delta with the stop reason and the
// output tokens, message_stop.
func anthropicWireEvents(turn Turn, model string, n int) []streamEvent {
	a := anthropicWireStream{size: turn.chunkRunes()}
	u := turn.usage()
	// The API counts input_tokens apart from the cached ones; the adapter adds them back up.
	a.event("message_start", fmt.Sprintf(`{"type":"message_start","message":{"model":%s,"id":"msg_llmtest%d","type":"message","role":"assistant","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":%d,"service_tier":"standard"}}}`,
		quote(model), n, max(u.InputTokens-u.CacheReadTokens-u.CacheWriteTokens, 0), u.CacheWriteTokens, u.CacheReadTokens, min(u.OutputTokens, 1)))
	if turn.Reasoning != "" {
		a.block(`{"type":"thinking","thinking":"","signature":""}`)
		a.event("ping", `{"type": "ping"}`)
		for _, piece := range split(turn.Reasoning, a.size) {
			a.delta(`{"type":"thinking_delta","thinking":` + quote(piece) + `}`)
		}
		a.delta(`{"type":"signature_delta","signature":` + quote(madeUpSignature(turn.Reasoning)) + `}`)
		a.stop()
	}
	if turn.Text != "" {
		a.block(`{"type":"text","text":""}`)
		for _, piece := range split(turn.Text, a.size) {
			a.delta(`{"type":"text_delta","text":` + quote(piece) + `}`)
		}
		a.stop()
	}
	for i, tc := range turn.ToolCalls {
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("toolu_llmtest%d_%d", n, i)
		}
		a.block(fmt.Sprintf(`{"type":"tool_use","id":%s,"name":%s,"input":{}}`, quote(id), quote(tc.Name)))
		a.delta(`{"type":"input_json_delta","partial_json":""}`)
		args := tc.Arguments
		if turn.CutArguments && i == len(turn.ToolCalls)-1 {
			args = args[:len(args)/2]
		}
		for _, piece := range oddSplit(args) {
			a.delta(`{"type":"input_json_delta","partial_json":` + quote(piece) + `}`)
		}
		a.stop()
	}
	if turn.InBandError != "" {
		a.event("error", `{"type":"error","error":{"details":null,"type":"api_error","message":`+quote(turn.InBandError)+`},"request_id":"req_llmtest"}`)
		return a.out
	}
	reason := turn.finishReason()
	if r, ok := anthropicWireStopReasons[reason]; ok {
		reason = r
	}
	a.out = append(a.out, streamEvent{name: "message_delta", finish: true,
		data: fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%s,"stop_sequence":null},"usage":{"output_tokens":%d}}`, quote(reason), u.OutputTokens)})
	if !turn.NoDone {
		a.event("message_stop", `{"type":"message_stop"}`)
	}
	return a.out
}

// anthropicWireStream builds the events of one message, numbering its content blocks.
type anthropicWireStream struct {
	out     []streamEvent
	size    int
	index   int // the block being streamed
	started bool
}

func (a *anthropicWireStream) event(name, data string) {
	a.out = append(a.out, streamEvent{name: name, data: data})
}

// block starts the next content block.
func (a *anthropicWireStream) block(contentBlock string) {
	if a.started {
		a.index++
	}
	a.started = true
	a.event("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":%s}`, a.index, contentBlock))
}

func (a *anthropicWireStream) delta(delta string) {
	a.event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":%s}`, a.index, delta))
}

func (a *anthropicWireStream) stop() {
	a.event("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, a.index))
}

// madeUpSignature signs text the way no real API does, but opaquely enough for a test: "sig-" and the
// base64 of its SHA-256.
func madeUpSignature(text string) string {
	sum := sha256.Sum256([]byte(text))
	return "sig-" + base64.StdEncoding.EncodeToString(sum[:])
}
