// Package marker takes the marked blocks a model may end its answer with — SUGGESTED_VALUES: [...],
// SUGGESTED_ACTIONS: [...] and an agent's payload markers such as SCHEMA_PROPOSAL: {...} — out of the
// answer's text while it streams, so that no byte of a block reaches a client as text.
//
// A Splitter is fed the text deltas of one answer and returns, for each, the text that may be released
// now. It holds back only a line that could still begin a marker: one whose first characters (after at
// most three spaces, as CommonMark allows before a paragraph) are a prefix of a marker. A line that turns
// out not to be one is released at once, so no text waits beyond its own line; ordinary text passes
// through without being copied. The JSON after a marker may span lines and may be wrapped in a ``` or
// ~~~ fence; everything up to the closing fence is the block's. A block whose JSON is invalid,
// unfinished (at a blank line, unfenced) or larger than the limit is dropped with a Note; the rest of
// the answer stands. Inside a fenced code block of the prose, and in indented code, nothing is a marker.
//
// This package imports only the standard library.
package marker

import (
	"bytes"
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
	stCodeIndent               // the indentation of a line in a code block of the prose
	stFenceRun                 // counting the ``` or ~~~ that begin a prose line
	stFenceRest                // the rest of a prose line that may open or close a code block
	stAfterMarker              // after a marker: whitespace before its JSON or fence
	stOpenFence                // counting the ``` or ~~~ of a fence opening the JSON
	stFenceInfo                // the rest of the fence's line (```json)
	stJSON                     // in the block's JSON
	stAfterJSON                // after an unfenced block's JSON, up to the end of its line
	stCloseFence               // after a fenced block's JSON, up to its closing fence
	stDropLine                 // dropping the rest of a bad block's line
	stDropFence                // dropping a bad fenced block up to its closing fence
)

// Splitter splits one answer's text into released text and blocks. Its zero value knows no markers;
// use New. It is not safe for concurrent use.
type Splitter struct {
	markers []string
	max     int

	st state
	// code is the fence character of the code block of the prose the text is in (0: none), codeLen
	// its length: the block closes with a line of at least codeLen of it and nothing else.
	code     byte
	codeLen  int
	fch      byte // the fence character being counted
	ticks    int  // how many of it
	fenceOK  bool // stFenceRest: the line still opens (or closes) a code block
	sawSpace bool // a candidate's held bytes are all spaces so far
	lead     int  // the spaces that begin held (or, in stCodeIndent, the line)
	newline  bool // stAfterMarker, stOpenFence: the marker's line has ended
	held     []byte
	heldAt   int // where held begins in the current delta; -1: (partly) in an earlier one

	marker   string // the block being read
	block    []byte // its JSON so far
	size     int    // its bytes from the marker on
	depth    int
	inString bool
	escaped  bool
	tooBig   bool
	blank    bool   // unfenced JSON: the line so far is blank
	fence    byte   // the fence character around the block's JSON; 0: none
	fenceLen int    // its length
	close    closer // finds the fence's closing line
	extra    int    // the bytes of a fenced block after its JSON (or after what was bad)
	lineText bool   // stCloseFence: the line has text
	extraBad bool   // the note about the text after the JSON is taken

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
// until the next call; it is a part of delta, not a copy, unless it joins text held from an earlier
// delta or skips a block.
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
		s.release(len(s.held))
	case stAfterMarker, stOpenFence:
		s.note("has no JSON after it")
		if s.fence == 0 {
			s.release(len(s.held)) // the blank lines after the marker's line
		}
	case stFenceInfo:
		s.note("has no JSON after it")
	case stJSON:
		s.abandon()
	case stCloseFence:
		s.noteExtra()
	}
	out := s.result()
	s.st, s.code, s.held = stLineStart, 0, s.held[:0]
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
	s.heldAt = -1
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

func (s *Splitter) toOut() {
	if s.useOut {
		return
	}
	s.out = append(s.out[:0], s.delta[s.outStart:s.outEnd]...)
	s.useOut, s.any = true, true
}

// hold holds back c, which is delta[i].
func (s *Splitter) hold(i int, c byte) {
	switch {
	case len(s.held) == 0:
		s.heldAt = i
	case s.heldAt >= 0 && s.heldAt+len(s.held) != i:
		s.heldAt = -1
	}
	s.held = append(s.held, c)
}

// release releases the first n held bytes: as a range of the delta when they all came with it, so
// that a line held and let go within one delta is not copied.
func (s *Splitter) release(n int) {
	if n == 0 {
		return
	}
	if s.heldAt >= 0 {
		s.emit(s.heldAt, s.heldAt+n)
		s.heldAt += n
	} else {
		s.toOut()
		s.out = append(s.out, s.held[:n]...)
	}
	s.held = append(s.held[:0], s.held[n:]...)
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
	case stCodeIndent, stFenceRun, stFenceRest:
		return s.codeLine(delta[i], i)
	}
	return s.stepBlock(delta, i)
}

func (s *Splitter) lineStart(delta string, i int) int {
	c := delta[i]
	switch {
	case c == '\n':
		s.emit(i, i+1)
		return i + 1
	case c == '`' || c == '~':
		s.st, s.fch, s.ticks = stFenceRun, c, 0
		return i
	case s.code != 0:
		s.st, s.lead = stCodeIndent, 0
		return i
	case c == ' ':
		s.st, s.sawSpace, s.lead, s.held = stCandidate, true, 0, s.held[:0]
		return i
	case s.prefix(nil, c):
		s.st, s.sawSpace, s.lead, s.held = stCandidate, false, 0, s.held[:0]
		s.hold(i, c)
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
		case c == ' ' && s.lead < maxIndent:
			s.hold(i, c)
			s.lead++
			return i + 1
		case c == '`' || c == '~':
			s.release(len(s.held))
			s.st, s.fch, s.ticks = stFenceRun, c, 0
			return i
		}
	}
	word := s.held[s.lead:]
	if m, ok := s.match(word, c); ok {
		s.startBlock(m)
		return i + 1
	}
	if s.prefix(word, c) {
		s.hold(i, c)
		s.sawSpace = false
		return i + 1
	}
	s.release(len(s.held))
	s.st = stText
	return i
}

// codeLine follows the lines that open and close the code blocks of the prose, as CommonMark has them:
// up to three spaces, three or more ` or ~, and on an opening line an info string (without a ` after
// backticks); a block closes with the same character, at least as many, and nothing after them.
func (s *Splitter) codeLine(c byte, i int) int {
	switch s.st {
	case stCodeIndent:
		switch {
		case c == ' ' && s.lead < maxIndent:
			s.emit(i, i+1)
			s.lead++
			return i + 1
		case c == '`' || c == '~':
			s.st, s.fch, s.ticks = stFenceRun, c, 0
		default:
			s.st = stText
		}
		return i
	case stFenceRun:
		if c == s.fch {
			s.emit(i, i+1)
			s.ticks++
			return i + 1
		}
		s.fenceOK = s.ticks >= 3 && (s.code == 0 || s.code == s.fch && s.ticks >= s.codeLen)
		s.st = stText
		if s.fenceOK {
			s.st = stFenceRest
		}
		return i
	}
	s.emit(i, i+1)
	switch {
	case c == '\n':
		switch {
		case !s.fenceOK:
		case s.code == 0:
			s.code, s.codeLen = s.fch, s.ticks
		default:
			s.code = 0
		}
		s.st = stLineStart
	case s.code == 0:
		if c == '`' && s.fch == '`' {
			s.fenceOK = false // ```x``` is inline code
		}
	case c != ' ' && c != '\t' && c != '\r':
		s.fenceOK = false // a closing fence has nothing after it
	}
	return i + 1
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

// maxIndent is how many spaces may come before a marker or a fence: four make indented code.
const maxIndent = 3

var standard = []string{SuggestedValues, SuggestedActions}

func (s *Splitter) startBlock(m string) {
	s.st, s.marker, s.block, s.held = stAfterMarker, m, s.block[:0], s.held[:0]
	s.size, s.depth, s.inString, s.escaped, s.tooBig, s.newline = len(m), 0, false, false, false, false
	s.fence, s.extra, s.lineText, s.extraBad = 0, 0, false, false
}

// stepBlock handles the bytes of a block, none of which is released.
func (s *Splitter) stepBlock(delta string, i int) int {
	c := delta[i]
	switch s.st {
	case stAfterMarker:
		return s.afterMarker(c, i)
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

// afterMarker skips the whitespace between a marker and its JSON or fence. Blank lines after the
// marker's line are held: they are the answer's again when no JSON follows them.
func (s *Splitter) afterMarker(c byte, i int) int {
	switch c {
	case ' ', '\t', '\r', '\n':
		s.size++
		switch {
		case s.fence != 0:
			s.close.next(c, s.fence, s.fenceLen)
		case !s.newline:
			s.newline = c == '\n'
		default:
			s.hold(i, c)
			if s.size > s.max {
				s.note("is not followed by a JSON array or object")
				return s.dropRest(i + 1)
			}
		}
		return i + 1
	case '[', '{':
		s.st, s.depth, s.blank, s.held = stJSON, 0, false, s.held[:0]
		return i
	case '`', '~':
		if s.fence == 0 {
			s.st, s.fch, s.ticks = stOpenFence, c, 0
			return i
		}
	}
	s.note("is not followed by a JSON array or object")
	return s.dropRest(i)
}

// stepFence handles the fence around a block's JSON: its opening line, what follows the JSON up to
// the closing line, and the rest of a bad fenced block.
func (s *Splitter) stepFence(c byte, i int) int {
	switch s.st {
	case stOpenFence:
		if c == s.fch {
			s.ticks++
			s.size++
			if s.newline {
				s.hold(i, c) // the answer's again if this is no fence
			}
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
		switch {
		case c == '\n':
			s.st, s.fence, s.fenceLen, s.close, s.held = stAfterMarker, s.fch, s.ticks, closer{}, s.held[:0]
		case c == '`' && s.fch == '`':
			s.note("is followed by inline code, not a fenced block")
			s.st = stDropLine
		}
		return i + 1
	}
	// stCloseFence, stDropFence: all up to the closing line is the block's, within the limit.
	if s.extra >= s.max {
		s.noteExtra()
		s.note(fmt.Sprintf("has a fence that does not close within %d bytes", s.max))
		s.st = stDropLine
		return i
	}
	s.extra++
	if s.close.next(c, s.fence, s.fenceLen) {
		s.st = stLineStart
		return i + 1
	}
	if s.st == stCloseFence {
		switch c {
		case '\n':
			s.noteExtra()
			s.lineText = false
		case ' ', '\t', '\r':
		default:
			s.lineText = true
		}
	}
	return i + 1
}

// noteExtra notes, once, that a fenced block has text after its JSON.
func (s *Splitter) noteExtra() {
	if s.lineText && !s.extraBad {
		s.extraBad = true
		s.note("has text after its JSON in the fence, which is dropped")
	}
}

// dropRest drops what is left of a bad block: the rest of its fence, or of its line.
func (s *Splitter) dropRest(i int) int {
	switch {
	case s.fence != 0:
		s.st, s.extra = stDropFence, 0
	case s.newline:
		return s.resumeLine(i) // the marker's line is gone; this one is the answer's again
	default:
		s.st = stDropLine
	}
	return i
}

// resumeLine gives the held lines after a marker that has no JSON back to the answer, and goes on with
// the line they lead to as if it had begun there.
func (s *Splitter) resumeLine(i int) int {
	s.release(bytes.LastIndexByte(s.held, '\n') + 1)
	s.st = stLineStart
	if len(s.held) == 0 {
		return i
	}
	if len(s.held) <= maxIndent && len(bytes.Trim(s.held, " ")) == 0 {
		s.st, s.sawSpace, s.lead = stCandidate, true, len(s.held)
		return i
	}
	s.release(len(s.held))
	s.st = stText
	return i
}

// json reads the block's JSON up to the bracket that closes its first one. Unfenced, the JSON ends at a
// blank line (which no JSON string holds), and fenced at the closing fence, whether it is done or not.
func (s *Splitter) json(delta string, i int) int {
	for ; i < len(delta); i++ {
		c := delta[i]
		switch {
		case s.fence != 0:
			if s.close.next(c, s.fence, s.fenceLen) {
				s.abandon()
				s.st = stLineStart
				return i + 1
			}
		case c == '\n':
			if s.blank {
				s.abandon()
				s.release(len(s.held)) // the blank line is the answer's
				s.st = stLineStart
				return i
			}
			s.blank, s.held = true, s.held[:0]
		case !s.blank:
		case c == ' ' || c == '\t' || c == '\r':
			s.hold(i, c)
		default:
			s.blank = false
		}
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
				s.st = stAfterJSON
				if s.fence != 0 {
					// The closing fence may follow on the JSON's own line.
					s.st, s.extra, s.close = stCloseFence, 0, closer{}
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

// abandon drops a block whose JSON did not end.
func (s *Splitter) abandon() {
	if s.tooBig {
		s.note(fmt.Sprintf("block is larger than %d bytes", s.max))
	} else {
		s.note("has JSON that does not end")
	}
	s.block = s.block[:0]
}

func (s *Splitter) note(reason string) {
	s.notes = append(s.notes, Note{Marker: s.marker, Reason: reason})
}

// closer finds the line that closes a block's fence: up to three spaces, the fence's character at
// least as many times as it opened, and nothing after them but spaces.
type closer struct {
	st       uint8 // 0: indentation, 1: fence characters, 2: spaces after them, 3: not a closing line
	col, run int
}

// next takes the next byte of the fenced block and reports whether it ends the closing line.
func (f *closer) next(c, ch byte, n int) bool {
	switch {
	case c == '\n':
		done := f.st == 2 || f.st == 1 && f.run >= n
		*f = closer{}
		return done
	case f.st == 0 && c == ' ' && f.col < maxIndent:
		f.col++
	case f.st <= 1 && c == ch:
		f.st, f.run = 1, f.run+1
	case (f.st == 1 || f.st == 2) && f.run >= n && (c == ' ' || c == '\t' || c == '\r'):
		f.st = 2
	default:
		f.st = 3
	}
	return false
}
