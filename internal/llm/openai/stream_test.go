package openai

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
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
	c, err := New(Options{Name: "openai", BaseURL: baseURL, APIKey: "sk-test"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// describe streams body, served in pieces of step bytes, through a client and renders its events.
func describe(t *testing.T, body []byte, step int) string {
	t.Helper()
	req := &llm.Request{Model: "m", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}}
	return llmtest.Describe(newTestClient(t, llmtest.ServeBytes(t, body, step).URL).Stream(t.Context(), req))
}

// TestRecordedStreams decodes streams shaped like recordings of real servers and compares the events with
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

func TestHTTPErrors(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		header     map[string]string
		body       string
		want       llm.Error
		retryable  bool
		retryAfter time.Duration
	}{
		{
			name: "rate limit", status: 429, header: map[string]string{"Retry-After": "7"},
			body: `{"error":{"message":"Rate limit reached for gpt-4o-mini in organization org-x on tokens per min (TPM): Limit 200000, Used 199000, Requested 4000.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`,
			want: llm.Error{Kind: llm.KindRateLimit, Status: 429, Code: "rate_limit_exceeded",
				Message: "Rate limit reached for gpt-4o-mini in organization org-x on tokens per min (TPM): Limit 200000, Used 199000, Requested 4000."},
			retryable: true, retryAfter: 7 * time.Second,
		},
		{
			name: "retry-after-ms wins", status: 503, header: map[string]string{"Retry-After": "7", "Retry-After-Ms": "1500"},
			body:      `{"error":{"message":"The engine is currently overloaded, please try again later","type":"server_error","param":null,"code":null}}`,
			want:      llm.Error{Kind: llm.KindOverloaded, Status: 503, Code: "server_error", Message: "The engine is currently overloaded, please try again later"},
			retryable: true, retryAfter: 1500 * time.Millisecond,
		},
		{
			name: "bad key", status: 401,
			body: `{"error":{"message":"Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
			want: llm.Error{Kind: llm.KindAuth, Status: 401, Code: "invalid_api_key",
				Message: "Incorrect API key provided: [redacted]. You can find your API key at https://platform.openai.com/account/api-keys."},
		},
		{
			name: "unknown model", status: 404,
			body: `{"error":{"message":"The model ` + "`gpt-9`" + ` does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}`,
			want: llm.Error{Kind: llm.KindNotFound, Status: 404, Code: "model_not_found", Message: "The model `gpt-9` does not exist or you do not have access to it."},
		},
		{
			name: "context length", status: 400,
			body: `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
			want: llm.Error{Kind: llm.KindContextLength, Status: 400, Code: "context_length_exceeded",
				Message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 tokens."},
		},
		{
			name: "vllm numeric code", status: 400,
			body: `{"object":"error","message":"[{'type': 'missing', 'loc': ('body', 'messages')}]","type":"BadRequestError","param":null,"code":400}`,
			want: llm.Error{Kind: llm.KindInvalid, Status: 400, Message: "[{'type': 'missing', 'loc': ('body', 'messages')}]"},
		},
		{
			name: "ollama plain error", status: 404,
			body: `{"error":{"message":"model \"llama9\" not found, try pulling it first","type":"api_error","param":null,"code":null}}`,
			want: llm.Error{Kind: llm.KindNotFound, Status: 404, Code: "api_error", Message: `model "llama9" not found, try pulling it first`},
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
				w.WriteHeader(tt.status)
				w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			c := newTestClient(t, srv.URL)
			var got error
			for _, err := range c.Stream(t.Context(), &llm.Request{Model: "m"}) {
				got = err
			}
			e, ok := errors.AsType[*llm.Error](got)
			if !ok {
				t.Fatalf("error = %v, want *llm.Error", got)
			}
			tt.want.Provider = "openai"
			tt.want.RetryAfter = tt.retryAfter
			if diff := cmp.Diff(tt.want, *e); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if e.Retryable() != tt.retryable {
				t.Errorf("Retryable() = %v, want %v", e.Retryable(), tt.retryable)
			}
		})
	}
}

func TestWholeArgumentsObject(t *testing.T) {
	body := "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{\"a\":1}}}]}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n"
	got := describe(t, []byte(body), 1000)
	want := "tool_call_delta index=0 id=\"c1\" name=\"f\" args=\"{\\\"a\\\":1}\"\n" +
		"tool_call_end index=0\nfinish tool_calls\n"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestBadChunkIsAStreamError(t *testing.T) {
	body := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\ndata: {not json\n\n"
	got := describe(t, []byte(body), 1000)
	if !strings.HasPrefix(got, "text \"ok\"\nerror kind=stream") {
		t.Errorf("got:\n%s", got)
	}
}

// TestInBandErrorHidesKey: a server or proxy that names the key in an error chunk does not get it passed
// on to chatd's clients, its log or its database.
func TestInBandErrorHidesKey(t *testing.T) {
	body := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\n" +
		"data: {\"error\":{\"message\":\"the key sk-test is over its quota\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n"
	got := describe(t, []byte(body), 1000)
	if strings.Contains(got, "sk-test") || !strings.Contains(got, "the key [redacted] is over its quota") {
		t.Errorf("got:\n%s", got)
	}
}

func TestNewRejectsBadBaseURL(t *testing.T) {
	for _, u := range []string{"ftp://x", "localhost:11434", "http://"} {
		if _, err := New(Options{BaseURL: u}); err == nil {
			t.Errorf("New(%q) succeeded", u)
		}
	}
}

func TestReasoningInBothFields(t *testing.T) {
	body := "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"Let me think\",\"reasoning\":\"Let me think\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\" more\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
	got := describe(t, []byte(body), 1000)
	want := "reasoning \"Let me think\"\nreasoning \" more\"\nfinish stop\n"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestTooManyToolCalls: a stream naming more tool-call indexes than any answer holds is a stream error,
// found in linear time (a chunk of 50,000 indexes once took seconds of a core, past any deadline).
func TestTooManyToolCalls(t *testing.T) {
	var b strings.Builder
	b.WriteString(`data: {"choices":[{"index":0,"delta":{"tool_calls":[`)
	for i := range 50_000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"index":%d}`, i)
	}
	b.WriteString("]}}]}\n\ndata: [DONE]\n\n")
	got := describe(t, []byte(b.String()), b.Len())
	if !strings.Contains(got, "more than 1024 tool calls") {
		t.Errorf("events:\n%.300s", got)
	}
}
