package chat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/chat"
	"chatd/internal/llm/llmtest"
	"chatd/internal/runevent"
	"chatd/internal/store"
	"chatd/internal/tool"
)

// structuredTool returns a payload with its text, as an MCP tool with structuredContent does.
type structuredTool struct{}

func (structuredTool) Info() tool.Info {
	return tool.Info{Name: "search", Description: "Searches.", InputSchema: json.RawMessage(`{"type":"object"}`)}
}

func (structuredTool) Call(context.Context, json.RawMessage) (tool.Result, error) {
	return tool.Result{Content: "2 results", Payload: json.RawMessage(`[{"title":"A","year":2020},{"title":"B","year":2021}]`)}, nil
}

const markedAnswer = "Here are the results.\nI propose a table.\n" +
	"SCHEMA_PROPOSAL:\n```json\n{\"table\": \"articles\", \"columns\": [\"title\", \"year\"]}\n```\n" +
	"SUGGESTED_VALUES: [\"Show more\", {\"label\": \"Only 2021\", \"value\": \"Show the 2021 ones\"}]\n" +
	"SUGGESTED_ACTIONS: [{\"label\": \"Search again\", \"action\": \"search\", \"handler\": \"server\", \"data\": {\"q\": \"x\"}}]\n"

const cleanAnswer = "Here are the results.\nI propose a table.\n"

var proposal = chat.PayloadType{Name: "schema_proposal", Marker: "SCHEMA_PROPOSAL:", Instructions: "Propose a table when asked.",
	Schema: json.RawMessage(`{"type":"object","required":["table"],"properties":{"table":{"type":"string"}}}`)}

// TestMarkedAnswer: an answer's marked blocks, streamed in pieces of every size, never reach the client
// as text; complete carries the suggestions and the run's payloads (a tool's and the answer's), the
// stored record holds them apart from its clean text, and the next run's system prompt lists the
// payloads, which get_payload reads in full.
func TestMarkedAnswer(t *testing.T) {
	for _, runes := range []int{1, 2, 3, 7, 1000} {
		t.Run(fmt.Sprint(runes, " runes a chunk"), func(t *testing.T) {
			var payloadID string
			f := newFixture(t, setup{Tools: []tool.Tool{structuredTool{}},
				Agents: map[string]chat.Agent{"default": {Payloads: []chat.PayloadType{proposal}, Suggestions: true}},
				Respond: func(n int, req llmtest.Request) llmtest.Turn {
					switch n {
					case 0:
						return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "search", Arguments: `{}`}}}
					case 1:
						return llmtest.Turn{Text: markedAnswer, ChunkRunes: runes}
					case 2:
						return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "c2", Name: "get_payload", Arguments: `{"id":"` + payloadID + `"}`}}}
					}
					return llmtest.Turn{Text: "done"}
				}})
			st := f.send(t, chat.Request{Message: "find articles"}, chat.StartOptions{})
			events := collect(t, f.svc, user, st.RunID)
			if got := text(t, events); got != cleanAnswer {
				t.Fatalf("text deltas say %q, want %q", got, cleanAnswer)
			}
			c := complete(t, events)
			wantValues := []runevent.SuggestedValue{{Label: "Show more", Value: "Show more"}, {Label: "Only 2021", Value: "Show the 2021 ones"}}
			if d := cmp.Diff(wantValues, c.SuggestedValues); d != "" {
				t.Errorf("suggested values (-want +got):\n%s", d)
			}
			wantActions := []runevent.SuggestedAction{{Label: "Search again", Action: "search", Handler: "server", Data: json.RawMessage(`{"q":"x"}`)}}
			if d := cmp.Diff(wantActions, c.SuggestedActions); d != "" {
				t.Errorf("suggested actions (-want +got):\n%s", d)
			}
			if len(c.Payloads) != 2 || c.Payloads[0].Source != "tool" || c.Payloads[0].Type != "search" ||
				c.Payloads[1].Source != "marker" || c.Payloads[1].Type != "schema_proposal" {
				t.Fatalf("payloads: %+v", c.Payloads)
			}
			// complete names the payloads; their data is the records'.
			if c.Payloads[0].Data != nil || c.Payloads[1].Data != nil || c.Payloads[1].RecordID != c.Message.ID {
				t.Errorf("complete's payloads carry data, or name no record: %+v", c.Payloads)
			}
			if got := string(c.Message.Payloads[0].Data); len(c.Message.Payloads) != 1 || got != `{"table":"articles","columns":["title","year"]}` {
				t.Errorf("marker payload data %s", got)
			}
			if c.Message.Content != cleanAnswer || c.Message.RawContent != markedAnswer {
				t.Errorf("complete's message: content %q, raw %q", c.Message.Content, c.Message.RawContent)
			}
			recs := records(t, f.db, st.SessionID)
			last := recs[len(recs)-1]
			if last.Content != cleanAnswer || last.RawContent != markedAnswer || len(last.Payloads) != 1 ||
				!strings.Contains(string(last.SuggestedValues), "Show the 2021 ones") || !strings.Contains(string(last.SuggestedActions), "server") {
				t.Fatalf("stored answer: %+v", last)
			}

			// The next run: the manifest lists both payloads, and get_payload reads one.
			payloadID = c.Payloads[1].ID
			st = f.send(t, chat.Request{SessionID: st.SessionID, Message: "the proposal again?"}, chat.StartOptions{})
			if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
				t.Fatalf("second run: %+v", o)
			}
			reqs := f.up.Requests()
			sys := systemOf(t, reqs[2])
			for _, p := range c.Payloads {
				if !strings.Contains(sys, p.ID) || !strings.Contains(sys, p.Summary) {
					t.Errorf("the system prompt does not list payload %s (%s):\n%s", p.ID, p.Summary, sys)
				}
			}
			for _, want := range []string{"SCHEMA_PROPOSAL: (schema_proposal): Propose a table when asked.", "SUGGESTED_VALUES:", "Call get_payload"} {
				if !strings.Contains(sys, want) {
					t.Errorf("the system prompt lacks %q:\n%s", want, sys)
				}
			}
			if !contains(offered(t, reqs[2]), "get_payload") {
				t.Errorf("get_payload not offered: %v", offered(t, reqs[2]))
			}
			msgs := reqs[3].Messages()
			result, _ := msgs[len(msgs)-1]["content"].(string)
			if !strings.Contains(result, `{"table":"articles","columns":["title","year"]}`) {
				t.Errorf("get_payload's result: %q", result)
			}
		})
	}
}

// TestMalformedBlocks: a bad block is dropped and logged; the answer and the good blocks stand.
func TestMalformedBlocks(t *testing.T) {
	answer := "Text.\nSUGGESTED_VALUES: [1, 2]\nSCHEMA_PROPOSAL: {\"columns\": []}\nSUGGESTED_ACTIONS: [{\"label\": \"Go\", \"action\": \"go\"}]\nSCHEMA_PROPOSAL: {\"table\": \"t\"\nEnd."
	f := newFixture(t, setup{Agents: map[string]chat.Agent{"default": {Payloads: []chat.PayloadType{proposal}}},
		Respond: func(int, llmtest.Request) llmtest.Turn { return llmtest.Turn{Text: answer} }})
	st := f.send(t, chat.Request{Message: "hi"}, chat.StartOptions{})
	events := collect(t, f.svc, user, st.RunID)
	if got := text(t, events); got != "Text.\n" {
		t.Fatalf("text %q", got)
	}
	c := complete(t, events)
	if len(c.SuggestedValues) != 0 || len(c.Payloads) != 0 || len(c.SuggestedActions) != 1 || c.SuggestedActions[0].Handler != "client" {
		t.Fatalf("complete: %+v", c)
	}
}

// TestPayloadTypeScope: a type bound to a page is parsed (and offered) only there.
func TestPayloadTypeScope(t *testing.T) {
	scoped := proposal
	scoped.Page = "reports"
	answer := "A.\nSCHEMA_PROPOSAL: {\"table\": \"t\"}\n"
	f := newFixture(t, setup{Agents: map[string]chat.Agent{"default": {Payloads: []chat.PayloadType{scoped}}},
		Respond: func(int, llmtest.Request) llmtest.Turn { return llmtest.Turn{Text: answer} }})
	for _, tt := range []struct {
		ctx      map[string]any
		text     string
		payloads int
	}{{nil, answer, 0}, {map[string]any{"page": "settings"}, answer, 0}, {map[string]any{"page": "reports"}, "A.\n", 1}} {
		st := f.send(t, chat.Request{Message: "hi", Context: tt.ctx}, chat.StartOptions{})
		events := collect(t, f.svc, user, st.RunID)
		if got := text(t, events); got != tt.text || len(complete(t, events).Payloads) != tt.payloads {
			t.Errorf("context %v: text %q, payloads %d", tt.ctx, got, len(complete(t, events).Payloads))
		}
	}
}

func TestCheckPayloadTypes(t *testing.T) {
	for _, bad := range [][]chat.PayloadType{
		{{Name: "", Marker: "A:"}},
		{{Name: "a", Marker: "lower:"}},
		{{Name: "a", Marker: "NO_COLON"}},
		{{Name: "a", Marker: "SUGGESTED_VALUES:"}},
		{{Name: "a", Marker: "A:"}, {Name: "a", Marker: "B:"}},
		{{Name: "a", Marker: "A:"}, {Name: "b", Marker: "A:"}},
		{{Name: "a", Marker: "A:", Schema: json.RawMessage(`{"type": 12}`)}},
		{{Name: "a", Marker: "A:", Schema: json.RawMessage(`{"$ref": "file:///etc/passwd"}`)}},
		{{Name: "a", Marker: "A:", Tab: "t"}},
	} {
		if err := chat.CheckPayloadTypes(bad); err == nil {
			t.Errorf("CheckPayloadTypes(%+v) = nil", bad)
		}
	}
	if err := chat.CheckPayloadTypes([]chat.PayloadType{proposal}); err != nil {
		t.Error(err)
	}
}

func complete(t *testing.T, events []chat.Event) runevent.Complete {
	t.Helper()
	for _, e := range events {
		if e.Type == runevent.TypeComplete {
			c, err := runevent.Decode[runevent.Complete](e.Data)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
	t.Fatalf("no complete event: %s", types(events))
	return runevent.Complete{}
}

func systemOf(t *testing.T, req llmtest.Request) string {
	t.Helper()
	msgs := req.Messages()
	if len(msgs) == 0 || msgs[0]["role"] != "system" {
		t.Fatalf("no system message: %s", req.Raw)
	}
	s, _ := msgs[0]["content"].(string)
	return s
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestMarkerBytesLimit: a block over Limits.MarkerBytes is dropped whole; the text and the smaller
// blocks stand.
func TestMarkerBytesLimit(t *testing.T) {
	big := `["` + strings.Repeat("x", 200) + `"]`
	answer := "Text.\nSUGGESTED_VALUES: " + big + "\nSUGGESTED_ACTIONS: [{\"label\":\"Go\",\"action\":\"go\"}]\n"
	f := newFixture(t, setup{Limits: chat.Limits{MarkerBytes: 100},
		Respond: func(int, llmtest.Request) llmtest.Turn { return llmtest.Turn{Text: answer, ChunkRunes: 16} }})
	st := f.send(t, chat.Request{Message: "hi"}, chat.StartOptions{})
	events := collect(t, f.svc, user, st.RunID)
	c := complete(t, events)
	if got := text(t, events); got != "Text.\n" || len(c.SuggestedValues) != 0 || len(c.SuggestedActions) != 1 {
		t.Fatalf("text %q, complete %+v", got, c)
	}
}

// TestGetPayloadSelected: a request that selects its tools still gets get_payload when the
// conversation has payloads — GET /v1/tools does not list it, so a client cannot know to select it —
// and reads a payload of an earlier run with it.
func TestGetPayloadSelected(t *testing.T) {
	var id string
	f := newFixture(t, setup{Tools: []tool.Tool{structuredTool{}},
		Respond: func(n int, req llmtest.Request) llmtest.Turn {
			switch n {
			case 0:
				return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "search", Arguments: `{}`}}}
			case 2:
				return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "c2", Name: "get_payload", Arguments: `{"id":"` + id + `"}`}}}
			}
			return llmtest.Turn{Text: "ok"}
		}})
	st := f.send(t, chat.Request{Message: "find"}, chat.StartOptions{})
	c := complete(t, collect(t, f.svc, user, st.RunID))
	if len(c.Payloads) != 1 {
		t.Fatalf("payloads %+v", c.Payloads)
	}
	id = c.Payloads[0].ID
	st = f.send(t, chat.Request{SessionID: st.SessionID, Message: "again", SelectedTools: []string{"search"}}, chat.StartOptions{})
	if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
		t.Fatalf("second run: %+v", o)
	}
	reqs := f.up.Requests()
	if got := offered(t, reqs[2]); !contains(got, "get_payload") || !contains(got, "search") {
		t.Fatalf("offered %v, want search and get_payload", got)
	}
	msgs := reqs[3].Messages()
	if result, _ := msgs[len(msgs)-1]["content"].(string); !strings.Contains(result, `"year":2021`) {
		t.Errorf("get_payload's result: %q", result)
	}
}
