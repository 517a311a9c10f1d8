package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestMCPElicitation runs server-everything's trigger-elicitation-request through the real binary: the
// model calls it, the server's elicitation reaches the client as approval_required (source mcp) with
// the requested schema's fields, GET /v1/runs/{id} shows it while the run runs, an answer that does
// not fit is refused naming the field, and the answer reaches the server, whose result — echoing the
// values — reaches the model's next request.
func TestMCPElicitation(t *testing.T) {
	t.Parallel()
	m := newMCPPeers(t)
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			testMCPElicitation(t, m, transport)
		})
	}
}

// elicitTimeout gives trigger-elicitation-request a timeout that a person — or a loaded machine — does
// not run out of: the call waits for the answer.
var elicitTimeout = map[string]any{"tools": map[string]any{"trigger-elicitation-request": map[string]any{"timeout": "5m"}}}

func testMCPElicitation(t *testing.T, m *mcpPeers, transport string) {
	p := m.startChatd(t, map[string]any{"everything": m.startEverything(t, transport, elicitTimeout).entry})
	if !slices.ContainsFunc(listTools(t, p), func(tl toolWire) bool { return tl.Name == "everything__trigger-elicitation-request" }) {
		t.Fatalf("GET /v1/tools has no everything__trigger-elicitation-request: the server did not see the elicitation capability")
	}

	message := "[mcp-elicit] sign me up over " + transport
	s := p.openStream(t, map[string]any{"message": message})
	events, err := s.until(func(ev event) bool { return ev.Type == "approval_required" }, patience)
	if err != nil {
		t.Fatalf("waiting for the question: %v; events:\n%s", err, eventList(events))
	}
	runID := str(events[0].Data["run_id"])
	q := events[len(events)-1].Data
	if q["source"] != "mcp" || q["kind"] != "question" || q["tool_call_id"] != "call_elicit" ||
		q["name"] != "everything__trigger-elicitation-request" || q["message"] != "Please provide inputs for the following fields:" {
		t.Errorf("approval_required: %v", q)
	}
	fields := map[string]map[string]any{}
	var order []string
	list, _ := q["fields"].([]any)
	for _, f := range list {
		f, _ := f.(map[string]any)
		fields[str(f["name"])] = f
		order = append(order, str(f["name"]))
	}
	// The Go SDK decodes the requested schema into a map: the server's order of its properties is lost,
	// and they come sorted by name.
	if want := []string{"birthdate", "check", "email", "firstLine", "homepage", "integer", "legacyTitledEnum", "name", "number",
		"titledMultipleSelectEnum", "titledSingleSelectEnum", "untitledMultipleSelectEnum", "untitledSingleSelectEnum"}; !slices.Equal(order, want) {
		t.Errorf("fields %v, want %v", order, want)
	}
	for name, want := range map[string]string{
		"name":                       `"required":true,"title":"String","type":"string"`,
		"check":                      `"type":"boolean"`,
		"email":                      `"format":"email"`,
		"integer":                    `"default":42,"description":"Your favorite integer (do not give us your phone number, pin, or other sensitive info)","maximum":100,"minimum":1`,
		"untitledMultipleSelectEnum": `"max_items":3,"min_items":1,"multiple":true`,
		"titledSingleSelectEnum":     `{"label":"Green Lantern","value":"hero-2"}`,
		"legacyTitledEnum":           `{"label":"Cats","value":"pet-1"}`,
	} {
		if got, _ := json.Marshal(fields[name]); !strings.Contains(string(got), want) {
			t.Errorf("field %s: %s, want it to hold %s", name, got, want)
		}
	}

	// GET /v1/runs/{id}: the run runs, and says what its call waits on.
	var run struct {
		Status   string
		Awaiting *struct {
			Calls []struct {
				ToolCallID string `json:"tool_call_id"`
				Source     string
			}
		}
	}
	getJSON(t, p.base+"/v1/runs/"+runID, &run)
	if run.Status != "running" || run.Awaiting == nil || len(run.Awaiting.Calls) != 1 || run.Awaiting.Calls[0].Source != "mcp" {
		t.Errorf("GET /v1/runs/%s while the question waits: %+v", runID, run)
	}

	answer := func(content map[string]any) (int, string) {
		resp, err := p.post(t.Context(), "/v1/runs/"+runID+"/approvals",
			map[string]any{"tool_call_id": "call_elicit", "decision": "answer", "content": content}, "")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	if status, raw := answer(map[string]any{"name": "Ada Lovelace", "integer": 500}); status != http.StatusBadRequest ||
		!strings.Contains(raw, "invalid_answer") || !strings.Contains(raw, `field \"integer\"`) {
		t.Errorf("an integer out of range: %d %s, want 400 invalid_answer naming the field", status, raw)
	}
	if status, raw := answer(map[string]any{"name": "Ada Lovelace", "check": true, "email": "ada@example.com", "integer": 7,
		"untitledMultipleSelectEnum": []string{"Piano", "Violin"}}); status != http.StatusOK {
		t.Fatalf("the answer: %d %s", status, raw)
	}

	rest, err := s.rest(patience)
	events = append(events, rest...)
	if err != nil {
		t.Fatalf("after the answer: %v; events:\n%s", err, eventList(events))
	}
	c := checkCall(t, events, "call_elicit", "everything__trigger-elicitation-request", "completed")
	for _, want := range []string{"- Name: Ada Lovelace", "- Agreed to terms: true", "- Email: ada@example.com", "- Favorite Integer: 7"} {
		if !strings.Contains(c.content(), want) {
			t.Errorf("the tool's result %q does not hold %q", c.content(), want)
		}
	}
	decided := slices.IndexFunc(events, func(ev event) bool { return ev.Type == "approval_decided" })
	if decided < 0 || decided > c.endAt || events[decided].Data["decision"] != "answer" || events[decided].Data["source"] != "mcp" {
		t.Errorf("approval_decided (event %d) before the call's tool_complete (event %d); events:\n%s", decided+1, c.endAt+1, eventList(events))
	}

	// The model's next request carries the server's result with the answered values.
	up := upstreamRequests(t, m.mock, message)
	if len(up) != 2 {
		t.Fatalf("%d upstream requests for %q, want 2", len(up), message)
	}
	msgs := up[1].Body.Messages
	last := msgs[len(msgs)-1]
	if content := fmt.Sprint(last.Content); last.Role != "tool" || last.ToolCallID != "call_elicit" || !strings.Contains(content, "- Name: Ada Lovelace") ||
		!strings.Contains(content, "- Favorite Integer: 7") {
		t.Errorf("the second upstream request ends with %+v, want the call's result with the answers", last)
	}
}

// TestBrowserElicitation: in the web UI, server-everything's question shows as a form of its fields,
// shows again after a reload while the call waits, and its answer reaches the server: the run goes on
// to the model's answer, and the form says it was answered.
func TestBrowserElicitation(t *testing.T) {
	t.Parallel()
	if findChromium() == "" {
		t.Skip("no Chromium")
	}
	m := newMCPPeers(t)
	p := m.startChatd(t, map[string]any{"everything": m.startEverything(t, "stdio", elicitTimeout).entry})
	tb := startBrowser(t, p.base).newTab(t)
	tb.open("/")
	message := "[mcp-elicit] in the browser"
	tb.send(message)
	const form = `document.querySelector('[data-testid="elicitation"][data-state="waiting"]')`
	const name = `#el-call_elicit-name`
	tb.wait("the question's form", form+` && !!document.querySelector("`+name+`")`)
	if txt := evalJS[string](tb, form+`.textContent`); !strings.Contains(txt, "Please provide inputs for the following fields:") {
		t.Errorf("the form does not show the server's message: %q", txt)
	}
	tb.screenshot("elicit-01-form")
	id := tb.sessionID()
	tb.open("/c/" + id)
	tb.wait("the question's form after a reload", form+` && !!document.querySelector("`+name+`")`)
	tb.typeIn("type a name", name, "Ada Lovelace")
	tb.do("submit", chromedp.Click(chromedp.CSS(`[data-testid="elicitation-submit"]`)))
	tb.waitAnswer("Thanks: the server has your details.")
	tb.wait("the form decided", `[...document.querySelectorAll('[data-testid="elicitation"]')].some(e => e.dataset.state === "decided" && e.textContent.includes("You answered."))`)
	tb.screenshot("elicit-02-answered")
	up := upstreamRequests(t, m.mock, message)
	if len(up) != 2 {
		t.Fatalf("%d upstream requests for %q, want 2", len(up), message)
	}
	msgs := up[1].Body.Messages
	if last := msgs[len(msgs)-1]; !strings.Contains(fmt.Sprint(last.Content), "- Name: Ada Lovelace") {
		t.Errorf("the second upstream request ends with %+v, want the call's result with the name", last)
	}
}
