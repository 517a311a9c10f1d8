package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestTitlesAgainstAimock: the real binary, with aimock as the model, titles a new session from its
// first exchange in the user's language (the title call is in aimock's journal, its usage in the
// ledger), and keeps the title of a session the user renamed while its first answer streamed.
func TestTitlesAgainstAimock(t *testing.T) {
	t.Parallel()
	mockPort := startAimock(t, "testdata/titles-fixtures.json", "--strict")
	mock := fmt.Sprintf("http://127.0.0.1:%d", mockPort)
	p := startChatd(t, "chatd", buildChatd(t), filepath.Join(t.TempDir(), "chatd.db"),
		"OPENAI_API_KEY="+apiKey, "OPENAI_BASE_URL="+mock+"/v1",
		"ANTHROPIC_API_KEY=", "ANTHROPIC_BASE_URL=", "GEMINI_API_KEY=", "GEMINI_BASE_URL=", "OLLAMA_HOST=",
		"CHATD_CONFIG=", "CHATD_MODEL=openai/gpt-4o-mini", "CHATD_MCP_CONFIG=",
		"CHATD_TITLE_MODEL=") // the default: the session's own model

	title := func(id string) string {
		var s struct{ Title string }
		getJSON(t, p.base+"/v1/sessions/"+id, &s)
		return s.Title
	}
	titleCalls := func() int {
		var n int
		usage := struct {
			Usage []struct{ Calls int } `json:"usage"`
		}{}
		getJSON(t, p.base+"/v1/usage?group_by=model", &usage)
		for _, u := range usage.Usage {
			n += u.Calls
		}
		return n
	}

	// A new session: the cut of its message at once, the model's title once the answer has ended.
	r := p.chat(t, map[string]any{"message": "Quel temps fait-il à Paris aujourd'hui ?"}, "")
	if r.last().Type != "done" || r.last().Data["status"] != "completed" {
		t.Fatalf("first run: %d %v", r.status, r.last())
	}
	session := r.events[0].Data["session_id"].(string)
	if !poll(func() bool { return title(session) == "Météo à Paris" }) {
		t.Fatalf("the session's title is %q, not the model's", title(session))
	}
	var journal []struct {
		Body struct{ Messages []map[string]any }
	}
	getJSON(t, mock+"/__aimock/journal", &journal)
	if len(journal) != 2 {
		t.Fatalf("aimock saw %d requests, want the run's and the title's", len(journal))
	}
	msgs := journal[1].Body.Messages
	if sys, _ := msgs[0]["content"].(string); len(msgs) != 2 || !strings.Contains(sys, "language of the user's message") {
		t.Errorf("the title request: %v", msgs)
	}
	if user, _ := msgs[1]["content"].(string); !strings.Contains(user, "Quel temps fait-il") || !strings.Contains(user, "Il fait beau") {
		t.Errorf("the title request does not carry the exchange: %q", user)
	}
	if !poll(func() bool { return titleCalls() == 2 }) {
		t.Errorf("the ledger counts %d calls, want 2: the run's and the title's", titleCalls())
	}

	// Renamed by the user while the first answer streams: kept.
	s := p.openStream(t, map[string]any{"message": "Planifie mon voyage à Lyon"})
	first, err := s.until(func(ev event) bool { return ev.Type == "text_delta" }, patience)
	if err != nil {
		t.Fatal(err)
	}
	renamed := first[0].Data["session_id"].(string)
	patch(t, p.base+"/v1/sessions/"+renamed, `{"title":"Lyon, mai"}`)
	if _, err := s.rest(patience); err != nil {
		t.Fatal(err)
	}
	// Once the title call is in the ledger, its title has been stored or refused.
	if !poll(func() bool { return titleCalls() == 4 }) {
		t.Fatalf("the ledger counts %d calls, want 4", titleCalls())
	}
	if got := title(renamed); got != "Lyon, mai" {
		t.Errorf("the renamed session's title is %q, want the user's", got)
	}
	if !strings.Contains(p.out.String(), "title was set by its user: kept") {
		t.Errorf("chatd did not log that it kept the user's title")
	}
}

func patch(t *testing.T, url, body string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "PATCH", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("PATCH %s: %d %s", url, resp.StatusCode, raw)
	}
	var s struct{ Title string }
	if json.Unmarshal(raw, &s) != nil {
		t.Fatalf("PATCH %s: %s", url, raw)
	}
}
