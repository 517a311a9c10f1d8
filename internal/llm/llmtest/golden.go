package llmtest

import (
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"chatd/internal/llm"
)

// ServeBytes starts a server that answers every request with body as an event stream, written in pieces
// of at most step bytes, each flushed, so the decoder sees events split at arbitrary points. The server
// closes at test end.
func ServeBytes(t testing.TB, body []byte, step int) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		rc := http.NewResponseController(w)
		for b := body; len(b) > 0; {
			n := min(step, len(b))
			w.Write(b[:n])
			rc.Flush()
			b = b[n:]
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Describe renders the events of a stream one per line, and its terminal error if any, for golden files
// a person can read. Each line starts with the event's kind; text and reasoning fragments follow quoted,
// then the fields the event sets as key=value, empty ones left out:
//
//	text "Hi" signature="…"
//	reasoning "Let me think" id="rs_1" signature="…"
//	reasoning_end id="rs_1" signature="…" redacted=true
//	tool_call_delta index=0 id="call_1" name="f" args="{\"a\":" signature="…"
//	tool_call_end index=0
//	usage input=25 output=9 cache_read=0 cache_write=0 reasoning=0
//	finish stop
//	error kind=rate_limit status=429 code="rate_limit_exceeded" message="…" retry_after=7s
//
// An error that is not an *llm.Error shows as error followed by its quoted text.
func Describe(seq iter.Seq2[llm.Event, error]) string {
	var b strings.Builder
	for ev, err := range seq {
		if err != nil {
			b.WriteString(describeError(err))
		} else {
			b.WriteString(describeEvent(ev))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func describeEvent(ev llm.Event) string {
	var b strings.Builder
	field := func(key, value string) {
		b.WriteString(" " + key + "=" + value)
	}
	quoted := func(key, value string) {
		if value != "" {
			field(key, strconv.Quote(value))
		}
	}
	text := ev.Text // shown after the kind for text and reasoning, as args for a tool call, else as text=
	index := ev.Index != 0
	switch ev.Kind {
	case llm.EventText:
		b.WriteString("text " + strconv.Quote(text))
		text = ""
	case llm.EventReasoning:
		b.WriteString("reasoning " + strconv.Quote(text))
		text = ""
	case llm.EventReasoningEnd:
		b.WriteString("reasoning_end")
	case llm.EventToolCallDelta:
		b.WriteString("tool_call_delta")
		index = true
	case llm.EventToolCallEnd:
		b.WriteString("tool_call_end")
		index = true
	case llm.EventUsage:
		u := ev.Usage
		fmt.Fprintf(&b, "usage input=%d output=%d cache_read=%d cache_write=%d reasoning=%d",
			u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheWriteTokens, u.ReasoningTokens)
	case llm.EventFinish:
		b.WriteString("finish " + string(ev.FinishReason))
	default:
		fmt.Fprintf(&b, "event kind=%d", ev.Kind)
	}
	if index {
		field("index", strconv.Itoa(ev.Index))
	}
	quoted("id", ev.ID)
	quoted("name", ev.Name)
	if ev.Kind == llm.EventToolCallDelta {
		quoted("args", text)
	} else {
		quoted("text", text)
	}
	quoted("signature", ev.Signature)
	if ev.Redacted {
		field("redacted", "true")
	}
	if ev.Kind != llm.EventUsage && !ev.Usage.IsZero() {
		field("usage", fmt.Sprintf("%+v", ev.Usage))
	}
	if ev.Kind != llm.EventFinish && ev.FinishReason != "" {
		field("finish", string(ev.FinishReason))
	}
	return b.String()
}

func describeError(err error) string {
	e, ok := errors.AsType[*llm.Error](err)
	if !ok {
		return "error " + strconv.Quote(err.Error())
	}
	s := "error kind=" + string(e.Kind)
	if e.Status != 0 {
		s += " status=" + strconv.Itoa(e.Status)
	}
	if e.Code != "" {
		s += " code=" + strconv.Quote(e.Code)
	}
	if e.Message != "" {
		s += " message=" + strconv.Quote(e.Message)
	}
	if e.RetryAfter != 0 {
		s += " retry_after=" + e.RetryAfter.String()
	}
	return s
}

// Golden runs every dir/*.sse as a subtest named after the file (without .sse): describe renders the
// recording's events, which must equal the file's .golden neighbour. With update, the .golden file is
// written from the rendering first.
func Golden(t *testing.T, update bool, dir string, describe func(t *testing.T, body []byte) string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.sse"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recordings in %s: %v", dir, err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".sse"), func(t *testing.T) {
			body, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got := describe(t, body)
			golden := strings.TrimSuffix(file, ".sse") + ".golden"
			if update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if string(want) != got {
				t.Fatalf("events differ from %s (-want +got):\n%s", golden, lineDiff(string(want), got))
			}
		})
	}
}

// lineDiff shows how got differs from want line by line: "-" before a line only want has, "+" before one
// only got has, a space before a common one.
func lineDiff(want, got string) string {
	a := strings.SplitAfter(want, "\n")
	b := strings.SplitAfter(got, "\n")
	// lcs[i][j] is the length of the longest common subsequence of a[i:] and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out strings.Builder
	line := func(mark byte, s string) {
		if s == "" {
			return // the empty piece after a final newline
		}
		out.WriteByte(mark)
		out.WriteString(s)
		if !strings.HasSuffix(s, "\n") {
			out.WriteString("\n\\ no newline at the end\n")
		}
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			line(' ', a[i])
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			line('-', a[i])
			i++
		default:
			line('+', b[j])
			j++
		}
	}
	return out.String()
}
