package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
)

// DefaultMaxEvent is the bound Scan puts on one event's size: far above any real chunk of a model's
// answer, yet low enough that a broken upstream cannot make the server buffer without end.
const DefaultMaxEvent = 32 << 20

// ErrTooLarge is yielded when one event (the data gathered so far plus the line being read) would
// exceed the limit given to ScanLimit.
var ErrTooLarge = errors.New("sse: event larger than limit")

// readSize holds a few typical token chunks (200–600 bytes each), so most lines are sliced straight out
// of the reader's buffer without being copied, and a longer line is gathered. It is held for as long as
// the stream is open, and most of the time empty: the body it reads from (an HTTP response's) has a
// buffer of its own, so reading it in small pieces costs copies, not system calls.
const readSize = 1 << 10

var bom = []byte("\xEF\xBB\xBF")

// Scan decodes r as a text/event-stream. A yielded error is terminal. Breaking out of the loop stops
// reading; r is left to the caller to close.
func Scan(r io.Reader) iter.Seq2[Event, error] {
	return ScanLimit(r, DefaultMaxEvent)
}

// ScanLimit is Scan with a bound on one event's size (line + accumulated data); exceeding it yields
// ErrTooLarge. A maxEvent of zero or less means DefaultMaxEvent.
func ScanLimit(r io.Reader, maxEvent int) iter.Seq2[Event, error] {
	if maxEvent <= 0 {
		maxEvent = DefaultMaxEvent
	}
	return func(yield func(Event, error) bool) {
		s := &scanner{br: bufio.NewReaderSize(r, readSize), max: maxEvent}
		s.run(yield)
	}
}

// scanner is the state of one stream. Its buffers and strings are reused from event to event, which
// is what keeps decoding free of allocations.
type scanner struct {
	br      *bufio.Reader
	max     int
	err     error  // io.EOF or a wrapped read error, kept once the reader is drained
	skip    int    // the returned line's bytes, discarded only on the next read so the line stays valid
	skipLF  bool   // the last line ended in CR: an LF right after it is the same line ending
	started bool   // the first line has been checked for a byte order mark
	line    []byte // a line that spans several reads, gathered

	data     []byte
	hasData  bool // a data line was seen, even an empty one: the event is dispatched
	typ      string
	lastType string // the previous event type, reused so repeated names cost no allocation
	id       string
	retry    int
}

func (s *scanner) run(yield func(Event, error) bool) {
	for {
		line, err := s.readLine()
		if err == io.EOF {
			// The deviation from the spec: an event cut off by the end of the stream is dispatched.
			if s.hasData {
				yield(s.event(), nil)
			}
			return
		}
		if err != nil {
			yield(Event{}, err)
			return
		}
		if !s.started {
			s.started = true
			line = bytes.TrimPrefix(line, bom)
		}
		if len(line) > 0 {
			s.field(line)
			continue
		}
		if s.hasData && !yield(s.event(), nil) {
			return
		}
		s.reset()
	}
}

func (s *scanner) event() Event {
	return Event{Type: s.typ, ID: s.id, Data: s.data, Retry: s.retry}
}

// reset starts a new block. The id is not reset: the spec keeps the last event ID across events.
func (s *scanner) reset() {
	s.data = s.data[:0]
	s.hasData = false
	s.typ = ""
	s.retry = 0
}

// field applies one non-empty line of a block.
func (s *scanner) field(line []byte) {
	if line[0] == ':' {
		return // a comment, such as a keep-alive
	}
	name, value, _ := bytes.Cut(line, []byte(":"))
	value = bytes.TrimPrefix(value, []byte(" "))
	switch string(name) {
	case "event":
		s.lastType = reuse(s.lastType, value)
		s.typ = s.lastType
	case "data":
		if s.hasData {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, value...)
		s.hasData = true
	case "id":
		// The spec ignores an id with NUL so that a last event ID can always be sent back in a header.
		if bytes.IndexByte(value, 0) < 0 {
			s.id = reuse(s.id, value)
		}
	case "retry":
		if n, ok := parseRetry(value); ok {
			s.retry = n
		}
	}
}

// reuse returns prev when b holds the same bytes; the comparison does not allocate, so a stream that
// repeats its event names or ids costs no string per event.
func reuse(prev string, b []byte) string {
	if string(b) == prev {
		return prev
	}
	return string(b)
}

// parseRetry accepts only ASCII digits, as the spec does, and also refuses a value too large for an int.
func parseRetry(b []byte) (int, bool) {
	if len(b) == 0 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int(c - '0')
		if n > (math.MaxInt-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// readLine returns the next line without its line ending, valid until the next call. An unterminated
// last line is returned before io.EOF. Other read errors come back wrapped.
func (s *scanner) readLine() ([]byte, error) {
	s.br.Discard(s.skip) // cannot fail: those bytes are buffered
	s.skip = 0
	s.line = s.line[:0]
	for {
		buf, err := s.buffered()
		if err != nil {
			if err == io.EOF && len(s.line) > 0 {
				return s.line, nil
			}
			return nil, err
		}
		if s.skipLF {
			s.skipLF = false
			if buf[0] == '\n' {
				s.br.Discard(1)
				continue
			}
		}
		i := indexEOL(buf)
		if i < 0 {
			if !s.fits(len(buf)) {
				return nil, ErrTooLarge
			}
			s.line = append(s.line, buf...)
			s.br.Discard(len(buf))
			continue
		}
		if !s.fits(i) {
			return nil, ErrTooLarge
		}
		s.skipLF = buf[i] == '\r'
		s.skip = i + 1
		if len(s.line) == 0 {
			return buf[:i], nil // the common case: the whole line is in the buffer, no copy
		}
		s.line = append(s.line, buf[:i]...)
		return s.line, nil
	}
}

// buffered returns the bytes the reader holds, reading only when it holds none.
func (s *scanner) buffered() ([]byte, error) {
	if s.err != nil {
		return nil, s.err
	}
	if _, err := s.br.Peek(1); err != nil {
		if err != io.EOF {
			err = fmt.Errorf("sse: read: %w", err)
		}
		s.err = err
		return nil, err
	}
	buf, _ := s.br.Peek(s.br.Buffered())
	return buf, nil
}

// fits reports whether n more bytes of the current line keep the event within the limit.
func (s *scanner) fits(n int) bool {
	return len(s.data)+len(s.line)+n <= s.max
}

// indexEOL returns the index of the first CR or LF in b, or -1. Two IndexByte scans beat one
// byte-by-byte loop, and the CR scan only covers the bytes before the first LF.
func indexEOL(b []byte) int {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return bytes.IndexByte(b, '\r')
	}
	if j := bytes.IndexByte(b[:i], '\r'); j >= 0 {
		return j
	}
	return i
}
