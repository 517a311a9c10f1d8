// Package llmtest is a scripted fake LLM provider for chatd's own tests. One server speaks the four wire
// protocols chatd has adapters for, chosen by the request's path, and answers each with the same scripted
// Turn, streamed over real HTTP and SSE in the shape of recorded streams of the real API:
//
//   - POST /v1/chat/completions: OpenAI Chat Completions. A first chunk with the role and empty content,
//     text in small pieces, tool-call arguments split at odd points with the id and name sent once, a
//     finish chunk with an empty delta, a usage chunk with "choices": [] and "data: [DONE]".
//   - POST /v1/messages: Anthropic Messages. message_start, a signed thinking block, a text block, tool_use
//     blocks whose input streams in odd input_json_delta fragments, message_delta with the stop reason and
//     the usage, message_stop.
//   - POST /v1beta/models/{model}:streamGenerateContent: Gemini. Chunks of thought parts, text parts, the
//     function calls whole (the first signed), and a last chunk with the finish reason; usage in each.
//   - POST /v1/responses: OpenAI Responses. response.created, output items (a reasoning item with summary
//     deltas and encrypted content, a message with text deltas, function calls with argument deltas), and
//     response.completed with the usage, or response.incomplete when the turn is cut by length.
//
// Errors, scripted (Turn.Status) or the real API's answers to an invalid request (Server.Strict) or one
// over the model's window (Server.ContextWindow), come in each API's own error body. Each part of the
// stream a Turn can change, to reproduce what real servers get wrong.
package llmtest

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"chatd/internal/llm"
)

// Turn scripts the answer to one model call. The fields apply to every protocol unless their comment
// names the ones they apply to; elsewhere they are ignored.
type Turn struct {
	// Reasoning is the model's thinking: reasoning_content deltas (OpenAI), a thinking block closed by a
	// signature_delta (Anthropic), thought parts (Gemini, the turn's signature following them), a reasoning
	// item with summary deltas and encrypted content (Responses). The signatures are made up from the text.
	Reasoning string
	Text      string
	// ToolCalls are made after the text, their arguments streamed in odd fragments — except on Gemini,
	// which sends each call whole in one chunk, the first with a thoughtSignature (invalid JSON arguments
	// end a Gemini turn MALFORMED_FUNCTION_CALL instead, as Gemini does).
	ToolCalls []ToolCall
	// FinishReason defaults to "tool_calls" when ToolCalls is set, else "stop". Set "length" to cut the
	// turn by the token limit (with CutArguments, the last call's arguments end halfway; not Gemini). Each
	// protocol says it in its words: "stop", "tool_calls", "length" and "content_filter" are end_turn,
	// tool_use, max_tokens and refusal on Anthropic, STOP, STOP, MAX_TOKENS and SAFETY on Gemini, and a
	// completed response, a completed one, response.incomplete (max_output_tokens) and
	// response.incomplete (content_filter) on Responses. Any other value is sent as it is.
	FinishReason string
	CutArguments bool
	// Usage is the turn's usage in llm's terms (nil: a plausible one), sent so that the adapter reads it
	// back as it is: Anthropic counts no reasoning tokens apart and drops ReasoningTokens; only Anthropic
	// reports CacheWriteTokens. See NoUsage.
	Usage *llm.Usage

	// Status answers with this HTTP status and the protocol's error body (ErrorMessage, or the status's
	// text) instead of a stream. RetryAfter goes in the Retry-After header, except on Gemini, which says
	// it in the body's RetryInfo (when RetryAfter is a number of seconds).
	Status       int
	RetryAfter   string
	ErrorMessage string
	// InBandError sends an error after the text instead of finishing, as servers do when they fail
	// mid-stream: an {"error": …} chunk (OpenAI, Gemini), an error event (Anthropic: api_error;
	// Responses: server_error).
	InBandError string
	// CutAfterChunks closes the connection after that many chunks (SSE events, all counted): no finish,
	// no terminator.
	CutAfterChunks int
	// NoDone omits the terminator, the stream still ending cleanly after the finish: "data: [DONE]"
	// (OpenAI), message_stop (Anthropic). Gemini has none; on Responses the terminal event is the finish.
	NoDone bool
	// NoUsage omits the usage: the usage chunk (OpenAI), usageMetadata (Gemini), the completed
	// response's usage (Responses, null). Anthropic always sends it.
	NoUsage bool
	// ChunkRunes is how many runes of text or reasoning go in one chunk (default 3).
	ChunkRunes int
	// Delay is slept before each chunk; Block waits until the client goes away before finishing.
	Delay time.Duration
	Block bool
	// BeforeFinish is called before the finish is sent (the finish chunk, message_delta, Gemini's chunk
	// with the finish reason, response.completed): a test can hold the stream open there, for instance
	// until a tool has started.
	BeforeFinish func()
	// BeforeChunk is called with each event's data before it is sent: a test can hold the stream until
	// its client has seen what was sent before (a proxy's buffering shows as a wait that never ends).
	BeforeChunk func(data string)
	// WholeArguments sends each call in one delta with the arguments as a JSON object, as a few
	// compatible servers do (OpenAI only).
	WholeArguments bool
}

// ToolCall is one scripted call. Arguments is the JSON text sent in fragments. ID "" sends no id on
// OpenAI; Anthropic and Responses always send one, so one is made up; Gemini sends none.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// The protocols a Server speaks, as Request.Protocol names them.
const (
	ProtocolOpenAI    = "openai"
	ProtocolAnthropic = "anthropic"
	ProtocolGemini    = "gemini"
	ProtocolResponses = "responses"
)

// Request is a request the server received.
type Request struct {
	Protocol string // ProtocolOpenAI, ProtocolAnthropic, ProtocolGemini or ProtocolResponses
	Path     string
	// Model is the model asked for: from the URL on Gemini, from the body's "model" elsewhere.
	Model  string
	Header http.Header
	Body   map[string]any
	Raw    []byte
}

// Messages returns the request's "messages" (OpenAI Chat Completions, Anthropic). Gemini's history is
// Body["contents"], Responses' is Body["input"].
func (r Request) Messages() []map[string]any {
	return objects(r.Body["messages"])
}

// Server is a fake server of the four protocols answering with scripted turns in order, whatever the
// protocol of each request.
type Server struct {
	*httptest.Server
	mu       sync.Mutex
	turns    []Turn
	requests []Request
	rejected int // requests answered with an error by Strict or ContextWindow; they take no turn
	// Respond, when set, picks the turn for each request instead of the script. n counts the requests
	// Strict and ContextWindow let through.
	Respond func(n int, req Request) Turn
	// Strict, when set (before the first request), has every request validated as the real API validates
	// it (Validate, ValidateAnthropic, ValidateGeminiModel, ValidateResponses): an invalid one is answered
	// 400 with the API's error body instead of a turn. It is still recorded in Requests, but takes no
	// scripted turn and is not passed to Respond.
	Strict bool
	// ContextWindow, when > 0 (set before the first request), is the model's window in tokens: a request
	// estimated over it is answered 400 with the protocol's own context-length error, whether or not
	// Strict is set (a request Strict refuses gets Strict's error), and like a request Strict rejects it
	// is recorded but takes no turn. A request counts (len(body)+3)/4 tokens, four bytes of its JSON a
	// token: the rough rule for English text, erring high since the JSON's syntax counts too. A turn
	// without a Usage then reports that count as its input tokens.
	ContextWindow int
}

// NewServer starts a server that answers the n-th request with turns[n] and closes it at test end.
func NewServer(t testing.TB, turns ...Turn) *Server {
	s := &Server{turns: turns}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// BaseURL is the URL to use as OPENAI_BASE_URL for Chat Completions (it includes /v1).
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// AnthropicBaseURL is the URL to use as ANTHROPIC_BASE_URL (without /v1).
func (s *Server) AnthropicBaseURL() string { return s.URL }

// GeminiBaseURL is the URL to use as GEMINI_BASE_URL (the host root, without /v1beta).
func (s *Server) GeminiBaseURL() string { return s.URL }

// ResponsesBaseURL is the base URL of the Responses adapter (it includes /v1).
func (s *Server) ResponsesBaseURL() string { return s.URL + "/v1" }

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// protocol is what the server needs of one wire protocol.
type protocol struct {
	name string
	// validate checks a request as the API does, for Strict; model is the request's.
	validate func(model string, body map[string]any) *APIError
	// tooLong is the API's answer to a request of tokens over a window of limit tokens.
	tooLong func(tokens, limit int) *APIError
	// statusError is the API's error for an HTTP status; msg "" says the status's text.
	statusError func(status int, msg string) *APIError
	// writeError sends e in the API's error shape, with a scripted retry-after when set.
	writeError func(w http.ResponseWriter, e *APIError, retryAfter string)
	// events is the stream answering turn, the n-th turn served (ids are unique across turns).
	events func(turn Turn, model string, n int) []streamEvent
}

// route returns the protocol of a request and the model its URL names (Gemini), or false when no
// protocol serves its path.
func route(r *http.Request) (*protocol, string, bool) {
	if r.Method != http.MethodPost {
		return nil, "", false
	}
	switch r.URL.Path {
	case "/v1/chat/completions":
		return &openaiWire, "", true
	case "/v1/messages":
		return &anthropicWire, "", true
	case "/v1/responses":
		return &responsesWire, "", true
	}
	if rest, ok := strings.CutPrefix(r.URL.Path, "/v1beta/models/"); ok {
		if model, ok := strings.CutSuffix(rest, ":streamGenerateContent"); ok && model != "" {
			return &geminiWire, model, true
		}
	}
	return nil, "", false
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	proto, model, ok := route(r)
	if !ok {
		http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	req := Request{Protocol: proto.name, Path: r.URL.Path, Model: model, Header: r.Header.Clone(), Raw: raw}
	if err := json.Unmarshal(raw, &req.Body); err != nil {
		proto.writeError(w, proto.statusError(http.StatusBadRequest, "We could not parse the JSON body of your request."), "")
		return
	}
	if req.Model == "" {
		req.Model, _ = req.Body["model"].(string)
	}
	turn, n, apiErr := s.take(proto, req)
	if apiErr != nil {
		proto.writeError(w, apiErr, "")
		return
	}
	if turn.Status != 0 {
		proto.writeError(w, proto.statusError(turn.Status, turn.ErrorMessage), turn.RetryAfter)
		return
	}
	writeEvents(w, r, turn, proto.events(turn, cmp.Or(req.Model, "llmtest-1"), n))
}

// take records req and picks its turn and the turn's number, or returns the error the API answers
// instead: a rejection (Strict, ContextWindow), which takes no turn, or a script run out.
func (s *Server) take(proto *protocol, req Request) (Turn, int, *APIError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, req)
	if apiErr := s.reject(proto, req); apiErr != nil {
		s.rejected++
		return Turn{}, 0, apiErr
	}
	n := len(s.requests) - 1 - s.rejected
	var turn Turn
	switch {
	case s.Respond != nil:
		turn = s.Respond(n, req)
	case n < len(s.turns):
		turn = s.turns[n]
	default:
		return Turn{}, n, proto.statusError(http.StatusInternalServerError, fmt.Sprintf("llmtest: no turn scripted for request %d", n+1))
	}
	if s.ContextWindow > 0 && turn.Usage == nil {
		// A server with a window counts each request as it measures it against the window, and
		// reports that count, as real APIs report the prompt's tokens.
		turn.Usage = &llm.Usage{InputTokens: int64(EstimateTokens(req.Raw)), OutputTokens: int64(len(turn.Text)/4 + 5)}
	}
	return turn, n, nil
}

// reject returns the error the API answers req with before any turn, or nil.
func (s *Server) reject(proto *protocol, req Request) *APIError {
	if s.Strict && proto.validate != nil {
		if apiErr := proto.validate(req.Model, req.Body); apiErr != nil {
			return apiErr
		}
	}
	if s.ContextWindow > 0 {
		if tokens := EstimateTokens(req.Raw); tokens > s.ContextWindow {
			return proto.tooLong(tokens, s.ContextWindow)
		}
	}
	return nil
}

// EstimateTokens is the size ContextWindow gives a request body: (len(body)+3)/4 tokens.
func EstimateTokens(body []byte) int { return (len(body) + 3) / 4 }

// streamEvent is one server-sent event of an answer.
type streamEvent struct {
	name string // the event field; "" sends none (OpenAI, Gemini)
	data string
	// finish marks the event that finishes the answer: Block and BeforeFinish wait before it.
	finish bool
}

// writeEvents streams events as turn says: delayed, cut, or held before the finish.
func writeEvents(w http.ResponseWriter, r *http.Request, turn Turn, events []streamEvent) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	for n, ev := range events {
		if turn.CutAfterChunks > 0 && n == turn.CutAfterChunks {
			panic(http.ErrAbortHandler) // drop the connection mid-stream
		}
		if ev.finish {
			if turn.Block {
				<-r.Context().Done()
				return
			}
			if turn.BeforeFinish != nil {
				turn.BeforeFinish()
			}
		}
		if turn.BeforeChunk != nil {
			turn.BeforeChunk(ev.data)
		}
		if turn.Delay > 0 {
			select {
			case <-time.After(turn.Delay):
			case <-r.Context().Done():
				return
			}
		}
		if ev.name != "" {
			fmt.Fprintf(w, "event: %s\n", ev.name)
		}
		fmt.Fprintf(w, "data: %s\n\n", ev.data)
		if rc.Flush() != nil {
			return
		}
	}
}

// finishReason is the turn's finish reason in llm's words.
func (t *Turn) finishReason() string {
	switch {
	case t.FinishReason != "":
		return t.FinishReason
	case len(t.ToolCalls) > 0:
		return "tool_calls"
	}
	return "stop"
}

// usage is the turn's usage, or a plausible one.
func (t *Turn) usage() llm.Usage {
	if t.Usage != nil {
		return *t.Usage
	}
	return llm.Usage{InputTokens: 42, OutputTokens: int64(len(t.Text)/4 + 5)}
}

// chunkRunes is how many runes go in one chunk.
func (t *Turn) chunkRunes() int {
	if t.ChunkRunes <= 0 {
		return 3
	}
	return t.ChunkRunes
}

// openaiWire is OpenAI's Chat Completions API.
var openaiWire = protocol{
	name:     ProtocolOpenAI,
	validate: func(_ string, body map[string]any) *APIError { return Validate(body) },
	tooLong: func(tokens, limit int) *APIError {
		return &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "messages", Code: "context_length_exceeded",
			Message: fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.", limit, tokens)}
	},
	statusError: openaiWireError,
	writeError:  writeOpenAIWireError,
	events: func(turn Turn, _ string, _ int) []streamEvent {
		var out []streamEvent
		for _, data := range chunks(turn) {
			out = append(out, streamEvent{data: data, finish: strings.Contains(data, `"finish_reason":"`)})
		}
		return out
	},
}

// openaiWireError is the error OpenAI answers a status with (Chat Completions and Responses).
func openaiWireError(status int, msg string) *APIError {
	e := &APIError{Status: status, Message: msg, Type: "invalid_request_error"}
	if status >= 500 {
		e.Type = "server_error"
	} else if status == http.StatusTooManyRequests {
		e.Type, e.Code = "requests", "rate_limit_exceeded"
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	return e
}

// writeOpenAIWireError sends e as OpenAI does: {"error": {"message", "type", "param", "code"}}.
func writeOpenAIWireError(w http.ResponseWriter, e *APIError, retryAfter string) {
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	e.write(w)
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// chunks builds the data lines of a turn, in order.
func chunks(turn Turn) []string {
	c := chunkWriter{id: "chatcmpl-llmtest" + strconv.Itoa(len(turn.Text)), model: "llmtest-1"}
	c.delta(`{"role":"assistant","content":"","refusal":null}`)
	size := turn.chunkRunes()
	for _, piece := range split(turn.Reasoning, size) {
		c.delta(`{"reasoning_content":` + quote(piece) + `}`)
	}
	for _, piece := range split(turn.Text, size) {
		c.delta(`{"content":` + quote(piece) + `}`)
	}
	for i, tc := range turn.ToolCalls {
		c.toolCall(i, tc, turn.WholeArguments, turn.CutArguments && i == len(turn.ToolCalls)-1)
	}
	if turn.InBandError != "" {
		c.out = append(c.out, `{"error":{"message":`+quote(turn.InBandError)+`,"type":"server_error","param":null,"code":null}}`)
		return c.out
	}
	c.out = append(c.out, c.prefix()+`{"index":0,"delta":{},"logprobs":null,"finish_reason":"`+turn.finishReason()+`"}],"usage":null}`)
	if !turn.NoUsage {
		u := turn.usage()
		c.out = append(c.out, fmt.Sprintf(`{"id":%q,"object":"chat.completion.chunk","created":1767225600,"model":%q,"system_fingerprint":"fp_llmtest","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":%d,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}`,
			c.id, c.model, u.InputTokens, u.OutputTokens, u.InputTokens+u.OutputTokens, u.CacheReadTokens, u.ReasoningTokens))
	}
	if !turn.NoDone {
		c.out = append(c.out, "[DONE]")
	}
	return c.out
}

type chunkWriter struct {
	id, model string
	out       []string
}

func (c *chunkWriter) prefix() string {
	return `{"id":"` + c.id + `","object":"chat.completion.chunk","created":1767225600,"model":"` + c.model + `","system_fingerprint":"fp_llmtest","choices":[`
}

func (c *chunkWriter) delta(delta string) {
	c.out = append(c.out, c.prefix()+`{"index":0,"delta":`+delta+`,"logprobs":null,"finish_reason":null}],"usage":null}`)
}

// toolCall sends the id, type and name once with empty arguments, then the arguments split at odd points.
func (c *chunkWriter) toolCall(i int, tc ToolCall, whole, cut bool) {
	idField := ""
	if tc.ID != "" {
		idField = `"id":` + quote(tc.ID) + `,"type":"function",`
	}
	if whole {
		c.delta(fmt.Sprintf(`{"tool_calls":[{"index":%d,%s"function":{"name":%s,"arguments":%s}}]}`, i, idField, quote(tc.Name), tc.Arguments))
		return
	}
	c.delta(fmt.Sprintf(`{"tool_calls":[{"index":%d,%s"function":{"name":%s,"arguments":""}}]}`, i, idField, quote(tc.Name)))
	args := tc.Arguments
	if cut {
		args = args[:len(args)/2]
	}
	for _, piece := range oddSplit(args) {
		c.delta(fmt.Sprintf(`{"tool_calls":[{"index":%d,"function":{"arguments":%s}}]}`, i, quote(piece)))
	}
}

// split cuts s into pieces of n runes.
func split(s string, n int) []string {
	var out []string
	for s != "" {
		i, k := 0, 0
		for i < len(s) && k < n {
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
			k++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}

// oddSplit cuts s at irregular points — inside keys, between a backslash and what it escapes is avoided
// only at the rune level — the way real servers split arguments.
func oddSplit(s string) []string {
	sizes := []int{1, 4, 2, 7, 3, 1, 5}
	var out []string
	for i := 0; s != ""; i++ {
		n := sizes[i%len(sizes)]
		end := 0
		for k := 0; k < n && end < len(s); k++ {
			_, size := utf8.DecodeRuneInString(s[end:])
			end += size
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
