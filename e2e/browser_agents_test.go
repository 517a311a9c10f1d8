package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserAgentsAndTitles: in the web UI, a new chat starts with the agent picked in the agent picker
// (GET /v1/agents), and its title, which chatd makes from the first exchange after the answer ended,
// appears in the sidebar without a reload; the answer's diagnostics show the model's raw answer.
func TestBrowserAgentsAndTitles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	config := filepath.Join(dir, "chatd.yaml")
	agents := "agents:\n  default:\n    description: Answers anything.\n  support:\n    description: The help desk.\n"
	if err := os.WriteFile(config, []byte(agents), 0o644); err != nil {
		t.Fatal(err)
	}
	mockPort := startAimock(t, "testdata/titles-fixtures.json", "--strict")
	p := startChatd(t, "chatd", buildChatd(t), filepath.Join(dir, "chatd.db"),
		"OPENAI_API_KEY="+apiKey, "OPENAI_BASE_URL="+mockAddr(mockPort)+"/v1",
		"ANTHROPIC_API_KEY=", "ANTHROPIC_BASE_URL=", "GEMINI_API_KEY=", "GEMINI_BASE_URL=", "OLLAMA_HOST=",
		"CHATD_CONFIG="+config, "CHATD_MODEL=openai/gpt-4o-mini", "CHATD_MCP_CONFIG=", "CHATD_TITLE_MODEL=")
	tb := startBrowser(t, p.base).newTab(t)
	tb.open("/")
	const picker = `document.querySelector('[data-testid="agent-picker"]')`
	tb.wait("the agent picker with both agents", picker+` && [...`+picker+`.options].map(o => o.value).join() === "default,support"`)
	tb.wait("support picked", `(() => { const s = `+picker+`; s.value = "support";
		s.dispatchEvent(new Event("change", {bubbles: true})); return s.value === "support"; })()`)
	tb.send("Quel temps fait-il à Paris aujourd'hui ?")
	tb.waitAnswer("Il fait beau")
	id := tb.sessionID()
	tb.wait("the generated title in the sidebar", fmt.Sprintf(`[...document.querySelectorAll('[data-testid="session-item"][data-session-id=%q] [data-testid="session-title"]')].some(e => e.innerText === "Météo à Paris")`, id))
	tb.screenshot("agents-01-titled")
	var s struct{ Agent, Title string }
	getJSON(t, p.base+"/v1/sessions/"+id, &s)
	if s.Agent != "support" || s.Title != "Météo à Paris" {
		t.Errorf("the session: %+v", s)
	}
	if n := evalJS[int](tb, `document.querySelectorAll('[data-testid="agent-picker"]').length`); n != 0 {
		t.Errorf("a chat that has started shows %d agent pickers: its agent is fixed", n)
	}
	tb.do("open diagnostics", chromedp.Click(chromedp.CSS(`[data-testid="diagnostics-button"]`)))
	tb.wait("the raw answer in the diagnostics", `(() => { const o = document.querySelector('[data-testid="diagnostics-output"]');
		return !!o && o.innerText.includes("Raw answer") && o.textContent.includes("Il fait beau"); })()`)
}
