package chat

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"iter"
	"log/slog"
	"strings"
	"testing"

	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/llm/openai"
)

// bodyProvider shows a request's body as its system prompt and the text of its messages: a body of a
// chosen size and compressibility.
type bodyProvider struct{}

func (bodyProvider) Stream(context.Context, *llm.Request) iter.Seq2[llm.Event, error] {
	return func(func(llm.Event, error) bool) {}
}

func (bodyProvider) Encode(req *llm.Request) ([]byte, error) {
	var text []string
	for _, m := range req.Messages {
		for _, p := range m.Parts {
			text = append(text, p.Text)
		}
	}
	return json.Marshal(map[string]any{"system": req.System, "messages": text})
}

// noise is n bytes of text that compresses to about three quarters of it.
func noise(n int) string {
	b := make([]byte, n*3/4+3)
	rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)[:n]
}

// TestCallLogBounds: a run's calls are stored with their system prompt once while it stays the same
// (the context with it), their requests compressed within the run's limit: a request over a quarter of
// it, or past what the run has left, is left out with the reason, and so is an answer past it.
func TestCallLogBounds(t *testing.T) {
	const limit = 64 << 10
	l := &callLog{runID: "r", sessionID: "s", limit: limit, log: slog.New(slog.DiscardHandler),
		context: map[string]any{"page": "reports"}, maxIterations: 5}
	m := agent.Model{Provider: bodyProvider{}, Name: "m", ProviderName: "p"}
	system := "You help. " + strings.Repeat("a", 2<<10)
	send := func(message string) {
		temp := 0.5
		l.sending(m, &llm.Request{System: system, MaxTokens: 100, Temperature: &temp,
			Tools: []llm.ToolSpec{{Name: "current_time"}}, Messages: []llm.Message{llm.TextMessage(llm.RoleUser, message)}})
	}
	send(strings.Repeat("b", 20<<10)) // compresses well
	send(strings.Repeat("b", 20<<10))
	calls := l.take(&callOutput{Text: "Hello."})
	if len(calls) != 2 || calls[0].N != 1 || calls[1].N != 2 || calls[0].Model != "p/m" {
		t.Fatalf("calls %+v", calls)
	}
	if calls[0].SameSystem || !calls[1].SameSystem || calls[1].System != "" {
		t.Errorf("the system prompt is stored once: same %v, %v", calls[0].SameSystem, calls[1].SameSystem)
	}
	if !strings.Contains(string(calls[0].Settings), `"context":{"page":"reports"}`) || strings.Contains(string(calls[1].Settings), "context") ||
		!strings.Contains(string(calls[1].Settings), `"max_iterations":5`) {
		t.Errorf("settings %s, %s", calls[0].Settings, calls[1].Settings)
	}
	if calls[0].Output != nil || string(calls[1].Output) != `{"text":"Hello."}` {
		t.Errorf("outputs %s, %s: the answer goes with the call that ended the turn", calls[0].Output, calls[1].Output)
	}
	body, err := gunzip(calls[1].Request)
	if err != nil || !strings.HasPrefix(string(body), `{"messages":["bbb`) || !strings.Contains(string(body), `"system":"You help. aaa`) {
		t.Errorf("request %.40s, %v", body, err)
	}
	if len(calls[1].Request) > 1<<10 {
		t.Errorf("a request of 20 KiB of one letter stored as %d bytes", len(calls[1].Request))
	}

	send(noise(limit / 3)) // a third of the limit, hardly compressible: over a quarter
	if c := l.take(nil)[0]; c.Request != nil || !strings.Contains(c.RequestOmitted, "at most") || !c.SameSystem {
		t.Errorf("a request over a quarter of the limit: %d bytes kept, omitted %q", len(c.Request), c.RequestOmitted)
	}
	for range 8 {
		send(noise(limit / 5)) // about a sixth of the limit compressed
	}
	calls = l.take(&callOutput{Text: noise(limit)})
	last := calls[len(calls)-1]
	if calls[0].Request == nil || last.Request != nil || !strings.Contains(last.RequestOmitted, "reached their limit") {
		t.Errorf("past the run's limit: kept %d bytes of the first, %d of the last; omitted %q", len(calls[0].Request), len(last.Request), last.RequestOmitted)
	}
	if !strings.Contains(string(last.Output), `"omitted"`) {
		t.Errorf("an answer past the limit is stored as %.80s", last.Output)
	}
	if l.used > limit {
		t.Errorf("the run stored %d bytes; the limit is %d", l.used, limit)
	}
	if l.take(nil) != nil && len(l.take(nil)) != 0 {
		t.Error("taken calls are taken again")
	}
}

// BenchmarkCallLogTake measures what a run pays per model call for its durable diagnostics: the
// request encoded again by the OpenAI adapter and compressed, for a conversation of about 100 KB.
func BenchmarkCallLogTake(b *testing.B) {
	prov, err := openai.New(openai.Options{Name: "openai", BaseURL: "http://127.0.0.1:1/v1"})
	if err != nil {
		b.Fatal(err)
	}
	req := &llm.Request{Model: "gpt-4o-mini", System: strings.Repeat("You are a helpful assistant. ", 40)}
	for i := range 100 {
		req.Messages = append(req.Messages, llm.TextMessage(llm.RoleUser, "Question "+strings.Repeat("about the weather ", 25)),
			llm.TextMessage(llm.RoleAssistant, "Answer "+strings.Repeat("it is sunny and warm ", 25)+string(rune('a'+i%26))))
	}
	l := &callLog{runID: "r", sessionID: "s", limit: 8 << 20, log: slog.New(slog.DiscardHandler)}
	m := agent.Model{Provider: prov, Name: "gpt-4o-mini", ProviderName: "openai"}
	body, _ := prov.Encode(req)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		l.sending(m, req)
		l.take(&callOutput{Text: "It is sunny."})
		l.used = 0
	}
}
