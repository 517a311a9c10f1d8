package gemini

import (
	"context"
	"testing"

	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
)

// BenchmarkDecodeTextChunk measures the decoder's cost per streamed text chunk, as the API sends them
// with alt=sse: one part of a few tokens, the running usage totals, the model version and response id,
// CRLF framing.
func BenchmarkDecodeTextChunk(b *testing.B) {
	head := []byte("data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Hello\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 8,\"candidatesTokenCount\": 1,\"totalTokenCount\": 9,\"promptTokensDetails\": [{\"modality\": \"TEXT\",\"tokenCount\": 8}]},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"IZI2acSKMoWl0-kPmYj2yQc\"}\r\n\r\n")
	chunk := []byte("data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"! How can I help\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 8,\"candidatesTokenCount\": 5,\"totalTokenCount\": 13,\"promptTokensDetails\": [{\"modality\": \"TEXT\",\"tokenCount\": 8}]},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"IZI2acSKMoWl0-kPmYj2yQc\"}\r\n\r\n")
	tail := []byte("data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \" you today?\"}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 8,\"candidatesTokenCount\": 9,\"totalTokenCount\": 17,\"promptTokensDetails\": [{\"modality\": \"TEXT\",\"tokenCount\": 8}]},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"IZI2acSKMoWl0-kPmYj2yQc\"}\r\n\r\n")
	b.ReportAllocs()
	b.SetBytes(int64(len(chunk)))
	body := llmtest.Repeat(head, chunk, b.N, tail)
	d := decoder{provider: "gemini"}
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
