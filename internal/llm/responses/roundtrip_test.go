package responses

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
)

// TestRoundTrip decodes recorded streams, folds them with llm.Collector as every consumer does, sends the
// answer back as history, and checks that each reasoning item reaches the API again exactly as it came
// (id, summaries in order, encrypted content: byte for byte), in the place it came, before the message or
// function call it preceded.
func TestRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		file  string
		parts int // the folded parts: one per summary part (the last signed), one per text run
	}{
		{"reasoning_summaries", 3},
		{"reasoning_encrypted_only", 1},
		{"incomplete_max_output_tokens", 2},
		{"function_call_split", 1},
	} {
		t.Run(tt.file, func(t *testing.T) {
			body, err := os.ReadFile("testdata/" + tt.file + ".sse")
			if err != nil {
				t.Fatal(err)
			}
			c := newTestClient(t, llmtest.ServeBytes(t, body, 5).URL)
			var col llm.Collector
			for ev, err := range c.Stream(t.Context(), testRequest) {
				if err != nil {
					t.Fatal(err)
				}
				col.Add(ev)
			}
			answer := col.Message()
			answer.Origin = "openai-responses/gpt-5"
			if len(answer.Parts) != tt.parts {
				t.Errorf("%d parts, want %d: %+v", len(answer.Parts), tt.parts, answer.Parts)
			}
			next := &llm.Request{Model: "gpt-5", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi"), answer}}
			for _, tc := range answer.ToolCalls {
				next.Messages = append(next.Messages, llm.Message{Role: llm.RoleTool, ToolCallID: tc.ID, ToolName: tc.Name,
					Parts: []llm.Part{{Kind: llm.PartText, Text: "done"}}})
			}
			sent, err := c.Encode(next)
			if err != nil {
				t.Fatal(err)
			}
			var req struct{ Input []json.RawMessage }
			if err := json.Unmarshal(sent, &req); err != nil {
				t.Fatal(err)
			}
			want := replayOf(t, outputItems(t, body))
			if len(want) == 0 || len(req.Input) < 1+len(want) {
				t.Fatalf("%d recorded items, %d sent", len(want), len(req.Input))
			}
			got := req.Input[1 : 1+len(want)]
			if diff := cmp.Diff(want, rawStrings(got)); diff != "" {
				t.Errorf("replayed items (-want +got):\n%s", diff)
			}
			if msg := checkInput(req.Input); msg != "" {
				t.Errorf("the API would refuse the replay: %s", msg)
			}
		})
	}
}

// outputItems returns the items of the recording's response.output_item.done events, as sent.
func outputItems(t *testing.T, body []byte) []json.RawMessage {
	t.Helper()
	var items []json.RawMessage
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type string
			Item json.RawMessage
		}
		if json.Unmarshal([]byte(data), &ev) == nil && ev.Type == "response.output_item.done" {
			items = append(items, ev.Item)
		}
	}
	return items
}

// replayOf returns what chatd must send back for the recorded output items: a reasoning item verbatim,
// a message as its text, a function call as its call id, name and arguments.
func replayOf(t *testing.T, items []json.RawMessage) []string {
	t.Helper()
	var out []string
	for _, raw := range items {
		var it outputItem
		if err := json.Unmarshal(raw, &it); err != nil {
			t.Fatal(err)
		}
		switch it.Type {
		case "reasoning":
			var b bytes.Buffer
			if err := json.Compact(&b, raw); err != nil {
				t.Fatal(err)
			}
			out = append(out, b.String())
		case "message":
			text, _ := json.Marshal(it.Content[0].Text)
			out = append(out, fmt.Sprintf(`{"type":"message","role":"assistant","content":[{"type":"output_text","text":%s}]}`, text))
		case "function_call":
			args, _ := json.Marshal(it.Arguments)
			out = append(out, fmt.Sprintf(`{"type":"function_call","call_id":%q,"name":%q,"arguments":%s}`, it.CallID, it.Name, args))
		}
	}
	return out
}

func rawStrings(items []json.RawMessage) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = string(it)
	}
	return out
}
