package store

import (
	"encoding/json"
	"strconv"
)

// DecodeUsage sets u from s, a stored usage column: what json.Marshal wrote of a Usage, an object of
// integer fields (the fast path also takes JSON's spaces between them). Those are read by hand, since a
// history read decodes one a turn; anything else (an unknown key, a float, an escape, a null) goes to
// encoding/json, so the result is always json.Unmarshal's.
func DecodeUsage(s string, u *Usage) error {
	if fastUsage(s, u) {
		return nil
	}
	*u = Usage{}
	return json.Unmarshal([]byte(s), u)
}

// fastUsage reads b as {"key": integer, …} with the keys of Usage, each at most once, and reports
// whether it could; u is not to be used when it could not.
func fastUsage(b string, u *Usage) bool {
	*u = Usage{}
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	var seen uint8
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		end := i + 1
		for end < len(b) && b[end] != '"' && b[end] != '\\' {
			end++
		}
		if end >= len(b) || b[end] != '"' {
			return false
		}
		key := b[i+1 : end]
		var field *int64
		var bit uint8
		switch key {
		case "input_tokens":
			field, bit = &u.InputTokens, 1
		case "output_tokens":
			field, bit = &u.OutputTokens, 2
		case "cache_read_tokens":
			field, bit = &u.CacheReadTokens, 4
		case "cache_write_tokens":
			field, bit = &u.CacheWriteTokens, 8
		case "reasoning_tokens":
			field, bit = &u.ReasoningTokens, 16
		default:
			return false
		}
		if seen&bit != 0 {
			return false // encoding/json keeps the last of duplicates; leave that to it
		}
		seen |= bit
		i = skipSpace(b, end+1)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		start := i
		if i < len(b) && b[i] == '-' {
			i++
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		num := b[start:i]
		// JSON integers only: no leading zero (but 0 itself), no fraction or exponent.
		if len(num) == 0 || num[len(num)-1] == '-' || (len(num) > 1 && num[0] == '0') ||
			(len(num) > 2 && num[0] == '-' && num[1] == '0') {
			return false
		}
		v, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return false
		}
		*field = v
		i = skipSpace(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

func skipSpace(b string, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
