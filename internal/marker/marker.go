// Package marker takes the marked blocks a model may end its answer with — SUGGESTED_VALUES: [...],
// SUGGESTED_ACTIONS: [...] and an agent's payload markers such as SCHEMA_PROPOSAL: {...} — out of the
// answer's text while it streams, so that no byte of a block reaches a client as text.
//
// A Splitter is fed the text deltas of one answer and returns, for each, the text that may be released
// now. It holds back only a line that could still begin a marker: one at the start of a line whose
// first characters (after spaces or tabs) are a prefix of a marker. A line that turns out not to be one
// is released at once, so no text waits beyond its own line; ordinary text passes through without being
// copied. The JSON after a marker may span lines and may be wrapped in a ``` fence. A block whose JSON is
// invalid, unfinished or larger than the limit is dropped with a Note; the rest of the answer stands.
// Inside a ``` code block of the prose, nothing is a marker.
//
// This package imports only the standard library.
package marker

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Standard markers, which every agent's answers may carry.
const (
	SuggestedValues  = "SUGGESTED_VALUES:"
	SuggestedActions = "SUGGESTED_ACTIONS:"
)

// DefaultMaxBlock is the default limit of one block's bytes, from its marker to its end.
const DefaultMaxBlock = 256 << 10

// Block is one marked block of an answer: its marker and its JSON (a valid JSON array or object).
type Block struct {
	Marker string
	JSON   json.RawMessage
}

// Note says why a block was dropped.
type Note struct {
	Marker string
	Reason string
}

func (n Note) String() string { return n.Marker + " " + n.Reason }

type state uint8

const (
	stLineStart   state = iota // at the start of a line, nothing of it seen
	stText                     // in a line of prose: released up to its newline
	stCandidate                // holding a line that could still begin a marker
	stTicks                    // counting the backticks that begin a prose line
	stAfterMarker              // after a marker: whitespace before its JSON or fence
	stOpenFence                // counting the backticks of a fence opening the JSON
	stFenceInfo                // the rest of the fence's line (```json)
	stJSON                     // in the block's JSON
	stAfterJSON                // after an unfenced block's JSON, up to the end of its line
	stCloseFence               // after a fenced block's JSON, looking for the closing ```
	stDropLine                 // dropping the rest of a bad block's line
	stDropFence                // dropping a bad fenced block up to its closing ```
)

// Splitter splits one answer's text into released text and blocks. Its zero value knows no markers;
// use New. It is not safe for concurrent use.
type Splitter struct {
	markers []string
	max     int

	st       state
	fenced   bool // inside a ``` code block of the prose
	ticks    int
	sawSpace bool // a candidate's held bytes are all spaces so far
	lead     int  // the spaces and tabs that begin held
	newline  bool // stAfterMarker, stOpenFence: a newline was skipped
	held     []byte
	marker   string // the block being read
	block    []byte // its JSON so far
	size     int    // its bytes from the marker on
	depth    int
	inString bool
	escaped  bool
	tooBig   bool
	inFence  bool // the block's JSON is in a fence

	blocks []Block
	notes  []Note

	// The text released by one Write: a range of its delta while it is one contiguous piece, else out.
	delta            string
	outStart, outEnd int
	useOut, any      bool
	out              []byte
}

// New returns a Splitter for markers (each such as "SCHEMA_PROPOSAL:"; SuggestedValues and
// SuggestedActions are not added), with blocks of at most maxBlock bytes (<= 0: DefaultMaxBlock).
func New(markers []string, maxBlock int) *Splitter {
	if maxBlock <= 0 {
		maxBlock = DefaultMaxBlock
	}
	return &Splitter{markers: markers, max: maxBlock}
}

// Write feeds the next delta of the answer and returns the text released by it. The result is valid
// until the next call; it is a part of delta, not a copy, unless it joins held text or skips a block.
func (s *Splitter) Write(delta string) string {
	s.begin(delta)
	i := 0
	for i < len(delta) {
		i = s.step(delta, i)
	}
	return s.result()
}

// Flush ends the answer: it releases a held line that did not become a marker, drops an unfinished
// block with a note, and makes s ready for the next answer. The blocks and notes stay until Take.
func (s *Splitter) Flush() string {
	s.begin("")
	switch s.st {
	case stCandidate:
		s.emitBytes(s.held)
	case stAfterMarker, stOpenFence, stFenceInfo:
		s.note("has no JSON after it")
	case stJSON:
		s.note("has JSON that does not end")
	}
	out := s.result()
	s.st, s.fenced, s.held = stLineStart, false, s.held[:0]
	return out
}

// Take returns the blocks and notes since the last Take, and forgets them.
func (s *Splitter) Take() ([]Block, []Note) {
	b, n := s.blocks, s.notes
	s.blocks, s.notes = nil, nil
	return b, n
}

// Split splits a whole answer: its text without the blocks, the blocks, and the notes of blocks dropped.
func Split(text string, markers []string, maxBlock int) (string, []Block, []Note) {
	s := New(markers, maxBlock)
	var sb strings.Builder
	sb.WriteString(s.Write(text))
	sb.WriteString(s.Flush())
	b, n := s.Take()
	return sb.String(), b, n
}

func (s *Splitter) begin(delta string) {
	s.delta, s.outStart, s.outEnd, s.useOut, s.any = delta, 0, 0, false, false
}

func (s *Splitter) result() string {
	if s.useOut {
		return string(s.out)
	}
	return s.delta[s.outStart:s.outEnd]
}

// emit releases delta[i:j].
func (s *Splitter) emit(i, j int) {
	switch {
	case i == j:
	case !s.any:
		s.outStart, s.outEnd, s.any = i, j, true
	case !s.useOut && s.outEnd == i:
		s.outEnd = j
	default:
		s.toOut()
		s.out = append(s.out, s.delta[i:j]...)
	}
}

// emitBytes releases held bytes.
func (s *Splitter) emitBytes(b []byte) {
	if len(b) == 0 {
		return
	}
	s.toOut()
	s.out = append(s.out, b...)
}

func (s *Splitter) toOut() {
	if s.useOut {
		return
	}
	s.out = append(s.out[:0], s.delta[s.outStart:s.outEnd]...)
	s.useOut, s.any = true, true
}

// step handles delta from i on and returns where it stopped.
func (s *Splitter) step(delta string, i int) int {
	switch s.st {
	case stText:
		j := strings.IndexByte(delta[i:], '\n')
		if j < 0 {
			s.emit(i, len(delta))
			return len(delta)
		}
		s.emit(i, i+j+1)
		s.st = stLineStart
		return i + j + 1
	case stLineStart:
		return s.lineStart(delta, i)
	case stCandidate:
		return s.candidate(delta, i)
	case stTicks:
		if delta[i] == '`' {
			s.ticks++
			s.emit(i, i+1)
			return i + 1
		}
		if s.ticks >= 3 {
			s.fenced = !s.fenced
		}
		s.st = stText
		return i
	}
	return s.stepBlock(delta, i)
}

func (s *Splitter) lineStart(delta string, i int) int {
	c := delta[i]
	switch {
	case c == '\n':
		s.emit(i, i+1)
		return i + 1
	case c == '`':
		s.st, s.ticks = stTicks, 0
		return i
	case s.fenced:
		if c == ' ' || c == '\t' {
			s.emit(i, i+1)
			return i + 1
		}
		s.st = stText
		return i
	case c == ' ' || c == '\t':
		s.st, s.sawSpace, s.lead = stCandidate, true, 1
		s.held = append(s.held[:0], c)
		return i + 1
	case s.prefix(nil, c):
		s.st, s.sawSpace, s.lead = stCandidate, false, 0
		s.held = append(s.held[:0], c)
		return i + 1
	}
	s.st = stText
	return i
}

// candidate goes on with a held line: it becomes a marker, stays a candidate, or is released.
func (s *Splitter) candidate(delta string, i int) int {
	c := delta[i]
	if s.sawSpace {
		switch {
		case (c == ' ' || c == '\t') && s.lead < maxIndent:
			s.held = append(s.held, c)
			s.lead++
			return i + 1
		case c == '`':
			s.emitBytes(s.held)
			s.st, s.ticks = stTicks, 0
			return i
		}
	}
	word := s.held[s.lead:]
	if m, ok := s.match(word, c); ok {
		s.startBlock(m)
		return i + 1
	}
	if s.prefix(word, c) {
		s.held = append(s.held, c)
		s.sawSpace = false
		return i + 1
	}
	s.emitBytes(s.held)
	s.st = stText
	return i
}

// prefix reports whether word followed by c begins some marker.
func (s *Splitter) prefix(word []byte, c byte) bool {
	for _, m := range standard {
		if isPrefix(m, word, c) {
			return true
		}
	}
	for _, m := range s.markers {
		if isPrefix(m, word, c) {
			return true
		}
	}
	return false
}

// match returns the marker that word followed by c is, if any.
func (s *Splitter) match(word []byte, c byte) (string, bool) {
	for _, m := range standard {
		if len(m) == len(word)+1 && isPrefix(m, word, c) {
			return m, true
		}
	}
	for _, m := range s.markers {
		if len(m) == len(word)+1 && isPrefix(m, word, c) {
			return m, true
		}
	}
	return "", false
}

// isPrefix reports whether m begins with word and then c.
func isPrefix(m string, word []byte, c byte) bool {
	if len(word) >= len(m) || m[len(word)] != c {
		return false
	}
	for i, b := range word {
		if m[i] != b {
			return false
		}
	}
	return true
}

// maxIndent is how many spaces or tabs may come before a marker.
const maxIndent = 16

var standard = []string{SuggestedValues, SuggestedActions}

func (s *Splitter) startBlock(m string) {
	s.st, s.marker, s.block = stAfterMarker, m, s.block[:0]
	s.size, s.depth, s.inString, s.escaped, s.tooBig, s.inFence, s.newline = len(m), 0, false, false, false, false, false
	s.held = s.held[:0]
}

// stepBlock handles the bytes of a block, none of which is released.
func (s *Splitter) stepBlock(delta string, i int) int {
	c := delta[i]
	switch s.st {
	case stAfterMarker:
		switch c {
		case ' ', '\t', '\r':
		case '\n':
			s.newline = true
		case '`':
			s.st, s.ticks = stOpenFence, 0
			return i
		case '[', '{':
			s.st, s.depth = stJSON, 0
			return i
		default:
			s.note("is not followed by a JSON array or object")
			return s.dropRest(i)
		}
		s.size++
		return i + 1
	case stJSON:
		return s.json(delta, i)
	case stAfterJSON:
		switch c {
		case ' ', '\t', '\r':
			return i + 1
		case '\n':
			s.st = stLineStart
			return i + 1
		}
		s.st = stLineStart // more on the line: a second marker, or text
		return i
	case stDropLine:
		if c == '\n' {
			s.st = stLineStart
		}
		return i + 1
	}
	return s.stepFence(c, i)
}

// stepFence handles the fence around a block's JSON: its opening line, its closing ```, and the rest of
// a bad fenced block.
func (s *Splitter) stepFence(c byte, i int) int {
	switch s.st {
	case stOpenFence:
		if c == '`' {
			s.ticks++
			s.size++
			return i + 1
		}
		if s.ticks < 3 {
			s.note("is not followed by a JSON array or object")
			return s.dropRest(i)
		}
		s.st = stFenceInfo
		return i
	case stFenceInfo:
		s.size++
		if c == '\n' {
			s.st, s.inFence, s.newline = stAfterMarker, true, true
		}
		return i + 1
	case stCloseFence:
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			return i + 1
		case c == '`':
			s.ticks++
			if s.ticks == 3 {
				s.st = stDropLine
			}
			return i + 1
		case s.ticks == 0:
			s.st = stLineStart // the fence never closed: the block ended with its JSON
			return i
		}
		s.st = stDropLine
		return i
	case stDropFence:
		switch {
		case c == '\n':
			s.ticks = 0
		case c == '`' && s.ticks >= 0:
			s.ticks++
			if s.ticks == 3 {
				s.st = stDropLine
			}
		default:
			s.ticks = -1 // not at the start of a line
		}
		return i + 1
	}
	panic(fmt.Sprintf("marker: state %d", s.st))
}

// dropRest drops what is left of a bad block: the rest of its fence, or of its line.
func (s *Splitter) dropRest(i int) int {
	switch {
	case s.inFence:
		s.st, s.ticks = stDropFence, -1
	case s.newline:
		s.st = stLineStart // the marker's line is gone; this one is the answer's again
	default:
		s.st = stDropLine
	}
	return i
}

// json reads the block's JSON up to the bracket that closes its first one.
func (s *Splitter) json(delta string, i int) int {
	for ; i < len(delta); i++ {
		c := delta[i]
		s.size++
		if s.size > s.max {
			s.tooBig = true
		}
		if !s.tooBig {
			s.block = append(s.block, c)
		}
		switch {
		case s.inString:
			switch {
			case s.escaped:
				s.escaped = false
			case c == '\\':
				s.escaped = true
			case c == '"':
				s.inString = false
			}
		case c == '"':
			s.inString = true
		case c == '[' || c == '{':
			s.depth++
		case c == ']' || c == '}':
			s.depth--
			if s.depth == 0 {
				if s.inFence {
					s.st, s.ticks = stCloseFence, 0
				} else {
					s.st = stAfterJSON
				}
				s.finishBlock()
				return i + 1
			}
		}
	}
	return i
}

func (s *Splitter) finishBlock() {
	switch {
	case s.tooBig:
		s.note(fmt.Sprintf("block is larger than %d bytes", s.max))
	case !json.Valid(s.block):
		s.note("has invalid JSON")
	default:
		s.blocks = append(s.blocks, Block{Marker: s.marker, JSON: append(json.RawMessage(nil), s.block...)})
	}
	s.block = s.block[:0]
}

func (s *Splitter) note(reason string) {
	s.notes = append(s.notes, Note{Marker: s.marker, Reason: reason})
}
