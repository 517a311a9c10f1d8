package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// The browser tests drive chatd's web UI — the build embedded in the binary, served at / — in headless
// Debian Chromium through chromedp, against aimock as the model (testdata/browser-fixtures.json). They
// find elements by the UI's data-testid contract (web/README.md) and save screenshots of the main states
// under e2e/artifacts/screenshots (CI keeps the workspace).

// slowAnswer is the answer of the browser-reload fixture; the browser-stop fixture's is stopAnswer, about
// 11 s long, so that the stop lands mid-answer on a loaded machine too.
const slowAnswer = "This answer streams slowly, a few characters at a time, so that the test can act in the middle of it: stop it, or reload the page and watch it resume where it was, then run to its very end."

var stopAnswer = slowAnswer + " " + slowAnswer + " " + slowAnswer

// redPixel is a 1×1 PNG.
const redPixel = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="

func findChromium() string {
	if p := os.Getenv("CHATD_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser is one headless Chromium for a test.
type browser struct {
	t     *testing.T
	ctx   context.Context // the browser's first tab; new tabs derive from it
	base  string
	shots string
}

func startBrowser(t *testing.T, base string) *browser {
	t.Helper()
	chromium := findChromium()
	require(t, chromium != "", "Chromium is not installed (apt-get install -y chromium; or set CHATD_CHROMIUM)")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox, // as root in CI
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}
	shots, _ := filepath.Abs(filepath.Join("artifacts", "screenshots"))
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, ctx: ctx, base: base, shots: shots}
}

// tab is one browser tab of a subtest. Uncaught exceptions of its page fail the test.
type tab struct {
	t    *testing.T
	b    *browser
	ctx  context.Context
	mu   sync.Mutex
	errs []string
}

func (b *browser) newTab(t *testing.T) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 3*patience) // a safety net for the whole subtest
	tb := &tab{t: t, b: b, ctx: tctx}
	exceptions := chromedp.Events(ctx, runtime.ExceptionThrown)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil && d.Exception.Description != "" {
				msg += " " + d.Exception.Description
			}
			tb.mu.Lock()
			tb.errs = append(tb.errs, msg)
			tb.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		tcancel()
		cancel()
		<-done
		tb.mu.Lock()
		defer tb.mu.Unlock()
		for _, e := range tb.errs {
			t.Errorf("uncaught exception in the page: %s", e)
		}
	})
	return tb
}

func (tb *tab) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	if err := chromedp.Do(tb.ctx, actions...); err != nil {
		tb.t.Fatalf("%s: %v\n%s", what, err, tb.dump())
	}
}

// wait waits until a JavaScript expression is truthy. The page checks it every 25ms (the states it
// waits for include a loaded image and a computed style, which no DOM mutation announces) and answers
// once it holds.
func (tb *tab) wait(what, js string) {
	tb.t.Helper()
	_, err := chromedp.Run(tb.ctx, chromedp.Poll[chromedp.Void](js, chromedp.WithPollingTimeout(patience),
		chromedp.WithPollingInterval(25*time.Millisecond)))
	if err != nil {
		tb.t.Fatalf("waiting for %s (%s): %v\n%s", what, js, err, tb.dump())
	}
}

func evalJS[T any](tb *tab, js string) T {
	tb.t.Helper()
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[T](js))
	if err != nil {
		tb.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// dump is what the page shows, for a failure message.
func (tb *tab) dump() string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(tb.ctx), 5*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText.slice(0, 3000)`))
	if err != nil {
		return "(the page could not be read: " + err.Error() + ")"
	}
	return "the page:\n" + v
}

func (tb *tab) screenshot(name string) {
	tb.t.Helper()
	png, err := chromedp.Run(tb.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		tb.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(tb.b.shots, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		tb.t.Fatal(err)
	}
	tb.t.Logf("screenshot %s", path)
}

// open loads a page of the UI and waits until the composer is there.
func (tb *tab) open(path string) {
	tb.t.Helper()
	tb.do("navigate to "+path, chromedp.Navigate(tb.b.base+path))
	tb.wait("the composer", `!!document.querySelector('[data-testid="composer-input"]')`)
}

// typeIn waits for the element sel, has the page focus it, and types text into it as key events
// ("\r" is Enter). Not chromedp's SendKeys: it reads the node's attributes without their lock while
// the page's DOM events change them, a data race in chromedp that the race build reports whenever the
// page re-renders the field (CI saw it in the elicitation form and in the session list's rename).
func (tb *tab) typeIn(what, sel, text string) {
	tb.t.Helper()
	tb.wait(what+": focus "+sel, fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; e.focus(); return document.activeElement === e; })()`, sel))
	tb.do(what, chromedp.KeyEvent(text))
}

// send types a message and sends it with Enter.
func (tb *tab) send(text string) {
	tb.t.Helper()
	tb.wait("an idle composer", `!document.querySelector('[data-testid="stop"]')`)
	tb.typeIn("type "+text, `[data-testid="composer-input"]`, text+"\r")
	tb.wait("the message "+text, fmt.Sprintf(`[...document.querySelectorAll('[data-testid="message"][data-role="user"]')].some(m => m.innerText.includes(%q))`, text))
}

// lastAnswer is the text of the last assistant message, and whether it is done.
const lastAnswerJS = `(() => { const a = [...document.querySelectorAll('[data-testid="message"][data-role="assistant"]')].pop();
	return a ? [...a.querySelectorAll('[data-testid="message-text"]')].map(e => e.innerText).join("\n") : ""; })()`

const lastDoneJS = `(() => { const a = [...document.querySelectorAll('[data-testid="message"][data-role="assistant"]')].pop();
	return !!a && a.dataset.status === "done" && !document.querySelector('[data-testid="stop"]'); })()`

// waitAnswer waits for the last answer to be done and contain want.
func (tb *tab) waitAnswer(want string) string {
	tb.t.Helper()
	tb.wait("the answer "+want, fmt.Sprintf(`%s && %s.includes(%q)`, lastDoneJS, lastAnswerJS, want))
	return evalJS[string](tb, lastAnswerJS)
}

// sessionID is the chat the page shows, from its /c/{id} URL.
func (tb *tab) sessionID() string {
	tb.t.Helper()
	tb.wait("a /c/ URL", `location.pathname.startsWith("/c/")`)
	return strings.TrimPrefix(evalJS[string](tb, `location.pathname`), "/c/")
}

func TestBrowserUI(t *testing.T) {
	t.Parallel() // each test has its own processes, ports and files
	// The tool card's call is a fetch_url of a page that answers only when the test lets it: the card
	// is running, for certain, until then. (current_time ends in microseconds, and its start and end
	// may reach the page in one chunk, rendered at once as done.)
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "It is 09:00 in Paris.")
	}))
	t.Cleanup(gate.Close)
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before gate.Close: cleanups run last first
	fixtures, err := os.ReadFile("testdata/browser-fixtures.json")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fixturesPath, config := filepath.Join(dir, "fixtures.json"), filepath.Join(dir, "chatd.yaml")
	if err := os.WriteFile(fixturesPath, bytes.ReplaceAll(fixtures, []byte("GATE_URL"), []byte(gate.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, []byte("fetch_url:\n  enabled: true\n  allow: [127.0.0.0/8]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mockPort := startAimock(t, fixturesPath, "--strict")
	mock := fmt.Sprintf("http://127.0.0.1:%d", mockPort)
	p := startChatd(t, "chatd", buildChatd(t), filepath.Join(dir, "chatd.db"),
		"OPENAI_API_KEY="+apiKey, "OPENAI_BASE_URL="+mock+"/v1",
		"ANTHROPIC_API_KEY=", "ANTHROPIC_BASE_URL=", "GEMINI_API_KEY=", "GEMINI_BASE_URL=", "OLLAMA_HOST=",
		"CHATD_CONFIG="+config, "CHATD_MODEL=", "CHATD_MCP_CONFIG=")
	b := startBrowser(t, p.base)

	t.Run("stream markdown", func(t *testing.T) {
		tb := b.newTab(t)
		tb.open("/")
		tb.screenshot("01-empty")
		tb.send("browser-hello: show me markdown")
		text := tb.waitAnswer(`fmt.Println("hello, chatd")`)
		if !strings.Contains(text, "bold text") || strings.Contains(text, "**") || strings.Contains(text, "```") {
			t.Errorf("the answer is not rendered markdown: %q", text)
		}
		if n := evalJS[int](tb, `document.querySelectorAll('[data-testid="message-text"] strong, [data-testid="message-text"] li').length`); n < 3 {
			t.Errorf("%d strong/li elements in the answer, want the bold text and two list items", n)
		}
		// The code block is highlighted: highlight.js wraps tokens in spans.
		if n := evalJS[int](tb, `document.querySelectorAll('[data-testid="message-text"] pre code span').length`); n == 0 {
			t.Error("the Go code block has no highlighted tokens")
		}
		id := tb.sessionID()
		tb.wait("the session in the sidebar", fmt.Sprintf(`!!document.querySelector('[data-testid="session-item"][data-session-id=%q]')`, id))
		tb.screenshot("02-answer")
	})

	t.Run("tool card", func(t *testing.T) {
		tb := b.newTab(t)
		tb.open("/")
		// Record every state a tool card passes through.
		tb.do("watch tool cards", chromedp.Evaluate[chromedp.Void](`window.__toolStates = [];
			new MutationObserver(() => {
				for (const c of document.querySelectorAll('[data-testid="tool-card"]')) {
					const l = window.__toolStates, s = c.dataset.state;
					if (l[l.length - 1] !== s) l.push(s);
				}
			}).observe(document.body, { subtree: true, childList: true, attributes: true, attributeFilter: ["data-state"] });`))
		tb.send("browser-tool: what time is it in Paris?")
		select {
		case <-arrived:
		case <-time.After(patience):
			t.Fatal("the tool's fetch did not arrive")
		}
		tb.wait("the running tool card", `document.querySelector('[data-testid="tool-card"]')?.dataset.state === "running"`)
		releaseOnce.Do(func() { close(release) })
		tb.waitAnswer("It is morning in Paris.")
		states := evalJS[[]string](tb, `window.__toolStates`)
		if !slices.Contains(states, "running") || states[len(states)-1] != "done" {
			t.Errorf("tool card states %q, want running, then done", states)
		}
		card := `document.querySelector('[data-testid="tool-card"]')`
		if name := evalJS[string](tb, card+`.dataset.toolName`); name != "fetch_url" {
			t.Errorf("tool card name %q", name)
		}
		if txt := evalJS[string](tb, card+`.textContent`); !strings.Contains(txt, "paris-time") {
			t.Errorf("the tool card does not show its arguments: %q", txt)
		}
		if n := evalJS[int](tb, `document.querySelectorAll('[data-testid="tool-card"] [data-testid="tool-result"]').length`); n != 1 {
			t.Errorf("%d tool results shown, want 1", n)
		}
		tb.screenshot("03-tool-card")

		// The diagnostics of the run: what was sent to the model.
		tb.do("open diagnostics", chromedp.Click(chromedp.CSS(`[data-testid="diagnostics-button"]`)))
		tb.wait("the diagnostics panel", `(() => { const d = document.querySelector('[data-testid="diagnostics-panel"]');
			return d && d.textContent.includes("fetch_url") && d.textContent.includes("gpt-4o-mini"); })()`)
		tb.screenshot("04-diagnostics")
		tb.do("close diagnostics", chromedp.Click(chromedp.CSS(`[data-testid="diagnostics-close"]`)))
		tb.wait("the panel closed", `!document.querySelector('[data-testid="diagnostics-panel"]')`)
	})

	t.Run("stop keeps the partial answer", func(t *testing.T) {
		tb := b.newTab(t)
		tb.open("/")
		tb.send("browser-stop: answer slowly")
		tb.wait("part of the answer", lastAnswerJS+`.length > 20`)
		tb.do("stop", chromedp.Click(chromedp.CSS(`[data-testid="stop"]`)))
		tb.wait("the stopped answer", lastDoneJS)
		partial := evalJS[string](tb, lastAnswerJS)
		// The stream must not go on: from here to the end of the run on the server, whatever chatd
		// still sent must not reach the answer. A MutationObserver sees any change of its text.
		tb.do("watch the answer", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`window.__changedAfterStop = "";
			const answer = () => %s, stopped = answer();
			new MutationObserver(() => { if (answer() !== stopped) window.__changedAfterStop = answer(); }).observe(
				document.body, { subtree: true, childList: true, characterData: true });`, lastAnswerJS)))
		// The run was cancelled on the server, and its partial answer stored.
		id := tb.sessionID()
		recs := waitRecords(t, p, id, func(recs []record) bool { return len(recs) >= 2 })
		last := recs[len(recs)-1]
		var run struct{ Status string }
		poll(func() bool {
			getJSON(t, p.base+"/v1/runs/"+last.RunID, &run) // the run ends a moment after its record is stored
			return run.Status != "running"
		})
		after := evalJS[string](tb, lastAnswerJS)
		changed := evalJS[string](tb, `window.__changedAfterStop`)
		if partial == "" || after != partial || changed != "" || !strings.HasPrefix(stopAnswer, strings.TrimSpace(partial)) || len(partial) >= len(stopAnswer) {
			t.Errorf("after stop the answer is %q, then %q (in between %q); want the same beginning of the answer", partial, after, changed)
		}
		if run.Status != "cancelled" || last.Role != "assistant" || !strings.HasPrefix(stopAnswer, last.Content) {
			t.Errorf("stored: run %s, last record %s %q; want a cancelled run with the partial answer", run.Status, last.Role, last.Content)
		}
		tb.screenshot("05-stopped")
	})

	t.Run("reload resumes the answer", func(t *testing.T) {
		tb := b.newTab(t)
		tb.open("/")
		tb.send("browser-reload: answer slowly")
		id := tb.sessionID()
		tb.wait("part of the answer", lastAnswerJS+`.length > 30`)
		before := evalJS[string](tb, lastAnswerJS)
		tb.do("reload", chromedp.Reload())
		tb.wait("the resumed answer streaming", fmt.Sprintf(`location.pathname === "/c/%s" && %s.length > 0`, id, lastAnswerJS))
		tb.screenshot("06-resumed")
		text := tb.waitAnswer("to its very end.")
		if strings.TrimSpace(text) != slowAnswer || len(before) >= len(slowAnswer) {
			t.Errorf("before the reload %d characters; after it %q; want the whole answer once", len(before), text)
		}
		if n := evalJS[int](tb, `document.querySelectorAll('[data-testid="message"][data-role="assistant"]').length`); n != 1 {
			t.Errorf("%d assistant messages after the reload, want 1", n)
		}
		if n := evalJS[int](tb, `document.querySelectorAll('[data-testid="message"][data-role="user"]').length`); n != 1 {
			t.Errorf("%d user messages after the reload, want 1", n)
		}
	})

	t.Run("switch sessions", func(t *testing.T) {
		tb := b.newTab(t)
		tb.open("/")
		tb.send("browser-first: the first chat")
		tb.waitAnswer("The answer in the first chat.")
		first := tb.sessionID()
		tb.do("new chat", chromedp.Click(chromedp.CSS(`[data-testid="new-chat"]`)))
		tb.wait("an empty chat", `!document.querySelector('[data-testid="message"]')`)
		tb.send("browser-second: the second chat")
		tb.waitAnswer("The answer in the second chat.")
		second := tb.sessionID()
		if first == second {
			t.Fatalf("both chats are session %s", first)
		}
		for _, c := range []struct{ id, shows, hides string }{
			{first, "The answer in the first chat.", "second chat"},
			{second, "The answer in the second chat.", "first chat"},
		} {
			item := fmt.Sprintf(`[data-testid="session-item"][data-session-id=%q]`, c.id)
			tb.do("open session "+c.id, chromedp.Click(chromedp.CSS(item+` [data-testid="session-title"]`)))
			tb.wait("session "+c.id, fmt.Sprintf(`location.pathname === "/c/%s" && %s.includes(%q) && !document.body.innerText.includes(%q + "?")`,
				c.id, lastAnswerJS, c.shows, c.hides))
			if cur := evalJS[string](tb, fmt.Sprintf(`document.querySelector('%s').getAttribute("aria-current") || ""`, item)); cur != "page" {
				t.Errorf("session %s is shown but not marked current (aria-current %q)", c.id, cur)
			}
		}
		tb.screenshot("07-sessions")

		// Regenerate the last answer: it is replaced (by a message of another run), not added.
		const lastID = `[...document.querySelectorAll('[data-testid="message"][data-role="assistant"]')].pop()?.dataset.messageId`
		old := evalJS[string](tb, lastID)
		tb.do("regenerate", chromedp.Click(chromedp.CSS(`[data-testid="regenerate"]`)))
		tb.wait("a new answer", fmt.Sprintf(`%s !== %q`, lastID, old))
		tb.waitAnswer("The answer in the second chat.")
		if n := evalJS[int](tb, `document.querySelectorAll('[data-testid="message"][data-role="assistant"]').length`); n != 1 {
			t.Errorf("%d assistant messages after regenerate, want 1", n)
		}
		var h struct{ Messages []struct{ Role string } }
		getJSON(t, p.base+"/v1/ui/chat/"+second, &h)
		if len(h.Messages) != 2 {
			t.Errorf("chatd's history of the chat has %d messages after regenerate, want 2", len(h.Messages))
		}

		// Rename the second chat, then delete the first.
		item := fmt.Sprintf(`[data-testid="session-item"][data-session-id=%q]`, second)
		tb.do("rename", chromedp.Click(chromedp.CSS(item+` [data-testid="session-rename"]`)))
		tb.wait("the rename field", `!!document.querySelector('[data-testid="session-rename-input"]')`)
		tb.do("select the old title", chromedp.Evaluate[chromedp.Void](`document.querySelector('[data-testid="session-rename-input"]').select()`))
		tb.typeIn("type the new title", `[data-testid="session-rename-input"]`, "Renamed by the browser test\r")
		tb.wait("the new title", fmt.Sprintf(`document.querySelector('%s [data-testid="session-title"]')?.innerText === "Renamed by the browser test"`, item))
		// The list shows the title while its PATCH may still be on its way.
		var sess struct{ Title string }
		poll(func() bool {
			getJSON(t, p.base+"/v1/sessions/"+second, &sess)
			return sess.Title == "Renamed by the browser test"
		})
		if sess.Title != "Renamed by the browser test" {
			t.Errorf("stored title %q after the rename", sess.Title)
		}
		gone := fmt.Sprintf(`[data-testid="session-item"][data-session-id=%q]`, first)
		tb.do("delete", chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
			chromedp.Click(chromedp.CSS(gone+` [data-testid="session-delete"]`)))
		tb.wait("the deleted chat gone", fmt.Sprintf(`!document.querySelector('%s')`, gone))
		status := 0
		poll(func() bool {
			resp, err := http.Get(p.base + "/v1/sessions/" + first)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			status = resp.StatusCode
			return status == http.StatusNotFound
		})
		if status != http.StatusNotFound {
			t.Errorf("the deleted session answers %d, want 404", status)
		}
	})

	t.Run("attachment reaches the model", func(t *testing.T) {
		tb := b.newTab(t)
		tb.open("/")
		img := filepath.Join(t.TempDir(), "red.png")
		data, _ := base64.StdEncoding.DecodeString(redPixel)
		if err := os.WriteFile(img, data, 0o644); err != nil {
			t.Fatal(err)
		}
		tb.do("attach", chromedp.SetUploadFiles(chromedp.CSS(`[data-testid="attach-input"]`), []string{img}))
		tb.wait("the preview", `!!document.querySelector('[data-testid="attachment-preview"] img, img[data-testid="attachment-preview"]')`)
		tb.send("browser-image: what is in this picture?")
		tb.waitAnswer("A single red pixel.")
		if n := evalJS[int](tb, `document.querySelectorAll('[data-testid="message"][data-role="user"] [data-testid="message-image"]').length`); n != 1 {
			t.Errorf("%d images in the user message, want 1", n)
		}
		// What reached the model: the image, as a data URL in the user's message.
		var journal []json.RawMessage
		getJSON(t, mockAddr(mockPort)+"/__aimock/journal", &journal)
		found := false
		for _, e := range journal {
			if bytes.Contains(e, []byte("browser-image: what is in this picture?")) && bytes.Contains(e, []byte("data:image/png;base64,"+redPixel)) {
				found = true
			}
		}
		if !found {
			t.Error("no request to the model holds the attached image")
		}
		// Reloaded, the image comes from chatd's history.
		tb.open("/c/" + tb.sessionID())
		tb.wait("the image after a reload", `(() => { const i = document.querySelector('[data-testid="message"][data-role="user"] [data-testid="message-image"]');
			return i && i.complete && i.naturalWidth === 1; })()`)
		tb.screenshot("08-attachment")
	})

	t.Run("html in an answer is text", func(t *testing.T) {
		tb := b.newTab(t)
		tb.open("/")
		tb.send("browser-xss: answer with html")
		text := tb.waitAnswer("bold?")
		if !strings.Contains(text, `<img src=x onerror="window.__xss=1">`) || !strings.Contains(text, "<script>") {
			t.Errorf("the HTML of the answer is not shown as text: %q", text)
		}
		if n := evalJS[int](tb, `document.querySelectorAll('[data-testid="message-text"] img, [data-testid="message-text"] script, [data-testid="message-text"] b').length`); n != 0 {
			t.Errorf("%d elements made from the model's HTML", n)
		}
		if v := evalJS[string](tb, `String(window.__xss)`); v != "undefined" {
			t.Errorf("the model's HTML ran: window.__xss = %s", v)
		}
		tb.screenshot("09-html-as-text")
	})

	t.Run("phone and dark", func(t *testing.T) {
		tb := b.newTab(t)
		tb.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateTouch))
		tb.open("/")
		tb.send("browser-first: the first chat")
		tb.waitAnswer("The answer in the first chat.")
		if w := evalJS[int](tb, `document.documentElement.scrollWidth`); w > 390 {
			t.Errorf("the page is %dpx wide on a 390px phone", w)
		}
		tb.screenshot("10-phone")
		tb.do("open the sidebar", chromedp.Click(chromedp.CSS(`[data-testid="sidebar-toggle"]`)))
		tb.wait("the session list", `(() => { const l = document.querySelector('[data-testid="session-list"]');
			return l && l.getBoundingClientRect().width > 0 && l.getBoundingClientRect().left >= 0; })()`)
		tb.screenshot("11-phone-sidebar")

		dt := b.newTab(t)
		dt.open("/")
		bg := evalJS[string](dt, `getComputedStyle(document.body).backgroundColor`)
		dt.do("toggle the theme", chromedp.Click(chromedp.CSS(`[data-testid="theme-toggle"]`)))
		dt.wait("another theme", fmt.Sprintf(`getComputedStyle(document.body).backgroundColor !== %q`, bg))
		dt.open("/c/" + tb.sessionID())
		dt.waitAnswer("The answer in the first chat.")
		dt.screenshot("12-other-theme")
	})

	t.Run("first paint and size", func(t *testing.T) {
		tb := b.newTab(t)
		tb.open("/")
		fcp := evalJS[float64](tb, `(performance.getEntriesByName("first-contentful-paint")[0] || {startTime: -1}).startTime`)
		nav := evalJS[float64](tb, `performance.getEntriesByType("navigation")[0].domContentLoadedEventEnd`)
		raw, gz := webJSSize(t)
		t.Logf("first contentful paint %.0f ms, DOMContentLoaded %.0f ms; JavaScript %d bytes, %d gzipped", fcp, nav, raw, gz)
		if fcp <= 0 {
			t.Error("no first-contentful-paint entry")
		}
		report, _ := json.MarshalIndent(map[string]any{"first_contentful_paint_ms": fcp, "dom_content_loaded_ms": nav,
			"js_bytes": raw, "js_gzip_bytes": gz}, "", "  ")
		os.WriteFile(filepath.Join(b.shots, "..", "ui-report.json"), report, 0o644)
	})
}

func mockAddr(port int) string { return fmt.Sprintf("http://127.0.0.1:%d", port) }

// waitRecords reads a session's records until ok holds (a run's end is stored a moment after its stream ends).
func waitRecords(t *testing.T, p *process, sessionID string, ok func([]record) bool) []record {
	t.Helper()
	var recs []record
	poll(func() bool {
		recs = p.records(t, sessionID)
		return ok(recs)
	})
	return recs
}

// webJSSize sums the embedded UI's JavaScript, raw and gzipped (level 9, as the server sends it).
func webJSSize(t *testing.T) (raw, gz int) {
	t.Helper()
	files, _ := filepath.Glob("../internal/webui/dist/assets/*.js")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(b)
		zw.Close()
		raw, gz = raw+len(b), gz+buf.Len()
	}
	return raw, gz
}

func evalJSAwait[T any](tb *tab, js string) T {
	tb.t.Helper()
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		tb.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// createKey runs `chatd keys create` on the database file db, before any chatd serves it, and returns
// the key it prints: exactly the key on stdout, the details on stderr.
func createKey(t *testing.T, bin, db, user string) string {
	t.Helper()
	cmd := exec.Command(bin, "keys", "create", "--user", user, "--db", "sqlite:"+db)
	cmd.Env = append(os.Environ(), "CHATD_CONFIG=", "CHATD_MCP_CONFIG=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chatd keys create --user %s: %v\nstdout: %s\nstderr: %s", user, err, stdout.Bytes(), stderr.Bytes())
	}
	key, rest, _ := strings.Cut(stdout.String(), "\n")
	if !strings.HasPrefix(key, "chd_") || rest != "" {
		t.Fatalf("chatd keys create printed %q on stdout, want one line with the key (stderr: %s)", stdout.Bytes(), stderr.Bytes())
	}
	return key
}

// signIn types a key into the sign-in form and submits it.
func (tb *tab) signIn(key string) {
	tb.t.Helper()
	tb.wait("the sign-in form", `!!document.querySelector('[data-testid="signin-form"]') && !document.querySelector('[data-testid="signin-key"]').disabled`)
	tb.typeIn("enter the key", `[data-testid="signin-key"]`, key)
	tb.do("submit the key", chromedp.Click(chromedp.CSS(`[data-testid="signin-submit"]`)))
}

// TestBrowserSignIn signs in to a chatd that has an API key, as its web UI's users do: the key is
// traded for an HttpOnly session cookie, which lasts over a reload and ends with a sign-out or a 401.
func TestBrowserSignIn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "chatd.db")
	bin := buildChatd(t)
	key := createKey(t, bin, db, "alice")
	mockPort := startAimock(t, "testdata/browser-fixtures.json", "--strict")
	p := startChatd(t, "chatd", bin, db,
		"OPENAI_API_KEY="+apiKey, "OPENAI_BASE_URL="+mockAddr(mockPort)+"/v1",
		"ANTHROPIC_API_KEY=", "ANTHROPIC_BASE_URL=", "GEMINI_API_KEY=", "GEMINI_BASE_URL=", "OLLAMA_HOST=",
		"CHATD_CONFIG=", "CHATD_MODEL=", "CHATD_MCP_CONFIG=")
	signInFlow(t, p.base, key)
}

// signInFlow is the sign-in test's browser half, against a chatd at base that has the key of alice.
func signInFlow(t *testing.T, base, key string) {
	tb := startBrowser(t, base).newTab(t)
	const signedIn = `!!document.querySelector('[data-testid="composer-input"]') && document.querySelector('[data-testid="whoami"]')?.innerText === "alice"`
	const signInForm = `!!document.querySelector('[data-testid="signin-form"]') && !document.querySelector('[data-testid="composer-input"]')`
	const keyField = `document.querySelector('[data-testid="signin-key"]')`

	tb.do("open the UI", chromedp.Navigate(base+"/"))
	tb.wait("the sign-in form", signInForm)
	if typ, ac := evalJS[string](tb, keyField+`.type`), evalJS[string](tb, keyField+`.autocomplete`); typ != "password" || ac != "off" {
		t.Errorf("the key field is type=%q autocomplete=%q, want password and off", typ, ac)
	}
	tb.screenshot("signin-01-form")

	// A wrong key: chatd's message, and the field is empty again.
	tb.signIn("chd_" + strings.Repeat("A", 43))
	tb.wait("the error of a wrong key", `document.querySelector('[data-testid="signin-error"]')?.innerText.trim().length > 0`)
	if msg := evalJS[string](tb, `document.querySelector('[data-testid="signin-error"]').innerText`); strings.Contains(msg, "{") {
		t.Errorf("the sign-in error is not a sentence: %q", msg)
	}
	if v := evalJS[string](tb, keyField+`.value`); v != "" {
		t.Errorf("the key field holds %q after a failed sign-in, want it empty", v)
	}
	tb.screenshot("signin-02-wrong-key")

	tb.signIn(key)
	tb.wait("the chat, signed in as alice", signedIn)
	if n := evalJS[int](tb, `document.querySelectorAll('[data-testid="signout"]').length`); n != 1 {
		t.Errorf("%d sign-out buttons, want 1", n)
	}
	tb.send("browser-first: the first chat")
	tb.waitAnswer("The answer in the first chat.")
	id := tb.sessionID()
	tb.screenshot("signin-03-signed-in")

	// The cookie keeps the sign-in over a reload; nothing the page's script can read holds the key.
	tb.do("reload", chromedp.Reload())
	tb.wait("the chat after a reload, still signed in", signedIn+fmt.Sprintf(` && location.pathname === "/c/%s"`, id))
	tb.waitAnswer("The answer in the first chat.")
	stored := evalJS[string](tb, `JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage)]) + "\n" + document.cookie`)
	if strings.Contains(stored, "chd_") || strings.Contains(stored, key[4:]) {
		t.Errorf("the key is kept where the page's script can read it:\n%s", stored)
	}
	if strings.Contains(stored, "chatd_session") {
		t.Errorf("the session cookie is readable by the page's script (not HttpOnly):\n%s", stored)
	}

	// The sign-in ends behind the UI's back (another tab signed out): the next request, the chat's
	// own send, answers 401, and the UI goes back to the sign-in form.
	if status := evalJSAwait[int](tb, `fetch("/v1/auth/session", {method: "DELETE"}).then(r => r.status)`); status != http.StatusNoContent {
		t.Fatalf("DELETE /v1/auth/session answered %d, want 204", status)
	}
	tb.do("new chat", chromedp.Click(chromedp.CSS(`[data-testid="new-chat"]`)))
	tb.wait("an empty chat", `!document.querySelector('[data-testid="message"]')`)
	tb.typeIn("send after the sign-in ended", `[data-testid="composer-input"]`, "browser-second: the second chat\r")
	tb.wait("the sign-in form after a 401", signInForm)
	tb.screenshot("signin-04-lapsed")
	tb.signIn(key)
	tb.wait("the chat, signed in again", signedIn)

	tb.do("sign out", chromedp.Click(chromedp.CSS(`[data-testid="signout"]`)))
	tb.wait("the sign-in form after signing out", signInForm+` && !document.querySelector('[data-testid="whoami"]')`)
	tb.do("reload", chromedp.Reload())
	tb.wait("the sign-in form after a reload", signInForm)
	tb.screenshot("signin-05-signed-out")
}
