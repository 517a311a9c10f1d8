package chat_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/chat"
	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
	"chatd/internal/store"
	"chatd/internal/tool"
)

// TestDiagnosticsStored: a run's diagnostics are read from the store — by a service that did not run
// it, as after a restart — call by call, each request the bytes the upstream received, each answer as
// the model wrote it; another user's run and a deleted session's are not found.
func TestDiagnosticsStored(t *testing.T) {
	f := newFixture(t, setup{Tools: []tool.Tool{tool.CurrentTime(nil)}, Turns: []llmtest.Turn{
		{Text: "Let me look.", ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "current_time", Arguments: `{}`}}},
		{Text: "It is noon."},
	}, Context: chat.ContextOptions{}})
	st := f.send(t, chat.Request{Message: "What time is it?", Context: map[string]any{"page": "clock"}}, chat.StartOptions{})
	if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
		t.Fatalf("run %s", o.Status)
	}
	// A second service on the same store: nothing of the run in its memory.
	fresh := chat.New(chat.Options{Store: f.db, Models: oneModel{nil}, DefaultModel: "x/m", FlushInterval: -1})
	t.Cleanup(func() { fresh.Close(context.Background()) })

	upstream := f.up.Requests()
	if len(upstream) != 2 {
		t.Fatalf("%d upstream requests", len(upstream))
	}
	for n, want := range []struct{ text string }{{"Let me look."}, {"It is noon."}} {
		d, err := fresh.Diagnostics(t.Context(), user, st.RunID, n+1)
		if err != nil {
			t.Fatalf("call %d: %v", n+1, err)
		}
		if d.Call != n+1 || d.ModelCalls != 2 || len(d.Calls) != 2 || d.Model != "x/m" || d.Agent != "default" {
			t.Errorf("call %d: %+v", n+1, d)
		}
		if string(d.Request) != string(upstream[n].Raw) {
			t.Errorf("call %d: the stored request differs from what the upstream received:\n%s\n%s", n+1, d.Request, upstream[n].Raw)
		}
		var out struct {
			Text      string
			ToolCalls []struct{ Name string } `json:"tool_calls"`
		}
		if err := json.Unmarshal(d.Output, &out); err != nil || out.Text != want.text {
			t.Errorf("call %d: output %s", n+1, d.Output)
		}
		if n == 0 && !strings.Contains(string(d.Output), `"tool_calls":[{"id":"call_1","name":"current_time","arguments":{}}]`) {
			t.Errorf("call 1: output %s, want its tool call", d.Output)
		}
		if d.Context["page"] != "clock" || d.SystemPrompt == "" || !cmp.Equal(d.Tools, []string{"current_time"}) || d.MaxIterations != 10 {
			t.Errorf("call %d: context %v, tools %v, system %q, max_iterations %d", n+1, d.Context, d.Tools, d.SystemPrompt, d.MaxIterations)
		}
	}
	latest, err := fresh.Diagnostics(t.Context(), user, st.RunID, 0)
	if err != nil || latest.Call != 2 {
		t.Errorf("the latest call: %+v, %v", latest, err)
	}
	notFound := func(what string, err error) {
		t.Helper()
		var e *chat.Error
		if !errors.As(err, &e) || !errors.Is(e.Kind, store.ErrNotFound) {
			t.Errorf("%s: %v, want not found", what, err)
		}
	}
	_, err = fresh.Diagnostics(t.Context(), "mallory", st.RunID, 0)
	notFound("another user's run", err)
	_, err = fresh.Diagnostics(t.Context(), user, st.RunID, 3)
	notFound("a call the run did not make", err)
	if err := fresh.DeleteSession(t.Context(), user, st.SessionID); err != nil {
		t.Fatal(err)
	}
	_, err = fresh.Diagnostics(t.Context(), user, st.RunID, 0)
	notFound("a deleted session's run", err)
}

// encodeCounter is a provider that counts the requests encoded through it; its calls stream through the
// adapter it wraps, which encodes their bodies itself.
type encodeCounter struct {
	llm.Provider
	encoded atomic.Int32
}

func (p *encodeCounter) Encode(req *llm.Request) ([]byte, error) {
	p.encoded.Add(1)
	return p.Provider.(llm.Encoder).Encode(req)
}

// TestDiagnosticsStoreTheBodySent: each call stores, compressed, the very bytes its adapter sent —
// a refused attempt's too — without encoding the request again, whatever the API.
func TestDiagnosticsStoreTheBodySent(t *testing.T) {
	for _, protocol := range []string{llmtest.ProtocolOpenAI, llmtest.ProtocolAnthropic, llmtest.ProtocolGemini, llmtest.ProtocolResponses} {
		t.Run(protocol, func(t *testing.T) {
			var counter *encodeCounter
			f := newFixture(t, setup{Protocol: protocol, Tools: []tool.Tool{tool.CurrentTime(nil)}, Turns: []llmtest.Turn{
				{Status: 429, RetryAfter: "0"},
				{Text: "Let me look.", ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "current_time", Arguments: `{}`}}},
				{Text: "It is noon."},
			}, WrapModel: func(p llm.Provider) llm.Provider {
				counter = &encodeCounter{Provider: p}
				return counter
			}})
			st := f.send(t, chat.Request{Message: "What time is it?"}, chat.StartOptions{})
			if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
				t.Fatalf("run %s", o.Status)
			}
			upstream := f.up.Requests()
			calls, err := f.db.ModelCalls(t.Context(), user, st.RunID)
			if err != nil {
				t.Fatal(err)
			}
			if len(upstream) != 3 || len(calls) != 3 {
				t.Fatalf("%d upstream requests, %d calls stored; want 3 of each", len(upstream), len(calls))
			}
			for i, c := range calls {
				zr, err := gzip.NewReader(bytes.NewReader(c.Request))
				if err != nil {
					t.Fatalf("call %d: %v (request omitted: %q)", c.N, err, c.RequestOmitted)
				}
				body, err := io.ReadAll(zr)
				if err != nil {
					t.Fatalf("call %d: %v", c.N, err)
				}
				if !bytes.Equal(body, upstream[i].Raw) {
					t.Errorf("call %d: the stored request differs from what the upstream received:\n%s\n%s", c.N, body, upstream[i].Raw)
				}
			}
			if n := counter.encoded.Load(); n != 0 {
				t.Errorf("the requests were encoded again %d times for the diagnostics; want none", n)
			}
		})
	}
}

// TestDiagnosticsOfARunningRun: a run's call is shown while the model still answers it, before the
// run has stored it.
func TestDiagnosticsOfARunningRun(t *testing.T) {
	g := newGate(t)
	f := newFixture(t, setup{Turns: []llmtest.Turn{{Text: "Slowly.", BeforeFinish: g.hold}}})
	st := f.send(t, chat.Request{Message: "Take your time"}, chat.StartOptions{})
	g.wait(t)
	d, err := f.svc.Diagnostics(t.Context(), user, st.RunID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d.Call != 1 || d.Request == nil || d.Output != nil || len(d.Calls) != 1 {
		t.Errorf("the running call: %+v", d)
	}
	g.open()
	f.wait(t, st.RunID)
	if d, err = f.svc.Diagnostics(t.Context(), user, st.RunID, 0); err != nil || d.Output == nil || len(d.Calls) != 1 {
		t.Errorf("the call once stored: %+v, %v", d, err)
	}
}

// TestDiagnosticsCountRetries: a call retried (429, then an answer) is two requests upstream and two
// calls in the diagnostics, numbered as the upstream received them.
func TestDiagnosticsCountRetries(t *testing.T) {
	f := newFixture(t, setup{Turns: []llmtest.Turn{{Status: 429, RetryAfter: "0"}, {Text: "Hello."}}})
	st := f.send(t, chat.Request{Message: "Hi"}, chat.StartOptions{})
	if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
		t.Fatalf("run %s", o.Status)
	}
	d, err := f.svc.Diagnostics(t.Context(), user, st.RunID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if up := len(f.up.Requests()); up != 2 || d.ModelCalls != up || len(d.Calls) != up {
		t.Fatalf("upstream got %d requests; diagnostics say model_calls=%d with %d listed", up, d.ModelCalls, len(d.Calls))
	}
	if d.Calls[0].Output || !d.Calls[1].Output || d.Call != 2 {
		t.Errorf("the refused attempt ends no turn, the retry ends it: %+v", d.Calls)
	}
}

// TestDiagnosticsPerSession: a session keeps the request bodies of its latest limits.diagnostics_runs
// runs; older runs keep the rest of their calls, with request_omitted saying why. A negative
// limits.diagnostics_bytes keeps none at all.
func TestDiagnosticsPerSession(t *testing.T) {
	f := newFixture(t, setup{Respond: echo, Limits: chat.Limits{DiagnosticsRuns: 2}})
	var runs []string
	session := ""
	for i := range 4 {
		st := f.send(t, chat.Request{SessionID: session, Message: strings.Repeat("words ", 100+i)}, chat.StartOptions{})
		session = st.SessionID
		f.wait(t, st.RunID)
		runs = append(runs, st.RunID)
	}
	for i, id := range runs {
		d, err := f.svc.Diagnostics(t.Context(), user, id, 0)
		if err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
		kept := i >= 2
		if (d.Request != nil) != kept || (strings.Contains(d.RequestOmitted, "diagnostics_runs")) == kept || d.SystemPrompt == "" || d.Output == nil {
			t.Errorf("run %d of 4, the latest 2 keep their requests: request %d bytes, omitted %q", i+1, len(d.Request), d.RequestOmitted)
		}
	}

	off := newFixture(t, setup{Respond: echo, Limits: chat.Limits{DiagnosticsBytes: -1}})
	st := off.send(t, chat.Request{Message: "hi"}, chat.StartOptions{})
	off.wait(t, st.RunID)
	if calls, err := off.db.ModelCalls(t.Context(), user, st.RunID); err != nil || len(calls) != 0 {
		t.Errorf("with diagnostics off the run stored %d calls (%v)", len(calls), err)
	}
	_, err := off.svc.Diagnostics(t.Context(), user, st.RunID, 0)
	if e, ok := errors.AsType[*chat.Error](err); !ok || e.Code != "diagnostics_unavailable" || !strings.Contains(e.Message, "diagnostics_bytes") {
		t.Errorf("diagnostics with diagnostics off: %v", err)
	}
}
