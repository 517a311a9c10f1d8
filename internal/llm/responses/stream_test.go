package responses

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
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
	c, err := New(Options{Name: "openai-responses", BaseURL: baseURL, APIKey: "sk-test"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var testRequest = &llm.Request{Model: "gpt-5", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}}

// describe streams body, served in pieces of step bytes, through a client and renders its events.
func describe(t *testing.T, body []byte, step int) string {
	t.Helper()
	return llmtest.Describe(newTestClient(t, llmtest.ServeBytes(t, body, step).URL).Stream(t.Context(), testRequest))
}

// TestRecordedStreams decodes streams shaped like captures of the Responses API and compares the events
// with testdata/*.golden, at several split points of the bytes.
func TestRecordedStreams(t *testing.T) {
	llmtest.Golden(t, *update, "testdata", func(t *testing.T, body []byte) string {
		got := describe(t, body, len(body))
		for _, step := range []int{1, 7, 64} {
			if again := describe(t, body, step); again != got {
				t.Errorf("split every %d bytes the events differ:\n%s", step, cmp.Diff(got, again))
			}
		}
		// The type is in each event's JSON; the event: lines are optional (proxies drop them).
		dataOnly := regexp.MustCompile(`(?m)^event: .*\n`).ReplaceAll(body, nil)
		if again := describe(t, dataOnly, len(dataOnly)); again != got {
			t.Errorf("without event: lines the events differ:\n%s", cmp.Diff(got, again))
		}
		return got
	})
}

// streamOf decodes an SSE body given as data lines.
func streamOf(t *testing.T, events ...string) string {
	t.Helper()
	var b strings.Builder
	for _, e := range events {
		b.WriteString(e)
		b.WriteString("\n\n")
	}
	return describe(t, []byte(b.String()), 1<<20)
}

// TestWholeItems: a server that sends each item whole in response.output_item.done, without deltas,
// gives the same parts as one that streams them. The refusal in the message makes the finish
// content_filter, calls or not.
func TestWholeItems(t *testing.T) {
	got := streamOf(t,
		`data: {"type":"response.output_item.done","output_index":0,"item":{"id":"rs_1","type":"reasoning","encrypted_content":"enc1","summary":[{"type":"summary_text","text":"first"},{"type":"summary_text","text":"second"}]}}`,
		`data: {"type":"response.output_item.done","output_index":1,"item":{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"text":"Hello"},{"type":"refusal","refusal":" but no."}]}}`,
		`data: {"type":"response.output_item.done","output_index":2,"item":{"id":"fc_1","type":"function_call","status":"completed","call_id":"call_1","name":"f","arguments":"{\"a\":1}"}}`,
		`data: {"type":"response.output_item.done","output_index":3,"item":{"id":"fc_2","type":"function_call","status":"completed","call_id":"call_2","name":"g","arguments":""}}`,
		`data: {"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":5,"output_tokens":7}}}`,
	)
	want := `reasoning "first" id="rs_1"
reasoning_end id="rs_1"
reasoning "second" id="rs_1"
reasoning_end id="rs_1" signature="enc1"
text "Hello"
text " but no."
tool_call_delta index=0 id="call_1" name="f"
tool_call_delta index=0 args="{\"a\":1}"
tool_call_end index=0
tool_call_delta index=1 id="call_2" name="g"
tool_call_delta index=1 args="{}"
tool_call_end index=1
finish content_filter
usage input=5 output=7 cache_read=0 cache_write=0 reasoning=0
`
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestDeltasWithoutItemIDs: some servers name the item of a delta by output_index only, and send the
// error event in its documented shape (code and message at the top level).
func TestDeltasWithoutItemIDs(t *testing.T) {
	got := streamOf(t,
		`data: {"type":"response.output_item.added","output_index":0,"item":{"id":"rs_9","type":"reasoning","summary":[]}}`,
		`data: {"type":"response.reasoning_text.delta","output_index":0,"content_index":0,"delta":"raw thinking"}`,
		`data: {"type":"response.output_item.added","output_index":1,"item":{"type":"function_call","call_id":"call_a","name":"weather","arguments":""}}`,
		`data: {"type":"response.output_item.added","output_index":2,"item":{"type":"function_call","call_id":"call_b","name":"clock","arguments":""}}`,
		`data: {"type":"response.function_call_arguments.delta","output_index":1,"delta":"{\"city\":"}`,
		`data: {"type":"response.function_call_arguments.delta","output_index":2,"delta":"{}"}`,
		`data: {"type":"response.function_call_arguments.delta","output_index":1,"delta":"\"Paris\"}"}`,
		`data: {"type":"response.output_item.done","output_index":2,"item":{"type":"function_call","call_id":"call_b","name":"clock","arguments":"{}"}}`,
		`data: {"type":"error","code":"ERR_SOMETHING","message":"Something went wrong","param":null,"sequence_number":9}`,
	)
	want := `reasoning "raw thinking" id="rs_9"
tool_call_delta index=0 id="call_a" name="weather"
tool_call_delta index=1 id="call_b" name="clock"
tool_call_delta index=0 args="{\"city\":"
tool_call_delta index=1 args="{}"
tool_call_delta index=0 args="\"Paris\"}"
tool_call_end index=1
error kind=stream code="ERR_SOMETHING" message="Something went wrong"
`
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestSkipsWhatItDoesNotRead: event types and item kinds chatd does not know, whatever their fields
// hold, are skipped.
func TestSkipsWhatItDoesNotRead(t *testing.T) {
	got := streamOf(t,
		`data: {"type":"response.output_item.added","output_index":0,"item":{"id":"ws_1","type":"web_search_call","status":"in_progress","content":"odd","summary":7}}`,
		`data: {"type":"response.web_search_call.searching","output_index":0,"item_id":"ws_1","delta":{"odd":true}}`,
		`data: {"type":"response.output_item.done","output_index":0,"item":{"id":"ws_1","type":"web_search_call","status":"completed","content":"odd"}}`,
		`data: {"type":"response.output_text.annotation.added","item_id":"msg_1","output_index":1,"annotation":{"type":"url_citation"}}`,
		`data: {"type":"response.output_text.delta","item_id":"msg_1","output_index":1,"content_index":0,"delta":"Found it."}`,
		`data: {"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":9,"input_tokens_details":{"cached_tokens":4,"cache_write_tokens":2},"output_tokens":3,"output_tokens_details":{"reasoning_tokens":0}}}}`,
		`data: [DONE]`,
	)
	want := `text "Found it."
finish stop
usage input=9 output=3 cache_read=4 cache_write=2 reasoning=0
`
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestBadEventIsAStreamError(t *testing.T) {
	got := streamOf(t,
		`data: {"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"delta":"ok"}`,
		`data: {"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"delta":`,
		`data: {"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"delta":"more"}`,
	)
	if !strings.HasPrefix(got, "text \"ok\"\nerror kind=stream message=\"cannot decode an event\"") {
		t.Errorf("got:\n%s", got)
	}
	got = streamOf(t, `data: {"type":"response.output_text.delta","delta":7}`)
	if !strings.HasPrefix(got, "error kind=stream message=\"cannot decode an event\"") {
		t.Errorf("a text delta of the wrong type: got:\n%s", got)
	}
}

func TestInBandErrorKinds(t *testing.T) {
	for _, tt := range []struct {
		code string
		kind llm.ErrorKind
	}{
		{"server_error", llm.KindServer},
		{"rate_limit_exceeded", llm.KindRateLimit},
		{"context_length_exceeded", llm.KindContextLength},
		{"server_is_overloaded", llm.KindOverloaded},
		{"invalid_prompt", llm.KindStream},
	} {
		for _, shape := range []string{
			`data: {"type":"error","sequence_number":2,"error":{"type":"x","code":"%s","message":"m","param":null}}`,
			`data: {"type":"response.failed","sequence_number":2,"response":{"status":"failed","error":{"code":"%s","message":"m"}}}`,
		} {
			got := streamOf(t, fmt.Sprintf(shape, tt.code))
			want := fmt.Sprintf("error kind=%s code=%q message=\"m\"\n", tt.kind, tt.code)
			if got != want {
				t.Errorf("%s: got %q, want %q", shape, got, want)
			}
		}
	}
	// A null code falls back to the type.
	got := streamOf(t, `data: {"type":"error","error":{"type":"server_error","code":null,"message":"Sorry, something went wrong.","param":null},"sequence_number":2}`)
	if want := "error kind=server code=\"server_error\" message=\"Sorry, something went wrong.\"\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestIncompleteContentFilter(t *testing.T) {
	got := streamOf(t,
		`data: {"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"delta":"I"}`,
		`data: {"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"content_filter"},"usage":{"input_tokens":3,"output_tokens":1}}}`,
	)
	want := "text \"I\"\nfinish content_filter\nusage input=3 output=1 cache_read=0 cache_write=0 reasoning=0\n"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestHTTPErrors(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		header     map[string]string
		body       string
		want       llm.Error
		retryAfter time.Duration
	}{
		{
			name: "rate limit", status: 429, header: map[string]string{"Retry-After": "7"},
			body: `{"error":{"message":"Rate limit reached for gpt-5 in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 1500.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`,
			want: llm.Error{Kind: llm.KindRateLimit, Status: 429, Code: "rate_limit_exceeded",
				Message: "Rate limit reached for gpt-5 in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 1500."},
			retryAfter: 7 * time.Second,
		},
		{
			name: "the key is never repeated", status: 401,
			body: `{"error":{"message":"Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
			want: llm.Error{Kind: llm.KindAuth, Status: 401, Code: "invalid_api_key",
				Message: "Incorrect API key provided: [redacted]. You can find your API key at https://platform.openai.com/account/api-keys."},
		},
		{
			name: "unsupported parameter", status: 400,
			body: `{"error":{"message":"Unsupported parameter: 'temperature' is not supported with this model.","type":"invalid_request_error","param":"temperature","code":null}}`,
			want: llm.Error{Kind: llm.KindInvalid, Status: 400, Code: "invalid_request_error", Message: "Unsupported parameter: 'temperature' is not supported with this model."},
		},
		{
			name: "context length", status: 400,
			body: `{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}`,
			want: llm.Error{Kind: llm.KindContextLength, Status: 400, Code: "context_length_exceeded",
				Message: "Your input exceeds the context window of this model. Please adjust your input and try again."},
		},
		{
			name: "html from a proxy", status: 502, body: "<html><body>Bad Gateway</body></html>",
			want: llm.Error{Kind: llm.KindServer, Status: 502, Message: "<html><body>Bad Gateway</body></html>"},
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
			var got error
			for _, err := range newTestClient(t, srv.URL).Stream(t.Context(), testRequest) {
				got = err
			}
			e, ok := errors.AsType[*llm.Error](got)
			if !ok {
				t.Fatalf("error = %v, want *llm.Error", got)
			}
			tt.want.Provider = "openai-responses"
			tt.want.RetryAfter = tt.retryAfter
			if diff := cmp.Diff(tt.want, *e); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewRejectsBadBaseURL(t *testing.T) {
	for _, u := range []string{"ftp://x", "localhost:8080", "http://"} {
		if _, err := New(Options{BaseURL: u}); err == nil {
			t.Errorf("New(%q) succeeded", u)
		}
	}
}

// TestRecordedFolds folds recordings whose events a decoder could yield twice, or finish wrongly, the way
// every consumer folds them: each text and summary comes once, a refusal finishes content_filter.
func TestRecordedFolds(t *testing.T) {
	for _, tt := range []struct {
		file            string
		text, reasoning string
		finish          llm.FinishReason
	}{
		// Summary part 0 is empty: the done event must not yield part 1 again ("BB").
		{"reasoning_empty_summary", "2 + 2 = 4.", "**Adding**\n\n2 + 2 is 4.", llm.FinishStop},
		// The text streams before its item is announced: the done event must not repeat it ("HiHi").
		{"text_before_item", "Hi!", "", llm.FinishStop},
		{"refusal", "I'm sorry, I can't help with that.", "", llm.FinishContentFilter},
	} {
		t.Run(tt.file, func(t *testing.T) {
			body, err := os.ReadFile("testdata/" + tt.file + ".sse")
			if err != nil {
				t.Fatal(err)
			}
			got := llmtest.Collect(t.Context(), newTestClient(t, llmtest.ServeBytes(t, body, 7).URL), testRequest)
			if got.Err != nil {
				t.Fatal(got.Err)
			}
			if diff := cmp.Diff([]any{tt.text, tt.reasoning, tt.finish}, []any{got.Text, got.Reasoning, got.Finish}); diff != "" {
				t.Errorf("[text reasoning finish] (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTooManyItems: a response with more output items than any real one is a stream error: each event's
// lookup among the items stays bounded.
func TestTooManyItems(t *testing.T) {
	var b strings.Builder
	for i := range maxItems + 2 {
		fmt.Fprintf(&b, "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":%d,\"item\":{\"type\":\"message\",\"id\":\"msg_%d\",\"role\":\"assistant\",\"content\":[]}}\n\n", i, i)
	}
	got := describe(t, []byte(b.String()), b.Len())
	if !strings.Contains(got, "more than 4096 output items") {
		t.Errorf("events:\n%.300s", got[max(0, len(got)-300):])
	}
}
