package httpapi_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/httpapi"
	"chatd/internal/llm/llmtest"
)

// TestUIHistory: a finished UI chat comes back as the UIMessages useChat starts from — one assistant
// message per run, tool parts with their outputs, attachments as links — and the run's diagnostics show
// what was sent.
func TestUIHistory(t *testing.T) {
	e := newEnv(t, httpapi.Options{}, twoClocks, answer)
	png := "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
	body := `{"id":"chat-hist","trigger":"submit-message","messages":[{"id":"u1","role":"user","parts":[
		{"type":"text","text":"What time is it in Paris and Tokyo?"},
		{"type":"file","mediaType":"image/png","filename":"dot.png","url":"data:image/png;base64,` + png + `"}]}]}`
	resp, chunks, done := uiChunks(t, e, "POST", "/v1/ui/chat", body)
	if resp.StatusCode != http.StatusOK || !done {
		t.Fatalf("post: %d, done %v", resp.StatusCode, done)
	}
	runID := resp.Header.Get("X-Run-Id")
	checkUIStream(t, chunks)

	r, raw := e.do(t, "GET", "/v1/ui/chat/chat-hist", "")
	if r.StatusCode != http.StatusOK {
		t.Fatalf("history: %d %s", r.StatusCode, raw)
	}
	var h struct {
		ID, Title   string
		ActiveRunID string `json:"active_run_id"`
		Messages    []struct {
			ID, Role string
			Metadata map[string]any
			Parts    []map[string]any
		}
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		t.Fatal(err)
	}
	if h.ID != "chat-hist" || h.ActiveRunID != "" || len(h.Messages) != 2 {
		t.Fatalf("history %s", raw)
	}
	u, a := h.Messages[0], h.Messages[1]
	var types []string
	for _, p := range u.Parts {
		types = append(types, p["type"].(string))
	}
	if u.Role != "user" || !cmp.Equal(types, []string{"text", "file"}) || u.Parts[1]["mediaType"] != "image/png" {
		t.Errorf("user message %+v", u)
	}
	types = nil
	for _, p := range a.Parts {
		types = append(types, p["type"].(string))
	}
	want := []string{"step-start", "text", "tool-current_time", "tool-current_time", "data-payload", "data-payload", "step-start", "text"}
	if a.ID != "msg_"+runID || a.Role != "assistant" || !cmp.Equal(types, want) {
		t.Errorf("assistant message %s %s parts %v, want msg_%s with %v", a.ID, a.Role, types, runID, want)
	}
	if a.Metadata["run_id"] != runID || a.Metadata["model"] == "" {
		t.Errorf("assistant metadata %v", a.Metadata)
	}
	tp := a.Parts[2]
	out, _ := tp["output"].(map[string]any)
	if tp["state"] != "output-available" || tp["toolCallId"] != "call_paris" || out == nil ||
		!strings.Contains(out["content"].(string), "Paris") {
		t.Errorf("tool part %v", tp)
	}
	if in, _ := tp["input"].(map[string]any); in["timezone"] != "Europe/Paris" {
		t.Errorf("tool part input %v", tp["input"])
	}

	// The image link serves the bytes, as an image that cannot script the page.
	url := u.Parts[1]["url"].(string)
	r, img := e.do(t, "GET", url, "")
	wantPNG, _ := base64.StdEncoding.DecodeString(png)
	if r.StatusCode != http.StatusOK || r.Header.Get("Content-Type") != "image/png" || string(img) != string(wantPNG) ||
		r.Header.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(r.Header.Get("Cache-Control"), "private") {
		t.Errorf("GET %s: %d %v (%d bytes)", url, r.StatusCode, r.Header, len(img))
	}
	for _, bad := range []string{strings.Replace(url, "/0", "/1", 1), strings.Replace(url, "/0", "/x", 1),
		strings.Replace(url, "chat-hist", "nope", 1)} {
		if r, _ := e.do(t, "GET", bad, ""); r.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", bad, r.StatusCode)
		}
	}

	// Diagnostics: the settings, the system prompt, the tools, and the body of the latest call.
	r, raw = e.do(t, "GET", "/v1/runs/"+runID+"/diagnostics", "")
	var d struct {
		RunID        string `json:"run_id"`
		Model        string
		SystemPrompt string `json:"system_prompt"`
		Tools        []string
		ModelCalls   int `json:"model_calls"`
		Request      struct {
			Model    string
			Messages []map[string]any
		}
	}
	if err := json.Unmarshal(raw, &d); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("diagnostics: %d %s (%v)", r.StatusCode, raw, err)
	}
	if d.RunID != runID || d.Model != "openai/gpt-4o-mini" || d.SystemPrompt == "" || !cmp.Equal(d.Tools, []string{"current_time"}) ||
		d.ModelCalls != 2 || d.Request.Model != "gpt-4o-mini" {
		t.Errorf("diagnostics %+v", d)
	}
	// The latest call held the tool results: system, user, assistant, two tool messages.
	if n := len(d.Request.Messages); n != 5 || d.Request.Messages[n-1]["role"] != "tool" {
		t.Errorf("diagnostics request messages %v", d.Request.Messages)
	}
	if r, raw := e.do(t, "GET", "/v1/runs/no-such-run/diagnostics", ""); r.StatusCode != http.StatusNotFound ||
		!strings.Contains(string(raw), "diagnostics_unavailable") {
		t.Errorf("diagnostics of an unknown run: %d %s", r.StatusCode, raw)
	}
	if r, _ := e.do(t, "GET", "/v1/ui/chat/no-such-chat", ""); r.StatusCode != http.StatusNotFound {
		t.Errorf("history of an unknown chat: %d, want 404", r.StatusCode)
	}
	if r, _ := e.do(t, "GET", "/v1/ui/chat/a%20b", ""); r.StatusCode != http.StatusBadRequest {
		t.Errorf("history of a bad chat id: %d, want 400", r.StatusCode)
	}
}

// TestRegenerateOverTheAPI: /v1/chat with regenerate answers the last message again; the history shows
// the new answer only, and the stored records keep the old one.
func TestRegenerateOverTheAPI(t *testing.T) {
	e := newEnv(t, httpapi.Options{}, llmtest.Turn{Text: "first try"}, llmtest.Turn{Text: "second try"})
	var first struct {
		SessionID string `json:"session_id"`
	}
	r, raw := e.do(t, "POST", "/v1/chat", `{"message":"hello"}`)
	if err := json.Unmarshal(raw, &first); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("first: %d %s", r.StatusCode, raw)
	}
	r, raw = e.do(t, "POST", "/v1/chat", `{"session_id":"`+first.SessionID+`","regenerate":true}`)
	if r.StatusCode != http.StatusOK || !strings.Contains(string(raw), "second try") {
		t.Fatalf("regenerate: %d %s", r.StatusCode, raw)
	}
	if r, raw := e.do(t, "POST", "/v1/chat", `{"session_id":"`+first.SessionID+`","regenerate":true,"message":"x"}`); r.StatusCode != http.StatusBadRequest ||
		!strings.Contains(string(raw), "invalid_regenerate") {
		t.Errorf("regenerate with a message: %d %s", r.StatusCode, raw)
	}
	_, raw = e.do(t, "GET", "/v1/ui/chat/"+first.SessionID, "")
	if strings.Contains(string(raw), "first try") || !strings.Contains(string(raw), "second try") {
		t.Errorf("history after regenerate: %s", raw)
	}
	_, raw = e.do(t, "GET", "/v1/sessions/"+first.SessionID+"/messages", "")
	if !strings.Contains(string(raw), "first try") || !strings.Contains(string(raw), `"retracts"`) {
		t.Errorf("stored records after regenerate: %s", raw)
	}
	// The model was sent the question without the retracted answer.
	reqs := e.upstream.Requests()
	for _, m := range reqs[len(reqs)-1].Messages() {
		if m["role"] == "assistant" {
			t.Errorf("the regenerating call was sent an assistant message: %v", m)
		}
	}
}

// TestUIRoutes: with a UI, / and client routes go to it, and the API's routes stay the API's.
func TestUIRoutes(t *testing.T) {
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("the UI: " + r.URL.Path)) })
	e := newEnv(t, httpapi.Options{UI: ui})
	for path, want := range map[string]string{
		"/":           "the UI: /",
		"/c/abc":      "the UI: /c/abc",
		"/healthz":    `{"status":"ok"}`,
		"/v1/nothing": `"not_found"`,
	} {
		if _, raw := e.do(t, "GET", path, ""); !strings.Contains(string(raw), want) {
			t.Errorf("GET %s: %s, want %s", path, raw, want)
		}
	}
}
