package httpapi_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"chatd/internal/httpapi"
	"chatd/internal/llm/llmtest"
)

// TestRejectedUIChatStoresNothing: a POST /v1/ui/chat that is refused stores no session — it once
// stored one in 5 of 5 cases, and the one made for an unknown agent could never take a message.
func TestRejectedUIChatStoresNothing(t *testing.T) {
	e := newEnv(t, httpapi.Options{}, llmtest.Turn{Text: "Hi."})
	file := func(mediaType string, data []byte) string {
		return `{"type":"file","mediaType":"` + mediaType + `","url":"data:` + mediaType + `;base64,` + base64.StdEncoding.EncodeToString(data) + `"}`
	}
	png := []byte("\x89PNG\r\n\x1a\n0000")
	var many []string
	for range 9 {
		many = append(many, file("image/png", png))
	}
	for _, tc := range []struct {
		name, extra, parts, code string
	}{
		{"unknown agent", `"agent":"nobody",`, `{"type":"text","text":"hi"}`, "unknown_agent"},
		{"unknown model", `"model":"nowhere/m",`, `{"type":"text","text":"hi"}`, "invalid_model"},
		{"bad max_iterations", `"max_iterations":99,`, `{"type":"text","text":"hi"}`, "invalid_max_iterations"},
		{"too many files", ``, strings.Join(many, ","), "too_many_attachments"},
		{"SVG", ``, file("image/svg+xml", []byte("<svg/>")), "invalid_attachment"},
		{"HTML declared as PNG", ``, file("image/png", []byte("<html><script>x</script>")), "invalid_attachment"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"id":"chat-` + strings.ReplaceAll(tc.name, " ", "-") + `",` + tc.extra +
				`"trigger":"submit-message","messages":[{"id":"m1","role":"user","parts":[` + tc.parts + `]}]}`
			resp, raw := e.do(t, "POST", "/v1/ui/chat", body)
			if got := jsonError(t, resp, raw); resp.StatusCode != http.StatusBadRequest || got.Code != tc.code {
				t.Errorf("%d %s %q; want 400 %s", resp.StatusCode, got.Code, got.Message, tc.code)
			}
		})
	}
	checkNoSessions(t, e)

	// An accepted one starts its session under the client's id.
	resp, _ := e.do(t, "POST", "/v1/ui/chat", `{"id":"chat-ok","trigger":"submit-message","messages":[{"id":"m1","role":"user","parts":[`+
		file("image/png", png)+`,{"type":"text","text":"what is it?"}]}]}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Session-Id") != "chat-ok" {
		t.Errorf("an accepted UI chat: %d, session %q", resp.StatusCode, resp.Header.Get("X-Session-Id"))
	}
}

// TestReplayedBatchSendAnswers200: a send retried with its Idempotency-Key answers 200 with the run as
// it ended, also when it failed: sending it again cannot change it, so the answer must not invite
// another retry. (An interrupted run answered 500 "retryable" forever.) The first answer still says
// the provider failed.
func TestReplayedBatchSendAnswers200(t *testing.T) {
	e := newEnv(t, httpapi.Options{}, llmtest.Turn{Status: 401, ErrorMessage: "Incorrect API key provided"})
	send := func() (*http.Response, []byte) {
		return e.send(t, "POST", "/v1/chat", map[string]string{"Content-Type": "application/json", "Idempotency-Key": "k1"}, `{"message":"hi"}`)
	}
	first, raw := send()
	if first.StatusCode != http.StatusBadGateway {
		t.Fatalf("first send: %d %s", first.StatusCode, raw)
	}
	again, raw2 := send()
	var a, b map[string]any
	json.Unmarshal(raw, &a)
	json.Unmarshal(raw2, &b)
	if again.StatusCode != http.StatusOK || again.Header.Get("Idempotent-Replayed") != "true" || b["status"] != "failed" ||
		b["run_id"] != a["run_id"] || b["error"] == nil {
		t.Errorf("retried send: %d %s; want 200 with the failed run %v and its error", again.StatusCode, raw2, a["run_id"])
	}
}

// TestTrailingBytesAreRefused: a body with anything after its JSON object is refused, a stray brace
// too (json.Decoder.More misses it).
func TestTrailingBytesAreRefused(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	for _, body := range []string{`{"title":"x"}}`, `{"title":"x"}]`, `{"title":"x"} junk`, `{"title":"x"}{"title":"y"}`} {
		resp, raw := e.do(t, "POST", "/v1/sessions", body)
		if got := jsonError(t, resp, raw); resp.StatusCode != http.StatusBadRequest || got.Code != "invalid_json" {
			t.Errorf("%s: %d %s; want 400 invalid_json", body, resp.StatusCode, got.Code)
		}
	}
	if resp, raw := e.do(t, "POST", "/v1/sessions", "{\"title\":\"x\"} \n"); resp.StatusCode != http.StatusCreated {
		t.Errorf("trailing space: %d %s", resp.StatusCode, raw)
	}
	checkOneSession := func() {
		_, raw := e.do(t, "GET", "/v1/sessions", "")
		if n := strings.Count(string(raw), `"agent"`); n != 1 {
			t.Errorf("%d sessions, want the one accepted", n)
		}
	}
	checkOneSession()
}
