package chat

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/llm/openai"
	"chatd/internal/store"
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
	body, err := gunzip(calls[1].Request, limit)
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

// BenchmarkCallLogTake measures what a run pays per model call for its durable diagnostics when the
// provider handed over no body (its call failed before it had one): the request encoded again by the
// OpenAI adapter and compressed, for a conversation of about 100 KB.
func BenchmarkCallLogTake(b *testing.B) {
	l, m, req, _ := benchCallLog(b, 100)
	for b.Loop() {
		l.sending(m, req)
		l.take(&callOutput{Text: "It is sunny."})
		l.used = 0
	}
}

// countingProvider is bodyProvider counting the requests it encodes.
type countingProvider struct {
	bodyProvider
	mu      sync.Mutex
	encoded int
}

func (p *countingProvider) Encode(req *llm.Request) ([]byte, error) {
	p.mu.Lock()
	p.encoded++
	p.mu.Unlock()
	return p.bodyProvider.Encode(req)
}

// TestCallLogEncodesOnce: a call's request is encoded and compressed once, however often a reader of
// the running run asks; a request whose attachments alone pass the limit is not encoded at all.
func TestCallLogEncodesOnce(t *testing.T) {
	p := &countingProvider{}
	l := &callLog{runID: "r", sessionID: "s", limit: 1 << 20, log: slog.New(slog.DiscardHandler)}
	m := agent.Model{Provider: p, Name: "m", ProviderName: "p"}
	l.sending(m, &llm.Request{System: "s", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}})
	for range 5 {
		if got := l.pending(); len(got) != 1 || got[0].Request == nil {
			t.Fatalf("pending %+v", got)
		}
	}
	if calls := l.take(nil); len(calls) != 1 || calls[0].Request == nil {
		t.Fatalf("taken %+v", calls)
	}
	if p.encoded != 1 {
		t.Errorf("the request was encoded %d times, want once", p.encoded)
	}
	img := make([]byte, 2<<20)
	l.sending(m, &llm.Request{System: "s", Messages: []llm.Message{{Role: llm.RoleUser,
		Parts: []llm.Part{{Kind: llm.PartImage, MediaType: "image/png", Data: img}, {Kind: llm.PartText, Text: "what is it"}}}}})
	c := l.take(nil)[0]
	if c.Request != nil || !strings.Contains(c.RequestOmitted, "attachments") || p.encoded != 1 {
		t.Errorf("a request with 2 MiB of image, limit 1 MiB: encoded %d times in all, omitted %q", p.encoded, c.RequestOmitted)
	}
}

// TestCallLogCountsEverything: what a run stores stays within its limit with a system prompt and a
// context far larger than it: both are counted, the prompt cut with a note, the context left out.
func TestCallLogCountsEverything(t *testing.T) {
	const limit = 4096
	l := &callLog{runID: "r", sessionID: "s", limit: limit, log: slog.New(slog.DiscardHandler),
		context: map[string]any{"page": strings.Repeat("x", 60000)}}
	m := agent.Model{Provider: bodyProvider{}, Name: "m", ProviderName: "p"}
	system := strings.Repeat("You are helpful. ", 4000)
	for i := range 3 {
		l.sending(m, &llm.Request{System: system + strings.Repeat("!", i%2), Tools: []llm.ToolSpec{{Name: "current_time"}},
			Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "time?")}})
	}
	total := 0
	for _, c := range l.take(&callOutput{Text: "noon"}) {
		total += len(c.Model) + len(c.System) + len(c.Settings) + len(c.Request) + len(c.RequestOmitted) + len(c.Output)
		for _, n := range c.Tools {
			total += len(n)
		}
		if !c.SameSystem && !strings.Contains(c.System, "cut: the system prompt was") {
			t.Errorf("call %d: system prompt of %d bytes stored as %d bytes without a note", c.N, len(system), len(c.System))
		}
		if c.N == 1 && !strings.Contains(string(c.Settings), "context_omitted") {
			t.Errorf("call 1: settings %.100s…, want the context left out", c.Settings)
		}
	}
	if total > limit {
		t.Errorf("the run stores %d bytes; limits.diagnostics_bytes is %d", total, limit)
	}
}

// BenchmarkCallLogStore1000 measures what storing one call's request costs a run for a conversation
// of 1,000 messages (about 540 KB sent), the provider's own encoding of it not counted: the body the
// provider hands over, compressed.
func BenchmarkCallLogStore1000(b *testing.B) {
	l, m, req, body := benchCallLog(b, 500)
	for b.Loop() {
		l.sending(m, req)
		req.Encoded(body) // what the provider's Stream does with the body it sends
		l.take(&callOutput{Text: "It is sunny."})
		l.stored()
		l.used = 0
	}
}

// TestCallLogKeepsTheBodySent: a call stores the body its provider handed over (Request.Encoded), not
// the request encoded again, and lets go of it once compressed. Each attempt is a call of its own, sent
// with the same request: the hook is the latest attempt's. Only a call whose provider handed nothing
// over — it failed before, or a reader compressed the call first — is encoded again; a body over the
// limit is not kept, and a request whose attachments pass it gets no hook.
func TestCallLogKeepsTheBodySent(t *testing.T) {
	const limit = 1 << 10
	p := &countingProvider{}
	l := &callLog{runID: "r", sessionID: "s", limit: limit, log: slog.New(slog.DiscardHandler)}
	m := agent.Model{Provider: p, Name: "m", ProviderName: "p"}
	req := &llm.Request{System: "s", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}}
	sent := []byte(`{"sent":"as the provider wrote it"}`)
	again, _ := bodyProvider{}.Encode(req)
	stored := func(c store.ModelCall) string {
		t.Helper()
		body, err := gunzip(c.Request, limit)
		if err != nil {
			t.Fatalf("call %d: %v (omitted %q)", c.N, err, c.RequestOmitted)
		}
		return string(body)
	}

	l.sending(m, req) // an attempt that failed before its provider had a body
	l.sending(m, req) // its retry
	req.Encoded(sent)
	calls := l.take(nil)
	if got := stored(calls[0]); got != string(again) {
		t.Errorf("call 1, handed nothing: stored %s, want the request encoded again", got)
	}
	if got := stored(calls[1]); got != string(sent) {
		t.Errorf("call 2: stored %s, want what the provider handed over", got)
	}
	if p.encoded != 1 {
		t.Errorf("encoded %d times, want once (call 1)", p.encoded)
	}
	for _, c := range l.taken {
		if c.sent != nil || c.req.Encoded != nil {
			t.Errorf("call %d still holds the body sent (%d bytes) or its hook after it was compressed", c.n, len(c.sent))
		}
	}
	l.stored()

	l.sending(m, req)
	if got := l.pending(); len(got) != 1 || stored(got[0]) != string(again) {
		t.Fatalf("a reader before the provider encoded: %+v", got)
	}
	req.Encoded(sent)
	if c := l.take(nil)[0]; stored(c) != string(again) || l.taken[0].sent != nil {
		t.Errorf("a body handed over after a reader compressed the call: stored %s, %d bytes held", stored(c), len(l.taken[0].sent))
	}
	l.stored()

	p.encoded = 0
	l.sending(m, req)
	req.Encoded(make([]byte, limit+1))
	if l.open[0].sent != nil {
		t.Error("a body over the limit is held until the call is stored")
	}
	if c := l.take(nil)[0]; c.Request != nil || !strings.Contains(c.RequestOmitted, "the request was 1025 bytes") || p.encoded != 0 {
		t.Errorf("a body over the limit: %d bytes stored, omitted %q, encoded %d times", len(c.Request), c.RequestOmitted, p.encoded)
	}
	l.stored()

	img := llm.Message{Role: llm.RoleUser, Parts: []llm.Part{{Kind: llm.PartImage, MediaType: "image/png", Data: make([]byte, limit+1)}}}
	withImage := &llm.Request{Messages: []llm.Message{img}, Encoded: func([]byte) { t.Error("a stale hook") }}
	l.sending(m, withImage)
	if withImage.Encoded != nil {
		t.Error("a request whose attachments pass the limit keeps a hook")
	}
	l.sending(agent.Model{Provider: streamOnly{}, Name: "m", ProviderName: "p"}, req)
	if req.Encoded != nil {
		t.Error("a request to a provider that cannot show its body gets a hook")
	}
}

// streamOnly is a provider that cannot show its requests' bodies.
type streamOnly struct{}

func (streamOnly) Stream(context.Context, *llm.Request) iter.Seq2[llm.Event, error] {
	return func(func(llm.Event, error) bool) {}
}

// TestCallLogReaderWhileSending: a reader of the running run may compress a call while its provider
// hands the body over; either body is stored, and the race detector finds nothing.
func TestCallLogReaderWhileSending(t *testing.T) {
	p := &countingProvider{}
	l := &callLog{runID: "r", sessionID: "s", limit: 1 << 20, log: slog.New(slog.DiscardHandler)}
	m := agent.Model{Provider: p, Name: "m", ProviderName: "p"}
	req := &llm.Request{System: "s", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}}
	sent := []byte(`{"sent":"as the provider wrote it"}`)
	again, _ := bodyProvider{}.Encode(req)
	for range 50 {
		l.sending(m, req)
		var wg sync.WaitGroup
		wg.Go(func() { l.pending() })
		req.Encoded(sent)
		wg.Wait()
		c := l.take(nil)[0]
		if body, err := gunzip(c.Request, l.limit); err != nil || (string(body) != string(sent) && string(body) != string(again)) {
			t.Fatalf("stored %s, %v", body, err)
		}
		l.stored()
	}
}

// TestCallLogHoldsOneBodySent: a turn of several attempts (a 429 retried, a fallback) compresses each
// attempt's body as the next one goes out, so that it holds one body sent at most until it is stored.
func TestCallLogHoldsOneBodySent(t *testing.T) {
	const limit = 1 << 20
	l := &callLog{runID: "r", sessionID: "s", limit: limit, log: slog.New(slog.DiscardHandler)}
	m := agent.Model{Provider: &countingProvider{}, Name: "m", ProviderName: "p"}
	req := &llm.Request{Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}}
	var bodies []string
	for i := range 4 {
		l.sending(m, req)
		body := fmt.Sprintf(`{"attempt":%d,"pad":%q}`, i, strings.Repeat("x", 64<<10))
		bodies = append(bodies, body)
		req.Encoded([]byte(body))
		held := 0
		for _, c := range l.open {
			c.mu.Lock()
			if c.sent != nil {
				held++
			}
			c.mu.Unlock()
		}
		if held != 1 {
			t.Fatalf("after attempt %d, %d calls hold the body they sent, want 1", i+1, held)
		}
	}
	for i, c := range l.take(nil) {
		body, err := gunzip(c.Request, limit)
		if err != nil || string(body) != bodies[i] {
			t.Errorf("call %d stored %.40q (%v), want the body of attempt %d", c.N, body, err, i+1)
		}
	}
}

// benchCallLog is the call log of a run whose model is OpenAI's, and a request of turns question and
// answer pairs with the body the adapter encodes for it; the benchmark's timer starts here.
func benchCallLog(b *testing.B, turns int) (*callLog, agent.Model, *llm.Request, []byte) {
	prov, err := openai.New(openai.Options{Name: "openai", BaseURL: "http://127.0.0.1:1/v1"})
	if err != nil {
		b.Fatal(err)
	}
	req := &llm.Request{Model: "gpt-4o-mini", System: strings.Repeat("You are a helpful assistant. ", 40)}
	for i := range turns {
		req.Messages = append(req.Messages, llm.TextMessage(llm.RoleUser, "Question "+strings.Repeat("about the weather ", 25)),
			llm.TextMessage(llm.RoleAssistant, "Answer "+strings.Repeat("it is sunny and warm ", 25)+string(rune('a'+i%26))))
	}
	l := &callLog{runID: "r", sessionID: "s", limit: 8 << 20, log: slog.New(slog.DiscardHandler)}
	m := agent.Model{Provider: prov, Name: "gpt-4o-mini", ProviderName: "openai"}
	body, _ := prov.Encode(req)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	return l, m, req, body
}
