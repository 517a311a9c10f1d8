// Package llmtest is a scripted fake LLM provider for chatd's own tests. It serves the OpenAI Chat
// Completions streaming API over real HTTP and SSE, shaped like recorded streams of the real API: a first
// chunk with the role and empty content, text in small pieces, tool-call arguments split at odd points with
// the id and name sent once, a finish chunk with an empty delta, a usage chunk with "choices": [] and
// "data: [DONE]" — each of which a Turn can change to reproduce what real servers get wrong.
package llmtest

import (
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

// Turn scripts the answer to one model call.
type Turn struct {
	Reasoning string
	Text      string
	ToolCalls []ToolCall
	// FinishReason defaults to "tool_calls" when ToolCalls is set, else "stop". Set "length" to cut the
	// turn by the token limit (with CutArguments, the last call's arguments end halfway).
	FinishReason string
	CutArguments bool
	Usage        *llm.Usage // nil: a plausible usage; see NoUsage

	// Status answers with this HTTP status and an OpenAI error body (ErrorMessage) instead of a stream.
	Status       int
	RetryAfter   string
	ErrorMessage string
	// InBandError sends an {"error": …} chunk after the text, as servers do when they fail mid-stream.
	InBandError string
	// CutAfterChunks closes the connection after that many chunks: no finish reason, no [DONE].
	CutAfterChunks int
	NoDone         bool // omit "data: [DONE]" (the stream still ends cleanly after the finish chunk)
	NoUsage        bool // omit the usage chunk
	// ChunkRunes is how many runes of text go in one chunk (default 3).
	ChunkRunes int
	// Delay is slept before each chunk; Block waits until the client goes away before finishing.
	Delay time.Duration
	Block bool
	// BeforeFinish is called before the finish chunk is sent: a test can hold the stream open there,
	// for instance until a tool has started.
	BeforeFinish func()
	// WholeArguments sends each call in one delta with the arguments as a JSON object, as a few
	// compatible servers do.
	WholeArguments bool
}

// ToolCall is one scripted call. Arguments is the JSON text sent in fragments; ID "" sends no id.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// Request is a request the server received.
type Request struct {
	Header http.Header
	Body   map[string]any
	Raw    []byte
}

// Messages returns the request's messages.
func (r Request) Messages() []map[string]any {
	var out []map[string]any
	ms, _ := r.Body["messages"].([]any)
	for _, m := range ms {
		mm, _ := m.(map[string]any)
		out = append(out, mm)
	}
	return out
}

// Server is a fake OpenAI-compatible server answering with scripted turns in order.
type Server struct {
	*httptest.Server
	mu       sync.Mutex
	turns    []Turn
	requests []Request
	rejected int // requests Strict answered with an error; they take no turn
	// Respond, when set, picks the turn for each request instead of the script. n counts the requests
	// Strict let through.
	Respond func(n int, req Request) Turn
	// Strict, when set (before the first request), has every request validated as the real API validates
	// it (see Validate): an invalid one is answered 400 with the API's error body instead of a turn. It is
	// still recorded in Requests, but takes no scripted turn and is not passed to Respond.
	Strict bool
}

// NewServer starts a server that answers the n-th request with turns[n] and closes it at test end.
func NewServer(t testing.TB, turns ...Turn) *Server {
	s := &Server{turns: turns}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// BaseURL is the URL to use as OPENAI_BASE_URL (it includes /v1).
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
		http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	req := Request{Header: r.Header.Clone(), Raw: raw}
	if err := json.Unmarshal(raw, &req.Body); err != nil {
		writeError(w, http.StatusBadRequest, "We could not parse the JSON body of your request.", "")
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, req)
	if s.Strict {
		if apiErr := Validate(req.Body); apiErr != nil {
			s.rejected++
			s.mu.Unlock()
			apiErr.write(w)
			return
		}
	}
	n := len(s.requests) - 1 - s.rejected
	var turn Turn
	switch {
	case s.Respond != nil:
		turn = s.Respond(n, req)
	case n < len(s.turns):
		turn = s.turns[n]
	default:
		s.mu.Unlock()
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("llmtest: no turn scripted for request %d", n+1), "")
		return
	}
	s.mu.Unlock()
	if turn.Status != 0 {
		if turn.RetryAfter != "" {
			w.Header().Set("Retry-After", turn.RetryAfter)
		}
		writeError(w, turn.Status, turn.ErrorMessage, "")
		return
	}
	streamTurn(w, r, turn)
}

func writeError(w http.ResponseWriter, status int, msg, code string) {
	e := &APIError{Status: status, Message: msg, Type: "invalid_request_error", Code: code}
	if status >= 500 {
		e.Type = "server_error"
	} else if status == http.StatusTooManyRequests {
		e.Type, e.Code = "requests", "rate_limit_exceeded"
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
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
	size := turn.ChunkRunes
	if size <= 0 {
		size = 3
	}
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
	finish := turn.FinishReason
	if finish == "" {
		finish = "stop"
		if len(turn.ToolCalls) > 0 {
			finish = "tool_calls"
		}
	}
	c.out = append(c.out, c.prefix()+`{"index":0,"delta":{},"logprobs":null,"finish_reason":"`+finish+`"}],"usage":null}`)
	if !turn.NoUsage {
		u := turn.Usage
		if u == nil {
			u = &llm.Usage{InputTokens: 42, OutputTokens: int64(len(turn.Text)/4 + 5), CacheReadTokens: 0}
		}
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

func streamTurn(w http.ResponseWriter, r *http.Request, turn Turn) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	for n, data := range chunks(turn) {
		if turn.CutAfterChunks > 0 && n == turn.CutAfterChunks {
			panic(http.ErrAbortHandler) // drop the connection mid-stream
		}
		if strings.Contains(data, `"finish_reason":"`) {
			if turn.Block {
				<-r.Context().Done()
				return
			}
			if turn.BeforeFinish != nil {
				turn.BeforeFinish()
			}
		}
		if turn.Delay > 0 {
			select {
			case <-time.After(turn.Delay):
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintf(w, "data: %s\n\n", data)
		if rc.Flush() != nil {
			return
		}
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
