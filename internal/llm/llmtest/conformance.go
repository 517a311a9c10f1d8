package llmtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"chatd/internal/llm"
)

// The scenarios of the conformance suite. Each is a file "<scenario>.http" among an adapter's
// recordings: an HTTP response as the provider's API sends it (status line, headers, blank line, body
// byte for byte), shaped like a capture of the real API but carrying the suite's canonical content, so
// that one set of expectations holds for every adapter:
//
//	text                 "Hello! How can I help you today?"; stop; usage 25 in, 9 out
//	tool_call            "Let me check the weather." then get_weather {"city":"Paris"}; tool_calls; 80 in, 20 out
//	parallel_tool_calls  get_weather {"city":"Paris"} and get_weather {"city":"Tokyo"}; tool_calls; 80 in, 40 out
//	reasoning            thinking "The user wants 2+2. That is 4." then "2 + 2 = 4."; stop; 30 in, 50 out
//	                     of which 38 reasoning (unless Adapter.NoReasoningTokens); the thinking's
//	                     signatures, if any, must come back verbatim in the next request
//	length               "Once upon a time, there"; length; 20 in, 5 out
//	error_mid_stream     "The answer is", then an in-band error the provider would succeed on later
//	                     (overloaded, server)
//	rate_limit           HTTP 429 with a retry-after of 7 s (header or body); the suite then serves text
//	abrupt_eof           "Hello, wor", then the connection drops: a stream error
//
// A recording with the header "Chatd-Conformance: cut" is served with a Content-Length longer than its
// body and the connection closed after the body, the way a dropped connection looks to a client.
const (
	ScenarioText              = "text"
	ScenarioToolCall          = "tool_call"
	ScenarioParallelToolCalls = "parallel_tool_calls"
	ScenarioReasoning         = "reasoning"
	ScenarioLength            = "length"
	ScenarioErrorMidStream    = "error_mid_stream"
	ScenarioRateLimit         = "rate_limit"
	ScenarioAbruptEOF         = "abrupt_eof"
)

// Scenarios lists every scenario of the suite.
var Scenarios = []string{
	ScenarioText, ScenarioToolCall, ScenarioParallelToolCalls, ScenarioReasoning,
	ScenarioLength, ScenarioErrorMidStream, ScenarioRateLimit, ScenarioAbruptEOF,
}

// Adapter is what the conformance suite needs of an adapter.
type Adapter struct {
	// Name is the provider name New gives the adapter: the suite sends its answers back with this
	// Origin, so their signatures must reach the provider again.
	Name string
	// New returns the adapter under test, talking to baseURL as its BASE_URL variable would say
	// (the suite's server answers on every path), with idle as its idle timeout (0: the default).
	New func(t *testing.T, baseURL string, idle time.Duration) llm.Provider
	// Recordings holds one "<scenario>.http" file per scenario.
	Recordings fs.FS
	// CheckRequest, when set, checks each request the adapter sent: path, headers, body.
	CheckRequest func(t *testing.T, r *http.Request, body []byte)
	// NoReasoningTokens says the API does not count reasoning tokens apart (Anthropic).
	NoReasoningTokens bool
}

// Outcome is what one streamed call gave, folded.
type Outcome struct {
	Text, Reasoning string
	Parts           []llm.Part
	Calls           []llm.ToolCall
	Finish          llm.FinishReason
	Usage           llm.Usage
	Err             error
	Events          int
}

// Collect streams req from p and folds the events.
func Collect(ctx context.Context, p llm.Provider, req *llm.Request) Outcome {
	var c llm.Collector
	var out Outcome
	for ev, err := range p.Stream(ctx, req) {
		if err != nil {
			out.Err = err
			break
		}
		out.Events++
		c.Add(ev)
	}
	m := c.Message()
	out.Text, out.Reasoning, out.Parts, out.Calls = c.Text(), c.Reasoning(), m.Parts, m.ToolCalls
	out.Finish, out.Usage = c.Finish, c.Usage
	return out
}

// Conformance runs every scenario against an adapter, each recording served whole and again in
// fragments of 1 to 7 bytes, so that no event boundary, line ending or UTF-8 sequence may be split
// where the adapter does not expect it.
func Conformance(t *testing.T, a Adapter) {
	for _, sc := range Scenarios {
		for _, dribble := range []bool{false, true} {
			name := sc
			if dribble {
				name += "/dribbled"
			}
			t.Run(name, func(t *testing.T) {
				srv := newReplayServer(t, a, dribble)
				p := a.New(t, srv.URL(), 0)
				runScenario(t, a, srv, p, sc)
			})
		}
	}
	t.Run("consumer_stops", func(t *testing.T) { consumerStops(t, a) })
	t.Run("transport_error", func(t *testing.T) { transportError(t, a) })
	t.Run("cancel", func(t *testing.T) { cancelMidStream(t, a) })
	t.Run("idle", func(t *testing.T) { idleUpstream(t, a) })
	t.Run("encoded", func(t *testing.T) { encodedHook(t, a) })
}

// encodedHook: an Encoder's Stream hands Request.Encoded the body it sends, once per call, before the
// server has it — byte for byte what the server receives, a call refused (429) included.
func encodedHook(t *testing.T, a Adapter) {
	srv := newReplayServer(t, a, false)
	p := a.New(t, srv.URL(), 0)
	if _, ok := p.(llm.Encoder); !ok {
		t.Skip("the adapter is not an llm.Encoder")
	}
	var handed [][]byte
	req := conformanceRequest(ScenarioToolCall)
	req.Encoded = func(body []byte) {
		if n := srv.received(); n != len(handed) {
			t.Errorf("hook %d ran after the server had received %d requests: it must run before the request is sent", len(handed)+1, n)
		}
		handed = append(handed, body)
	}
	srv.queue(ScenarioRateLimit, ScenarioText)
	Collect(t.Context(), p, req)
	if out := Collect(t.Context(), p, req); out.Err != nil {
		t.Fatalf("second call: %v", out.Err)
	}
	srv.mu.Lock()
	sent := srv.bodies
	srv.mu.Unlock()
	if len(handed) != 2 || len(sent) != 2 {
		t.Fatalf("two calls: the hook was handed %d bodies, the server received %d", len(handed), len(sent))
	}
	for i := range sent {
		if !bytes.Equal(handed[i], sent[i]) {
			t.Errorf("call %d: the hook was handed\n%s\nthe server received\n%s", i+1, handed[i], sent[i])
		}
	}
}

// consumerStops: breaking out of the stream closes the connection.
func consumerStops(t *testing.T, a Adapter) {
	srv := newReplayServer(t, a, false)
	srv.hold = true
	srv.queue(ScenarioText)
	for _, err := range a.New(t, srv.URL(), 0).Stream(t.Context(), conformanceRequest(ScenarioText)) {
		if err != nil {
			t.Fatalf("first event is an error: %v", err)
		}
		break
	}
	select {
	case <-srv.gone:
	case <-time.After(10 * time.Second):
		t.Fatal("breaking out of the stream did not close the connection")
	}
}

// transportError: a server nothing listens on is a retryable transport error, before any event.
func transportError(t *testing.T, a Adapter) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	out := Collect(t.Context(), a.New(t, url, 0), conformanceRequest(ScenarioText))
	e, ok := errors.AsType[*llm.Error](out.Err)
	if !ok || e.Kind != llm.KindTransport || !e.Retryable() || out.Events != 0 {
		t.Fatalf("error = %#v after %d events, want a retryable transport *llm.Error", out.Err, out.Events)
	}
}

// cancelMidStream: cancelling the context while the server holds the stream open ends it with the
// context's error, after the text already received.
func cancelMidStream(t *testing.T, a Adapter) {
	srv := newReplayServer(t, a, false)
	srv.hold, srv.firstEventOnly = true, true
	srv.queue(ScenarioText)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var text strings.Builder
	var last error
	for ev, err := range a.New(t, srv.URL(), 0).Stream(ctx, conformanceRequest(ScenarioText)) {
		if err != nil {
			last = err
			break
		}
		text.WriteString(ev.Text)
		if ev.Kind == llm.EventText {
			cancel()
		}
	}
	if !errors.Is(last, context.Canceled) || !strings.HasPrefix(text.String(), "Hello") {
		t.Fatalf("error %v after text %q, want context.Canceled after the first text", last, text.String())
	}
}

// idleUpstream: a server that goes quiet mid-stream ends it with a transport error after the idle
// timeout, after the text already received, instead of hanging the run.
func idleUpstream(t *testing.T, a Adapter) {
	srv := newReplayServer(t, a, false)
	srv.hold, srv.firstEventOnly = true, true
	srv.queue(ScenarioText)
	out := Collect(t.Context(), a.New(t, srv.URL(), 50*time.Millisecond), conformanceRequest(ScenarioText))
	e, ok := errors.AsType[*llm.Error](out.Err)
	if !ok || e.Kind != llm.KindTransport || !strings.Contains(e.Message, "sent nothing for 50ms") {
		t.Fatalf("error = %v, want an idle transport error", out.Err)
	}
	if !strings.HasPrefix(out.Text, "Hello") {
		t.Errorf("text %q before the idle error, want the first text", out.Text)
	}
}

var weatherTool = llm.ToolSpec{
	Name:        "get_weather",
	Description: "Get the current weather in a city.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`),
}

func conformanceRequest(sc string) *llm.Request {
	req := &llm.Request{
		Model:    "conformance-model",
		System:   "You are a helpful assistant.",
		Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "Hi")},
	}
	switch sc {
	case ScenarioToolCall, ScenarioParallelToolCalls:
		req.Tools = []llm.ToolSpec{weatherTool}
		req.Messages[0] = llm.TextMessage(llm.RoleUser, "What is the weather in Paris?")
	case ScenarioReasoning:
		req.Reasoning = &llm.Reasoning{Effort: "low", BudgetTokens: 1024}
		req.Messages[0] = llm.TextMessage(llm.RoleUser, "What is 2+2?")
	case ScenarioLength:
		req.MaxTokens = 5
	}
	return req
}

func runScenario(t *testing.T, a Adapter, srv *replayServer, p llm.Provider, sc string) {
	ctx := t.Context()
	req := conformanceRequest(sc)
	if sc == ScenarioRateLimit {
		srv.queue(ScenarioRateLimit, ScenarioText)
		first := Collect(ctx, p, req)
		e, ok := errors.AsType[*llm.Error](first.Err)
		if !ok || e.Kind != llm.KindRateLimit || e.Status != http.StatusTooManyRequests {
			t.Fatalf("429: got %v, want an *llm.Error of kind rate_limit with status 429", first.Err)
		}
		if e.RetryAfter != 7*time.Second {
			t.Errorf("429: RetryAfter = %v, want 7s", e.RetryAfter)
		}
		if !e.Retryable() || e.Message == "" {
			t.Errorf("429: retryable %v, message %q", e.Retryable(), e.Message)
		}
		if first.Events != 0 {
			t.Errorf("429: %d events before the error", first.Events)
		}
		sc = ScenarioText
	} else {
		srv.queue(sc)
	}
	got := Collect(ctx, p, req)
	want := expected(sc, a)
	checkOutcome(t, sc, want, got)
	if sc == ScenarioReasoning && got.Err == nil {
		checkReplay(t, a, srv, p, req, got)
	}
	if sc == ScenarioToolCall && got.Err == nil {
		checkToolResult(t, a, srv, p, req, got)
	}
}

func expected(sc string, a Adapter) Outcome {
	paris := llm.ToolCall{Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`)}
	tokyo := llm.ToolCall{Name: "get_weather", Arguments: json.RawMessage(`{"city":"Tokyo"}`)}
	switch sc {
	case ScenarioText:
		return Outcome{Text: "Hello! How can I help you today?", Finish: llm.FinishStop, Usage: llm.Usage{InputTokens: 25, OutputTokens: 9}}
	case ScenarioToolCall:
		return Outcome{Text: "Let me check the weather.", Calls: []llm.ToolCall{paris}, Finish: llm.FinishToolCalls,
			Usage: llm.Usage{InputTokens: 80, OutputTokens: 20}}
	case ScenarioParallelToolCalls:
		return Outcome{Calls: []llm.ToolCall{paris, tokyo}, Finish: llm.FinishToolCalls, Usage: llm.Usage{InputTokens: 80, OutputTokens: 40}}
	case ScenarioReasoning:
		u := llm.Usage{InputTokens: 30, OutputTokens: 50, ReasoningTokens: 38}
		if a.NoReasoningTokens {
			u.ReasoningTokens = 0
		}
		return Outcome{Reasoning: "The user wants 2+2. That is 4.", Text: "2 + 2 = 4.", Finish: llm.FinishStop, Usage: u}
	case ScenarioLength:
		return Outcome{Text: "Once upon a time, there", Finish: llm.FinishLength, Usage: llm.Usage{InputTokens: 20, OutputTokens: 5}}
	case ScenarioErrorMidStream:
		return Outcome{Text: "The answer is", Err: errRetryable}
	case ScenarioAbruptEOF:
		return Outcome{Text: "Hello, wor", Err: errStream}
	}
	panic("unknown scenario " + sc)
}

var (
	errRetryable = errors.New("a retryable *llm.Error")
	errStream    = errors.New("an *llm.Error of kind stream")
)

func checkOutcome(t *testing.T, sc string, want, got Outcome) {
	t.Helper()
	switch want.Err {
	case nil:
		if got.Err != nil {
			t.Fatalf("%s: error %v", sc, got.Err)
		}
	case errRetryable:
		if e, ok := errors.AsType[*llm.Error](got.Err); !ok || !e.Retryable() || e.Message == "" || e.Kind == llm.KindTransport {
			t.Errorf("%s: error %v, want %v with a message", sc, got.Err, want.Err)
		}
	case errStream:
		if e, ok := errors.AsType[*llm.Error](got.Err); !ok || e.Kind != llm.KindStream {
			t.Errorf("%s: error %v, want %v", sc, got.Err, want.Err)
		}
	}
	if got.Text != want.Text {
		t.Errorf("%s: text %q, want %q", sc, got.Text, want.Text)
	}
	if got.Reasoning != want.Reasoning {
		t.Errorf("%s: reasoning %q, want %q", sc, got.Reasoning, want.Reasoning)
	}
	if want.Err != nil {
		return
	}
	if got.Finish != want.Finish {
		t.Errorf("%s: finish %q, want %q", sc, got.Finish, want.Finish)
	}
	if got.Usage != want.Usage {
		t.Errorf("%s: usage %+v, want %+v", sc, got.Usage, want.Usage)
	}
	if len(got.Calls) != len(want.Calls) {
		t.Fatalf("%s: %d tool calls %+v, want %d", sc, len(got.Calls), got.Calls, len(want.Calls))
	}
	ids := map[string]bool{}
	for i, c := range got.Calls {
		if c.Name != want.Calls[i].Name || !sameJSON(c.Arguments, want.Calls[i].Arguments) {
			t.Errorf("%s: call %d is %s %s, want %s %s", sc, i, c.Name, c.Arguments, want.Calls[i].Name, want.Calls[i].Arguments)
		}
		if c.ID != "" && ids[c.ID] {
			t.Errorf("%s: call id %q repeats", sc, c.ID)
		}
		ids[c.ID] = true
	}
}

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// checkReplay sends the reasoning answer back as history and checks that every signature and item id
// the provider gave reaches it again, verbatim.
func checkReplay(t *testing.T, a Adapter, srv *replayServer, p llm.Provider, req *llm.Request, got Outcome) {
	t.Helper()
	next := *req
	answer := llm.Message{Role: llm.RoleAssistant, Parts: got.Parts, Origin: llm.Origin(a.Name, "conformance-model")}
	next.Messages = append(req.Messages[:len(req.Messages):len(req.Messages)], answer, llm.TextMessage(llm.RoleUser, "And 3+3?"))
	srv.queue(ScenarioText)
	if out := Collect(t.Context(), p, &next); out.Err != nil {
		t.Fatalf("second turn: %v", out.Err)
	}
	body := srv.lastBody()
	for _, part := range got.Parts {
		for _, token := range []string{part.Signature, part.ID} {
			if token == "" {
				continue
			}
			quoted, _ := json.Marshal(token)
			if !bytes.Contains(body, quoted) {
				t.Errorf("the second request does not send back %s of a %d part; body:\n%s", quoted, part.Kind, body)
			}
		}
	}
}

// checkToolResult answers the call and checks the next request carries the call and its result.
func checkToolResult(t *testing.T, a Adapter, srv *replayServer, p llm.Provider, req *llm.Request, got Outcome) {
	t.Helper()
	call := got.Calls[0]
	if call.ID == "" {
		call.ID = "call_chatd_1" // what the agent assigns when the provider sends none
	}
	next := *req
	next.Messages = append(req.Messages[:len(req.Messages):len(req.Messages)],
		llm.Message{Role: llm.RoleAssistant, Parts: got.Parts, ToolCalls: []llm.ToolCall{call}, Origin: llm.Origin(a.Name, "conformance-model")},
		llm.Message{Role: llm.RoleTool, ToolCallID: call.ID, ToolName: call.Name, Parts: []llm.Part{{Kind: llm.PartText, Text: "18°C and sunny"}}})
	srv.queue(ScenarioText)
	if out := Collect(t.Context(), p, &next); out.Err != nil {
		t.Fatalf("turn after the tool result: %v", out.Err)
	}
	body := srv.lastBody()
	for _, s := range []string{"18°C and sunny", "get_weather", call.Signature} {
		if s == "" {
			continue
		}
		quoted, _ := json.Marshal(s)
		if !bytes.Contains(body, quoted[1:len(quoted)-1]) {
			t.Errorf("the request after the tool call lacks %s; body:\n%s", quoted, body)
		}
	}
}

// replayServer serves recordings in the order they are queued.
type replayServer struct {
	t       *testing.T
	a       Adapter
	srv     *httptest.Server
	dribble bool
	hold    bool          // keep the connection open after the body, until the client goes
	gone    chan struct{} // closed when a held connection's client went away
	// firstEventOnly serves the body only up to the end of the event holding the first text
	// ("Hello"): the stream cannot finish.
	firstEventOnly bool

	mu     sync.Mutex
	next   []string
	bodies [][]byte
}

func newReplayServer(t *testing.T, a Adapter, dribble bool) *replayServer {
	s := &replayServer{t: t, a: a, dribble: dribble, gone: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// URL is the server's root.
func (s *replayServer) URL() string { return s.srv.URL }

func (s *replayServer) queue(names ...string) {
	s.mu.Lock()
	s.next = append(s.next, names...)
	s.mu.Unlock()
}

// received is how many requests the server has read.
func (s *replayServer) received() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.bodies)
}

func (s *replayServer) lastBody() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.bodies) == 0 {
		return nil
	}
	return s.bodies[len(s.bodies)-1]
}

func (s *replayServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.bodies = append(s.bodies, body)
	var name string
	if len(s.next) > 0 {
		name, s.next = s.next[0], s.next[1:]
	}
	s.mu.Unlock()
	if name == "" {
		s.t.Errorf("unexpected request %s %s", r.Method, r.URL)
		http.Error(w, "no recording queued", http.StatusInternalServerError)
		return
	}
	if r.Method != http.MethodPost || !json.Valid(body) {
		s.t.Errorf("request %s %s: want a POST of JSON, got %q", r.Method, r.URL, body)
	}
	if s.a.CheckRequest != nil {
		s.a.CheckRequest(s.t, r, body)
	}
	status, header, payload, err := readRecording(s.a.Recordings, name)
	if err != nil {
		s.t.Errorf("recording %s: %v", name, err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if header.Get("Chatd-Conformance") == "cut" {
		s.serveCut(w, status, header, payload)
		return
	}
	if s.firstEventOnly {
		payload = throughFirstText(payload)
	}
	for k, v := range header {
		w.Header()[k] = v
	}
	w.WriteHeader(status)
	s.write(w, payload)
	if s.hold {
		<-r.Context().Done()
		close(s.gone)
	}
}

// throughFirstText cuts an SSE body after the event that holds "Hello", the first text of the text
// scenario.
func throughFirstText(body []byte) []byte {
	i := bytes.Index(body, []byte("Hello"))
	if i < 0 {
		return body
	}
	for _, sep := range []string{"\r\n\r\n", "\n\n"} {
		if j := bytes.Index(body[i:], []byte(sep)); j >= 0 {
			return body[:i+j+len(sep)]
		}
	}
	return body
}

// write sends the body whole, or dribbled in random small writes, each flushed.
func (s *replayServer) write(w io.Writer, payload []byte) {
	f, _ := w.(http.Flusher)
	if !s.dribble {
		w.Write(payload)
		if f != nil {
			f.Flush()
		}
		return
	}
	rng := rand.New(rand.NewPCG(uint64(len(payload)), 7))
	for len(payload) > 0 {
		n := min(1+rng.IntN(7), len(payload))
		if _, err := w.Write(payload[:n]); err != nil {
			return
		}
		if f != nil {
			f.Flush()
		}
		payload = payload[n:]
	}
}

// serveCut writes the response by hand with a Content-Length it never reaches, then drops the
// connection.
func (s *replayServer) serveCut(w http.ResponseWriter, status int, header http.Header, payload []byte) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		s.t.Errorf("hijack: %v", err)
		return
	}
	defer conn.Close()
	fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	header.Del("Chatd-Conformance")
	header.Set("Content-Length", strconv.Itoa(len(payload)+4096))
	header.Write(buf)
	buf.WriteString("\r\n")
	buf.Flush()
	s.write(conn, payload)
}

// readRecording parses "<name>.http": a status line, headers, a blank line, and the body verbatim.
func readRecording(fsys fs.FS, name string) (int, http.Header, []byte, error) {
	raw, err := fs.ReadFile(fsys, name+".http")
	if err != nil {
		return 0, nil, nil, err
	}
	br := bufio.NewReader(bytes.NewReader(raw))
	line, err := br.ReadString('\n')
	if err != nil {
		return 0, nil, nil, fmt.Errorf("no status line")
	}
	// "HTTP/1.1 200 OK"
	fields := strings.Fields(line)
	if len(fields) < 2 || !strings.HasPrefix(fields[0], "HTTP/") {
		return 0, nil, nil, fmt.Errorf("bad status line %q", line)
	}
	status, err := strconv.Atoi(fields[1])
	if err != nil {
		return 0, nil, nil, fmt.Errorf("bad status line %q", line)
	}
	header := http.Header{}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return 0, nil, nil, fmt.Errorf("headers do not end with a blank line")
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			break
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			return 0, nil, nil, fmt.Errorf("bad header line %q", line)
		}
		header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	body, _ := io.ReadAll(br)
	return status, header, body, nil
}

// Repeat returns a body of head, then chunk n times, then tail, without holding n copies: the input of
// a decoder's per-chunk benchmark.
func Repeat(head, chunk []byte, n int, tail []byte) io.Reader {
	return &repeatReader{head: head, chunk: chunk, n: n, tail: tail}
}

type repeatReader struct {
	head, chunk, tail []byte
	n                 int
	cur               []byte
}

func (r *repeatReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		switch {
		case r.head != nil:
			r.cur, r.head = r.head, nil
		case r.n > 0:
			r.cur = r.chunk
			r.n--
		case r.tail != nil:
			r.cur, r.tail = r.tail, nil
		default:
			return 0, io.EOF
		}
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}
