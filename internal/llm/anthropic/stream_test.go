package anthropic

import (
	"errors"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
)

var update = flag.Bool("update", false, "rewrite the .golden files from the adapter's output")

func newTestClient(t *testing.T, baseURL string) *Client {
	t.Helper()
	c, err := New(Options{Name: "anthropic", BaseURL: baseURL, APIKey: "sk-ant-test"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// describe streams body, served in pieces of step bytes, through a client and renders its events.
func describe(t *testing.T, body []byte, step int) string {
	t.Helper()
	req := &llm.Request{Model: "claude-sonnet-4-5", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}}
	return llmtest.Describe(newTestClient(t, llmtest.ServeBytes(t, body, step).URL).Stream(t.Context(), req))
}

// TestRecordedStreams decodes streams shaped like captures of the API and compares the events with
// testdata/*.golden, at several split points of the bytes.
func TestRecordedStreams(t *testing.T) {
	llmtest.Golden(t, *update, "testdata", func(t *testing.T, body []byte) string {
		got := describe(t, body, len(body))
		for _, step := range []int{1, 7, 64} {
			if again := describe(t, body, step); again != got {
				t.Errorf("split every %d bytes the events differ:\n%s", step, cmp.Diff(got, again))
			}
		}
		return got
	})
}

// TestCollectedParts checks the parts the events of the recordings fold into: each thinking block one
// part with its signature, redacted thinking apart, the calls by chatd's index.
func TestCollectedParts(t *testing.T) {
	tests := []struct {
		file  string
		parts []llm.Part
		calls []llm.ToolCall
	}{
		{
			file: "thinking_redacted.sse",
			parts: []llm.Part{
				{Kind: llm.PartReasoning, Text: "The user asks about the magic string. Let me look at it step by step.", Signature: "ErUBCkYIARgCIkACJWxzySUOJzOlZ8WFdgQSbeQA3H1i5rfkKLV9eC4HN6Jcnrlw1NcnPRIPaTs9jLF3rllsfoidjZapJ+5MLwjVEgzTfQ6r9tDZvyBP0nEaDHWRqRWP7CoPOc+ksSIwSlxHzaMbnyXGoiNmCj9thC3N6EDMpemJPx3UZqDtrgmKZgQMMzNzNsh9IxgvtuYKKh1PxXUmWexqlckSVETQj3LbHLK/nwEK+bz0+2b/pA=="},
				{Kind: llm.PartRedactedReasoning, Signature: "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB9URj2pLmN3kF8/dW5hR7xJ0aP1oLs9yTcMnKVf2wRpEGjH9XZaBt4UvDcPrQ=="},
				{Kind: llm.PartReasoning, Text: "Now I can answer plainly.", Signature: "EqoBCkgIARABGAIiQL2UoU0b1OHYi+yCHpBY7U6FQW8/FcoLewocJQPa2HnmLM+NECy50y44F/kD4SULFXi57buI9fAvyBwtyjlOiO0SDE3+r3spdg6PLOo9PBoMma2ku5OTAoR46j9VIjDRlvNmBvff7YW4WI9oU8XagaOBSxLPxElrhyuxppEn7m6bfT40dqBSTDrfiw4FYB4qEPETTI6TA6wtjGAAqmFqKTo="},
				{Kind: llm.PartText, Text: "Some of my reasoning was redacted, but here is the answer."},
			},
		},
		{
			file:  "parallel_tool_use.sse",
			parts: []llm.Part{{Kind: llm.PartText, Text: "I'll look up both cities at once."}},
			calls: []llm.ToolCall{
				{ID: "toolu_01Hx8bqTaZ6gk3n1Hd2oQ8kE", Name: "get_weather", Arguments: []byte(`{"city": "Paris"}`)},
				{ID: "toolu_01BgKj4X2nQ7w5tWcF1mYz9R", Name: "get_weather", Arguments: []byte(`{"city": "Tokyo"}`)},
				{ID: "toolu_01Ls5eVq3RkZp8yNc2DhTw6A", Name: "current_time", Arguments: []byte(`{}`)},
			},
		},
		{
			file:  "tool_no_args.sse",
			parts: []llm.Part{{Kind: llm.PartText, Text: "I'll update the issue list for you."}},
			calls: []llm.ToolCall{{ID: "toolu_01QE1WLsSVp5hy5Q3GmGTmjP", Name: "updateIssueList", Arguments: []byte(`{}`)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			m := collect(t, "testdata/"+tt.file)
			if diff := cmp.Diff(tt.parts, m.Parts); diff != "" {
				t.Errorf("parts (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.calls, m.ToolCalls); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
		})
	}
}

// collect streams a recording through a client and folds its events into a message.
func collect(t *testing.T, file string) llm.Message {
	t.Helper()
	body, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	c := newTestClient(t, llmtest.ServeBytes(t, body, 13).URL)
	var col llm.Collector
	for ev, err := range c.Stream(t.Context(), &llm.Request{Model: "m"}) {
		if err != nil {
			t.Fatal(err)
		}
		col.Add(ev)
	}
	return col.Message()
}

func TestHTTPErrors(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		header    map[string]string
		body      string
		want      llm.Error
		retryable bool
	}{
		{
			name: "rate limit", status: 429, header: map[string]string{"retry-after": "7"},
			body: `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization (6f4c2b8e) of 30,000 input tokens per minute."},"request_id":"req_011CUa5Rz1kQ7dN3bT8wXy2M"}`,
			want: llm.Error{Kind: llm.KindRateLimit, Status: 429, Code: "rate_limit_error", RetryAfter: 7 * time.Second,
				Message: "This request would exceed the rate limit for your organization (6f4c2b8e) of 30,000 input tokens per minute."},
			retryable: true,
		},
		{
			name: "overloaded", status: 529,
			body:      `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CUa6fq8ZRdVZ7B9vhQ3Jk"}`,
			want:      llm.Error{Kind: llm.KindOverloaded, Status: 529, Code: "overloaded_error", Message: "Overloaded"},
			retryable: true,
		},
		{
			name: "bad key", status: 401,
			body: `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"},"request_id":"req_011CUa7Lk2dP9sW4rQ6nVt1B"}`,
			want: llm.Error{Kind: llm.KindAuth, Status: 401, Code: "authentication_error", Message: "invalid x-api-key"},
		},
		{
			name: "unknown model", status: 404,
			body: `{"type":"error","error":{"type":"not_found_error","message":"model: claude-9"},"request_id":"req_011CUa8Hc4vN2xK7pB3mWq9T"}`,
			want: llm.Error{Kind: llm.KindNotFound, Status: 404, Code: "not_found_error", Message: "model: claude-9"},
		},
		{
			name: "prompt too long", status: 400,
			body: `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 214139 tokens > 200000 maximum"},"request_id":"req_011CUa9Xw3mT5qL8cR2vNb6K"}`,
			want: llm.Error{Kind: llm.KindContextLength, Status: 400, Code: "invalid_request_error", Message: "prompt is too long: 214139 tokens > 200000 maximum"},
		},
		{
			name: "html from a proxy", status: 502, body: "<html><body>Bad Gateway</body></html>",
			want:      llm.Error{Kind: llm.KindServer, Status: 502, Message: "<html><body>Bad Gateway</body></html>"},
			retryable: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tt.header {
					w.Header().Set(k, v)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.status)
				w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			var got error
			for _, err := range newTestClient(t, srv.URL).Stream(t.Context(), &llm.Request{Model: "m"}) {
				got = err
			}
			e, ok := errors.AsType[*llm.Error](got)
			if !ok {
				t.Fatalf("error = %v, want *llm.Error", got)
			}
			tt.want.Provider = "anthropic"
			if diff := cmp.Diff(tt.want, *e); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if e.Retryable() != tt.retryable {
				t.Errorf("Retryable() = %v, want %v", e.Retryable(), tt.retryable)
			}
			if strings.Contains(e.Error(), "sk-ant-test") {
				t.Errorf("the error shows the key: %v", e)
			}
		})
	}
}

// TestInBandErrors maps each error type sent after HTTP 200 to the kind it has as an HTTP answer.
func TestInBandErrors(t *testing.T) {
	tests := []struct {
		typ, message string
		kind         llm.ErrorKind
	}{
		{"overloaded_error", "Overloaded", llm.KindOverloaded},
		{"api_error", "Internal server error", llm.KindServer},
		{"rate_limit_error", "Rate limited", llm.KindRateLimit},
		{"invalid_request_error", "messages.1.content.0: unexpected `tool_use_id`", llm.KindInvalid},
		{"invalid_request_error", "prompt is too long: 201734 tokens > 200000 maximum", llm.KindContextLength},
		{"timeout_error", "Stream timed out", llm.KindServer},
		{"brand_new_error", "Something new", llm.KindStream},
	}
	for _, tt := range tests {
		t.Run(tt.typ+" "+string(tt.kind), func(t *testing.T) {
			body := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n" +
				"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"" + tt.typ + "\",\"message\":\"" + tt.message + "\"}}\n\n"
			var got error
			for _, err := range newTestClient(t, llmtest.ServeBytes(t, []byte(body), 1000).URL).Stream(t.Context(), &llm.Request{Model: "m"}) {
				got = err
			}
			e, ok := errors.AsType[*llm.Error](got)
			if !ok || e.Kind != tt.kind || e.Code != tt.typ || e.Message != tt.message || e.Status != 0 {
				t.Errorf("error = %#v, want kind %s", got, tt.kind)
			}
		})
	}
}

// TestInBandErrorHidesKey: a proxy that names the key in an error event does not get it passed on to
// chatd's clients, its log or its database.
func TestInBandErrorHidesKey(t *testing.T) {
	body := "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"invalid x-api-key sk-ant-test\"}}\n\n"
	got := describe(t, []byte(body), 1000)
	if strings.Contains(got, "sk-ant-test") || !strings.Contains(got, "invalid x-api-key [redacted]") {
		t.Errorf("got:\n%s", got)
	}
}

func TestBadEventIsAStreamError(t *testing.T) {
	body := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_de\n\n"
	got := describe(t, []byte(body), 1000)
	if !strings.HasPrefix(got, "text \"ok\"\nerror kind=stream") {
		t.Errorf("got:\n%s", got)
	}
}

func TestNewRejectsBadBaseURL(t *testing.T) {
	for _, u := range []string{"ftp://x", "api.anthropic.com", "http://"} {
		if _, err := New(Options{BaseURL: u}); err == nil {
			t.Errorf("New(%q) succeeded", u)
		}
	}
}

// TestFinishReason: the API's stop reasons map to llm's; one chatd does not know passes through raw.
func TestFinishReason(t *testing.T) {
	for stop, want := range map[string]llm.FinishReason{
		"end_turn":                      llm.FinishStop,
		"stop_sequence":                 llm.FinishStop,
		"tool_use":                      llm.FinishToolCalls,
		"max_tokens":                    llm.FinishLength,
		"model_context_window_exceeded": llm.FinishLength,
		"refusal":                       llm.FinishContentFilter,
		"pause_turn":                    llm.FinishPause,
		"compaction_required":           "compaction_required",
	} {
		if got := finishReason(stop); got != want {
			t.Errorf("finishReason(%q) = %q, want %q", stop, got, want)
		}
	}
}

// TestSignatureHasALimit: a thinking signature that grows past any real one, delta by delta, is a stream
// error rather than memory that grows until the block ends.
func TestSignatureHasALimit(t *testing.T) {
	var b strings.Builder
	b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n")
	b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n")
	chunk := strings.Repeat("S", 64<<10)
	for range 20 {
		b.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"" + chunk + "\"}}\n\n")
	}
	got := describe(t, []byte(b.String()), b.Len())
	if !strings.Contains(got, "signature is impossibly long") {
		t.Errorf("events:\n%.300s", got)
	}
}
