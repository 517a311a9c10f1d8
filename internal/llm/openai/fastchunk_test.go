package openai

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"chatd/internal/llm/upstream"
	"chatd/internal/sse"
)

// fastChunkSeeds are chunks the hand-written decoder must take, and edge cases it may take or leave.
var fastChunkSeeds = []string{
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4o","service_tier":"default","system_fingerprint":"fp_f9f4fb6dbf","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"c","choices":[{"index":0,"delta":{"content":" help"},"logprobs":null,"finish_reason":null}],"usage":null}`,
	`{"id":"c","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}`,
	`{"choices":[{"index":0,"delta":{"content":"line\none \"quoted\" \\ \/ \b\f\r\t \u00e9 \ud83d\ude00 \ud83d x \udc00"}}]}`,
	`{"choices":[{"index":0,"delta":{"reasoning_content":"think","reasoning":null}}]}`,
	`{"choices":[{"index":0,"delta":{"reasoning":"think"}}]}`,
	`{"choices":[{"index":1,"delta":{"content":"other"}},{"index":0,"delta":{"refusal":"no"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"x"},"logprobs":{"content":[{"token":"x","logprob":-0.5e-3,"bytes":[120],"top_logprobs":[]}]}}]}`,
	` { "choices" : [ { "index" : 0 , "delta" : { "content" : "spaced" } } ] }`,
	`{"choices":[{"index":0,"delta":null,"finish_reason":"length"}]}`,
	`{"choices":[]}`,
	`{}`,
	`{"Choices":[{"index":0,"delta":{"content":"case"}}]}`,
	`{"choices":[{"INDEX":1,"delta":{"Content":"case"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"a","content":"b"}}]}`,
	`{"choices":[{"index":0.0,"delta":{"content":"a"}}]}`,
	`{"choices":[{"index":01,"delta":{"content":"a"}}]}`,
	`{"choices":[{"index":-0,"delta":{"content":"a"}}]}`,
	`{"choices":[{"index":1234567890,"delta":{"content":"a"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":1}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"bad \x01"}}]}`,
	"{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"invalid \xff utf-8 \xe2\x82\"}}]}",
	`{"choices":[{"index":0,"delta":{"content":"\u12"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"\x"}}]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":""}}]}}]}`,
	`{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`,
	`{"error":{"message":"boom","type":"server_error"}}`,
	`{"choices":[{"index":0,"delta":{"content":"a"}}]} trailing`,
	`{"choices":[{"index":0,"delta":{"content":"a"}}]`,
	`{"choices":[{"index":0,"delta":{"content":"a"}}],}`,
	`{"x":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],"choices":[]}`,
	`{"x":{"a":[1,-2.5e+3,true,false,null,"s",{}],"b":{}},"choices":[]}`,
	`{"x":nul,"choices":[]}`,
	`{"x":truex,"choices":[]}`,
	`{"x":1.,"choices":[]}`,
	`{"x":-,"choices":[]}`,
	`{"ſ":1,"choices":[]}`,
	`{"choices":[{"index":0,"delta":{"content":"a"}}],"usage":null,"error":null}`,
	`[]`,
	`null`,
}

func TestFastChunkTakesCommonChunks(t *testing.T) {
	for _, s := range fastChunkSeeds[:12] {
		var f fastChunk
		var c chunk
		if !f.decode([]byte(s), &c) {
			t.Errorf("left to encoding/json: %s", s)
		}
	}
}

// TestFastChunkRecorded decodes every chunk of the recorded streams both ways.
func TestFastChunkRecorded(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.sse")
	files2, _ := filepath.Glob("testdata/conformance/*.sse")
	for _, name := range append(files, files2...) {
		raw, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for ev, err := range sse.Scan(bytes.NewReader(raw)) {
			if err != nil {
				t.Fatal(err)
			}
			checkFastChunk(t, bytes.TrimSpace(ev.Data))
		}
	}
}

func FuzzFastChunk(f *testing.F) {
	for _, s := range fastChunkSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkFastChunk)
}

// checkFastChunk checks that when the hand-written decoder takes data, it decodes what encoding/json
// decodes, the way the stream's decoder uses it (a reused chunk, an EventDecoder).
func checkFastChunk(t *testing.T, data []byte) {
	var fast fastChunk
	var got chunk
	got.Choices = make([]choice, 0, 1)
	if !fast.decode(data, &got) {
		return
	}
	var want chunk
	var dec upstream.EventDecoder
	if err := dec.Decode(data, &want); err != nil {
		t.Fatalf("fastChunk took what encoding/json refuses (%v): %q", err, data)
	}
	if len(got.Choices) == 0 && len(want.Choices) == 0 {
		got.Choices, want.Choices = nil, nil
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\nfastChunk     %+v\nencoding/json %+v", data, got, want)
	}
}
