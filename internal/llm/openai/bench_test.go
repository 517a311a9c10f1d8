package openai

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
)

// BenchmarkDecodeTextChunk measures the decoder's cost per streamed text chunk, as OpenAI sends them.
func BenchmarkDecodeTextChunk(b *testing.B) {
	head := []byte("data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_f9f4fb6dbf\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}]}\n\n")
	chunk := []byte("data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_f9f4fb6dbf\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" help\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n")
	tail := []byte("data: {\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion.chunk\",\"created\":1741569952,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_f9f4fb6dbf\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	b.ReportAllocs()
	b.SetBytes(int64(len(chunk)))
	body := llmtest.Repeat(head, chunk, b.N, tail)
	d := decoder{provider: "openai"}
	n := 0
	d.run(context.Background(), body, func(ev llm.Event, err error) bool {
		if err != nil {
			b.Fatal(err)
		}
		if ev.Kind == llm.EventText {
			n++
		}
		return true
	})
	if n < b.N {
		b.Fatalf("%d text events for %d chunks", n, b.N)
	}
}

// BenchmarkEncode measures the request body of a long conversation, written by hand and, for
// comparison, by encoding/json from the wire structs.
func BenchmarkEncode(b *testing.B) {
	c, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	text := strings.Repeat("lorem ipsum ", 16)
	req := &llm.Request{Model: "m", System: "You are a helpful assistant."}
	for i := range 10000 {
		switch i % 3 {
		case 0:
			req.Messages = append(req.Messages, llm.TextMessage(llm.RoleUser, text))
		case 1:
			req.Messages = append(req.Messages, llm.Message{Role: llm.RoleAssistant, Parts: []llm.Part{{Kind: llm.PartText, Text: text}},
				ToolCalls: []llm.ToolCall{{ID: "call_" + strconv.Itoa(i), Name: "get_weather", Arguments: []byte(`{"city":"Paris"}`)}}})
		case 2:
			req.Messages = append(req.Messages, llm.Message{Role: llm.RoleTool, ToolCallID: "call_" + strconv.Itoa(i-1), Parts: []llm.Part{{Kind: llm.PartText, Text: "21°C"}}})
		}
	}
	body, err := c.Encode(req)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("append", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Encode(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			wire, err := c.newChatRequest(req)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := json.Marshal(wire); err != nil {
				b.Fatal(err)
			}
		}
	})
}
