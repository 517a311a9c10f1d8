package responses

import (
	"context"
	"testing"

	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
)

// BenchmarkDecodeTextChunk measures the decoder's cost per streamed text delta, as OpenAI sends them:
// an event line, and a data line with the sequence number, the item id, logprobs and obfuscation padding.
func BenchmarkDecodeTextChunk(b *testing.B) {
	head := []byte("event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_68d93041848c819e90d610c34d125a8f03aa6e5a972b3b23\",\"object\":\"response\",\"created_at\":1759064129,\"status\":\"in_progress\",\"background\":false,\"error\":null,\"incomplete_details\":null,\"instructions\":null,\"max_output_tokens\":null,\"max_tool_calls\":null,\"model\":\"gpt-5-2025-08-07\",\"output\":[],\"parallel_tool_calls\":true,\"previous_response_id\":null,\"prompt_cache_key\":null,\"reasoning\":{\"effort\":\"medium\",\"summary\":null},\"safety_identifier\":null,\"service_tier\":\"auto\",\"store\":false,\"temperature\":1.0,\"text\":{\"format\":{\"type\":\"text\"},\"verbosity\":\"medium\"},\"tool_choice\":\"auto\",\"tools\":[],\"top_logprobs\":0,\"top_p\":1.0,\"truncation\":\"disabled\",\"usage\":null,\"user\":null,\"metadata\":{}}}\n\n" +
		"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":2,\"output_index\":0,\"item\":{\"id\":\"msg_68d930427844819ebda216a5dcfbec4603aa6e5a972b3b23\",\"type\":\"message\",\"status\":\"in_progress\",\"content\":[],\"role\":\"assistant\"}}\n\n" +
		"event: response.content_part.added\ndata: {\"type\":\"response.content_part.added\",\"sequence_number\":3,\"item_id\":\"msg_68d930427844819ebda216a5dcfbec4603aa6e5a972b3b23\",\"output_index\":0,\"content_index\":0,\"part\":{\"type\":\"output_text\",\"annotations\":[],\"logprobs\":[],\"text\":\"\"}}\n\n")
	chunk := []byte("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":7,\"item_id\":\"msg_68d930427844819ebda216a5dcfbec4603aa6e5a972b3b23\",\"output_index\":0,\"content_index\":0,\"delta\":\" help\",\"logprobs\":[],\"obfuscation\":\"m6CUvXEzWfZ\"}\n\n")
	tail := []byte("event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":99,\"response\":{\"id\":\"resp_68d93041848c819e90d610c34d125a8f03aa6e5a972b3b23\",\"object\":\"response\",\"status\":\"completed\",\"usage\":{\"input_tokens\":114,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":15,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":129}}}\n\n")
	b.ReportAllocs()
	b.SetBytes(int64(len(chunk)))
	body := llmtest.Repeat(head, chunk, b.N, tail)
	d := decoder{provider: "openai-responses"}
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
