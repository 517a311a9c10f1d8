package store

import (
	"encoding/json"
	"testing"
)

// TestDecodeUsage holds DecodeUsage to json.Unmarshal's answer, on what chatd writes and on what it
// does not.
func TestDecodeUsage(t *testing.T) {
	written, _ := json.Marshal(Usage{InputTokens: 100, OutputTokens: 40, CacheReadTokens: 7, ReasoningTokens: 1 << 40})
	for _, in := range []string{
		string(written),
		`{"input_tokens": 100, "output_tokens": 40, "cache_read_tokens": 0, "cache_write_tokens": 0, "reasoning_tokens": 0}`,
		`{}`, ` { } `, `{"output_tokens":-3}`, `{"input_tokens":0}`,
		`{"input_tokens":01}`, `{"input_tokens":-0}`, `{"input_tokens":-}`, `{"input_tokens":1.5}`, `{"input_tokens":1e3}`,
		`{"input_tokens":9223372036854775808}`, `{"input_tokens":null}`, `{"input_tokens":"1"}`,
		`{"input_tokens":1,"input_tokens":2}`, `{"Input_Tokens":5}`, `{"in\u0070ut_tokens":5}`, `{"other":1}`,
		`{"input_tokens":1,}`, `{"input_tokens":1`, `{"input_tokens" 1}`, `{"input_tokens":1} x`, `null`, ``, `[]`,
	} {
		sameAsUnmarshal(t, in)
	}
	var u Usage
	if !fastUsage(string(written), &u) || u.ReasoningTokens != 1<<40 {
		t.Errorf("what chatd writes, %s, is not read by the fast path: %+v", written, u)
	}
}

func FuzzDecodeUsage(f *testing.F) {
	f.Add(`{"input_tokens":100,"output_tokens":40,"cache_read_tokens":0,"cache_write_tokens":0,"reasoning_tokens":0}`)
	f.Add(`{"input_tokens": -1}`)
	f.Fuzz(func(t *testing.T, in string) {
		sameAsUnmarshal(t, in)
	})
}

func BenchmarkDecodeUsage(b *testing.B) {
	raw, _ := json.Marshal(Usage{InputTokens: 1234, OutputTokens: 56})
	in := string(raw)
	b.ReportAllocs()
	var u Usage
	for b.Loop() {
		if err := DecodeUsage(in, &u); err != nil {
			b.Fatal(err)
		}
	}
}

// sameAsUnmarshal fails t when DecodeUsage's answer for in is not json.Unmarshal's.
func sameAsUnmarshal(t *testing.T, in string) {
	t.Helper()
	var want Usage
	wantErr := json.Unmarshal([]byte(in), &want)
	var got Usage
	err := DecodeUsage(in, &got)
	if (err != nil) != (wantErr != nil) || (err == nil && got != want) {
		t.Errorf("DecodeUsage(%q) = %+v, %v; json.Unmarshal: %+v, %v", in, got, err, want, wantErr)
	}
}
