package sse

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// event is Event with Data as a string, so tables read as text and results outlive the iteration.
type event struct {
	Type  string
	ID    string
	Data  string
	Retry int
}

// events runs seq to its end or its first error.
func events(seq iter.Seq2[Event, error]) ([]event, error) {
	var got []event
	for ev, err := range seq {
		if err != nil {
			return got, err
		}
		got = append(got, event{Type: ev.Type, ID: ev.ID, Data: string(ev.Data), Retry: ev.Retry})
	}
	return got, nil
}

// splitReader returns s in two reads, split at i, so a line ending can straddle two Read calls.
func splitReader(s string, i int) io.Reader {
	return io.MultiReader(strings.NewReader(s[:i]), strings.NewReader(s[i:]))
}

// chunkReader returns s in reads of at most n bytes.
type chunkReader struct {
	s string
	n int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.s) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.n)], r.s)
	r.s = r.s[n:]
	return n, nil
}

// checkScan decodes in whole, one byte per read, and split in two at every position; each must give want.
func checkScan(t *testing.T, in string, want []event) {
	t.Helper()
	check := func(how string, r io.Reader) {
		t.Helper()
		got, err := events(Scan(r))
		if err != nil {
			t.Fatalf("%s: Scan: %v", how, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("%s: events (-want +got):\n%s", how, diff)
		}
	}
	check("whole", strings.NewReader(in))
	check("one byte per read", iotest.OneByteReader(strings.NewReader(in)))
	for i := range len(in) + 1 {
		check(fmt.Sprintf("split at %d", i), splitReader(in, i))
	}
}

func TestScanRules(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []event
	}{
		{"empty stream", "", nil},
		{"lf", "data: a\n\ndata: b\n\n", []event{{Data: "a"}, {Data: "b"}}},
		{"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", []event{{Data: "a"}, {Data: "b"}}},
		{"lone cr", "data: a\r\rdata: b\r\r", []event{{Data: "a"}, {Data: "b"}}},
		{"cr cr lf is two line endings", "data: a\r\r\ndata: b\n\n", []event{{Data: "a"}, {Data: "b"}}},
		{"mixed line endings", "data: a\rdata: b\r\ndata: c\n\r\n", []event{{Data: "a\nb\nc"}}},
		{"bom", "\xEF\xBB\xBFdata: a\n\n", []event{{Data: "a"}}},
		{"bom alone on the first line", "\xEF\xBB\xBF\ndata: a\n\n", []event{{Data: "a"}}},
		{"bom only at the start", "data: a\n\n\xEF\xBB\xBFdata: b\n\n", []event{{Data: "a"}}},
		{"one bom skipped", "\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\n", nil},
		{"comment", ": ping\n\ndata: a\n\n", []event{{Data: "a"}}},
		{"comment inside a block", "data: a\n:note\ndata: b\n\n", []event{{Data: "a\nb"}}},
		{"multi-line data", "data: a\ndata:\ndata: b\n\n", []event{{Data: "a\n\nb"}}},
		{"empty data is dispatched", "data:\n\n", []event{{Data: ""}}},
		{"two empty data lines", "data\ndata\n\n", []event{{Data: "\n"}}},
		{"block without data", "event: x\nretry: 5\n\ndata: a\n\n", []event{{Data: "a"}}},
		{"one leading space removed", "data:  a\ndata:b\ndata:\tc\n\n", []event{{Data: " a\nb\n\tc"}}},
		{"colon in value", "data: a: b\n\n", []event{{Data: "a: b"}}},
		{"line without colon", "data\n\n", []event{{Data: ""}}},
		{"unknown fields", "foo: bar\nbaz\ndata: a\n\n", []event{{Data: "a"}}},
		{"names are case-sensitive", "Data: a\nEVENT: x\n\n", nil},
		{"name with a space", "data : a\n\n", nil},
		{"event type", "event: add\ndata: a\n\n", []event{{Type: "add", Data: "a"}}},
		{"event type per block", "event: add\ndata: a\n\ndata: b\n\n", []event{{Type: "add", Data: "a"}, {Data: "b"}}},
		{"last event type wins", "event: a\nevent: b\ndata: x\n\n", []event{{Type: "b", Data: "x"}}},
		{"empty event type", "event: a\nevent\ndata: x\n\n", []event{{Data: "x"}}},
		{
			"id persists",
			"id: 1\ndata: a\n\ndata: b\n\nid\ndata: c\n\n",
			[]event{{ID: "1", Data: "a"}, {ID: "1", Data: "b"}, {Data: "c"}},
		},
		{"id of a block without data", "id: 7\n\ndata: a\n\n", []event{{ID: "7", Data: "a"}}},
		{"id with nul ignored", "id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n", []event{{ID: "1", Data: "a"}, {ID: "1", Data: "b"}}},
		{"id set after data", "data: a\nid: 3\n\n", []event{{ID: "3", Data: "a"}}},
		{"retry", "retry: 1500\ndata: a\n\ndata: b\n\n", []event{{Retry: 1500, Data: "a"}, {Data: "b"}}},
		{"retry zero", "retry: 0\ndata: a\n\n", []event{{Data: "a"}}},
		{"retry not a number", "retry: 15x\ndata: a\n\n", []event{{Data: "a"}}},
		{"retry negative", "retry: -1\ndata: a\n\n", []event{{Data: "a"}}},
		{"retry empty", "retry: 9\nretry:\ndata: a\n\n", []event{{Retry: 9, Data: "a"}}},
		{"retry two spaces", "retry:  5\ndata: a\n\n", []event{{Data: "a"}}},
		{"retry overflows int", "retry: 99999999999999999999\ndata: a\n\n", []event{{Data: "a"}}},
		{"end without blank line", "data: a\n\ndata: [DONE]", []event{{Data: "a"}, {Data: "[DONE]"}}},
		{"end after one line ending", "data: [DONE]\n", []event{{Data: "[DONE]"}}},
		{"end after cr", "data: [DONE]\r", []event{{Data: "[DONE]"}}},
		{"end in a block without data", "data: a\n\nevent: x\nid: 2", []event{{Data: "a"}}},
		{"end in a comment", "data: a\n: bye", []event{{Data: "a"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkScan(t, tt.in, tt.want)
			// The fuzz target trusts the reference parser; hold it to the same table.
			if diff := cmp.Diff(tt.want, reference(tt.in)); diff != "" {
				t.Errorf("reference (-want +got):\n%s", diff)
			}
		})
	}
}

func TestScanLongLine(t *testing.T) {
	data := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB, far beyond bufio.Scanner's 64 KB
	in := "data: " + data + "\r\n\r\ndata: next\n\n"
	want := []event{{Data: data}, {Data: "next"}}
	for name, r := range map[string]io.Reader{
		"whole":           strings.NewReader(in),
		"4000-byte reads": &chunkReader{s: in, n: 4000},
		"split at the cr": splitReader(in, len(in)-len("\n\r\ndata: next\n\n")),
	} {
		got, err := events(Scan(r))
		if err != nil {
			t.Fatalf("%s: Scan: %v", name, err)
		}
		if !cmp.Equal(want, got) {
			t.Errorf("%s: got %d events, want the 1 MiB event and one more", name, len(got))
		}
	}
}

func TestScanLimit(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		max     int
		want    []event
		wantErr error
	}{
		{"line within", "data: abc\n\n", 9, []event{{Data: "abc"}}, nil},
		{"line beyond", "data: abcd\n\n", 9, nil, ErrTooLarge},
		{"line beyond, unterminated", "data: abcd", 9, nil, ErrTooLarge},
		{"comment beyond", ": abcdefgh\n\ndata: a\n\n", 9, nil, ErrTooLarge},
		// The second line is checked with the 3 bytes already gathered: 3 + len("data: de") = 11.
		{"data within", "data: abc\ndata: de\n\n", 11, []event{{Data: "abc\nde"}}, nil},
		{"data beyond", "data: abc\ndata: de\n\n", 10, nil, ErrTooLarge},
		{"limit is per event", strings.Repeat("data: abc\n\n", 100), 9, repeat(event{Data: "abc"}, 100), nil},
		{"events before the error", "data: a\n\ndata: " + strings.Repeat("x", 100) + "\n\n", 50, []event{{Data: "a"}}, ErrTooLarge},
		{"zero means the default", "data: a\n\n", 0, []event{{Data: "a"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, chunk := range []int{1, 4, 1 << 20} {
				got, err := events(ScanLimit(&chunkReader{s: tt.in, n: chunk}, tt.max))
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("reads of %d: err = %v, want %v", chunk, err, tt.wantErr)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Fatalf("reads of %d: events (-want +got):\n%s", chunk, diff)
				}
			}
		})
	}
}

func repeat(ev event, n int) []event {
	evs := make([]event, n)
	for i := range evs {
		evs[i] = ev
	}
	return evs
}

func TestScanReadError(t *testing.T) {
	r := io.MultiReader(strings.NewReader("data: a\n\ndata: b\n"), iotest.ErrReader(io.ErrUnexpectedEOF))
	var got []event
	var errs []error
	for ev, err := range Scan(r) {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		got = append(got, event{Data: string(ev.Data)})
	}
	// The event cut off by the error is not dispatched: unlike a clean end, it may be incomplete.
	if diff := cmp.Diff([]event{{Data: "a"}}, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if len(errs) != 1 {
		t.Fatalf("got %d errors, want 1 terminal error: %v", len(errs), errs)
	}
	if !errors.Is(errs[0], io.ErrUnexpectedEOF) || !strings.HasPrefix(errs[0].Error(), "sse: read: ") {
		t.Errorf("err = %q, want sse: read: wrapping io.ErrUnexpectedEOF", errs[0])
	}
}

// failAfter serves its chunks, then fails the test if it is read again.
type failAfter struct {
	t      *testing.T
	chunks []string
}

func (r *failAfter) Read(p []byte) (int, error) {
	if len(r.chunks) == 0 {
		r.t.Error("read after the consumer stopped")
		return 0, io.EOF
	}
	n := copy(p, r.chunks[0])
	r.chunks = r.chunks[1:]
	return n, nil
}

func TestScanBreakStopsReading(t *testing.T) {
	r := &failAfter{t: t, chunks: []string{"data: a\n\ndata: b\n\n"}}
	n := 0
	for _, err := range Scan(r) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		break
	}
	if n != 1 {
		t.Errorf("got %d events, want 1", n)
	}
}

// A CR ends a line at once: the event is dispatched without waiting for a possible LF, which may
// be the next token's worth of latency away.
func TestScanCRDoesNotWait(t *testing.T) {
	pr, pw := io.Pipe()
	var wg sync.WaitGroup
	wg.Go(func() {
		pw.Write([]byte("data: a\r\r"))
		pw.Write([]byte("\ndata: b\r\n\r\n"))
		pw.Close()
	})
	defer wg.Wait()
	defer pr.Close() // unblocks the writer when the test stops early
	next, stop := iter.Pull2(Scan(pr))
	defer stop()
	for _, want := range []string{"a", "b"} {
		ev, err, ok := next()
		if !ok || err != nil || string(ev.Data) != want {
			t.Fatalf("next() = %q, %v, %v; want %q", ev.Data, err, ok, want)
		}
	}
	if _, _, ok := next(); ok {
		t.Error("an event after the end")
	}
}

// TestScanRecorded decodes streams shaped the way the providers send them. The golden files list
// the events; regenerate them with -update and read the diff.
func TestScanRecorded(t *testing.T) {
	files, err := filepath.Glob("testdata/*.sse")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata streams: %v", err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".sse")
		t.Run(name, func(t *testing.T) {
			in, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			want := reference(string(in))
			checkScan(t, string(in), want)
			checkGolden(t, strings.TrimSuffix(file, ".sse")+".golden", formatEvents(want))
		})
	}
}

// formatEvents renders events one block each, every data line behind "| ", for golden files.
func formatEvents(evs []event) []byte {
	var b bytes.Buffer
	for i, ev := range evs {
		fmt.Fprintf(&b, "#%d type=%q id=%q retry=%d\n", i, ev.Type, ev.ID, ev.Retry)
		for line := range strings.SplitSeq(ev.Data, "\n") {
			fmt.Fprintf(&b, "| %s\n", line)
		}
	}
	return b.Bytes()
}

func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}

// TestScanAllocs pins the steady state: a stream of 2000 events allocates no more than one of 1000.
// (A short stream allocates less: buffers grow once a line first straddles two reads.)
func TestScanAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("counts allocations")
	}
	perStream := func(n int) float64 {
		stream := benchStream(anthropicChunk, n)
		return testing.AllocsPerRun(20, func() {
			for _, err := range Scan(bytes.NewReader(stream)) {
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if short, long := perStream(1000), perStream(2000); long != short {
		t.Errorf("1000 events: %v allocations, 2000 events: %v; want no allocation per event", short, long)
	}
}

const (
	openaiChunk    = `data: {"id":"chatcmpl-BZt3kQm8TnV2xL4pR7wYc1sD9eFgH","object":"chat.completion.chunk","created":1748031842,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_34a54ae93c","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n"
	anthropicChunk = "event: content_block_delta\n" +
		`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" token"}}` + "\n\n"
)

func benchStream(chunk string, n int) []byte {
	return []byte(strings.Repeat(chunk, n))
}

// BenchmarkScan decodes a stream of many small text chunks; ns/event and allocs/event are the
// figures that matter, allocs/op being the per-stream setup.
func BenchmarkScan(b *testing.B) {
	const n = 1000
	for _, bc := range []struct{ name, chunk string }{
		{"openai", openaiChunk},
		{"anthropic", anthropicChunk},
	} {
		b.Run(bc.name, func(b *testing.B) {
			stream := benchStream(bc.chunk, n)
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for b.Loop() {
				for _, err := range Scan(bytes.NewReader(stream)) {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			runtime.ReadMemStats(&after)
			events := float64(b.N * n)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/events, "ns/event")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/events, "allocs/event")
		})
	}
}
