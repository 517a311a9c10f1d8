package main

import (
	"bytes"
	"strconv"
	"time"
)

// appendMarker appends the stamp the mock puts in every content chunk: ⟦T<unix-nanos>⟧ and a space.
func appendMarker(b []byte, t time.Time) []byte {
	b = append(b, "⟦T"...)
	b = strconv.AppendInt(b, t.UnixNano(), 10)
	return append(b, "⟧ "...)
}

// markerScanner finds ⟦T<digits>⟧ markers in a byte stream fed in pieces of any size, whatever the
// event format around them, so one client measures the mock, the relay and chatd alike. Each bracket
// may be raw UTF-8 (U+27E6 is E2 9F A6, U+27E7 is E2 9F A7) or a JSON escape (\u27e6, \u27e7, hex in
// either case, after any number of backslashes, so a marker escaped twice is found too).
type markerScanner struct {
	state  scanState
	k      int   // bytes of the current bracket matched so far
	v      int64 // the digits so far
	digits int
}

type scanState int

const (
	scanIdle       scanState = iota
	scanOpenRaw              // inside the raw open bracket
	scanOpenSlash            // one or more backslashes: maybe an escaped open bracket
	scanOpenHex              // \u seen, matching "27e6"
	scanT                    // open bracket done, a 'T' must follow
	scanDigits               // inside the number
	scanCloseRaw             // inside the raw close bracket
	scanCloseSlash           // backslashes after the digits
	scanCloseHex             // \u seen, matching "27e7"
)

const (
	rawOpen  = "\xE2\x9F\xA6"
	rawClose = "\xE2\x9F\xA7"
	hexOpen  = "27e6"
	hexClose = "27e7"
	// maxDigits keeps the value inside an int64; a unix-nanos stamp has 19 digits.
	maxDigits = 19
)

func lowerASCII(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

// feed scans p and calls emit with the value of every marker that ends inside p.
func (s *markerScanner) feed(p []byte, emit func(int64)) {
	for i := 0; i < len(p); i++ {
		if s.step(p[i]) {
			emit(s.v)
		}
	}
}

// step advances the scanner by one byte and reports whether a marker ended with it. A byte that breaks
// a partial match is looked at again from the idle state, since it may start a new marker.
func (s *markerScanner) step(b byte) bool {
	for {
		again, done := s.advance(b)
		if !again {
			return done
		}
		s.state = scanIdle
	}
}

// advance is one transition; again asks for b to be read again from the idle state.
func (s *markerScanner) advance(b byte) (again, done bool) {
	switch s.state {
	case scanIdle:
		switch b {
		case rawOpen[0]:
			s.state, s.k = scanOpenRaw, 1
		case '\\':
			s.state = scanOpenSlash
		}
	case scanOpenRaw, scanCloseRaw:
		want := rawOpen
		if s.state == scanCloseRaw {
			want = rawClose
		}
		if b != want[s.k] {
			if s.state == scanCloseRaw && s.k == 2 && b == rawOpen[2] {
				s.state = scanT // both brackets start E2 9F: this was an open one, after a broken marker
				return false, false
			}
			return true, false
		}
		if s.k++; s.k == len(want) {
			if s.state == scanCloseRaw {
				s.state = scanIdle
				return false, true
			}
			s.state = scanT
		}
	case scanOpenSlash, scanCloseSlash:
		switch b {
		case '\\':
		case 'u':
			s.state, s.k = s.state+1, 0 // the matching hex state
		default:
			return true, false
		}
	case scanOpenHex, scanCloseHex:
		want := hexOpen
		if s.state == scanCloseHex {
			want = hexClose
		}
		if lowerASCII(b) != want[s.k] {
			return true, false
		}
		if s.k++; s.k == len(want) {
			if s.state == scanCloseHex {
				s.state = scanIdle
				return false, true
			}
			s.state = scanT
		}
	case scanT:
		if b != 'T' {
			return true, false
		}
		s.state, s.v, s.digits = scanDigits, 0, 0
	case scanDigits:
		switch {
		case '0' <= b && b <= '9' && s.digits < maxDigits:
			s.v = s.v*10 + int64(b-'0')
			s.digits++
		case b == rawClose[0] && s.digits > 0:
			s.state, s.k = scanCloseRaw, 1
		case b == '\\' && s.digits > 0:
			s.state = scanCloseSlash
		default:
			return true, false
		}
	}
	return false, false
}

// needleScanner reports whether a fixed string occurs in a stream fed in pieces, also across pieces.
type needleScanner struct {
	needle []byte
	tail   []byte // the last bytes seen, fewer than the needle
	found  bool
}

func (n *needleScanner) feed(p []byte) {
	if n.found || len(n.needle) == 0 {
		return
	}
	// Across the boundary: the tail and as much of p as could complete a match with it.
	head := append(n.tail, p[:min(len(p), len(n.needle)-1)]...)
	if bytes.Contains(head, n.needle) || bytes.Contains(p, n.needle) {
		n.found = true
		return
	}
	if keep := len(n.needle) - 1; len(p) >= keep {
		n.tail = append(n.tail[:0], p[len(p)-keep:]...)
	} else {
		n.tail = append(n.tail[:0], head[max(0, len(head)-keep):]...)
	}
}
