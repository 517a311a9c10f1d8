package gemini

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
)

var update = flag.Bool("update", false, "rewrite the .golden files from the adapter's output")

func newTestClient(t *testing.T, baseURL string) *Client {
	t.Helper()
	c, err := New(Options{Name: "gemini", BaseURL: baseURL, APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func testRequest() *llm.Request {
	return &llm.Request{Model: "gemini-2.5-flash", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}}
}

// describe streams body, served in pieces of step bytes, through a client and renders its events.
func describe(t *testing.T, body []byte, step int) string {
	t.Helper()
	return llmtest.Describe(newTestClient(t, llmtest.ServeBytes(t, body, step).URL).Stream(t.Context(), testRequest()))
}

// TestRecordedStreams decodes streams shaped like captures of the real API and compares the events with
// testdata/*.golden, at several split points of the bytes.
func TestRecordedStreams(t *testing.T) {
	llmtest.Golden(t, *update, "testdata", func(t *testing.T, body []byte) string {
		if !bytes.Contains(body, []byte("\r\n\r\n")) {
			t.Fatal("the recording is not framed with CRLF as the API frames its events")
		}
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
		name      string
		status    int
		header    map[string]string
		body      string
		want      llm.Error
		retryable bool
	}{
		{
			name: "rate limit with RetryInfo", status: 429,
			body: `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"34.4s"}]}}`,
			want: llm.Error{Kind: llm.KindRateLimit, Status: 429, Code: "RESOURCE_EXHAUSTED",
				Message: "Resource has been exhausted (e.g. check quota).", RetryAfter: 34400 * time.Millisecond},
			retryable: true,
		},
		{
			name: "retry-after header wins", status: 429, header: map[string]string{"Retry-After": "3"},
			body: `{"error":{"code":429,"message":"Quota exceeded.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"20s"}]}}`,
			want: llm.Error{Kind: llm.KindRateLimit, Status: 429, Code: "RESOURCE_EXHAUSTED", Message: "Quota exceeded.",
				RetryAfter: 3 * time.Second},
			retryable: true,
		},
		{
			name: "overloaded", status: 503,
			body:      "{\n  \"error\": {\n    \"code\": 503,\n    \"message\": \"The model is overloaded. Please try again later.\",\n    \"status\": \"UNAVAILABLE\"\n  }\n}\n",
			want:      llm.Error{Kind: llm.KindOverloaded, Status: 503, Code: "UNAVAILABLE", Message: "The model is overloaded. Please try again later."},
			retryable: true,
		},
		{
			name: "bad key", status: 400,
			body: `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com","metadata":{"service":"generativelanguage.googleapis.com"}}]}}`,
			want: llm.Error{Kind: llm.KindAuth, Status: 400, Code: "API_KEY_INVALID", Message: "API key not valid. Please pass a valid API key."},
		},
		{
			name: "invalid argument", status: 400,
			body: `{"error":{"code":400,"message":"Request contains an invalid argument.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"OTHER_REASON","domain":"googleapis.com"}]}}`,
			want: llm.Error{Kind: llm.KindInvalid, Status: 400, Code: "INVALID_ARGUMENT", Message: "Request contains an invalid argument."},
		},
		{
			name: "context length", status: 400,
			body: `{"error":{"code":400,"message":"The input token count (1310734) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}`,
			want: llm.Error{Kind: llm.KindContextLength, Status: 400, Code: "INVALID_ARGUMENT",
				Message: "The input token count (1310734) exceeds the maximum number of tokens allowed (1048576)."},
		},
		{
			name: "unknown model", status: 404,
			body: `{"error":{"code":404,"message":"models/gemini-9 is not found for API version v1beta, or is not supported for generateContent. Call ListModels to see the list of available models and their supported methods.","status":"NOT_FOUND"}}`,
			want: llm.Error{Kind: llm.KindNotFound, Status: 404, Code: "NOT_FOUND",
				Message: "models/gemini-9 is not found for API version v1beta, or is not supported for generateContent. Call ListModels to see the list of available models and their supported methods."},
		},
		{
			name: "error in an array", status: 403,
			body: `[{"error":{"code":403,"message":"Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.","status":"PERMISSION_DENIED"}}]`,
			want: llm.Error{Kind: llm.KindAuth, Status: 403, Code: "PERMISSION_DENIED",
				Message: "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API."},
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
			var got error
			for _, err := range newTestClient(t, srv.URL).Stream(t.Context(), testRequest()) {
				got = err
			}
			e, ok := errors.AsType[*llm.Error](got)
			if !ok {
				t.Fatalf("error = %v, want *llm.Error", got)
			}
			tt.want.Provider = "gemini"
			if diff := cmp.Diff(tt.want, *e); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if e.Retryable() != tt.retryable {
				t.Errorf("Retryable() = %v, want %v", e.Retryable(), tt.retryable)
			}
			if strings.Contains(e.Error(), testKey) {
				t.Errorf("the error names the key: %v", e)
			}
		})
	}
}

func TestInBandErrorKinds(t *testing.T) {
	tests := []struct {
		chunk string
		kind  llm.ErrorKind
		code  string
	}{
		{`{"error": {"code": 503,"message": "The model is overloaded. Please try again later.","status": "UNAVAILABLE"}}`, llm.KindOverloaded, "UNAVAILABLE"},
		{`{"error": {"code": 500,"message": "An internal error has occurred.","status": "INTERNAL"}}`, llm.KindServer, "INTERNAL"},
		{`{"error": {"code": 429,"message": "Resource has been exhausted (e.g. check quota).","status": "RESOURCE_EXHAUSTED"}}`, llm.KindRateLimit, "RESOURCE_EXHAUSTED"},
		{`{"error": {"code": 400,"message": "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status": "INVALID_ARGUMENT"}}`, llm.KindContextLength, "INVALID_ARGUMENT"},
		{`{"error": {"code": 400,"message": "Request contains an invalid argument.","status": "INVALID_ARGUMENT"}}`, llm.KindStream, "INVALID_ARGUMENT"},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			body := "data: " + tt.chunk + "\r\n\r\n"
			var got error
			for _, err := range newTestClient(t, llmtest.ServeBytes(t, []byte(body), len(body)).URL).Stream(t.Context(), testRequest()) {
				got = err
			}
			e, ok := errors.AsType[*llm.Error](got)
			if !ok || e.Kind != tt.kind || e.Code != tt.code || e.Status != 0 || e.Message == "" {
				t.Fatalf("error = %#v, want kind %s code %s", got, tt.kind, tt.code)
			}
		})
	}
}

// TestInBandErrorHidesKey: a proxy that names the key in an error chunk does not get it passed on to
// chatd's clients, its log or its database.
func TestInBandErrorHidesKey(t *testing.T) {
	body := `data: {"error": {"code": 400,"message": "API key not valid: ` + testKey + `","status": "INVALID_ARGUMENT"}}` + "\r\n\r\n"
	got := describe(t, []byte(body), len(body))
	if strings.Contains(got, testKey) || !strings.Contains(got, "API key not valid: [redacted]") {
		t.Errorf("got:\n%s", got)
	}
}

func TestFinishReasons(t *testing.T) {
	tests := []struct {
		in     string
		called bool
		want   llm.FinishReason
	}{
		{"STOP", false, llm.FinishStop},
		{"STOP", true, llm.FinishToolCalls},
		{"FUNCTION_CALL", true, llm.FinishToolCalls},
		{"MAX_TOKENS", false, llm.FinishLength},
		{"MAX_TOKENS", true, llm.FinishLength},
		{"SAFETY", false, llm.FinishContentFilter},
		{"RECITATION", false, llm.FinishContentFilter},
		{"BLOCKLIST", false, llm.FinishContentFilter},
		{"PROHIBITED_CONTENT", false, llm.FinishContentFilter},
		{"SPII", false, llm.FinishContentFilter},
		{"IMAGE_SAFETY", false, llm.FinishContentFilter},
		{"LANGUAGE", false, llm.FinishContentFilter},
		{"OTHER", false, "other"},
		{"TOO_MANY_TOOL_CALLS", true, "too_many_tool_calls"},
	}
	for _, tt := range tests {
		if got := finishReason(tt.in, tt.called); got != tt.want {
			t.Errorf("finishReason(%q, %v) = %q, want %q", tt.in, tt.called, got, tt.want)
		}
	}
}

const helloChunk = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Hi\"}],\"role\": \"model\"},\"index\": 0}],\"modelVersion\": \"gemini-2.5-flash\"}\r\n\r\n"

func TestBadChunkIsAStreamError(t *testing.T) {
	body := helloChunk + "data: {\"candidates\": [{\"content\r\n\r\n"
	got := describe(t, []byte(body), 1000)
	if !strings.HasPrefix(got, "text \"Hi\"\nerror kind=stream") {
		t.Errorf("got:\n%s", got)
	}
}

func TestNewRejectsBadBaseURL(t *testing.T) {
	for _, u := range []string{"ftp://x", "generativelanguage.googleapis.com", "http://"} {
		if _, err := New(Options{BaseURL: u}); err == nil {
			t.Errorf("New(%q) succeeded", u)
		}
	}
}

func TestModels(t *testing.T) {
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1beta/models" || r.Header.Get("x-goog-api-key") != testKey || r.URL.Query().Has("key") {
			t.Errorf("request %s with key header %q", r.URL, r.Header.Get("x-goog-api-key"))
		}
		queries = append(queries, r.URL.RawQuery)
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		switch r.URL.Query().Get("pageToken") {
		case "":
			fmt.Fprint(w, `{
  "models": [
    {
      "name": "models/embedding-001",
      "version": "001",
      "displayName": "Embedding 001",
      "inputTokenLimit": 2048,
      "outputTokenLimit": 1,
      "supportedGenerationMethods": ["embedContent"]
    },
    {
      "name": "models/gemini-2.5-flash",
      "version": "001",
      "displayName": "Gemini 2.5 Flash",
      "inputTokenLimit": 1048576,
      "outputTokenLimit": 65536,
      "supportedGenerationMethods": ["generateContent", "countTokens", "createCachedContent", "batchGenerateContent"],
      "temperature": 1,
      "topP": 0.95,
      "topK": 64,
      "maxTemperature": 2,
      "thinking": true
    }
  ],
  "nextPageToken": "Chhtb2RlbHMvZ2VtaW5pLTIuNS1mbGFzaA=="
}
`)
		case "Chhtb2RlbHMvZ2VtaW5pLTIuNS1mbGFzaA==":
			fmt.Fprint(w, `{"models": [{"name": "models/gemini-3-pro-preview", "supportedGenerationMethods": ["generateContent", "countTokens"]}, {"name": "models/aqa", "supportedGenerationMethods": ["generateAnswer"]}]}`)
		default:
			t.Errorf("unexpected page token in %s", r.URL)
		}
	}))
	defer srv.Close()
	got, err := newTestClient(t, srv.URL).Models(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"gemini-2.5-flash", "gemini-3-pro-preview"}, got); diff != "" {
		t.Errorf("models (-want +got):\n%s", diff)
	}
	want := []string{"pageSize=1000", "pageSize=1000&pageToken=Chhtb2RlbHMvZ2VtaW5pLTIuNS1mbGFzaA%3D%3D"}
	if diff := cmp.Diff(want, queries); diff != "" {
		t.Errorf("queries (-want +got):\n%s", diff)
	}
}

func TestModelsWithoutMethodsAndErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"models": [{"name": "models/local-model"}, {"name": "plain-name"}]}`)
	}))
	defer srv.Close()
	got, err := newTestClient(t, srv.URL).Models(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"local-model", "plain-name"}, got); diff != "" {
		t.Errorf("models (-want +got):\n%s", diff)
	}

	denied := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error": {"code": 429,"message": "Quota exceeded.","status": "RESOURCE_EXHAUSTED","details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo","retryDelay": "12s"}]}}`)
	}))
	defer denied.Close()
	_, err = newTestClient(t, denied.URL).Models(t.Context())
	if e, ok := errors.AsType[*llm.Error](err); !ok || e.Kind != llm.KindRateLimit || e.RetryAfter != 12*time.Second {
		t.Fatalf("error = %#v, want a rate limit with RetryAfter 12s", err)
	}
}

// badKeyBody is the API's answer to an unknown API key, as it sends it.
const badKeyBody = `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com","metadata":{"service":"generativelanguage.googleapis.com"}}]}}`

// TestModelsBadKey: listing the models with a bad key is an auth error too, though the API answers 400.
func TestModelsBadKey(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, badKeyBody)
	}))
	defer srv.Close()
	_, err := newTestClient(t, srv.URL).Models(t.Context())
	e, ok := errors.AsType[*llm.Error](err)
	if !ok {
		t.Fatalf("error = %v, want *llm.Error", err)
	}
	want := llm.Error{Provider: "gemini", Kind: llm.KindAuth, Status: 400, Code: "API_KEY_INVALID", Message: "API key not valid. Please pass a valid API key."}
	if diff := cmp.Diff(want, *e); diff != "" {
		t.Errorf("error (-want +got):\n%s", diff)
	}
}

// TestModelsPageCap: a server that hands out a new page token forever is asked 50 times, not forever.
func TestModelsPageCap(t *testing.T) {
	var mu sync.Mutex
	requests := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests++
		n := requests
		mu.Unlock()
		fmt.Fprintf(w, `{"models": [{"name": "models/m%d"}], "nextPageToken": "page-%d"}`, n, n)
	}))
	defer srv.Close()
	got, err := newTestClient(t, srv.URL).Models(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if requests != 50 || len(got) != 50 || got[49] != "m50" {
		t.Errorf("%d requests, %d models (last %q), want 50 of each", requests, len(got), got[len(got)-1])
	}
}

// TestRequestTextUnescaped: text goes upstream as written, "<", ">" and "&" unescaped, and the body
// ends with its JSON value.
func TestRequestTextUnescaped(t *testing.T) {
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"ok\"}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}]}\r\n\r\n")
	}))
	defer srv.Close()
	const text = "Is <b>a && b</b> -> c?"
	req := &llm.Request{Model: "gemini-2.5-flash", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, text)}}
	for _, err := range newTestClient(t, srv.URL).Stream(t.Context(), req) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Contains(body, []byte(`"text":"`+text+`"`)) {
		t.Errorf("the text is not sent as written: %s", body)
	}
	if bytes.HasSuffix(body, []byte("\n")) {
		t.Errorf("the body ends with a newline: %q", body)
	}
}
