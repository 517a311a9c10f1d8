package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"chatd/internal/llm/llmtest"
)

// setControlled sets the value of a React-controlled field (select, input or textarea) as a person's
// edit does — through the element's own value setter, then the event React listens for — and reports
// whether it found the field.
func setControlled(tb *tab, selector, value string) {
	tb.t.Helper()
	js := fmt.Sprintf(`(() => {
		const el = document.querySelector(%q);
		if (!el) return false;
		const proto = Object.getPrototypeOf(el);
		Object.getOwnPropertyDescriptor(proto, "value").set.call(el, %q);
		el.dispatchEvent(new Event(el.tagName === "SELECT" ? "change" : "input", {bubbles: true}));
		return true;
	})()`, selector, value)
	if !evalJS[bool](tb, js) {
		tb.t.Fatalf("no %s on the page\n%s", selector, tb.dump())
	}
}

// clickJS clicks the element selector names with the DOM's click(): no coordinates, so a form that
// closes and moves the page at that moment cannot make it miss.
func clickJS(tb *tab, what, selector string) {
	tb.t.Helper()
	if !evalJS[bool](tb, fmt.Sprintf(`(() => { const el = document.querySelector(%q); if (!el || el.disabled) return false; el.click(); return true; })()`, selector)) {
		tb.t.Fatalf("%s: no enabled %s on the page\n%s", what, selector, tb.dump())
	}
}

// noRegenerateJS is true when no answer offers Regenerate.
const noRegenerateJS = `!document.querySelector('[data-testid="regenerate"]')`

// TestBrowserAskUser: in the web UI, an ask_user call with two questions, one with choices, shows a form
// (and no Regenerate while the run waits); the person picks a choice and types the other answer, and
// the answers reach the model's next request as the call's result; the answer streams into the same
// message.
func TestBrowserAskUser(t *testing.T) {
	t.Parallel()
	if findChromium() == "" {
		t.Skip("no Chromium")
	}
	up := llmtest.NewServer(t)
	up.Strict = true
	up.Respond = func(n int, req llmtest.Request) llmtest.Turn {
		msgs := req.Messages()
		if last := msgs[len(msgs)-1]; last["role"] == "tool" {
			return llmtest.Turn{Text: fmt.Sprintf("Booked, as you answered: %v", last["content"])}
		}
		return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: fmt.Sprintf("call_%d_ask", n), Name: "ask_user",
			Arguments: `{"questions":[{"question":"Which city?","choices":["Paris","Tokyo"]},{"question":"How many nights?"}]}`}}}
	}
	up.Requests()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "chatd.yaml")
	if err := os.WriteFile(cfg, []byte("agents:\n  default:\n    ask_user: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startChatd(t, "chatd", buildChatd(t), filepath.Join(dir, "chatd.db"), append(chatdEnv(up, "5s"), "CHATD_CONFIG="+cfg)...)
	tb := startBrowser(t, p.base).newTab(t)
	tb.open("/")
	tb.send("Book me a trip.")
	tb.wait("the questions", `document.querySelectorAll('[data-testid="question-form"] select, [data-testid="question-form"] input').length === 2`)
	if !evalJS[bool](tb, noRegenerateJS) {
		t.Error("an answer whose run waits for the user's answers offers Regenerate")
	}
	if txt := evalJS[string](tb, `document.querySelector('[data-testid="question-form"]').textContent`); !strings.Contains(txt, "Which city?") || !strings.Contains(txt, "How many nights?") {
		t.Errorf("the form does not ask both questions: %q", txt)
	}
	if !evalJS[bool](tb, `document.querySelector('[data-testid="answer"]').disabled`) {
		t.Error("Answer is enabled before the questions are answered")
	}
	tb.screenshot("22-ask-user")
	setControlled(tb, `[data-testid="question-form"] select`, "Tokyo")
	tb.typeIn("answer the second question", `[data-testid="question-form"] input`, "3")
	tb.wait("Answer enabled", `!document.querySelector('[data-testid="answer"]').disabled`)
	clickJS(tb, "send the answers", `[data-testid="answer"]`)
	tb.waitAnswer("Booked, as you answered")
	if n := evalJS[int](tb, `document.querySelectorAll('[data-testid="question-form"]').length`); n != 0 {
		t.Errorf("%d question forms left after the answer", n)
	}
	if n := evalJS[int](tb, `document.querySelectorAll('[data-testid="message"][data-role="assistant"]').length`); n != 1 {
		t.Errorf("%d assistant messages, want the one answer", n)
	}
	reqs := up.Requests()
	last := reqs[len(reqs)-1].Messages()
	result, _ := last[len(last)-1]["content"].(string)
	if !strings.Contains(result, `"question":"Which city?","answer":"Tokyo"`) || !strings.Contains(result, `"question":"How many nights?","answer":"3"`) {
		t.Errorf("the model's next request carries the call's result %q; want both answers", result)
	}
	tb.screenshot("23-ask-user-answered")
	checkModelRequests(t, up, 0)
}

// TestBrowserApprovalEdit: in the web UI, Edit on a call that waits shows its arguments; the person
// changes them and approves, and the tool runs with the edited arguments (its own result says so), the
// model told they were edited; Regenerate is not offered while the run waits.
func TestBrowserApprovalEdit(t *testing.T) {
	t.Parallel()
	if findChromium() == "" {
		t.Skip("no Chromium")
	}
	up := newModel(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "chatd.yaml")
	if err := os.WriteFile(cfg, []byte("agents:\n  default:\n    approvals:\n      - {tools: [current_time], decision: ask}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startChatd(t, "chatd", buildChatd(t), filepath.Join(dir, "chatd.db"), append(chatdEnv(up, "5s"), "CHATD_CONFIG="+cfg)...)
	tb := startBrowser(t, p.base).newTab(t)
	tb.open("/")
	tb.send("What time is it in Paris and Tokyo?")
	tb.wait("two calls waiting", `document.querySelectorAll('[data-testid="approval"] [data-testid="approve"]').length === 2`)
	if !evalJS[bool](tb, noRegenerateJS) {
		t.Error("an answer whose run waits for approval offers Regenerate")
	}
	paris := `[data-tool-call-id$="_paris"] `
	tb.do("edit the Paris call", chromedp.Click(chromedp.CSS(paris+`[data-testid="edit"]`)))
	tb.wait("its arguments", fmt.Sprintf(`document.querySelector(%q)?.value.includes("Europe/Paris")`, paris+`[data-testid="approval-args"]`))
	setControlled(tb, paris+`[data-testid="approval-args"]`, `{"timezone": "America/New_York"}`)
	tb.screenshot("24-approval-edit")
	clickJS(tb, "approve as edited", paris+`[data-testid="approve-edited"]`)
	tb.wait("the Paris call approved", fmt.Sprintf(`!document.querySelector(%q)`, paris+`[data-testid="approval"]`))
	clickJS(tb, "approve the Tokyo call", `[data-tool-call-id$="_tokyo"] [data-testid="approve"]`)
	tb.waitAnswer("That is the end of the answer.")
	tb.wait("both cards done", `[...document.querySelectorAll('[data-tool-call-id]')].every(c => c.dataset.state === "done")`)
	reqs := up.Requests()
	var result string
	for _, m := range reqs[len(reqs)-1].Messages() {
		if id, _ := m["tool_call_id"].(string); m["role"] == "tool" && strings.HasSuffix(id, "_paris") {
			result, _ = m["content"].(string)
		}
	}
	// The tool's own report names the zone it ran in; the note before it, the edited arguments.
	if !strings.Contains(result, `"timezone":"America/New_York","utc_offset"`) || !strings.Contains(result, "edited the arguments") {
		t.Errorf("the Paris call's result in the model's next request: %q; want current_time's report for America/New_York, noted as edited", result)
	}
	tb.screenshot("25-approval-edited")
	checkModelRequests(t, up, 0)
}
