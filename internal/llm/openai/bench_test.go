package openai

import (
	"context"
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
