package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"chatd/internal/httpapi"
)

// uiChunks posts body to /v1/ui/chat and reads the UI message stream to its end: the chunks, and
// whether it ended with [DONE].
func uiChunks(t *testing.T, e *env, method, path, body string) (*http.Response, []map[string]any, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, e.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var chunks []map[string]any
	done := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		switch {
		case line == "" || strings.HasPrefix(line, ":"):
			continue
		case !ok:
			t.Fatalf("a line that is not a data frame: %q", line)
		case done:
			t.Fatalf("a frame after [DONE]: %q", line)
		case data == "[DONE]":
			done = true
			continue
		}
		var c map[string]any
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("frame %q: %v", data, err)
		}
		chunks = append(chunks, c)
	}
	return resp, chunks, done
}

// checkUIStream holds a stream to the protocol's ordering rules: start first, finish last, every delta
// inside its part's start and end, steps balanced, every tool output after its input.
func checkUIStream(t *testing.T, chunks []map[string]any) {
	t.Helper()
	if len(chunks) == 0 || chunks[0]["type"] != "start" {
		t.Fatalf("the stream does not begin with start: %v", chunks)
	}
	open := map[string]bool{}
	inputs := map[string]bool{}
	step := false
	for i, c := range chunks {
		ty, _ := c["type"].(string)
		id, _ := c["id"].(string)
		call, _ := c["toolCallId"].(string)
		switch ty {
		case "start-step":
			if step {
				t.Errorf("chunk %d: start-step inside a step", i)
			}
			step = true
		case "finish-step":
			if !step || len(open) > 0 {
				t.Errorf("chunk %d: finish-step outside a step or with parts open %v", i, open)
			}
			step = false
		case "text-start", "reasoning-start":
			open[id] = true
		case "text-delta", "reasoning-delta":
			if !open[id] || !step {
				t.Errorf("chunk %d: %s for %q, which is not open", i, ty, id)
			}
		case "text-end", "reasoning-end":
			if !open[id] {
				t.Errorf("chunk %d: %s for %q, which is not open", i, ty, id)
			}
			delete(open, id)
		case "tool-input-start", "tool-input-available":
			inputs[call] = true
		case "tool-input-delta", "tool-output-available", "tool-output-error":
			if !inputs[call] {
				t.Errorf("chunk %d: %s for %q before its input", i, ty, call)
			}
		}
	}
	if last := chunks[len(chunks)-1]["type"]; last != "finish" && last != "abort" {
		t.Errorf("the stream ends with %v, want finish or abort", last)
	}
}

func chunkTypes(chunks []map[string]any) []string {
	var out []string
	for _, c := range chunks {
		ty := c["type"].(string)
		if len(out) > 0 && out[len(out)-1] == ty && strings.HasSuffix(ty, "-delta") {
			continue
		}
		out = append(out, ty)
	}
	return out
}

// TestUIChatStream: a useChat post with a client-made chat id starts a session under that id; the run
// (two tool calls, then an answer) streams as UI message chunks in the protocol's order, ending with
// [DONE]; the header names the protocol; a resume after the run answers 204.
func TestUIChatStream(t *testing.T) {
	e := newEnv(t, httpapi.Options{}, twoClocks, answer)
	body := `{"id":"chat-abc123","trigger":"submit-message","messageId":"m1","messages":[
		{"id":"u0","role":"user","parts":[{"type":"text","text":"an earlier question chatd already has"}]},
		{"id":"u1","role":"user","parts":[{"type":"text","text":"What time is it in Paris and Tokyo?"}]}]}`
	resp, chunks, done := uiChunks(t, e, "POST", "/v1/ui/chat", body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Vercel-Ai-Ui-Message-Stream") != "v1" {
		t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
	}
	if !done {
		t.Error("the stream did not end with [DONE]")
	}
	checkUIStream(t, chunks)
	if sid := resp.Header.Get("X-Session-Id"); sid != "chat-abc123" {
		t.Errorf("the run's session is %q, want the chat id", sid)
	}
	var outputs int
	for _, c := range chunks {
		if c["type"] == "tool-output-available" {
			outputs++
		}
	}
	t.Logf("chunks: %v", chunkTypes(chunks))
	if outputs != 2 {
		t.Errorf("%d tool outputs, want 2; chunks: %v", outputs, chunkTypes(chunks))
	}
	// Only the newest user message was taken.
	recs, err := e.db.Records(t.Context(), httpapi.LocalUser, "chat-abc123")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) == 0 || recs[0].Content != "What time is it in Paris and Tokyo?" {
		t.Errorf("stored records %+v, want the newest user message first", recs)
	}
	if r, _ := e.do(t, "GET", "/v1/ui/chat/chat-abc123/stream", ""); r.StatusCode != http.StatusNoContent {
		t.Errorf("resume with no active run: %d, want 204", r.StatusCode)
	}
	// A client that read the history while the run ran resumes it by id after it has ended: it gets
	// the whole answer, not 204.
	runID := resp.Header.Get("X-Run-Id")
	r, again, done := uiChunks(t, e, "GET", "/v1/ui/chat/chat-abc123/stream?run="+runID, "")
	if r.StatusCode != http.StatusOK || !done || len(again) != len(chunks) {
		t.Errorf("resume of the ended run %s: %d, %d chunks (done %v), want 200 and the %d chunks of the stream", runID, r.StatusCode, len(again), done, len(chunks))
	}
	for _, path := range []string{"/v1/ui/chat/chat-abc123/stream?run=no-such-run", "/v1/ui/chat/another-chat/stream?run=" + runID} {
		if r, raw := e.do(t, "GET", path, ""); r.StatusCode != http.StatusNotFound || !strings.Contains(string(raw), "run_not_found") {
			t.Errorf("GET %s: %d %s, want 404 run_not_found", path, r.StatusCode, raw)
		}
	}
}

func TestUIChatBadInput(t *testing.T) {
	e := newEnv(t, httpapi.Options{}, answer)
	for _, tc := range []struct{ body, code string }{
		{`{"id":"","messages":[{"role":"user","parts":[{"type":"text","text":"hi"}]}]}`, "invalid_chat_id"},
		{`{"id":"a/b","messages":[{"role":"user","parts":[{"type":"text","text":"hi"}]}]}`, "invalid_chat_id"},
		{`{"id":"..","messages":[{"role":"user","parts":[{"type":"text","text":"hi"}]}]}`, "invalid_chat_id"},
		{`{"id":".","messages":[{"role":"user","parts":[{"type":"text","text":"hi"}]}]}`, "invalid_chat_id"},
		{`{"id":"c1","messages":[]}`, "missing_message"},
		{`{"id":"c1","trigger":"nope","messages":[{"role":"user","parts":[{"type":"text","text":"hi"}]}]}`, "invalid_trigger"},
		{`{"id":"c1","messages":[{"role":"user","parts":[{"type":"file","mediaType":"image/png","url":"https://x/y.png"}]}]}`, "invalid_attachment"},
	} {
		resp, raw := e.do(t, "POST", "/v1/ui/chat", tc.body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(raw), tc.code) {
			t.Errorf("%s: %d %s, want 400 %s", tc.body, resp.StatusCode, raw, tc.code)
		}
	}
}
