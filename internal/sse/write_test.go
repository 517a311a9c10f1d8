package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWrite(t *testing.T) {
	tests := []struct {
		name string
		ev   Event
		want string
	}{
		{"data only", Event{Data: []byte("hi")}, "data: hi\n\n"},
		{"empty data", Event{}, "data: \n\n"},
		{"all fields", Event{Type: "delta", ID: "7", Data: []byte(`{"t":"x"}`), Retry: 3000}, "id: 7\nevent: delta\nretry: 3000\ndata: {\"t\":\"x\"}\n\n"},
		{"negative retry", Event{Data: []byte("a"), Retry: -1}, "data: a\n\n"},
		{"lf", Event{Data: []byte("a\nb")}, "data: a\ndata: b\n\n"},
		{"crlf", Event{Data: []byte("a\r\nb")}, "data: a\ndata: b\n\n"},
		{"cr", Event{Data: []byte("a\rb")}, "data: a\ndata: b\n\n"},
		{"cr cr", Event{Data: []byte("a\r\rb")}, "data: a\ndata: \ndata: b\n\n"},
		{"trailing line ending", Event{Data: []byte("a\n")}, "data: a\ndata: \n\n"},
		{"leading space kept", Event{Type: " t", Data: []byte(" a")}, "event:  t\ndata:  a\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := NewWriter(&buf).Write(tt.ev); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, buf.String()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestWriteNumbered(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	if err := w.WriteNumbered(41, "text-delta", []byte(`{"delta":"Hi"}`)); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteNumbered(-2, "", []byte("a\nb")); err != nil {
		t.Fatal(err)
	}
	want := "id: 41\nevent: text-delta\ndata: {\"delta\":\"Hi\"}\n\n" + "id: -2\ndata: a\ndata: b\n\n"
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestComment(t *testing.T) {
	var buf bytes.Buffer
	if err := NewWriter(&buf).Comment("ping"); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != ": ping\n\n" {
		t.Errorf("got %q, want %q", got, ": ping\n\n")
	}
}

func TestWriteRejects(t *testing.T) {
	tests := []struct {
		name  string
		write func(*Writer) error
	}{
		{"lf in type", func(w *Writer) error { return w.Write(Event{Type: "a\ndata: x"}) }},
		{"cr in type", func(w *Writer) error { return w.Write(Event{Type: "a\r"}) }},
		{"lf in id", func(w *Writer) error { return w.Write(Event{ID: "1\n"}) }},
		{"nul in id", func(w *Writer) error { return w.Write(Event{ID: "1\x00"}) }},
		{"lf in numbered type", func(w *Writer) error { return w.WriteNumbered(1, "a\n", nil) }},
		{"lf in comment", func(w *Writer) error { return w.Comment("a\ndata: x") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := tt.write(NewWriter(&buf))
			if err == nil || !strings.HasPrefix(err.Error(), "sse: write ") {
				t.Errorf("err = %v, want an sse: write error", err)
			}
			if buf.Len() != 0 {
				t.Errorf("wrote %q for a rejected event", buf.String())
			}
		})
	}
}

func TestWriterFlushes(t *testing.T) {
	rec := httptest.NewRecorder()
	w := NewWriter(rec)
	if err := w.WriteNumbered(1, "start", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if !rec.Flushed {
		t.Error("ResponseRecorder not flushed")
	}
	if got, want := rec.Body.String(), "id: 1\nevent: start\ndata: {}\n\n"; got != want {
		t.Errorf("body %q, want %q", got, want)
	}

	var out bytes.Buffer
	bw := bufio.NewWriter(&out)
	if err := NewWriter(bw).Comment("ping"); err != nil {
		t.Fatal(err)
	}
	if out.String() != ": ping\n\n" {
		t.Errorf("bufio.Writer not flushed: underlying writer holds %q", out.String())
	}
}

// callLog records the calls a Writer makes, to check one Write then one Flush per event.
type callLog struct {
	calls    []string
	writeErr error
}

func (l *callLog) Write(p []byte) (int, error) {
	l.calls = append(l.calls, "write "+string(p))
	return len(p), l.writeErr
}

func (l *callLog) Flush() { l.calls = append(l.calls, "flush") }

func TestWriterOneWritePerEvent(t *testing.T) {
	var l callLog
	w := NewWriter(&l)
	w.Write(Event{Type: "t", ID: "1", Data: []byte("a\nb\nc")})
	w.Comment("ping")
	want := []string{"write id: 1\nevent: t\ndata: a\ndata: b\ndata: c\n\n", "flush", "write : ping\n\n", "flush"}
	if diff := cmp.Diff(want, l.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

// TestWriterOneWritePerBatch: queued events go out together in one write and one flush, encoded as
// WriteNumbered encodes them; a Send with nothing queued writes nothing.
func TestWriterOneWritePerBatch(t *testing.T) {
	var l callLog
	w := NewWriter(&l)
	if err := w.Send(); err != nil {
		t.Fatal(err)
	}
	for i, d := range []string{"a", "b\nc", ""} {
		if err := w.QueueNumbered(int64(i+1), "text_delta", []byte(d)); err != nil {
			t.Fatal(err)
		}
	}
	if len(l.calls) != 0 {
		t.Fatalf("queueing wrote: %q", l.calls)
	}
	if err := w.Send(); err != nil {
		t.Fatal(err)
	}
	w.WriteNumbered(4, "done", []byte("{}"))
	want := []string{"write id: 1\nevent: text_delta\ndata: a\n\nid: 2\nevent: text_delta\ndata: b\ndata: c\n\nid: 3\nevent: text_delta\ndata: \n\n",
		"flush", "write id: 4\nevent: done\ndata: {}\n\n", "flush"}
	if diff := cmp.Diff(want, l.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if err := w.QueueNumbered(5, "bad\ntype", nil); err == nil {
		t.Error("a type with a line break was queued")
	}

	// A batch past the buffer the writer keeps is sent whole, and the next batch is only itself.
	l.calls = nil
	big := bytes.Repeat([]byte("x"), keepBuf)
	w.QueueNumbered(6, "text_delta", big)
	w.QueueNumbered(7, "text_delta", big)
	if err := w.Send(); err != nil {
		t.Fatal(err)
	}
	w.QueueNumbered(8, "done", []byte("{}"))
	w.Send()
	if len(l.calls) != 4 || len(l.calls[0]) < 2*keepBuf || l.calls[2] != "write id: 8\nevent: done\ndata: {}\n\n" {
		t.Errorf("%d calls; the second batch wrote %.60q", len(l.calls), l.calls[min(2, len(l.calls)-1)])
	}
}

// failFlusher accepts writes and fails to flush, like a connection the client has closed.
type failFlusher struct{ io.Writer }

func (failFlusher) Flush() error { return errors.New("connection reset") }

// plainResponseWriter is an http.ResponseWriter with no way to flush.
type plainResponseWriter struct{ bytes.Buffer }

func (*plainResponseWriter) Header() http.Header { return http.Header{} }
func (*plainResponseWriter) WriteHeader(int)     {}

func TestWriterErrors(t *testing.T) {
	errClosed := errors.New("closed")
	err := NewWriter(&callLog{writeErr: errClosed}).Comment("ping")
	if !errors.Is(err, errClosed) || !strings.HasPrefix(err.Error(), "sse: write: ") {
		t.Errorf("write error: got %v", err)
	}
	err = NewWriter(failFlusher{io.Discard}).Comment("ping")
	if err == nil || !strings.HasPrefix(err.Error(), "sse: flush: ") {
		t.Errorf("flush error: got %v", err)
	}
	// A ResponseWriter that cannot flush still gets the event; that is not an error.
	var rw plainResponseWriter
	if err := NewWriter(&rw).Comment("ping"); err != nil || rw.String() != ": ping\n\n" {
		t.Errorf("unflushable ResponseWriter: err %v, body %q", err, rw.String())
	}
}

func TestRoundTrip(t *testing.T) {
	sent := []Event{
		{Type: "message_start", ID: "1", Data: []byte(`{"type":"message_start"}`)},
		{ID: "2", Data: []byte("line one\nline two\n\nline four")},
		{Type: "ping", ID: "2", Data: []byte{}},
		{Type: " spaced", ID: " 3", Data: []byte("  two spaces\n: not a comment\ndata: not a field"), Retry: 2500},
		{ID: "4", Data: []byte("\n")},
		{Type: "done", ID: "4", Data: []byte("[DONE]")},
	}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, ev := range sent {
		if err := w.Write(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Comment("ping"); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteNumbered(5, "delta", []byte("a\r\nb\rc")); err != nil {
		t.Fatal(err)
	}
	var want []event
	for _, ev := range sent {
		want = append(want, event{Type: ev.Type, ID: ev.ID, Data: string(ev.Data), Retry: ev.Retry})
	}
	// Line endings inside data all come back as LF: the wire format cannot tell them apart.
	want = append(want, event{Type: "delta", ID: "5", Data: "a\nb\nc"})
	got, err := events(Scan(&buf))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-sent +decoded):\n%s", diff)
	}
}

func TestWriteNumberedAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("counts allocations")
	}
	w := NewWriter(&discardResponse{})
	data := []byte(`{"type":"text-delta","delta":" token"}`)
	if n := testing.AllocsPerRun(100, func() { w.WriteNumbered(1, "text-delta", data) }); n != 0 {
		t.Errorf("WriteNumbered: %v allocations, want 0", n)
	}
}

// discardResponse is a flushable ResponseWriter that discards, so allocation counts and timings are
// the Writer's own, through the same ResponseController path a server takes.
type discardResponse struct{ flushes int }

func (*discardResponse) Header() http.Header         { return nil }
func (*discardResponse) WriteHeader(int)             {}
func (*discardResponse) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardResponse) Flush()                    { d.flushes++ }

func BenchmarkWriteNumbered(b *testing.B) {
	w := NewWriter(&discardResponse{})
	data := []byte(`{"type":"text-delta","id":"txt-0","delta":" token"}`)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	var id int64
	for b.Loop() {
		id++
		if err := w.WriteNumbered(id, "text-delta", data); err != nil {
			b.Fatal(err)
		}
	}
}
