package sse

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// keepBuf caps the encoding buffers kept for reuse: one huge event should not pin its size for the rest
// of the process.
const keepBuf = 64 << 10

// Writer encodes events to w, flushing after each one when w can flush, so that every token reaches
// the browser when it is produced. A Writer is not safe for concurrent use.
type Writer struct {
	w     io.Writer
	flush func() error // nil when w cannot flush
	// buf is the events being encoded, taken from bufs (bp) when the first is encoded and given back
	// once they are written: a stream waiting for its next event holds no buffer, and an event costs
	// no allocation.
	buf []byte
	bp  *[]byte
}

// bufs are the encoding buffers of Writers that are writing.
var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// take returns the buffer to encode into, holding what is queued.
func (w *Writer) take() []byte {
	if w.bp == nil {
		w.bp = bufs.Get().(*[]byte)
		w.buf = (*w.bp)[:0]
	}
	return w.buf
}

// release gives the buffer back once b, encoded in it, is written; one grown past keepBuf is dropped,
// so that one huge event does not pin its size. After a failed write it is dropped too: an HTTP/2
// stream that failed may still be copying it (net/http's own writes give no such buffer back).
func (w *Writer) release(b []byte, err error) {
	if w.bp != nil && err == nil && cap(b) <= keepBuf {
		*w.bp = b[:0]
		bufs.Put(w.bp)
	}
	w.bp, w.buf = nil, nil
}

// NewWriter returns a Writer that encodes events to w.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: w, flush: flusher(w)}
}

// flusher finds how to flush w. A ResponseController also reaches the flusher of a ResponseWriter
// wrapped by middleware, through its Unwrap method.
func flusher(w io.Writer) func() error {
	switch f := w.(type) {
	case http.ResponseWriter:
		return http.NewResponseController(f).Flush
	case interface{ Flush() error }:
		return f.Flush
	case interface{ Flush() }:
		return func() error { f.Flush(); return nil }
	}
	return nil
}

// Write encodes ev: an id line when ev.ID is set, an event line when ev.Type is set, a retry line
// when ev.Retry is positive, and one data line per line of ev.Data (at least one, so that the event
// is dispatched). A line break in ev.Type or ev.ID, or a NUL in ev.ID, is an error: it would let the
// value forge fields, or make receivers drop the id.
func (w *Writer) Write(ev Event) error {
	if err := checkType(ev.Type); err != nil {
		return err
	}
	if err := checkID(ev.ID); err != nil {
		return err
	}
	b := w.take()[:0]
	if ev.ID != "" {
		b = appendField(b, "id: ", ev.ID)
	}
	if ev.Type != "" {
		b = appendField(b, "event: ", ev.Type)
	}
	if ev.Retry > 0 {
		b = append(b, "retry: "...)
		b = strconv.AppendInt(b, int64(ev.Retry), 10)
		b = append(b, '\n')
	}
	b = appendData(b, ev.Data)
	return w.send(append(b, '\n'))
}

// WriteNumbered writes an event with a numeric id, the form chatd's own streams use so a browser can
// resume with Last-Event-ID. The event line is left out when typ is empty.
func (w *Writer) WriteNumbered(id int64, typ string, data []byte) error {
	if err := checkType(typ); err != nil {
		return err
	}
	b := append(w.take()[:0], "id: "...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, '\n')
	if typ != "" {
		b = appendField(b, "event: ", typ)
	}
	b = appendData(b, data)
	return w.send(append(b, '\n'))
}

// QueueNumbered encodes an event as WriteNumbered does, to go out with the next Send: a batch of events
// costs one write and one flush. Write, WriteNumbered and Comment must not be called between the two.
func (w *Writer) QueueNumbered(id int64, typ string, data []byte) error {
	if err := checkType(typ); err != nil {
		return err
	}
	b := append(w.take(), "id: "...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, '\n')
	if typ != "" {
		b = appendField(b, "event: ", typ)
	}
	b = appendData(b, data)
	w.buf = append(b, '\n')
	return nil
}

// Queued is the size of the events queued since the last Send.
func (w *Writer) Queued() int { return len(w.buf) }

// Send writes the events queued since the last Send in a single Write, and flushes.
func (w *Writer) Send() error {
	b := w.buf
	if len(b) == 0 {
		return nil
	}
	err := w.write(b)
	w.release(b, err)
	return err
}

// Comment writes a comment, which receivers ignore; a ": ping" every few seconds keeps proxies from
// closing an idle stream. A line break in text is an error.
func (w *Writer) Comment(text string) error {
	if strings.ContainsAny(text, "\r\n") {
		return fmt.Errorf("sse: write comment %q: contains a line break", text)
	}
	b := append(w.take()[:0], ": "...)
	b = append(b, text...)
	return w.send(append(b, '\n', '\n'))
}

// WriteEncoded writes b, whole events already encoded as text/event-stream (a batch of `data:` frames,
// say), in a single Write, and flushes. b is not kept.
func (w *Writer) WriteEncoded(b []byte) error {
	return w.write(b)
}

// send writes one encoded event in a single Write, so it is never interleaved on the wire, and flushes.
func (w *Writer) send(b []byte) error {
	err := w.write(b)
	w.release(b, err)
	return err
}

func (w *Writer) write(b []byte) error {
	if _, err := w.w.Write(b); err != nil {
		return fmt.Errorf("sse: write: %w", err)
	}
	if w.flush == nil {
		return nil
	}
	// A ResponseWriter that cannot flush still delivers the event, only later; that is not an error.
	if err := w.flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("sse: flush: %w", err)
	}
	return nil
}

func checkType(typ string) error {
	if strings.ContainsAny(typ, "\r\n") {
		return fmt.Errorf("sse: write event type %q: contains a line break", typ)
	}
	return nil
}

func checkID(id string) error {
	if strings.ContainsAny(id, "\r\n\x00") {
		return fmt.Errorf("sse: write id %q: contains a line break or NUL", id)
	}
	return nil
}

func appendField(b []byte, prefix, value string) []byte {
	b = append(b, prefix...)
	b = append(b, value...)
	return append(b, '\n')
}

// appendData writes data as data lines, splitting at LF, CRLF and CR: a receiver would end the line
// at any of them and read the rest as a field of its own.
func appendData(b, data []byte) []byte {
	for {
		i := indexEOL(data)
		b = append(b, "data: "...)
		if i < 0 {
			b = append(b, data...)
			return append(b, '\n')
		}
		b = append(b, data[:i]...)
		b = append(b, '\n')
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
}
