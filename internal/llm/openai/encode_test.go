package openai

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"

	"chatd/internal/llm"
)

// TestEncodeMatchesJSON: the hand-written body is byte for byte what encoding/json makes of the wire
// structs, for requests of every shape and strings of every kind.
func TestEncodeMatchesJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, base := range []string{"https://api.openai.com/v1", "http://127.0.0.1:11434/v1"} {
		c, err := New(Options{BaseURL: base})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3000 {
			req := randomRequest(rng)
			checkEncode(t, c, req, i)
		}
	}
}

// FuzzEncode compares the two encodings for one message built from fuzzed text.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", "plain", "<a href=\"x\">&amp;</a>", "\x00\x1f\b\f\n\r\t\\\"", "\u2028\u2029", "\xff\xfe", "é😀", "\xe2\x80", "\xe2\x80\xa8x"} {
		f.Add(s, []byte(`{"a": "`+s+`"}`))
	}
	c, err := New(Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string, schema []byte) {
		req := &llm.Request{Model: s, System: s, Messages: []llm.Message{
			{Role: llm.RoleUser, Parts: []llm.Part{{Kind: llm.PartText, Text: s}, {Kind: llm.PartImage, MediaType: s, Data: []byte(s)}}},
			{Role: llm.RoleAssistant, Parts: []llm.Part{{Kind: llm.PartText, Text: s}}, ToolCalls: []llm.ToolCall{{ID: s, Name: s, Arguments: []byte(s)}}},
			{Role: llm.RoleTool, ToolCallID: s, Parts: []llm.Part{{Kind: llm.PartText, Text: s}}},
		}, Tools: []llm.ToolSpec{{Name: s, Description: s, InputSchema: schema}}, ToolChoice: llm.ToolChoice(s)}
		checkEncode(t, c, req, 0)
	})
}

func checkEncode(t *testing.T, c *Client, req *llm.Request, i int) {
	t.Helper()
	got, gotErr := c.Encode(req)
	wire, err := c.newChatRequest(req)
	var want []byte
	if err == nil {
		want, err = json.Marshal(wire)
	}
	if (gotErr != nil) != (err != nil) {
		t.Fatalf("case %d: error %v, encoding/json's %v", i, gotErr, err)
	}
	if err == nil && !bytes.Equal(got, want) {
		t.Fatalf("case %d:\n got %s\nwant %s", i, got, want)
	}
}

// randomRequest is a request of random shape, with strings drawn from pieces that need every kind of
// escape.
func randomRequest(rng *rand.Rand) *llm.Request {
	pieces := []string{"", "a", "lorem ipsum ", "<", ">", "&", "\"", "\\", "\n", "\t", "\x00", "\x1f", "\b", "\f",
		"\u2028", "\u2029", "\xff", "\xe2\x80", "é", "😀", "\x7f", "/", "{\"k\": [1, 2]}"}
	str := func() string {
		var sb bytes.Buffer
		for range rng.IntN(6) {
			sb.WriteString(pieces[rng.IntN(len(pieces))])
		}
		return sb.String()
	}
	req := &llm.Request{Model: str(), System: str(), ToolChoice: llm.ToolChoice(str())}
	if rng.IntN(2) == 0 {
		temps := []float64{0, 0.2, 1, 1e-7, 1e21, 123456.789}
		t := temps[rng.IntN(len(temps))]
		req.Temperature = &t
	}
	if rng.IntN(2) == 0 {
		req.MaxTokens = rng.IntN(3) * 1000
	}
	if rng.IntN(3) == 0 {
		req.Reasoning = &llm.Reasoning{Effort: []string{"", "low"}[rng.IntN(2)], BudgetTokens: rng.IntN(10000)}
	}
	for range rng.IntN(3) {
		schemas := []string{"", `{"type":"object"}`, "{\n  \"type\": \"object\",\n  \"description\": \"<b> & \u2028\"\n}"}
		req.Tools = append(req.Tools, llm.ToolSpec{Name: str(), Description: str(), InputSchema: json.RawMessage(schemas[rng.IntN(len(schemas))])})
	}
	roles := []llm.Role{llm.RoleSystem, llm.RoleUser, llm.RoleAssistant, llm.RoleTool}
	kinds := []llm.PartKind{llm.PartText, llm.PartImage, llm.PartReasoning}
	for range rng.IntN(8) {
		m := llm.Message{Role: roles[rng.IntN(len(roles))], ToolCallID: str()}
		for range rng.IntN(4) {
			p := llm.Part{Kind: kinds[rng.IntN(len(kinds))], Text: str()}
			if p.Kind == llm.PartImage {
				p.MediaType, p.Data = str(), []byte(str())
			}
			m.Parts = append(m.Parts, p)
		}
		if m.Role == llm.RoleAssistant {
			for range rng.IntN(3) {
				m.ToolCalls = append(m.ToolCalls, llm.ToolCall{ID: str(), Name: str(), Arguments: []byte(str())})
			}
		}
		req.Messages = append(req.Messages, m)
	}
	return req
}

// TestPlain8 checks the eight-byte test against the table for every byte in every position.
func TestPlain8(t *testing.T) {
	base := []byte("abcdefgh")
	for pos := range 8 {
		for c := range 256 {
			w := bytes.Clone(base)
			w[pos] = byte(c)
			var x uint64
			for i := 7; i >= 0; i-- {
				x = x<<8 | uint64(w[i])
			}
			want := c < 0x80 && safe[c]
			if got := plain8(x); got != want {
				t.Fatalf("byte %#x at %d: plain8 %v, want %v", c, pos, got, want)
			}
		}
	}
}
