package marker

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var payloadMarkers = []string{"SCHEMA_PROPOSAL:", "SUGGESTED_QUERY:"}

// answers are recorded-shape answers: what models wrote, and what the user must see of it.
var answers = []struct {
	name   string
	in     string
	clean  string
	blocks []Block
	notes  []Note
}{
	{
		name:  "values and actions at the end",
		in:    "Paris is lovely in spring.\nTokyo too.\n\nSUGGESTED_VALUES: [\"Paris\", \"Tokyo\"]\nSUGGESTED_ACTIONS: [{\"label\": \"Show weather\", \"action\": \"get_weather\", \"handler\": \"server\", \"data\": {\"city\": \"Paris\"}}]\n",
		clean: "Paris is lovely in spring.\nTokyo too.\n\n",
		blocks: []Block{
			{SuggestedValues, json.RawMessage(`["Paris", "Tokyo"]`)},
			{SuggestedActions, json.RawMessage(`[{"label": "Show weather", "action": "get_weather", "handler": "server", "data": {"city": "Paris"}}]`)},
		},
	},
	{
		name:   "fenced multi-line payload, text after it",
		in:     "Here is a schema.\nSCHEMA_PROPOSAL:\n```json\n{\n  \"table\": \"users\",\n  \"columns\": [\"id\", \"name\"]\n}\n```\nDoes it fit? Say \"}\" if not.\n",
		clean:  "Here is a schema.\nDoes it fit? Say \"}\" if not.\n",
		blocks: []Block{{"SCHEMA_PROPOSAL:", json.RawMessage("{\n  \"table\": \"users\",\n  \"columns\": [\"id\", \"name\"]\n}")}},
	},
	{
		name:   "no trailing newline, indented marker, strings with brackets and escapes",
		in:     "Sure. So: Some Sugar.\n  SUGGESTED_VALUES: [{\"label\": \"a ]\\\" b\", \"value\": \"x\"}]",
		clean:  "Sure. So: Some Sugar.\n",
		blocks: []Block{{SuggestedValues, json.RawMessage(`[{"label": "a ]\" b", "value": "x"}]`)}},
	},
	{
		name:  "marker words in prose are text",
		in:    "Use SUGGESTED_VALUES: [1] mid-line.\nSUGGESTED_VALUES is a marker without colon\nSUGGEST more\nSUGGESTED_QUERY\n",
		clean: "Use SUGGESTED_VALUES: [1] mid-line.\nSUGGESTED_VALUES is a marker without colon\nSUGGEST more\nSUGGESTED_QUERY\n",
	},
	{
		name:   "a marker inside a code block of the prose",
		in:     "The format:\n```\nSUGGESTED_VALUES: [\"a\"]\n```\nThat is all.\nSUGGESTED_VALUES: [\"b\"]\n",
		clean:  "The format:\n```\nSUGGESTED_VALUES: [\"a\"]\n```\nThat is all.\n",
		blocks: []Block{{SuggestedValues, json.RawMessage(`["b"]`)}},
	},
	{
		name:  "two markers on one line",
		in:    "Pick one.\nSUGGESTED_VALUES: [\"a\"] SUGGESTED_ACTIONS: [{\"label\":\"Go\",\"action\":\"go\"}]\nBye.",
		clean: "Pick one.\nBye.",
		blocks: []Block{
			{SuggestedValues, json.RawMessage(`["a"]`)},
			{SuggestedActions, json.RawMessage(`[{"label":"Go","action":"go"}]`)},
		},
	},
	{
		name:   "bad JSON is dropped, the rest stands",
		in:     "Text.\nSUGGESTED_VALUES: [\"a\",, \"b\"]\nMore text.\nSUGGESTED_ACTIONS: [{\"label\":\"Go\",\"action\":\"go\"}]\n",
		clean:  "Text.\nMore text.\n",
		blocks: []Block{{SuggestedActions, json.RawMessage(`[{"label":"Go","action":"go"}]`)}},
		notes:  []Note{{SuggestedValues, "has invalid JSON"}},
	},
	{
		name:  "no JSON after the marker",
		in:    "Text.\nSUGGESTED_VALUES: none today\nMore.\nSCHEMA_PROPOSAL:\nplain words\n",
		clean: "Text.\nMore.\nplain words\n",
		notes: []Note{{SuggestedValues, "is not followed by a JSON array or object"}, {"SCHEMA_PROPOSAL:", "is not followed by a JSON array or object"}},
	},
	{
		name:  "a bad fenced block is dropped to its fence",
		in:    "A.\nSCHEMA_PROPOSAL:\n```json\nnot json\n```\nB.\n",
		clean: "A.\nB.\n",
		notes: []Note{{"SCHEMA_PROPOSAL:", "is not followed by a JSON array or object"}},
	},
	{
		name:  "unfinished JSON at the end",
		in:    "A.\nSUGGESTED_VALUES: [\"a\", \"b\"\n",
		clean: "A.\n",
		notes: []Note{{SuggestedValues, "has JSON that does not end"}},
	},
	{
		name:  "a held prefix at the end is released",
		in:    "A.\nSUGGESTED_VAL",
		clean: "A.\nSUGGESTED_VAL",
	},
	{
		name:  "text after a fenced block's JSON belongs to the block, later markers are still markers",
		in:    "Pick one.\nSUGGESTED_VALUES:\n```json\n[\"Paris\", \"Tokyo\"]\n// the two cities\n```\nSUGGESTED_ACTIONS: [{\"label\":\"Go\",\"action\":\"x\",\"handler\":\"client\"}]\n",
		clean: "Pick one.\n",
		blocks: []Block{
			{SuggestedValues, json.RawMessage(`["Paris", "Tokyo"]`)},
			{SuggestedActions, json.RawMessage(`[{"label":"Go","action":"x","handler":"client"}]`)},
		},
		notes: []Note{{SuggestedValues, "has text after its JSON in the fence, which is dropped"}},
	},
	{
		name:  "a fence on one line is inline code: only that line goes",
		in:    "Here you go.\nSUGGESTED_VALUES: ```json [\"a\"]```\nThanks…\nAnd another paragraph.\n",
		clean: "Here you go.\nThanks…\nAnd another paragraph.\n",
		notes: []Note{{SuggestedValues, "is followed by inline code, not a fenced block"}},
	},
	{
		name:   "unfinished JSON ends at a blank line",
		in:     "Answer.\nSUGGESTED_VALUES: [\"a\", \"b\"\n \r\nP.S. …\nSUGGESTED_VALUES: [\"c\"]\n",
		clean:  "Answer.\n \r\nP.S. …\n",
		blocks: []Block{{SuggestedValues, json.RawMessage(`["c"]`)}},
		notes:  []Note{{SuggestedValues, "has JSON that does not end"}},
	},
	{
		name:  "the fence closes before the JSON ends",
		in:    "A.\nSUGGESTED_VALUES:\n```\n[\"a\",\n```\nB.\n",
		clean: "A.\nB.\n",
		notes: []Note{{SuggestedValues, "has JSON that does not end"}},
	},
	{
		name:   "a ~~~ fence around the JSON, and ``` right after it",
		in:     "A.\nSCHEMA_PROPOSAL:\n~~~\n{\"a\": 1}\n~~~\nB.\nSUGGESTED_VALUES:\n```\n[\"a\"]```\nC.\n",
		clean:  "A.\nB.\nC.\n",
		blocks: []Block{{"SCHEMA_PROPOSAL:", json.RawMessage(`{"a": 1}`)}, {SuggestedValues, json.RawMessage(`["a"]`)}},
	},
	{
		name: "code blocks of the prose: ~~~, longer fences, indented code, inline code",
		in: "~~~\nSUGGESTED_VALUES: [1]\n~~~\n" +
			"````md\n```\nSUGGESTED_VALUES: [2]\n````\n" +
			"~~~\n```\nSUGGESTED_VALUES: [3]\n~~~\n" +
			"```\ncode\n``` not a close\nSUGGESTED_VALUES: [4]\n  ```\n" +
			"Code:\n\n    SUGGESTED_VALUES: [5]\n\tSUGGESTED_VALUES: [6]\n" +
			"```x``` is inline code.\nSUGGESTED_VALUES: [\"b\"]\n",
		clean: "~~~\nSUGGESTED_VALUES: [1]\n~~~\n" +
			"````md\n```\nSUGGESTED_VALUES: [2]\n````\n" +
			"~~~\n```\nSUGGESTED_VALUES: [3]\n~~~\n" +
			"```\ncode\n``` not a close\nSUGGESTED_VALUES: [4]\n  ```\n" +
			"Code:\n\n    SUGGESTED_VALUES: [5]\n\tSUGGESTED_VALUES: [6]\n" +
			"```x``` is inline code.\n",
		blocks: []Block{{SuggestedValues, json.RawMessage(`["b"]`)}},
	},
	{
		name:   "blank lines after a marker without JSON stay",
		in:     "a\nSUGGESTED_VALUES:\n\n\nNext paragraph.\nSUGGESTED_VALUES:\n\n  SUGGESTED_VALUES:\n\n[\"x\"]\nb\n",
		clean:  "a\n\n\nNext paragraph.\n\nb\n",
		blocks: []Block{{SuggestedValues, json.RawMessage(`["x"]`)}},
		notes:  []Note{{SuggestedValues, "is not followed by a JSON array or object"}, {SuggestedValues, "is not followed by a JSON array or object"}},
	},
	{
		name:   "windows newlines",
		in:     "A.\r\nSUGGESTED_VALUES: [\"a\"]\r\nB.\r\n",
		clean:  "A.\r\nB.\r\n",
		blocks: []Block{{SuggestedValues, json.RawMessage(`["a"]`)}},
	},
}

func split(t *testing.T, in string, pieces []string) (string, []Block, []Note) {
	t.Helper()
	s := New(payloadMarkers, 0)
	var out strings.Builder
	for _, p := range pieces {
		got := s.Write(p)
		if strings.Contains(got, "SUGGESTED_VALUES: [\"b\"]") || strings.Contains(got, "SCHEMA_PROPOSAL:\n") {
			t.Fatalf("marker text released: %q", got)
		}
		out.WriteString(got)
	}
	out.WriteString(s.Flush())
	b, n := s.Take()
	return out.String(), b, n
}

func check(t *testing.T, label string, want struct {
	clean  string
	blocks []Block
	notes  []Note
}, clean string, blocks []Block, notes []Note) {
	t.Helper()
	if clean != want.clean {
		t.Fatalf("%s: text %q, want %q", label, clean, want.clean)
	}
	if d := cmp.Diff(want.blocks, blocks); d != "" {
		t.Fatalf("%s: blocks (-want +got):\n%s", label, d)
	}
	if d := cmp.Diff(want.notes, notes); d != "" {
		t.Fatalf("%s: notes (-want +got):\n%s", label, d)
	}
}

// TestEveryByteSplit feeds each answer split in two at every byte, one byte at a time, and in random
// pieces: the released text is always the clean text, and the blocks and notes the same.
func TestEveryByteSplit(t *testing.T) {
	for _, a := range answers {
		t.Run(a.name, func(t *testing.T) {
			want := struct {
				clean  string
				blocks []Block
				notes  []Note
			}{a.clean, a.blocks, a.notes}
			c, b, n := split(t, a.in, []string{a.in})
			check(t, "whole", want, c, b, n)
			for i := 0; i <= len(a.in); i++ {
				c, b, n := split(t, a.in, []string{a.in[:i], a.in[i:]})
				check(t, "split at "+itoa(i), want, c, b, n)
			}
			bytes := make([]string, len(a.in))
			for i := range len(a.in) {
				bytes[i] = a.in[i : i+1]
			}
			c, b, n = split(t, a.in, bytes)
			check(t, "byte by byte", want, c, b, n)
			r := rand.New(rand.NewPCG(1, 2))
			for range 50 {
				var pieces []string
				for rest := a.in; rest != ""; {
					k := min(len(rest), 1+r.IntN(7))
					pieces, rest = append(pieces, rest[:k]), rest[k:]
				}
				c, b, n = split(t, a.in, pieces)
				check(t, "random pieces", want, c, b, n)
			}
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestReleasedByNewline: fed a byte at a time, a line that is not a marker is out by its newline, and
// the text before a marker is out when the marker's line begins.
func TestReleasedByNewline(t *testing.T) {
	prose := "Sure thing.\nSUGGEST nothing\n  indented SUGGESTED\nS\n```go\nSUGGESTED_VALUES: [1]\n```\nSo.\n"
	s := New(payloadMarkers, 0)
	var out strings.Builder
	for i := range len(prose) {
		out.WriteString(s.Write(prose[i : i+1]))
		if prose[i] == '\n' && out.String() != prose[:i+1] {
			t.Fatalf("after byte %d: released %q, want %q", i, out.String(), prose[:i+1])
		}
	}
	in := answers[0].in
	at := strings.Index(in, "SUGGESTED_VALUES")
	s = New(payloadMarkers, 0)
	out.Reset()
	for i := range at {
		out.WriteString(s.Write(in[i : i+1]))
	}
	if out.String() != in[:at] {
		t.Fatalf("before the marker: released %q, want %q", out.String(), in[:at])
	}
}

func TestOversizedBlock(t *testing.T) {
	big := `["` + strings.Repeat("x", 300) + `"]`
	in := "A.\nSUGGESTED_VALUES: " + big + "\nB.\nSUGGESTED_ACTIONS: [{\"label\":\"Go\",\"action\":\"go\"}]\n"
	for _, pieces := range [][]string{{in}, strings.SplitAfter(in, "x")} {
		s := New(nil, 100)
		var out strings.Builder
		for _, p := range pieces {
			out.WriteString(s.Write(p))
		}
		out.WriteString(s.Flush())
		blocks, notes := s.Take()
		if out.String() != "A.\nB.\n" {
			t.Fatalf("text %q", out.String())
		}
		if len(blocks) != 1 || blocks[0].Marker != SuggestedActions {
			t.Fatalf("blocks %v", blocks)
		}
		if d := cmp.Diff([]Note{{SuggestedValues, "block is larger than 100 bytes"}}, notes); d != "" {
			t.Fatal(d)
		}
	}
}

// TestFenceThatDoesNotClose: what follows a fenced block's JSON is the block's up to the closing fence,
// but no further than the limit: past it, the answer stands again from the next line.
func TestFenceThatDoesNotClose(t *testing.T) {
	in := "A.\nSUGGESTED_VALUES:\n```\n[\"a\"]\n" + strings.Repeat("note\n", 30) + "B.\n"
	want := struct {
		clean  string
		blocks []Block
		notes  []Note
	}{
		"A.\n" + strings.Repeat("note\n", 10) + "B.\n",
		[]Block{{SuggestedValues, json.RawMessage(`["a"]`)}},
		[]Note{{SuggestedValues, "has text after its JSON in the fence, which is dropped"}, {SuggestedValues, "has a fence that does not close within 100 bytes"}},
	}
	for i := 0; i <= len(in); i++ {
		s := New(nil, 100)
		out := s.Write(in[:i])
		out += s.Write(in[i:])
		out += s.Flush()
		b, n := s.Take()
		check(t, "split at "+itoa(i), want, out, b, n)
	}
}

// TestPlainTextIsNotCopied: ordinary text comes back as the delta itself, without an allocation.
func TestPlainTextIsNotCopied(t *testing.T) {
	s := New(payloadMarkers, 0)
	deltas := []string{"The answer", " is forty", "-two.\n", "Because", " of\n", "\n", "reasons", " Sure."}
	allocs := testing.AllocsPerRun(100, func() {
		for _, d := range deltas {
			if got := s.Write(d); got != d {
				t.Fatalf("Write(%q) = %q", d, got)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per run of plain text, want 0", allocs)
	}
}

// TestHeldLineIsNotCopied: a held line that is released in the delta it came in with is a part of that
// delta too, without an allocation.
func TestHeldLineIsNotCopied(t *testing.T) {
	s := New(payloadMarkers, 0)
	deltas := []string{"Sure.\nSo: Some Sugar.\n", "SUGGEST nothing\n  indented\n", "SUGGESTED_VALUES is a word\n", "Sure."}
	allocs := testing.AllocsPerRun(100, func() {
		for _, d := range deltas {
			if got := s.Write(d); got != d {
				t.Fatalf("Write(%q) = %q", d, got)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per run of held lines, want 0", allocs)
	}
}

func TestSplitReuse(t *testing.T) {
	s := New(nil, 0)
	s.Write("A\nSUGGESTED_VALUES: [\"a\"")
	if got := s.Flush(); got != "" {
		t.Fatalf("flush released %q", got)
	}
	if got := s.Write("SUGGESTED_VALUES: [\"b\"]\nC"); got != "C" {
		t.Fatalf("next answer released %q", got)
	}
	s.Flush()
	b, n := s.Take()
	if len(b) != 1 || len(n) != 1 {
		t.Fatalf("blocks %v notes %v", b, n)
	}
}

func BenchmarkWritePlain(b *testing.B) {
	deltas := strings.SplitAfter(strings.Repeat("The quick brown fox jumps over the lazy dog. Some more words follow.\n", 40), " ")
	s := New(payloadMarkers, 0)
	b.ReportAllocs()
	for b.Loop() {
		for _, d := range deltas {
			s.Write(d)
		}
	}
}

func BenchmarkWriteWithMarkers(b *testing.B) {
	text := answers[0].in + answers[1].in
	var deltas []string
	for i := 0; i < len(text); i += 4 {
		deltas = append(deltas, text[i:min(i+4, len(text))])
	}
	b.ReportAllocs()
	for b.Loop() {
		s := New(payloadMarkers, 0)
		for _, d := range deltas {
			s.Write(d)
		}
		s.Flush()
	}
}

func TestParseValues(t *testing.T) {
	got, err := ParseValues(json.RawMessage(`["Paris", {"label": "Tokyo, Japan", "value": "Tokyo"}, {"value": "Oslo"}]`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Value{{"Paris", "Paris"}, {"Tokyo, Japan", "Tokyo"}, {"Oslo", "Oslo"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatal(d)
	}
	// Fields of their own are the model's business; more than MaxSuggestions are the caller's to cut.
	got, err = ParseValues(json.RawMessage(`[{"label":"a","value":"b","description":"x"},` + strings.Repeat(`"c",`, MaxSuggestions) + `"d"]`))
	if err != nil || len(got) != MaxSuggestions+2 || got[0] != (Value{"a", "b"}) {
		t.Fatalf("ParseValues with extra fields and values: %v, %v", got, err)
	}
	for _, bad := range []string{`{"label":"a"}`, `[1]`, `[""]`, `[{"label":""}]`, `[{"description":"x"}]`,
		`["` + strings.Repeat("x", MaxLabelBytes+1) + `"]`} {
		if _, err := ParseValues(json.RawMessage(bad)); err == nil {
			t.Errorf("ParseValues(%.40s) took a wrong shape", bad)
		}
	}
}

func TestParseActions(t *testing.T) {
	got, err := ParseActions(json.RawMessage(`[{"label":"Show weather","action":"get_weather","handler":"server","data":{"city": "Paris"}},
		{"label":"Open","action":"open_report"}]`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Action{{"Show weather", "get_weather", HandlerServer, json.RawMessage(`{"city":"Paris"}`)}, {"Open", "open_report", HandlerClient, nil}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatal(d)
	}
	got, err = ParseActions(json.RawMessage(`[{"label":"Go","action":"go","description":"x","prompt":"y"},` + strings.Repeat(`{"action":"a"},`, MaxSuggestions) + `{"action":"b"}]`))
	if err != nil || len(got) != MaxSuggestions+2 || cmp.Diff(Action{"Go", "go", HandlerClient, nil}, got[0]) != "" {
		t.Fatalf("ParseActions with extra fields and actions: %v, %v", got, err)
	}
	for _, bad := range []string{`[{"label":"a"}]`, `[{"action":"a","handler":"browser"}]`, `["a"]`, `[{"action":1}]`,
		`[{"action":"a","handler":"server","data":[1]}]`, `{}`} {
		if _, err := ParseActions(json.RawMessage(bad)); err == nil {
			t.Errorf("ParseActions(%s) took a wrong shape", bad)
		}
	}
}

// FuzzSplitAnywhere: however an answer is cut into deltas, the released text, the blocks and the notes
// are those of the whole answer, and the released text is never longer than the answer.
func FuzzSplitAnywhere(f *testing.F) {
	for _, a := range answers {
		f.Add(a.in, uint64(1))
	}
	f.Add("```\nSUGGESTED_VALUES: [1]\n```\nSCHEMA_PROPOSAL: ```json\n{\"a\": \"```\"}\n```\n", uint64(7))
	f.Fuzz(func(t *testing.T, in string, seed uint64) {
		clean, blocks, notes := Split(in, payloadMarkers, 64)
		if len(clean) > len(in) {
			t.Fatalf("released %d bytes of %d", len(clean), len(in))
		}
		r := rand.New(rand.NewPCG(seed, seed))
		s := New(payloadMarkers, 64)
		var out strings.Builder
		for rest := in; rest != ""; {
			k := min(len(rest), 1+r.IntN(9))
			out.WriteString(s.Write(rest[:k]))
			rest = rest[k:]
		}
		out.WriteString(s.Flush())
		b, n := s.Take()
		if out.String() != clean {
			t.Fatalf("in pieces: %q, whole: %q", out.String(), clean)
		}
		if d := cmp.Diff(blocks, b); d != "" {
			t.Fatalf("blocks (-whole +pieces):\n%s", d)
		}
		if d := cmp.Diff(notes, n); d != "" {
			t.Fatalf("notes (-whole +pieces):\n%s", d)
		}
	})
}
