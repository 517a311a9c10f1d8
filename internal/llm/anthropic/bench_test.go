package anthropic

import (
	"context"
	"testing"

	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
)

// BenchmarkDecodeTextChunk measures the decoder's cost per streamed text chunk, as the API sends them.
func BenchmarkDecodeTextChunk(b *testing.B) {
	head := []byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-sonnet-4-5-20250929\",\"id\":\"msg_01QC4g3HwBThD4BaNtBckFDJ\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"cache_creation\":{\"ephemeral_5m_input_tokens\":0,\"ephemeral_1h_input_tokens\":0},\"output_tokens\":1,\"service_tier\":\"standard\"}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: ping\ndata: {\"type\": \"ping\"}\n\n")
	chunk := []byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" help\"}}\n\n")
	tail := []byte("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":30}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	b.ReportAllocs()
	b.SetBytes(int64(len(chunk)))
	body := llmtest.Repeat(head, chunk, b.N, tail)
	d := decoder{ctx: context.Background(), provider: "anthropic"}
	n := 0
	d.run(body, func(ev llm.Event, err error) bool {
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
