package llmtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// geminiWire is the Gemini API's streamGenerateContent, with alt=sse.
var geminiWire = protocol{
	name:     ProtocolGemini,
	validate: ValidateGeminiModel,
	tooLong: func(tokens, limit int) *APIError {
		return &APIError{Status: http.StatusBadRequest, Type: "INVALID_ARGUMENT",
			Message: fmt.Sprintf("The input token count (%d) exceeds the maximum number of tokens allowed (%d).", tokens, limit)}
	},
	statusError: geminiWireError,
	writeError:  writeGeminiWireError,
	events:      geminiWireEvents,
}

// geminiWireStatuses are the API's error statuses by HTTP status.
var geminiWireStatuses = map[int]string{
	http.StatusBadRequest:          "INVALID_ARGUMENT",
	http.StatusUnauthorized:        "UNAUTHENTICATED",
	http.StatusForbidden:           "PERMISSION_DENIED",
	http.StatusNotFound:            "NOT_FOUND",
	http.StatusConflict:            "ABORTED",
	http.StatusTooManyRequests:     "RESOURCE_EXHAUSTED",
	http.StatusInternalServerError: "INTERNAL",
	http.StatusNotImplemented:      "UNIMPLEMENTED",
	http.StatusServiceUnavailable:  "UNAVAILABLE",
	http.StatusGatewayTimeout:      "DEADLINE_EXCEEDED",
}

// geminiWireError is the error Gemini answers a status with; its Type is the status name.
func geminiWireError(status int, msg string) *APIError {
	name, ok := geminiWireStatuses[status]
	switch {
	case ok:
	case status >= 500:
		name = "INTERNAL"
	default:
		name = "FAILED_PRECONDITION"
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &APIError{Status: status, Type: name, Message: msg}
}

// writeGeminiWireError sends e as Gemini does: {"error":{"code","message","status"}}, a retry delay in a
// RetryInfo detail (Gemini sends no retry-after header). An error made for another API (a Type that is
// not a status name) gets the status name of its HTTP status.
func writeGeminiWireError(w http.ResponseWriter, e *APIError, retryAfter string) {
	name := e.Type
	if name == "" || strings.ToUpper(name) != name {
		name = geminiWireError(e.Status, e.Message).Type
	}
	details := ""
	if retryAfter != "" {
		if s, err := strconv.ParseFloat(retryAfter, 64); err == nil {
			details = fmt.Sprintf(`,"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"%ss"}]`, strconv.FormatFloat(s, 'f', -1, 64))
		} else {
			w.Header().Set("Retry-After", retryAfter) // an HTTP date, which RetryInfo cannot say
		}
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(e.Status)
	fmt.Fprintf(w, `{"error":{"code":%d,"message":%s,"status":%s%s}}`, e.Status, quote(e.Message), quote(name), details)
}

// geminiWireFinishReasons are the finish reasons of llm's. Gemini 3 ends a turn that called functions with
// STOP.
var geminiWireFinishReasons = map[string]string{
	"stop":           "STOP",
	"tool_calls":     "STOP",
	"length":         "MAX_TOKENS",
	"content_filter": "SAFETY",
}

// geminiWirePart is a part of a streamed candidate.
type geminiWirePart struct {
	Text             *string         `json:"text,omitempty"`
	Thought          bool            `json:"thought,omitempty"`
	FunctionCall     *geminiWireCall `json:"functionCall,omitempty"`
	ThoughtSignature string          `json:"thoughtSignature,omitempty"`
}

type geminiWireCall struct {
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

type geminiWireUsage struct {
	PromptTokenCount        int64 `json:"promptTokenCount"`
	CandidatesTokenCount    int64 `json:"candidatesTokenCount,omitempty"`
	TotalTokenCount         int64 `json:"totalTokenCount"`
	CachedContentTokenCount int64 `json:"cachedContentTokenCount,omitempty"`
	ThoughtsTokenCount      int64 `json:"thoughtsTokenCount,omitempty"`
}

// geminiWireEvents streams turn as Gemini does: a chunk a piece of thought, a chunk a piece of text, the
// function calls whole in one chunk, the first signed, and a last chunk with the finish reason (and
// the signature of a turn that thought and called nothing, in an empty text part). Every chunk carries
// the usage.
func geminiWireEvents(turn Turn, model string, n int) []streamEvent {
	g := geminiWireStream{model: model, id: fmt.Sprintf("llmtest%d", n)}
	if !turn.NoUsage {
		u := turn.usage()
		g.usage = &geminiWireUsage{
			PromptTokenCount:        u.InputTokens,
			CandidatesTokenCount:    max(u.OutputTokens-u.ReasoningTokens, 0),
			TotalTokenCount:         u.InputTokens + u.OutputTokens,
			CachedContentTokenCount: u.CacheReadTokens,
			ThoughtsTokenCount:      u.ReasoningTokens,
		}
	}
	size := turn.chunkRunes()
	for _, piece := range split(turn.Reasoning, size) {
		g.chunk("", geminiWirePart{Text: &piece, Thought: true})
	}
	for _, piece := range split(turn.Text, size) {
		g.chunk("", geminiWirePart{Text: &piece})
	}
	var calls []geminiWirePart
	for _, tc := range turn.ToolCalls {
		if !json.Valid([]byte(tc.Arguments)) || !bytes.HasPrefix(bytes.TrimSpace([]byte(tc.Arguments)), []byte("{")) {
			return g.malformed(tc)
		}
		calls = append(calls, geminiWirePart{FunctionCall: &geminiWireCall{Name: tc.Name, Args: json.RawMessage(tc.Arguments)}})
	}
	if len(calls) > 0 {
		calls[0].ThoughtSignature = madeUpSignature(turn.Reasoning + "\x00" + turn.ToolCalls[0].Name)
		g.chunk("", calls...)
	}
	if turn.InBandError != "" {
		g.out = append(g.out, streamEvent{data: `{"error": {"code": 500,"message": ` + quote(turn.InBandError) + `,"status": "INTERNAL"}}`})
		return g.out
	}
	reason := turn.finishReason()
	if r, ok := geminiWireFinishReasons[reason]; ok {
		reason = r
	} else {
		reason = strings.ToUpper(reason)
	}
	last := geminiWirePart{Text: new(string)}
	if turn.Reasoning != "" && len(calls) == 0 {
		last.ThoughtSignature = madeUpSignature(turn.Reasoning)
	}
	g.chunk(reason, last)
	return g.out
}

// geminiWireStream builds the chunks of one answer.
type geminiWireStream struct {
	out       []streamEvent
	model, id string
	usage     *geminiWireUsage
}

// chunk adds a chunk of one candidate holding parts, finished when reason is set.
func (g *geminiWireStream) chunk(reason string, parts ...geminiWirePart) {
	type content struct {
		Parts []geminiWirePart `json:"parts"`
		Role  string           `json:"role"`
	}
	type candidate struct {
		Content      content `json:"content"`
		FinishReason string  `json:"finishReason,omitempty"`
		Index        int     `json:"index"`
	}
	c := struct {
		Candidates    []candidate      `json:"candidates"`
		UsageMetadata *geminiWireUsage `json:"usageMetadata,omitempty"`
		ModelVersion  string           `json:"modelVersion"`
		ResponseID    string           `json:"responseId"`
	}{[]candidate{{Content: content{Parts: parts, Role: "model"}, FinishReason: reason}}, g.usage, g.model, g.id}
	b, _ := json.Marshal(c)
	g.out = append(g.out, streamEvent{data: string(b), finish: reason != ""})
}

// malformed ends the answer as Gemini ends one whose function call it cannot parse: no call, and the
// finish reason MALFORMED_FUNCTION_CALL with the call's text.
func (g *geminiWireStream) malformed(tc ToolCall) []streamEvent {
	msg := fmt.Sprintf("Malformed function call: print(default_api.%s(%s))", tc.Name, tc.Arguments)
	b, _ := json.Marshal(map[string]any{
		"candidates":   []any{map[string]any{"content": map[string]any{}, "finishReason": "MALFORMED_FUNCTION_CALL", "finishMessage": msg, "index": 0}},
		"modelVersion": g.model,
		"responseId":   g.id,
	})
	g.out = append(g.out, streamEvent{data: string(b), finish: true})
	return g.out
}
