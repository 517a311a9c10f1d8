package openai

import (
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// fastChunk decodes the common chunk — text, reasoning or a finish reason for choice 0, usage and error
// null — without encoding/json, into the same chunk value json.Unmarshal would make. Anything else (a
// tool call, usage, an error, a key that only differs in case from a field's name, a duplicate field, a
// number that is not a small integer, any invalid JSON) is left to encoding/json: decode reports false
// and the caller decodes the chunk again the usual way.
//
// It exists for the run's goroutine, which reads and decodes every token of an answer: encoding/json's
// reflection costs a few microseconds a chunk, and its recursive descent, at the depth a run's goroutine
// reads at, grows the goroutine's stack to 16 KB, which it then keeps for as long as the stream is open.
// fastChunk's descent is four frames deep and skips unknown values with a loop.
type fastChunk struct {
	scratch []byte // unquoted strings that had escapes, reused
}

// maxSkipDepth bounds the nesting of a value fastChunk skips; deeper ones are left to encoding/json.
const maxSkipDepth = 32

// decode decodes data into c, whose Choices the caller has cleared and emptied and whose Usage and Error
// are nil. On false, c may hold part of the chunk: the caller clears it again.
func (f *fastChunk) decode(data []byte, c *chunk) bool {
	i, ok := f.object(data, skipSpace(data, 0), topFields, func(field int, i int) (int, bool) {
		switch field {
		case fieldChoices:
			return f.choices(data, i, c)
		default: // usage and error: only null is decoded here
			return literal(data, i, "null")
		}
	})
	// Not even space may follow: EventDecoder refuses it (ErrTrailingData).
	return ok && i == len(data)
}

// The fields fastChunk decodes, by object.
const (
	fieldChoices = iota
	fieldUsage
	fieldError
)

const (
	fieldIndex = iota
	fieldDelta
	fieldFinishReason
)

const (
	fieldContent = iota
	fieldRefusal
	fieldReasoningContent
	fieldReasoning
	fieldToolCalls
)

var (
	topFields    = []string{"choices", "usage", "error"}
	choiceFields = []string{"index", "delta", "finish_reason"}
	deltaFields  = []string{"content", "refusal", "reasoning_content", "reasoning", "tool_calls"}
)

func (f *fastChunk) choices(data []byte, i int, c *chunk) (int, bool) {
	if i >= len(data) || data[i] != '[' {
		return i, false // null included: left to encoding/json
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == ']' {
		return i + 1, true
	}
	for {
		c.Choices = append(c.Choices, choice{})
		ch := &c.Choices[len(c.Choices)-1]
		var ok bool
		if i, ok = f.choice(data, i, ch); !ok {
			return i, false
		}
		i = skipSpace(data, i)
		if i >= len(data) {
			return i, false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case ']':
			return i + 1, true
		default:
			return i, false
		}
	}
}

func (f *fastChunk) choice(data []byte, i int, ch *choice) (int, bool) {
	return f.object(data, i, choiceFields, func(field int, i int) (int, bool) {
		switch field {
		case fieldIndex:
			return smallInt(data, i, &ch.Index)
		case fieldDelta:
			if end, ok := literal(data, i, "null"); ok {
				return end, true
			}
			return f.delta(data, i, &ch.Delta)
		default:
			return f.str(data, i, &ch.FinishReason)
		}
	})
}

func (f *fastChunk) delta(data []byte, i int, d *delta) (int, bool) {
	return f.object(data, i, deltaFields, func(field int, i int) (int, bool) {
		switch field {
		case fieldContent:
			return f.str(data, i, &d.Content)
		case fieldRefusal:
			return f.str(data, i, &d.Refusal)
		case fieldReasoningContent:
			return f.str(data, i, &d.ReasoningContent)
		case fieldReasoning:
			return f.str(data, i, &d.Reasoning)
		default: // tool calls are left to encoding/json
			return literal(data, i, "null")
		}
	})
}

// object decodes the object at data[i:]: value decodes the value of each key that names one of fields
// (by its index), and the values of other keys are skipped. A key that is not one of fields but equals
// one without regard to case (encoding/json would decode it into that field), or that holds an escape or
// a byte beyond ASCII, a field seen twice, or invalid JSON make it report false.
func (f *fastChunk) object(data []byte, i int, fields []string, value func(field, i int) (int, bool)) (int, bool) {
	if i >= len(data) || data[i] != '{' {
		return i, false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return i + 1, true
	}
	seen := 0
	for {
		key, end, ok := plainString(data, i)
		if !ok {
			return i, false
		}
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return i, false
		}
		i = skipSpace(data, i+1)
		field := -1
		for k, name := range fields {
			if string(key) == name {
				field = k
				break
			}
			if equalFoldASCII(key, name) {
				return i, false
			}
		}
		if field >= 0 {
			if seen&(1<<field) != 0 {
				return i, false
			}
			seen |= 1 << field
			i, ok = value(field, i)
		} else {
			i, ok = skipValue(data, i)
		}
		if !ok {
			return i, false
		}
		i = skipSpace(data, i)
		if i >= len(data) {
			return i, false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return i + 1, true
		default:
			return i, false
		}
	}
}

// str decodes a string or null at data[i:] into s, as encoding/json does: null leaves s as it is.
func (f *fastChunk) str(data []byte, i int, s *string) (int, bool) {
	if end, ok := literal(data, i, "null"); ok {
		return end, true
	}
	end, escaped, ok := scanString(data, i)
	if !ok {
		return i, false
	}
	raw := data[i+1 : end-1]
	if escaped || !utf8.Valid(raw) {
		if f.scratch, ok = unquote(f.scratch[:0], raw); !ok {
			return i, false
		}
		raw = f.scratch
	}
	*s = string(raw)
	return end, true
}

// smallInt decodes a JSON integer of at most nine digits, or null, into n; other numbers (a fraction,
// an exponent, a larger one) are left to encoding/json.
func smallInt(data []byte, i int, n *int) (int, bool) {
	if end, ok := literal(data, i, "null"); ok {
		return end, true
	}
	neg := i < len(data) && data[i] == '-'
	if neg {
		i++
	}
	start, v := i, 0
	for i < len(data) && '0' <= data[i] && data[i] <= '9' && i-start < 9 {
		v = v*10 + int(data[i]-'0')
		i++
	}
	if i == start || (data[start] == '0' && i-start > 1) || (i < len(data) && isNumberByte(data[i])) {
		return i, false
	}
	if neg {
		v = -v
	}
	*n = v
	return i, true
}

func isNumberByte(c byte) bool {
	return '0' <= c && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'
}

// literal reports whether data[i:] starts with lit (true, false or null) not followed by a letter.
func literal(data []byte, i int, lit string) (int, bool) {
	end := i + len(lit)
	if end > len(data) || string(data[i:end]) != lit {
		return i, false
	}
	if end < len(data) && ('a' <= data[end] && data[end] <= 'z' || 'A' <= data[end] && data[end] <= 'Z') {
		return i, false
	}
	return end, true
}

// plainString returns the bytes of the string at data[i:] and the index after it, when it holds
// neither an escape nor a byte beyond ASCII: an object's keys, as fastChunk compares them.
func plainString(data []byte, i int) ([]byte, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return nil, i, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return data[i+1 : j], j + 1, true
		case c == '\\' || c < ' ' || c >= utf8.RuneSelf:
			return nil, i, false
		}
	}
	return nil, i, false
}

// scanString checks the JSON string at data[i:] as encoding/json's scanner does and returns the index
// after its closing quote, and whether it holds an escape.
func scanString(data []byte, i int) (end int, escaped bool, ok bool) {
	if i >= len(data) || data[i] != '"' {
		return i, false, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return j + 1, escaped, true
		case c < ' ':
			return i, false, false
		case c == '\\':
			escaped = true
			j++
			if j >= len(data) {
				return i, false, false
			}
			switch data[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(data) || getu4(data[j-1:]) < 0 {
					return i, false, false
				}
				j += 4
			default:
				return i, false, false
			}
		}
	}
	return i, false, false
}

// skipValue skips the JSON value at data[i:], checking it as encoding/json's scanner does, without
// recursion; it reports false past maxSkipDepth.
func skipValue(data []byte, i int) (int, bool) {
	var stack [maxSkipDepth]byte // the open containers' closing bytes
	depth := 0
	for {
		// A value.
		if i >= len(data) {
			return i, false
		}
		switch c := data[i]; {
		case c == '{' || c == '[':
			if depth == maxSkipDepth {
				return i, false
			}
			close := byte('}')
			if c == '[' {
				close = ']'
			}
			stack[depth] = close
			depth++
			i = skipSpace(data, i+1)
			if i < len(data) && data[i] == close {
				i++
				depth--
				break
			}
			if close == '}' {
				var ok bool
				if i, ok = skipKey(data, i); !ok {
					return i, false
				}
			}
			continue
		case c == '"':
			end, _, ok := scanString(data, i)
			if !ok {
				return i, false
			}
			i = end
		case c == '-' || '0' <= c && c <= '9':
			end, ok := scanNumber(data, i)
			if !ok {
				return i, false
			}
			i = end
		case c == 't':
			end, ok := literal(data, i, "true")
			if !ok {
				return i, false
			}
			i = end
		case c == 'f':
			end, ok := literal(data, i, "false")
			if !ok {
				return i, false
			}
			i = end
		case c == 'n':
			end, ok := literal(data, i, "null")
			if !ok {
				return i, false
			}
			i = end
		default:
			return i, false
		}
		// After a value: close containers, or go on to the next element.
		for {
			if depth == 0 {
				return i, true
			}
			i = skipSpace(data, i)
			if i >= len(data) {
				return i, false
			}
			if data[i] == stack[depth-1] {
				i++
				depth--
				continue
			}
			if data[i] != ',' {
				return i, false
			}
			i = skipSpace(data, i+1)
			if stack[depth-1] == '}' {
				var ok bool
				if i, ok = skipKey(data, i); !ok {
					return i, false
				}
			}
			break
		}
	}
}

// skipKey skips an object's key and its colon, and the space after them.
func skipKey(data []byte, i int) (int, bool) {
	end, _, ok := scanString(data, i)
	if !ok {
		return i, false
	}
	i = skipSpace(data, end)
	if i >= len(data) || data[i] != ':' {
		return i, false
	}
	return skipSpace(data, i+1), true
}

// scanNumber checks the JSON number at data[i:] and returns the index after it.
func scanNumber(data []byte, i int) (int, bool) {
	if data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && '1' <= data[i] && data[i] <= '9':
		for i < len(data) && '0' <= data[i] && data[i] <= '9' {
			i++
		}
	default:
		return i, false
	}
	if i < len(data) && data[i] == '.' {
		i++
		start := i
		for i < len(data) && '0' <= data[i] && data[i] <= '9' {
			i++
		}
		if i == start {
			return i, false
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		start := i
		for i < len(data) && '0' <= data[i] && data[i] <= '9' {
			i++
		}
		if i == start {
			return i, false
		}
	}
	return i, true
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// equalFoldASCII reports whether the ASCII key equals name without regard to case.
func equalFoldASCII(key []byte, name string) bool {
	if len(key) != len(name) {
		return false
	}
	for i := range len(key) {
		a, b := key[i], name[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

// unquote appends the JSON string body s (without its quotes), unescaped, to b, as encoding/json's
// unquoteBytes does: an invalid surrogate and each byte of invalid UTF-8 become U+FFFD.
func unquote(b, s []byte) ([]byte, bool) {
	for r := 0; r < len(s); {
		switch c := s[r]; {
		case c == '\\':
			r++
			if r >= len(s) {
				return b, false
			}
			switch s[r] {
			default:
				return b, false
			case '"', '\\', '/':
				b = append(b, s[r])
				r++
			case 'b':
				b = append(b, '\b')
				r++
			case 'f':
				b = append(b, '\f')
				r++
			case 'n':
				b = append(b, '\n')
				r++
			case 'r':
				b = append(b, '\r')
				r++
			case 't':
				b = append(b, '\t')
				r++
			case 'u':
				r--
				rr := getu4(s[r:])
				if rr < 0 {
					return b, false
				}
				r += 6
				if utf16.IsSurrogate(rr) {
					rr1 := getu4(s[r:])
					if dec := utf16.DecodeRune(rr, rr1); dec != unicode.ReplacementChar {
						r += 6
						b = utf8.AppendRune(b, dec)
						break
					}
					rr = unicode.ReplacementChar
				}
				b = utf8.AppendRune(b, rr)
			}
		case c == '"', c < ' ':
			return b, false
		case c < utf8.RuneSelf:
			b = append(b, c)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			r += size
			b = utf8.AppendRune(b, rr)
		}
	}
	return b, true
}

// getu4 decodes \uXXXX from the beginning of s, returning the hex value, or -1.
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c = c - '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}
