package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func scan(pieces ...string) []int64 {
	var s markerScanner
	var got []int64
	for _, p := range pieces {
		s.feed([]byte(p), func(v int64) { got = append(got, v) })
	}
	return got
}

// asciiJSON is s as a JSON string from an encoder that escapes everything outside ASCII.
func asciiJSON(s string) string {
	b, _ := json.Marshal(s)
	var out strings.Builder
	for _, r := range string(b) {
		if r > 127 {
			fmt.Fprintf(&out, `\u%04x`, r)
		} else {
			out.WriteRune(r)
		}
	}
	return out.String()
}

func TestMarkerScanner(t *testing.T) {
	stamp := time.Unix(1_700_000_000, 123_456_789)
	tests := []struct {
		name string
		in   string
		want []int64
	}{
		{"mock chunk", `data: {"choices":[{"delta":{"content":"` + string(appendMarker(nil, stamp)) + `"}}]}` + "\n\n",
			[]int64{stamp.UnixNano()}},
		{"chatd text_delta", "event: text_delta\ndata: {\"text\":\"⟦T42⟧ \"}\n\n", []int64{42}},
		{"escaped", `data: {"text":"\u27e6T42\u27e7 "}`, []int64{42}},
		{"escaped upper case", `{"t":"\u27E6T7\u27E7"}`, []int64{7}},
		{"ascii encoder", asciiJSON("a ⟦T5⟧ b ⟦T6⟧"), []int64{5, 6}},
		{"escaped twice", `{"data":"{\"t\":\"\\u27e6T9\\u27e7\"}"}`, []int64{9}},
		{"mixed brackets", `⟦T1\u27e7 \u27e6T2⟧`, []int64{1, 2}},
		{"adjacent", `⟦T1⟧⟦T2⟧⟦T3⟧`, []int64{1, 2, 3}},
		{"broken ones, then one", `⟦T⟧ ⟦Tx⟧ ⟦ T1⟧ \u27e6 \\n \u27e6T12 ⟦T99999999999999999999⟧ ⟦T3⟧`, []int64{3}},
		{"a broken one restarts at its last byte", `⟦T1⟦T2⟧`, []int64{2}},
		{"other brackets", `⟨T1⟩ ⟦T2⟧ ✓`, []int64{2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, scan(tt.in)); diff != "" {
				t.Errorf("whole (-want +got):\n%s", diff)
			}
			// Split at every byte, as reads may split it, the markers must be the same.
			if diff := cmp.Diff(tt.want, scan(strings.Split(tt.in, "")...)); diff != "" {
				t.Errorf("byte by byte (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNeedleScanner(t *testing.T) {
	const needle = "event: error\n"
	tests := []struct {
		name   string
		pieces []string
		want   bool
	}{
		{"inside one piece", []string{"id: 9\nevent: error\ndata: {}\n\n"}, true},
		{"across two pieces", []string{"id: 9\nevent: er", "ror\ndata: {}\n\n"}, true},
		{"across many small pieces", strings.Split("x event: error\n", ""), true},
		{"absent", []string{"event: text_delta\n", "data: {\"text\":\"error\"}\n\n"}, false},
		{"a prefix at the end", []string{"event: erro"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := needleScanner{needle: []byte(needle)}
			for _, p := range tt.pieces {
				n.feed([]byte(p))
			}
			if n.found != tt.want {
				t.Errorf("found = %v, want %v", n.found, tt.want)
			}
		})
	}
}
