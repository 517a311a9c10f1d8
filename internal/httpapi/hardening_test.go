package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"chatd/internal/httpapi"
	"chatd/internal/llm/llmtest"
)

// send makes a request with exactly the headers given: unlike e.do, it sets no Content-Type.
func (e *env) send(t *testing.T, method, path string, header map[string]string, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, raw
}

type apiErr struct{ Code, Message string }

// jsonError decodes an error answer, failing the test when the body is not chatd's JSON error.
func jsonError(t *testing.T, resp *http.Response, raw []byte) apiErr {
	t.Helper()
	var got struct{ Error *apiErr }
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%d with Content-Type %q, want application/json: %.200s", resp.StatusCode, ct, raw)
	}
	if err := json.Unmarshal(raw, &got); err != nil || got.Error == nil {
		t.Fatalf("%d, body is not a JSON error: %.200s", resp.StatusCode, raw)
	}
	return *got.Error
}

func checkNoSessions(t *testing.T, e *env) {
	t.Helper()
	if _, raw := e.do(t, "GET", "/v1/sessions", ""); !strings.Contains(string(raw), `"sessions":[]`) {
		t.Errorf("sessions after refused requests: %s", raw)
	}
}

// TestCrossOriginRefusalIsJSONError: the CSRF refusal is the API's JSON error, not net/http's text.
func TestCrossOriginRefusalIsJSONError(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	for name, header := range map[string]map[string]string{
		"fetch metadata": {"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"},
		"origin only":    {"Content-Type": "application/json", "Origin": "http://attacker.example"},
	} {
		t.Run(name, func(t *testing.T) {
			resp, raw := e.send(t, "POST", "/v1/sessions", header, `{"title":"x"}`)
			got := jsonError(t, resp, raw)
			if resp.StatusCode != http.StatusForbidden || got.Code != "cross_origin_request" || !strings.Contains(got.Message, "another origin") {
				t.Errorf("got %d %s %q; want 403 cross_origin_request", resp.StatusCode, got.Code, got.Message)
			}
		})
	}
	checkNoSessions(t, e)
}

// TestWrongMethodIs405: a path a route serves with other methods answers 405 with Allow, as ServeMux
// does; a path no route serves stays 404; HEAD still reaches GET routes.
func TestWrongMethodIs405(t *testing.T) {
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("the UI")) })
	for name, opts := range map[string]httpapi.Options{"without UI": {}, "with UI": {UI: ui}} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, opts)
			tests := []struct {
				method, path string
				status       int
				code, allow  string
			}{
				{"PUT", "/v1/chat", 405, "method_not_allowed", "POST"},
				{"GET", "/v1/chat/stream", 405, "method_not_allowed", "POST"},
				{"HEAD", "/v1/chat", 405, "", "POST"},
				{"DELETE", "/v1/runs/r1/cancel", 405, "method_not_allowed", "POST"},
				{"POST", "/v1/runs/r1", 405, "method_not_allowed", "GET, HEAD"},
				{"PUT", "/v1/sessions/s1", 405, "method_not_allowed", "DELETE, GET, HEAD, PATCH"},
				{"DELETE", "/v1/sessions", 405, "method_not_allowed", "GET, HEAD, POST"},
				{"POST", "/v1/ui/chat/c1", 405, "method_not_allowed", "GET, HEAD"},
				{"PUT", "/v1/nothing", 404, "not_found", ""},
				{"GET", "/v1/chat/nothing", 404, "not_found", ""},
				{"GET", "/v1/sessions/s1/", 404, "not_found", ""},
			}
			for _, tt := range tests {
				resp, raw := e.do(t, tt.method, tt.path, "")
				if resp.StatusCode != tt.status || resp.Header.Get("Allow") != tt.allow {
					t.Errorf("%s %s: %d Allow %q, want %d Allow %q", tt.method, tt.path, resp.StatusCode, resp.Header.Get("Allow"), tt.status, tt.allow)
				}
				if tt.method == "HEAD" {
					continue // no body to read the code from
				}
				if got := jsonError(t, resp, raw); got.Code != tt.code || !strings.Contains(got.Message, tt.path) {
					t.Errorf("%s %s: %s %q, want %s naming the path", tt.method, tt.path, got.Code, got.Message, tt.code)
				}
			}
			for _, path := range []string{"/v1/sessions", "/v1/models", "/healthz"} {
				if resp, raw := e.do(t, "HEAD", path, ""); resp.StatusCode != http.StatusOK || len(raw) != 0 {
					t.Errorf("HEAD %s: %d with %d bytes, want 200 without a body", path, resp.StatusCode, len(raw))
				}
			}
		})
	}
}

// TestMissingContentTypeIs415: a body the API decodes must be declared as JSON; routes that take no
// body need no Content-Type.
func TestMissingContentTypeIs415(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	uiBody := `{"id":"c1","trigger":"submit-message","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"hi"}]}]}`
	for _, tt := range []struct{ method, path, body string }{
		{"POST", "/v1/chat", `{"message":"hi"}`},
		{"POST", "/v1/chat/stream", `{"message":"hi"}`},
		{"POST", "/v1/sessions", `{"title":"x"}`},
		{"PATCH", "/v1/sessions/s1", `{"title":"x"}`},
		{"POST", "/v1/ui/chat", uiBody},
	} {
		resp, raw := e.send(t, tt.method, tt.path, nil, tt.body)
		if got := jsonError(t, resp, raw); resp.StatusCode != http.StatusUnsupportedMediaType || got.Code != "unsupported_media_type" ||
			!strings.Contains(got.Message, "Content-Type: application/json") {
			t.Errorf("%s %s without Content-Type: %d %s %q, want 415 unsupported_media_type", tt.method, tt.path, resp.StatusCode, got.Code, got.Message)
		}
	}
	checkNoSessions(t, e)

	// JSON declared with parameters or as a +json type is JSON.
	for _, ct := range []string{"application/json; charset=utf-8", "application/merge-patch+json"} {
		if resp, raw := e.send(t, "POST", "/v1/sessions", map[string]string{"Content-Type": ct}, `{"title":"x"}`); resp.StatusCode != http.StatusCreated {
			t.Errorf("Content-Type %s: %d %s, want 201", ct, resp.StatusCode, raw)
		}
	}

	// Routes without a body do without a Content-Type.
	_, raw := e.do(t, "POST", "/v1/sessions", `{"title":"bye"}`)
	var sess struct{ ID string }
	if err := json.Unmarshal(raw, &sess); err != nil || sess.ID == "" {
		t.Fatalf("create session: %s", raw)
	}
	for _, tt := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/v1/sessions/" + sess.ID, http.StatusOK},
		{"POST", "/v1/runs/nope/cancel", http.StatusNotFound},
		{"DELETE", "/v1/sessions/" + sess.ID, http.StatusNoContent},
	} {
		if resp, raw := e.send(t, tt.method, tt.path, nil, ""); resp.StatusCode != tt.status {
			t.Errorf("%s %s without Content-Type: %d %s, want %d", tt.method, tt.path, resp.StatusCode, raw, tt.status)
		}
	}
}

// TestInvalidUTF8IsRefused: invalid UTF-8, raw or as an unpaired surrogate escape, is refused rather than
// turned into U+FFFD.
func TestInvalidUTF8IsRefused(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	uiBody := `{"id":"c1","trigger":"submit-message","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"\udc00"}]}]}`
	tests := []struct {
		name, path, body, at string
	}{
		{"invalid byte", "/v1/chat", "{\"message\":\"a\xffb\"}", "byte 13"},
		{"truncated character", "/v1/chat/stream", "{\"message\":\"a\xe2\x82\"}", "byte 13"},
		{"encoded surrogate", "/v1/sessions", "{\"title\":\"\xed\xa0\x80\"}", "byte 10"},
		{"offset in the sent body", "/v1/sessions", "\n  {\"title\":\"\xff\"}", "byte 13"},
		{"lone high", "/v1/chat", `{"message":"\ud800"}`, `\ud800 (at byte 12)`},
		{"lone high at the end of a key", "/v1/sessions", `{"metadata":{"k\uD83D":1}}`, `\uD83D (at byte 15)`},
		{"high then text", "/v1/chat", `{"message":"\ud83dx"}`, `\ud83d`},
		{"high then another escape", "/v1/chat", `{"message":"\ud83d\u0041"}`, `\ud83d`},
		{"two highs", "/v1/chat", `{"message":"\ud83d\ud83d"}`, `\ud83d (at byte 12)`},
		{"lone low", "/v1/sessions", `{"title":"ok \ude00"}`, `\ude00 (at byte 13)`},
		{"low then high", "/v1/sessions", `{"title":"\udc00\ud800"}`, `\udc00 (at byte 10)`},
		{"after a valid pair", "/v1/chat", `{"message":"\ud83d\ude00 \ud800"}`, `\ud800 (at byte 25)`},
		{"offset in the sent body, escaped", "/v1/sessions", "  \t" + `{"title":"\ud800"}`, `(at byte 13)`},
		{"ui chat", "/v1/ui/chat", uiBody, `\udc00`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, raw := e.do(t, "POST", tt.path, tt.body)
			got := jsonError(t, resp, raw)
			if resp.StatusCode != http.StatusBadRequest || got.Code != "invalid_utf8" || !strings.Contains(got.Message, tt.at) {
				t.Errorf("got %d %s %q; want 400 invalid_utf8 naming %s", resp.StatusCode, got.Code, got.Message, tt.at)
			}
		})
	}
	checkNoSessions(t, e)

	// A valid pair, and a backslash that is itself escaped, are text.
	for body, title := range map[string]string{
		`{"title":"\ud83d\ude00 \uD83D\uDE00"}`: "😀 😀",
		`{"title":"\\ud800"}`:                   `\ud800`,
		`{"title":"\\\ud83d\ude00"}`:            `\😀`,
	} {
		resp, raw := e.do(t, "POST", "/v1/sessions", body)
		var sess struct{ Title string }
		if err := json.Unmarshal(raw, &sess); err != nil || resp.StatusCode != http.StatusCreated || sess.Title != title {
			t.Errorf("%s: %d %s, want 201 with title %q", body, resp.StatusCode, raw, title)
		}
	}
}

// TestAttachmentIndexIsCanonical: one attachment has one URL; "+0", "00" and the like are not its index.
func TestAttachmentIndexIsCanonical(t *testing.T) {
	e := newEnv(t, httpapi.Options{}, llmtest.Turn{Text: "A red dot."})
	png := "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
	_, events := e.stream(t, `{"message":"What is this?","attachments":[{"media_type":"image/png","name":"dot.png","data":"`+png+`"}]}`)
	var base string
	for _, ev := range events {
		if m, _ := ev.Data["message"].(map[string]any); ev.Type == "record" && m["role"] == "user" {
			base = "/v1/sessions/" + m["session_id"].(string) + "/records/" + m["id"].(string) + "/attachments/"
			break
		}
	}
	if base == "" {
		t.Fatalf("no user record in %v", types(events))
	}
	if resp, _ := e.do(t, "GET", base+"0", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s0: %d, want 200", base, resp.StatusCode)
	}
	for _, n := range []string{"+0", "%2B0", "00", "000", "-0", "0x0", "1", "-1", "%200", "0%20"} {
		resp, raw := e.do(t, "GET", base+n, "")
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET …/attachments/%s: %d, want 404", n, resp.StatusCode)
		} else if got := jsonError(t, resp, raw); got.Code != "not_found" {
			t.Errorf("GET …/attachments/%s: 404 %s, want not_found", n, got.Code)
		}
	}
}
