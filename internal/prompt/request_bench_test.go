package prompt_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"chatd/internal/llm"
	"chatd/internal/llm/openai"
	"chatd/internal/prompt"
	"chatd/internal/store"
)

// BenchmarkRequestBuild measures what a run does between having its session's records and sending
// its first model call: the records in effect, the system prompt with its payload manifest, the
// conversation with its token estimate, and the request's JSON (OpenAI's Chat Completions), for
// sessions of 10, 1,000 and 10,000 records of alternating user and assistant turns of about 200
// bytes, every fifth assistant turn with a tool call and its result. Warm keeps the token estimates
// of an earlier run of the session, as chatd does; cold counts every record.
func BenchmarkRequestBuild(b *testing.B) {
	client, err := openai.New(openai.Options{Name: "x", BaseURL: "http://127.0.0.1:1"})
	if err != nil {
		b.Fatal(err)
	}
	tools := []llm.ToolSpec{{Name: "get_weather", Description: "The weather in a city.",
		InputSchema: []byte(`{"type":"object","properties":{"city":{"type":"string"}}}`)}}
	for _, n := range []int{10, 1000, 10000} {
		records := history(n)
		for _, warm := range []bool{true, false} {
			name := fmt.Sprintf("%d/cold", n)
			if warm {
				name = fmt.Sprintf("%d/warm", n)
			}
			b.Run(name, func(b *testing.B) {
				est := &prompt.Estimates{}
				build := func() int {
					recs := store.Current(records)
					manifest, earlier := prompt.Manifest(recs)
					system := prompt.System(prompt.Sections{Identity: "You are a helpful assistant.", Payloads: manifest, EarlierPayloads: earlier, Tools: tools})
					opts := prompt.Options{Tools: true}
					if warm {
						opts.Estimates = est
					}
					built := prompt.Build(recs, opts)
					body, err := client.Encode(&llm.Request{Model: "m", System: system, Messages: built.Messages, Tools: tools})
					if err != nil {
						b.Fatal(err)
					}
					return len(body) + built.Tokens
				}
				build()
				b.ReportAllocs()
				for b.Loop() {
					build()
				}
			})
		}
	}
}

// history is a session of n records ending with a user message.
func history(n int) []store.Record {
	text := strings.Repeat("lorem ipsum ", 16)
	ok, ms := true, int64(3)
	recs := make([]store.Record, 0, n)
	for i := 0; len(recs) < n; i++ {
		id := strconv.Itoa(len(recs))
		if i%2 == 0 || len(recs) == n-1 {
			recs = append(recs, store.Record{ID: id, Seq: int64(len(recs) + 1), Role: store.RoleUser, Content: text})
			continue
		}
		a := store.Record{ID: id, Seq: int64(len(recs) + 1), Role: store.RoleAssistant, Content: text, Model: "x/m",
			Usage: &store.Usage{InputTokens: 100, OutputTokens: 40}}
		if i%10 == 1 && len(recs)+2 < n {
			a.ToolCalls = []store.ToolCall{{ID: "call_" + id, Name: "get_weather", Arguments: []byte(`{"city":"Paris"}`)}}
			recs = append(recs, a, store.Record{ID: id + "r", Seq: int64(len(recs) + 2), Role: store.RoleTool, ParentID: id,
				ToolCallID: "call_" + id, Name: "get_weather", Content: "21°C", Success: &ok, DurationMS: &ms})
			continue
		}
		recs = append(recs, a)
	}
	return recs
}
