package gemini

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/llm"
)

var signatureField = regexp.MustCompile(`"thoughtSignature": "([^"]+)"`)

// TestSignatureRoundTrip streams a recorded answer, folds it with llm.Collector as chatd stores it, and
// sends it back as history: every signature Gemini gave must reach it again, byte for byte, on the part
// it came with.
func TestSignatureRoundTrip(t *testing.T) {
	tests := []struct {
		file string
		// want is the model turn of the second request, signatures named by their order in the file.
		want string
	}{
		{"thought_signature_then_text", `[
			{"text": "**Comparing the units**\n\nThe user asks how many centimetres are in a foot. A foot is 12 inches and an inch is exactly 2.54 cm, so 30.48 cm.\n\n", "thought": true, "thoughtSignature": "$0"},
			{"text": "A foot is exactly **30.48 cm** (12 in × 2.54 cm)."}]`},
		{"two_signed_thoughts", `[
			{"text": "**Reading the question**\n\nTwo files are asked for; the first one decides the second.\n\n", "thought": true, "thoughtSignature": "$0"},
			{"text": "**Planning the lookups**\n\nOpen config.yaml first, then the path it names.\n\n", "thought": true, "thoughtSignature": "$1"},
			{"text": "I'll open ` + "`config.yaml`" + ` first."}]`},
		{"function_call_signature_stop", `[
			{"functionCall": {"name": "weather", "args": {"location": "San Francisco"}}, "thoughtSignature": "$0"}]`},
		{"parallel_function_calls", `[
			{"text": "**Checking both cities**\n\nThe user wants the weather in Paris and Tokyo; both lookups are independent.\n\n", "thought": true},
			{"functionCall": {"name": "get_weather", "args": {"city": "Paris", "unit": "celsius"}}, "thoughtSignature": "$0"},
			{"functionCall": {"name": "get_weather", "args": {"city": "Tokyo", "unit": "celsius"}}}]`},
		{"function_call_no_args", `[
			{"functionCall": {"name": "read_theme", "args": {}}, "thoughtSignature": "$0"}]`},
		{"signature_only_trailing_part", `[
			{"text": "4", "thoughtSignature": "$0"}]`},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			recording, err := os.ReadFile("testdata/" + tt.file + ".sse")
			if err != nil {
				t.Fatal(err)
			}
			var signatures []string
			for _, m := range signatureField.FindAllSubmatch(recording, -1) {
				signatures = append(signatures, string(m[1]))
			}
			srv, second := replayThenCapture(t, recording)
			c := newTestClient(t, srv.URL)

			req := &llm.Request{Model: "gemini-3-pro-preview", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "Go on.")}}
			var col llm.Collector
			for ev, err := range c.Stream(t.Context(), req) {
				if err != nil {
					t.Fatal(err)
				}
				col.Add(ev)
			}
			answer := col.Message()
			answer.Origin = "gemini/gemini-3-pro-preview"
			for i := range answer.ToolCalls {
				answer.ToolCalls[i].ID = "call_chatd_" + string(rune('a'+i))
			}
			next := *req
			next.Messages = append(next.Messages, answer)
			for _, tc := range answer.ToolCalls {
				next.Messages = append(next.Messages, llm.Message{Role: llm.RoleTool, ToolCallID: tc.ID, ToolName: tc.Name,
					Parts: []llm.Part{{Kind: llm.PartText, Text: "ok"}}})
			}
			for _, err := range c.Stream(t.Context(), &next) {
				if err != nil {
					t.Fatal(err)
				}
			}

			body := second()
			for _, s := range signatures {
				quoted, _ := json.Marshal(s)
				if !regexp.MustCompile(`"thoughtSignature":` + regexp.QuoteMeta(string(quoted))).Match(body) {
					t.Errorf("signature %.16s… is not sent back verbatim", s)
				}
			}
			var sent struct {
				Contents []struct {
					Parts []any `json:"parts"`
				} `json:"contents"`
			}
			if err := json.Unmarshal(body, &sent); err != nil {
				t.Fatal(err)
			}
			want := tt.want
			for i, s := range signatures {
				want = regexp.MustCompile(`\$`+string(rune('0'+i))+`\b`).ReplaceAllLiteralString(want, s)
			}
			var wantParts []any
			if err := json.Unmarshal([]byte(want), &wantParts); err != nil {
				t.Fatalf("bad expectation: %v", err)
			}
			if diff := cmp.Diff(wantParts, sent.Contents[1].Parts); diff != "" {
				t.Errorf("model turn (-want +got):\n%s", diff)
			}
		})
	}
}

// replayThenCapture serves recording to the first request and a short text answer to the next,
// whose body the returned function gives.
func replayThenCapture(t *testing.T, recording []byte) (*httptest.Server, func() []byte) {
	t.Helper()
	var mu sync.Mutex
	var bodies [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, b)
		n := len(bodies)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		if n == 1 {
			w.Write(recording)
			return
		}
		io.WriteString(w, "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Done.\"}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}]}\r\n\r\n")
	}))
	t.Cleanup(srv.Close)
	return srv, func() []byte {
		mu.Lock()
		defer mu.Unlock()
		if len(bodies) < 2 {
			t.Fatal("no second request")
		}
		return bodies[1]
	}
}
