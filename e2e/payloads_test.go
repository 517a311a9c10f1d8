package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// payloadConfig gives the default agent a payload type and tells it about suggestions.
const payloadConfig = `agents:
  default:
    suggestions: true
    payloads:
      - name: schema_proposal
        marker: "SCHEMA_PROPOSAL:"
        instructions: Propose a table when the user wants to keep what they found.
        schema: {type: object, required: [table, columns]}
`

// TestBrowserPayloads: against aimock, an answer ending with SUGGESTED_VALUES, SUGGESTED_ACTIONS and a
// payload marker shows buttons and no marker text; a tool's payload and the marker's both render with
// their summaries; pressing the server action runs its tool as a run of its own; pressing a value sends
// it; a reload shows it all again; and the next request's system prompt lists the payloads by id.
func TestBrowserPayloads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	config := filepath.Join(dir, "chatd.yaml")
	if err := os.WriteFile(config, []byte(payloadConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	mockPort := startAimock(t, "testdata/payload-fixtures.json", "--strict")
	p := startChatd(t, "chatd", buildChatd(t), filepath.Join(dir, "chatd.db"),
		"OPENAI_API_KEY="+apiKey, "OPENAI_BASE_URL="+mockAddr(mockPort)+"/v1",
		"ANTHROPIC_API_KEY=", "ANTHROPIC_BASE_URL=", "GEMINI_API_KEY=", "GEMINI_BASE_URL=", "OLLAMA_HOST=",
		"CHATD_CONFIG="+config, "CHATD_MODEL=", "CHATD_MCP_CONFIG=")
	b := startBrowser(t, p.base)
	tb := b.newTab(t)
	tb.open("/")
	tb.send("payloads: what time is it in Paris?")
	if text := tb.waitAnswer("It is morning in Paris."); strings.Contains(text, "SUGGESTED") || strings.Contains(text, "SCHEMA_PROPOSAL") || strings.Contains(text, "city_times") {
		t.Errorf("marker text reached the page: %q", text)
	}
	sid := tb.sessionID()
	shown := func(when string) {
		t.Helper()
		tb.wait("suggestion buttons "+when, `[...document.querySelectorAll('[data-testid="suggestion"]')].map(b => b.innerText.trim()).join("|") === "Tell me more|Tokyo"`)
		tb.wait("the server action, naming its tool, "+when, `[...document.querySelectorAll('[data-testid="suggested-action"][data-handler="server"]')].some(b => b.innerText.includes("UTC time") && b.title.includes("current_time"))`)
		tb.wait("the tool's payload "+when, `(() => { const p = document.querySelector('[data-testid="payload-part"][data-source="tool"]');
			return !!p && p.querySelector('[data-testid="payload-title"]').innerText.includes("current_time returned") && p.innerText.includes("Europe/Paris"); })()`)
		tb.wait("the marker's payload "+when, `(() => { const p = document.querySelector('[data-testid="payload-part"][data-source="marker"]');
			return !!p && p.querySelector('[data-testid="payload-title"]').innerText.includes("schema_proposal") && p.innerText.includes("city_times"); })()`)
		if text := evalJS[string](tb, `document.querySelector('.thread').innerText`); strings.Contains(text, "SUGGESTED_") || strings.Contains(text, "SCHEMA_PROPOSAL") {
			t.Errorf("marker text on the page %s", when)
		}
	}
	shown("after the answer")
	tb.screenshot("20-payloads")

	// The server action runs current_time in the session, and the chat shows its run.
	tb.do("press the server action", chromedp.Click(chromedp.CSS(`[data-testid="suggested-action"][data-handler="server"]`)))
	tb.wait("the action's run", `(() => { const a = [...document.querySelectorAll('[data-testid="message"][data-role="assistant"]')];
		const last = a[a.length - 1];
		return a.length === 2 && last.dataset.status === "done" && !!last.querySelector('[data-testid="tool-card"][data-tool-name="current_time"]')
			&& last.innerText.includes("UTC") && !last.querySelector('[data-testid="regenerate"]'); })()`)
	recs := waitRecords(t, p, sid, func(rs []record) bool { return len(rs) == 6 })
	if a, r := recs[4], recs[5]; a.Role != "assistant" || len(a.ToolCalls) != 1 || a.ToolCalls[0].Name != "current_time" ||
		a.ToolCalls[0].Arguments["timezone"] != "UTC" || r.Role != "tool" || r.Success == nil || !*r.Success {
		t.Errorf("the action's records: %+v %+v", a, r)
	}

	// A suggested value sends itself.
	tb.do("press a suggested value", chromedp.Click(chromedp.CSS(`[data-testid="suggestion"]`)))
	tb.wait("the value sent", `[...document.querySelectorAll('[data-testid="message"][data-role="user"]')].some(m => m.innerText.includes("Tell me more"))`)
	tb.waitAnswer("Paris keeps Central European Time.")

	// The stored answer: clean text, its suggestions and payload apart.
	var msgs struct {
		Messages []struct {
			Role, Content   string
			RawContent      string              `json:"raw_content"`
			SuggestedValues []map[string]string `json:"suggested_values"`
			Payloads        []struct{ ID, Type string }
			PayloadID       string `json:"payload_id"`
		}
	}
	getJSON(t, p.base+"/v1/sessions/"+sid+"/messages", &msgs)
	var ids []string
	for _, m := range msgs.Messages {
		if m.PayloadID != "" {
			ids = append(ids, m.PayloadID)
		}
		for _, pl := range m.Payloads {
			ids = append(ids, pl.ID)
		}
		if m.Role == "assistant" && strings.Contains(m.RawContent, "SUGGESTED_VALUES") &&
			(m.Content != "It is morning in Paris.\n" || len(m.SuggestedValues) != 2 || len(m.Payloads) != 1) {
			t.Errorf("stored answer: %+v", m)
		}
	}
	if len(ids) != 3 {
		t.Fatalf("payload ids %v, want the tool's, the marker's and the action's", ids)
	}

	// The next request's system prompt lists every earlier payload by id.
	var journal []struct {
		Body struct{ Messages []map[string]any }
	}
	getJSON(t, fmt.Sprintf("http://127.0.0.1:%d/__aimock/journal", mockPort), &journal)
	last := journal[len(journal)-1].Body.Messages
	system, _ := last[0]["content"].(string)
	for _, id := range ids {
		if !strings.Contains(system, id) {
			t.Errorf("the system prompt of the next request does not list payload %s:\n%s", id, system)
		}
	}
	if !strings.Contains(system, "SCHEMA_PROPOSAL: (schema_proposal)") || !strings.Contains(system, "get_payload") {
		t.Errorf("the system prompt lacks the payload type or get_payload:\n%s", system)
	}

	// A reload shows the buttons and the payloads again.
	tb.open("/c/" + sid)
	shown("after a reload")
	if n := evalJS[int](tb, `document.querySelectorAll('[data-testid="payload-part"]').length`); n != 3 {
		t.Errorf("%d payloads after a reload, want 3", n)
	}
	tb.screenshot("21-payloads-reloaded")
}
