package llmtest_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/llm"
	"chatd/internal/llm/anthropic"
	"chatd/internal/llm/gemini"
	"chatd/internal/llm/llmtest"
	"chatd/internal/llm/openai"
	"chatd/internal/llm/responses"
)

// wireAdapter is one protocol of the fake server and the real adapter that speaks it.
type wireAdapter struct {
	protocol, path string
	model          string
	new            func(t *testing.T, srv *llmtest.Server) llm.Provider
	// wholeCalls says the protocol sends each tool call whole, its arguments unsplit (Gemini).
	wholeCalls bool
	// signed says the protocol signs the model's reasoning (or its first call), to be sent back.
	signed bool
	// noReasoningTokens says the API does not count reasoning tokens apart (Anthropic).
	noReasoningTokens bool
	// validate is the validator Strict uses for the protocol, and rateCode the code of a 429.
	validate func(model string, body map[string]any) *llmtest.APIError
	rateCode string
	// tooLong is the start of the API's context-length message.
	tooLong string
}

func wireAdapters() []wireAdapter {
	fail := func(t *testing.T, err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	return []wireAdapter{{
		protocol: llmtest.ProtocolOpenAI, path: "/v1/chat/completions", model: "llmtest-model",
		new: func(t *testing.T, srv *llmtest.Server) llm.Provider {
			c, err := openai.New(openai.Options{Name: "openai", BaseURL: srv.BaseURL(), APIKey: "sk-test"})
			fail(t, err)
			return c
		},
		validate: func(_ string, body map[string]any) *llmtest.APIError { return llmtest.Validate(body) },
		rateCode: "rate_limit_exceeded",
		tooLong:  "This model's maximum context length is 500 tokens. However, your messages resulted in ",
	}, {
		protocol: llmtest.ProtocolAnthropic, path: "/v1/messages", model: "claude-sonnet-4-5",
		new: func(t *testing.T, srv *llmtest.Server) llm.Provider {
			c, err := anthropic.New(anthropic.Options{Name: "anthropic", BaseURL: srv.AnthropicBaseURL(), APIKey: "sk-ant-test"})
			fail(t, err)
			return c
		},
		signed: true, noReasoningTokens: true,
		validate: func(_ string, body map[string]any) *llmtest.APIError { return llmtest.ValidateAnthropic(body) },
		rateCode: "rate_limit_error",
		tooLong:  "prompt is too long: ",
	}, {
		protocol: llmtest.ProtocolGemini, path: "/v1beta/models/gemini-3-flash-preview:streamGenerateContent", model: "gemini-3-flash-preview",
		new: func(t *testing.T, srv *llmtest.Server) llm.Provider {
			c, err := gemini.New(gemini.Options{Name: "gemini", BaseURL: srv.GeminiBaseURL(), APIKey: "gm-test"})
			fail(t, err)
			return c
		},
		wholeCalls: true, signed: true,
		validate: llmtest.ValidateGeminiModel,
		rateCode: "RESOURCE_EXHAUSTED",
		tooLong:  "The input token count (",
	}, {
		protocol: llmtest.ProtocolResponses, path: "/v1/responses", model: "gpt-5",
		new: func(t *testing.T, srv *llmtest.Server) llm.Provider {
			c, err := responses.New(responses.Options{Name: "responses", BaseURL: srv.ResponsesBaseURL(), APIKey: "sk-test"})
			fail(t, err)
			return c
		},
		signed:   true,
		validate: func(_ string, body map[string]any) *llmtest.APIError { return llmtest.ValidateResponses(body) },
		rateCode: "rate_limit_exceeded",
		tooLong:  "Your input exceeds the context window of this model.",
	}}
}

// forEachProtocol runs test once for each protocol, on a server of its own answering turns.
func forEachProtocol(t *testing.T, test func(t *testing.T, a wireAdapter)) {
	for _, a := range wireAdapters() {
		t.Run(a.protocol, func(t *testing.T) { test(t, a) })
	}
}

var wireWeather = llm.ToolSpec{
	Name:        "get_weather",
	Description: "Get the current weather in a city.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string"}},"required":["city"]}`),
}

func (a wireAdapter) request(text string) *llm.Request {
	return &llm.Request{
		Model:     a.model,
		System:    "You are terse.",
		Messages:  []llm.Message{llm.TextMessage(llm.RoleUser, text)},
		Tools:     []llm.ToolSpec{wireWeather},
		Reasoning: &llm.Reasoning{Effort: "low", BudgetTokens: 1024},
	}
}

// wireStream is what one call streamed: the outcome folded, and the argument fragments of each call.
type wireStream struct {
	llmtest.Outcome
	fragments map[int]int
}

func streamWire(t *testing.T, p llm.Provider, req *llm.Request) wireStream {
	t.Helper()
	var c llm.Collector
	out := wireStream{fragments: map[int]int{}}
	for ev, err := range p.Stream(t.Context(), req) {
		if err != nil {
			out.Err = err
			break
		}
		out.Events++
		if ev.Kind == llm.EventToolCallDelta && ev.Text != "" {
			out.fragments[ev.Index]++
		}
		c.Add(ev)
	}
	m := c.Message()
	out.Text, out.Reasoning, out.Parts, out.Calls = c.Text(), c.Reasoning(), m.Parts, m.ToolCalls
	out.Finish, out.Usage = c.Finish, c.Usage
	return out
}

// upstreamError returns err as an *llm.Error, failing the test when it is not one.
func upstreamError(t *testing.T, err error) *llm.Error {
	t.Helper()
	e, ok := errors.AsType[*llm.Error](err)
	if !ok {
		t.Fatalf("error = %v, want an *llm.Error", err)
	}
	return e
}

func TestServerProtocolsText(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, a wireAdapter) {
		srv := llmtest.NewServer(t, llmtest.Turn{
			Reasoning: "The user greets me. I greet back.",
			Text:      "Hello there, ünïcode friend!",
			Usage:     &llm.Usage{InputTokens: 30, OutputTokens: 12, ReasoningTokens: 5, CacheReadTokens: 8},
		})
		got := streamWire(t, a.new(t, srv), a.request("Hi"))
		if got.Err != nil {
			t.Fatal(got.Err)
		}
		want := llm.Usage{InputTokens: 30, OutputTokens: 12, ReasoningTokens: 5, CacheReadTokens: 8}
		if a.noReasoningTokens {
			want.ReasoningTokens = 0
		}
		if got.Text != "Hello there, ünïcode friend!" || got.Reasoning != "The user greets me. I greet back." ||
			got.Finish != llm.FinishStop || got.Usage != want {
			t.Errorf("text %q, reasoning %q, finish %q, usage %+v; want usage %+v", got.Text, got.Reasoning, got.Finish, got.Usage, want)
		}
		if a.signed && !hasSignature(got.Parts) {
			t.Errorf("no part is signed: %+v", got.Parts)
		}
		reqs := srv.Requests()
		if len(reqs) != 1 {
			t.Fatalf("%d requests, want 1", len(reqs))
		}
		if r := reqs[0]; r.Protocol != a.protocol || r.Path != a.path || r.Model != a.model {
			t.Errorf("request: protocol %q, path %q, model %q", r.Protocol, r.Path, r.Model)
		}
	})
}

func hasSignature(parts []llm.Part) bool {
	for _, p := range parts {
		if strings.HasPrefix(p.Signature, "sig-") {
			return true
		}
	}
	return false
}

// TestServerProtocolsToolCalls: two calls whose arguments stream split, then, under Strict, the answer
// and the results sent back, signatures included, as the real API accepts them.
func TestServerProtocolsToolCalls(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, a wireAdapter) {
		srv := llmtest.NewServer(t,
			llmtest.Turn{
				Reasoning: "Two cities: two lookups.",
				Text:      "Checking both.",
				ToolCalls: []llmtest.ToolCall{
					{ID: "call_paris", Name: "get_weather", Arguments: `{"city":"Paris"}`},
					{ID: "call_tokyo", Name: "get_weather", Arguments: `{"city":"Tokyo","unit":"celsius"}`},
				},
			},
			llmtest.Turn{Text: "Sunny in both."},
		)
		srv.Strict = true
		p := a.new(t, srv)
		req := a.request("Weather in Paris and Tokyo?")
		got := streamWire(t, p, req)
		if got.Err != nil {
			t.Fatal(got.Err)
		}
		if got.Finish != llm.FinishToolCalls || len(got.Calls) != 2 {
			t.Fatalf("finish %q, calls %+v", got.Finish, got.Calls)
		}
		for i, want := range []string{`{"city":"Paris"}`, `{"city":"Tokyo","unit":"celsius"}`} {
			c := got.Calls[i]
			if c.Name != "get_weather" || !jsonEqual(c.Arguments, want) {
				t.Errorf("call %d: %s %s, want get_weather %s", i, c.Name, c.Arguments, want)
			}
			if !a.wholeCalls && got.fragments[i] < 2 {
				t.Errorf("call %d: arguments in %d fragments, want them split", i, got.fragments[i])
			}
		}
		if a.protocol == llmtest.ProtocolGemini && !strings.HasPrefix(got.Calls[0].Signature, "sig-") {
			t.Errorf("Gemini's first call is not signed: %+v", got.Calls[0])
		}

		// The answer goes back with the results: the API must accept it, signatures and all.
		answer := llm.Message{Role: llm.RoleAssistant, Parts: got.Parts, ToolCalls: got.Calls, Origin: llm.Origin(a.protocol, a.model)}
		req.Messages = append(req.Messages, answer)
		for i, c := range got.Calls {
			if c.ID == "" {
				answer.ToolCalls[i].ID = fmt.Sprintf("call_%d", i) // as the agent does for Gemini
			}
			req.Messages = append(req.Messages, llm.Message{Role: llm.RoleTool, ToolCallID: answer.ToolCalls[i].ID,
				ToolName: c.Name, Parts: []llm.Part{{Kind: llm.PartText, Text: "Sunny, 22°C"}}})
		}
		again := streamWire(t, p, req)
		if again.Err != nil || again.Text != "Sunny in both." {
			t.Fatalf("second call: %q, %v", again.Text, again.Err)
		}
		raw := string(srv.Requests()[1].Raw)
		for _, part := range got.Parts {
			if part.Signature != "" && !strings.Contains(raw, part.Signature) {
				t.Errorf("the signature %q of a part was not sent back:\n%s", part.Signature, raw)
			}
		}
		for _, c := range got.Calls {
			if c.Signature != "" && !strings.Contains(raw, c.Signature) {
				t.Errorf("the signature %q of a call was not sent back:\n%s", c.Signature, raw)
			}
		}
	})
}

func jsonEqual(got json.RawMessage, want string) bool {
	var g, w any
	return json.Unmarshal(got, &g) == nil && json.Unmarshal([]byte(want), &w) == nil && cmp.Equal(g, w)
}

func TestServerProtocolsLength(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, a wireAdapter) {
		srv := llmtest.NewServer(t, llmtest.Turn{
			Text: "Once upon a time, there", FinishReason: "length", Usage: &llm.Usage{InputTokens: 20, OutputTokens: 5},
		})
		got := streamWire(t, a.new(t, srv), a.request("Tell me a story."))
		if got.Err != nil {
			t.Fatal(got.Err)
		}
		if got.Text != "Once upon a time, there" || got.Finish != llm.FinishLength || got.Usage != (llm.Usage{InputTokens: 20, OutputTokens: 5}) {
			t.Errorf("text %q, finish %q, usage %+v", got.Text, got.Finish, got.Usage)
		}
	})
}

// TestServerProtocolsBrokenStreams: an error mid-stream is a retryable error after the text; a dropped
// connection is an error.
func TestServerProtocolsBrokenStreams(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, a wireAdapter) {
		srv := llmtest.NewServer(t,
			llmtest.Turn{Text: "The answer is", InBandError: "The server had an error while processing your request."},
			llmtest.Turn{Text: "Hello, world, and more.", CutAfterChunks: 4},
		)
		p := a.new(t, srv)
		got := streamWire(t, p, a.request("Hi"))
		if e := upstreamError(t, got.Err); !e.Retryable() || e.Message != "The server had an error while processing your request." || got.Text != "The answer is" {
			t.Errorf("in-band error: %v (retryable %v) after %q", e, e.Retryable(), got.Text)
		}
		got = streamWire(t, p, a.request("Hi"))
		if upstreamError(t, got.Err); got.Finish != "" {
			t.Errorf("cut stream: finished %q", got.Finish)
		}
	})
}

func TestServerProtocolsErrorStatus(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, a wireAdapter) {
		srv := llmtest.NewServer(t, llmtest.Turn{Status: http.StatusTooManyRequests, RetryAfter: "7", ErrorMessage: "Slow down."})
		got := streamWire(t, a.new(t, srv), a.request("Hi"))
		e := upstreamError(t, got.Err)
		if e.Kind != llm.KindRateLimit || e.Status != http.StatusTooManyRequests || e.RetryAfter != 7*time.Second ||
			e.Message != "Slow down." || e.Code != a.rateCode || got.Events != 0 {
			t.Errorf("error %+v after %d events, want a rate limit of code %s, retry after 7s", e, got.Events, a.rateCode)
		}
	})
}

// TestServerProtocolsStrict: a tool result without its call is refused with the API's error, which the
// adapter reads whole from the API's error body; the refused request takes no turn.
func TestServerProtocolsStrict(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, a wireAdapter) {
		srv := llmtest.NewServer(t, llmtest.Turn{Text: "Fine."})
		srv.Strict = true
		p := a.new(t, srv)
		req := a.request("What is the weather?")
		req.Messages = append(req.Messages, llm.Message{Role: llm.RoleTool, ToolCallID: "call_nowhere", ToolName: "get_weather",
			Parts: []llm.Part{{Kind: llm.PartText, Text: "Sunny"}}})
		got := streamWire(t, p, req)
		e := upstreamError(t, got.Err)
		want := a.validate(a.model, srv.Requests()[0].Body)
		if want == nil {
			t.Fatalf("the validator accepts the request; the server answered %v", e)
		}
		if e.Kind != llm.KindInvalid || e.Status != want.Status || e.Message != want.Message {
			t.Errorf("error %+v, want kind %s, status %d, message %q", e, llm.KindInvalid, want.Status, want.Message)
		}
		if got := streamWire(t, p, a.request("Hi")); got.Err != nil || got.Text != "Fine." {
			t.Errorf("after the refusal: %q, %v; want the first turn", got.Text, got.Err)
		}
	})
}

// TestServerProtocolsContextWindow: a request over the window is refused with the API's context-length
// error, which the adapter classifies so; it takes no turn, and a request that fits gets the first.
func TestServerProtocolsContextWindow(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, a wireAdapter) {
		srv := llmtest.NewServer(t, llmtest.Turn{Text: "Short enough."})
		srv.ContextWindow = 500 // 2000 bytes of JSON
		p := a.new(t, srv)
		got := streamWire(t, p, a.request(strings.Repeat("Lorem ipsum dolor sit amet. ", 100)))
		e := upstreamError(t, got.Err)
		if e.Kind != llm.KindContextLength || e.Status != http.StatusBadRequest || !strings.HasPrefix(e.Message, a.tooLong) {
			t.Errorf("error %+v, want a context-length error saying %q…", e, a.tooLong)
		}
		tokens := llmtest.EstimateTokens(srv.Requests()[0].Raw)
		if a.protocol != llmtest.ProtocolResponses && !strings.Contains(e.Message, fmt.Sprint(tokens)) {
			t.Errorf("message %q does not count the request's %d tokens", e.Message, tokens)
		}
		if got := streamWire(t, p, a.request("Hi")); got.Err != nil || got.Text != "Short enough." {
			t.Errorf("a request that fits: %q, %v; want the first turn", got.Text, got.Err)
		}
	})
}
