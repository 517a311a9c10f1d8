package chat_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"chatd/internal/chat"
	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
	"chatd/internal/store"
	"chatd/internal/tool"
)

// lookupTool returns about 1.5 KB of text a call: a tool loop that fills a small window in a few rounds.
type lookupTool struct{ size int }

func (l lookupTool) Info() tool.Info {
	return tool.Info{Name: "lookup", Description: "Looks a number up.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)}
}

func (l lookupTool) Call(_ context.Context, args json.RawMessage) (tool.Result, error) {
	var a struct{ N int }
	if err := json.Unmarshal(args, &a); err != nil {
		return tool.Result{}, err
	}
	var sb strings.Builder
	for i := 0; sb.Len() < l.size; i++ {
		fmt.Fprintf(&sb, "fact %d of number %d: the value is %d. ", i, a.N, a.N*1000+i)
	}
	return tool.Result{Content: sb.String()}, nil
}

// isSummaryCall reports whether req is chatd asking the model for a summary.
func isSummaryCall(req llmtest.Request) bool {
	return bytes.Contains(req.Raw, []byte("You write the summary that replaces"))
}

// TestLongToolLoopCompacts: a 40-round tool loop on a model with a small window crosses the compaction
// threshold again and again, mid-loop. Every request fits the window, every one is valid for the
// provider (strict mode throughout, the last turn included), the summaries never split a call from its
// result, and the run ends with the model's answer. The stored records keep every result in full.
func TestLongToolLoopCompacts(t *testing.T) {
	const rounds = 40
	for _, protocol := range []string{llmtest.ProtocolOpenAI, llmtest.ProtocolAnthropic, llmtest.ProtocolGemini, llmtest.ProtocolResponses} {
		t.Run(protocol, func(t *testing.T) {
			var mu sync.Mutex
			main, summaries := 0, 0
			respond := func(_ int, req llmtest.Request) llmtest.Turn {
				mu.Lock()
				defer mu.Unlock()
				if isSummaryCall(req) {
					summaries++
					return llmtest.Turn{Text: fmt.Sprintf("SUMMARY-%d: the user asked for %d lookups so far.", summaries, main)}
				}
				main++
				if main <= rounds {
					return llmtest.Turn{Reasoning: "I need another number.", Text: "Looking.",
						ToolCalls: []llmtest.ToolCall{{ID: fmt.Sprintf("call_%d", main), Name: "lookup", Arguments: fmt.Sprintf(`{"n":%d}`, main)}}}
				}
				return llmtest.Turn{Text: "All 40 numbers are looked up."}
			}
			f := newFixture(t, setup{Respond: respond, Protocol: protocol, Tools: []tool.Tool{lookupTool{size: 1500}},
				Agents: map[string]chat.Agent{"default": {ContextWindow: 5000, ToolHistoryRounds: -1}}})
			// The server refuses what does not fit: a request over the window is a failure of the test.
			f.up.ContextWindow = 6000

			st := f.send(t, chat.Request{Message: "Look up the numbers 1 to 40.", MaxIterations: 45}, chat.StartOptions{})
			o := f.wait(t, st.RunID)
			if o.Status != store.RunCompleted || o.Message == nil || o.Message.Content != "All 40 numbers are looked up." {
				t.Fatalf("run: %+v %+v", o, o.Error)
			}
			reqs := f.up.Requests()
			mu.Lock()
			if len(reqs) != main+summaries {
				t.Errorf("%d requests, %d answered: the server refused some", len(reqs), main+summaries)
			}
			mu.Unlock()
			for i, r := range reqs {
				if n := llmtest.EstimateTokens(r.Raw); n > 6000 {
					t.Errorf("request %d: %d tokens", i, n)
				}
			}
			if last := reqs[len(reqs)-1]; !bytes.Contains(last.Raw, []byte("SUMMARY-")) || isSummaryCall(last) {
				t.Errorf("the last request does not carry the summary")
			}

			recs := records(t, f.db, st.SessionID)
			checkPaired(t, recs)
			byID := map[string]int{}
			calls, results, stored := 0, 0, 0
			for i, r := range recs {
				byID[r.ID] = i
				switch {
				case r.Role == store.RoleAssistant:
					calls += len(r.ToolCalls)
				case r.Role == store.RoleTool:
					results++
					if len(r.Content) < 1500 {
						t.Errorf("stored result %s cut to %d bytes", r.ToolCallID, len(r.Content))
					}
				case r.SummaryThrough != "":
					stored++
					j, ok := byID[r.SummaryThrough]
					if !ok {
						t.Errorf("summary %s names %s, not an earlier record", r.ID, r.SummaryThrough)
					} else if recs[j+1].Role == store.RoleTool {
						t.Errorf("summary %s ends between a call and its result", r.ID)
					}
				}
			}
			if calls != rounds || results != rounds || stored < 2 || stored > summaries {
				t.Errorf("%d calls, %d results, %d summaries stored (%d made)", calls, results, stored, summaries)
			}
		})
	}
}

// TestContextTooLong: the provider's "context too long" answer compacts once and retries once; a second
// one fails the run with it — never a loop.
func TestContextTooLong(t *testing.T) {
	tooLong := llmtest.Turn{Status: 400, ErrorMessage: "This model's maximum context length is 4096 tokens. However, your messages resulted in 5000 tokens. Please reduce the length of the messages."}
	for _, tc := range []struct {
		name      string
		refusals  int
		wantState string
	}{
		{"once", 1, store.RunCompleted},
		{"twice", 2, store.RunFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var kinds []string
			refused := 0
			f := newFixture(t, setup{Respond: func(_ int, req llmtest.Request) llmtest.Turn {
				mu.Lock()
				defer mu.Unlock()
				if isSummaryCall(req) {
					kinds = append(kinds, "summary")
					return llmtest.Turn{Text: "They talked about the weather."}
				}
				kinds = append(kinds, "main")
				if strings.Contains(lastUserMessage(req), "now") && refused < tc.refusals {
					refused++
					return tooLong
				}
				return llmtest.Turn{Text: "re: " + lastUserMessage(req)}
			}})
			first := f.send(t, chat.Request{Message: "first"}, chat.StartOptions{})
			f.wait(t, first.RunID)
			second := f.send(t, chat.Request{SessionID: first.SessionID, Message: "second"}, chat.StartOptions{})
			f.wait(t, second.RunID)
			mu.Lock()
			kinds = nil
			mu.Unlock()

			st := f.send(t, chat.Request{SessionID: first.SessionID, Message: "and now"}, chat.StartOptions{})
			o := f.wait(t, st.RunID)
			if o.Status != tc.wantState {
				t.Fatalf("run %s: %+v", o.Status, o.Error)
			}
			mu.Lock()
			if got := strings.Join(kinds, ","); got != "main,summary,main" {
				t.Errorf("calls: %s, want main,summary,main", got)
			}
			mu.Unlock()
			if tc.wantState == store.RunFailed && (o.Error == nil || o.Error.Code != "upstream_context_length") {
				t.Errorf("error: %+v", o.Error)
			}
			if tc.wantState == store.RunCompleted {
				last := f.up.Requests()[len(f.up.Requests())-1]
				if !bytes.Contains(last.Raw, []byte("They talked about the weather.")) || bytes.Contains(last.Raw, []byte(`"first"`)) {
					t.Errorf("the retry does not carry the summary in place of the first turns: %s", last.Raw)
				}
			}
		})
	}
}

// TestCorruptRecordsContinue: a session whose stored records cannot be right (thousands of tool
// results in one turn, answering no call, as one production history held) still continues: the model gets a valid request
// (strict mode), the records stay as they are, and the log warns once, with figures.
func TestCorruptRecordsContinue(t *testing.T) {
	path := dbPath(t)
	var logs bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))
	turns := 0
	f := newFixture(t, setup{Path: path, Logger: log, Tools: []tool.Tool{lookupTool{size: 10}}, Respond: func(_ int, req llmtest.Request) llmtest.Turn {
		turns++
		if turns == 1 {
			return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "lookup", Arguments: `{"n":1}`}}}
		}
		return llmtest.Turn{Text: "re: " + lastUserMessage(req)}
	}})
	first := f.send(t, chat.Request{Message: "look"}, chat.StartOptions{})
	f.wait(t, first.RunID)
	recs := records(t, f.db, first.SessionID)
	parent := recs[1]

	// What no chatd writes: 2,000 results for calls nobody made. (A second result for one call the
	// schema itself refuses.)
	raw := openRaw(t, path)
	tx, err := raw.Begin()
	if err != nil {
		t.Fatal(err)
	}
	seq := int64(len(recs))
	for i := range 2_000 {
		seq++
		id, call := fmt.Sprintf("bad-%d", i), fmt.Sprintf("call_ghost_%d", i)
		_, err := tx.Exec(`INSERT INTO records (id, session_id, user_id, seq, role, content, reasoning, parent_id,
tool_call_id, name, model, finish_reason, created_at) VALUES (?, ?, ?, ?, 'tool', 'again', '', ?, ?, 'lookup', '', '', 0)`,
			id, first.SessionID, user, seq, parent.ID, call)
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Exec(`UPDATE sessions SET last_seq = ? WHERE id = ?`, seq, first.SessionID); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	next := f.send(t, chat.Request{SessionID: first.SessionID, Message: "go on"}, chat.StartOptions{})
	if o := f.wait(t, next.RunID); o.Status != store.RunCompleted || o.Message.Content != "re: go on" {
		t.Fatalf("the next message: %+v %+v", o, o.Error)
	}
	if n := len(records(t, f.db, first.SessionID)); n != int(seq)+2 {
		t.Errorf("%d records stored, want %d: the corrupt ones must stay", n, seq+2)
	}
	logMu.Lock()
	defer logMu.Unlock()
	text := logs.String()
	if n := strings.Count(text, "cannot be right"); n != 1 {
		t.Errorf("%d warnings about the records, want 1:\n%s", n, text)
	}
	if !strings.Contains(text, "orphan_results=2000") {
		t.Errorf("the warning lacks the figures:\n%s", text)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestWhatTheModelIsSent: the system prompt's sections, a tool result over the cap cut for the model
// but stored whole, and Anthropic's cache breakpoints moving forward as the loop goes on.
func TestWhatTheModelIsSent(t *testing.T) {
	turns := 0
	f := newFixture(t, setup{Protocol: llmtest.ProtocolAnthropic, Tools: []tool.Tool{lookupTool{size: 100_000}},
		Context: chat.ContextOptions{ResultMaxBytes: 10_000},
		Agents:  map[string]chat.Agent{"ada": {SystemPrompt: "You are Ada.", Instructions: "Answer in French.", Guidelines: "Be brief."}},
		Respond: func(_ int, req llmtest.Request) llmtest.Turn {
			turns++
			if turns <= 2 {
				return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: fmt.Sprint("toolu_", turns), Name: "lookup", Arguments: fmt.Sprintf(`{"n":%d}`, turns)}}}
			}
			return llmtest.Turn{Text: "Voilà.", Usage: &llm.Usage{InputTokens: 9000, OutputTokens: 3, CacheReadTokens: 8000, CacheWriteTokens: 900}}
		}})
	st := f.send(t, chat.Request{Agent: "ada", Message: "look", Context: map[string]any{"page": "reports"}}, chat.StartOptions{})
	o := f.wait(t, st.RunID)
	if o.Status != store.RunCompleted {
		t.Fatalf("run: %+v %+v", o, o.Error)
	}
	if o.Usage.CacheReadTokens != 8000 || o.Usage.CacheWriteTokens != 900 {
		t.Errorf("usage does not show the cache: %+v", o.Usage)
	}
	reqs := f.up.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	var system strings.Builder
	for _, b := range blocks(reqs[0].Body["system"]) {
		system.WriteString(b["text"].(string))
	}
	sys := system.String()
	order := []string{"You are Ada.", "# Context", `"page": "reports"`, "# Capabilities", "- lookup: Looks a number up.", "# Instructions", "Answer in French.", "# Guidelines", "Be brief."}
	at := 0
	for _, s := range order {
		i := strings.Index(sys[at:], s)
		if i < 0 {
			t.Fatalf("system prompt lacks %q after byte %d:\n%s", s, at, sys)
		}
		at += i
	}

	// The results: cut for the model, whole in the store.
	last := reqs[2]
	if bytes.Count(last.Raw, []byte("Result cut for the model: showing the first 10000 of ")) != 2 || len(last.Raw) > 40_000 {
		t.Errorf("the results were not cut: %d bytes", len(last.Raw))
	}
	for _, r := range records(t, f.db, st.SessionID) {
		if r.Role == store.RoleTool && len(r.Content) < 100_000 {
			t.Errorf("stored result cut to %d bytes", len(r.Content))
		}
	}

	// Breakpoints: the system and the tools, then the end of the conversation, moving forward.
	var ends []int
	for _, r := range reqs {
		msgs := blocks(r.Body["messages"])
		end := -1
		for i, m := range msgs {
			for _, b := range blocks(m["content"]) {
				if b["cache_control"] != nil {
					end = i
				}
			}
		}
		ends = append(ends, end)
		sys := blocks(r.Body["system"])
		tools := blocks(r.Body["tools"])
		if sys[len(sys)-1]["cache_control"] == nil || tools[len(tools)-1]["cache_control"] == nil {
			t.Errorf("request without breakpoints on the system prompt and tools")
		}
		if end != len(msgs)-1 {
			t.Errorf("the last breakpoint is on message %d of %d", end, len(msgs))
		}
	}
	if !(ends[0] < ends[1] && ends[1] < ends[2]) {
		t.Errorf("breakpoints did not move forward: %v", ends)
	}
}

// blocks returns a JSON list of objects.
func blocks(v any) []map[string]any {
	list, _ := v.([]any)
	out := make([]map[string]any, 0, len(list))
	for _, x := range list {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// openRaw opens the SQLite file at path with plain SQL, to write what chatd never would.
func openRaw(t *testing.T, path string) *sql.DB {
	t.Helper()
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	return raw
}

// TestCompactionThatCannotHelp: when the system prompt and tools fill most of the window, summarizing
// the turns would not bring the request under the limit: chatd does not summarize on every call (nor at
// all), and the run goes on.
func TestCompactionThatCannotHelp(t *testing.T) {
	var mu sync.Mutex
	main, summaries := 0, 0
	f := newFixture(t, setup{Tools: []tool.Tool{lookupTool{size: 600}},
		Agents: map[string]chat.Agent{"default": {ContextWindow: 5000, SystemPrompt: strings.Repeat("Be careful. ", 1300)}},
		Respond: func(_ int, req llmtest.Request) llmtest.Turn {
			mu.Lock()
			defer mu.Unlock()
			if isSummaryCall(req) {
				summaries++
				return llmtest.Turn{Text: "summary"}
			}
			main++
			if main <= 12 {
				return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: fmt.Sprint("call_", main), Name: "lookup", Arguments: fmt.Sprintf(`{"n":%d}`, main)}}}
			}
			return llmtest.Turn{Text: "done"}
		}})
	f.up.ContextWindow = 100_000 // large; it makes the server report each request's size as its usage
	st := f.send(t, chat.Request{Message: "look", MaxIterations: 20}, chat.StartOptions{})
	if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
		t.Fatalf("run: %+v %+v", o, o.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	if summaries != 0 {
		t.Errorf("%d summary calls for a conversation no summary can fit", summaries)
	}
}
