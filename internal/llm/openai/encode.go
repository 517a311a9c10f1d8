package openai

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"chatd/internal/llm"
)

// The request body is written by hand, appended to one buffer sized in advance: a session of 10,000
// records is a body of megabytes, and encoding/json would walk it by reflection through a copy of the
// conversation in wire structs, then copy the result once more. The output is what encoding/json makes
// of the Chat Completions shape (fields in the same order, strings escaped alike); TestEncodeMatchesJSON
// holds the two together.

var emptyParameters = json.RawMessage(`{"type":"object","properties":{}}`)

// appendRequest appends the Chat Completions body of req to b.
func (c *Client) appendRequest(b []byte, req *llm.Request) ([]byte, error) {
	b = append(b, `{"model":`...)
	b = appendString(b, req.Model)
	b = append(b, `,"messages":[`...)
	first := true
	if req.System != "" {
		b = append(b, `{"role":"system","content":`...)
		b = appendString(b, req.System)
		b = append(b, '}')
		first = false
	}
	for i := range req.Messages {
		if !first {
			b = append(b, ',')
		}
		first = false
		var err error
		if b, err = appendMessage(b, &req.Messages[i]); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
	}
	b = append(b, ']')
	if len(req.Tools) > 0 {
		b = append(b, `,"tools":[`...)
		for i, t := range req.Tools {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"type":"function","function":{"name":`...)
			b = appendString(b, t.Name)
			if t.Description != "" {
				b = append(b, `,"description":`...)
				b = appendString(b, t.Description)
			}
			b = append(b, `,"parameters":`...)
			params := t.InputSchema
			if len(params) == 0 {
				params = emptyParameters
			}
			var err error
			if b, err = appendCompact(b, params); err != nil {
				return nil, fmt.Errorf("tool %s: parameters: %w", t.Name, err)
			}
			b = append(b, "}}"...)
		}
		b = append(b, ']')
		if req.ToolChoice != "" {
			b = append(b, `,"tool_choice":`...)
			b = appendString(b, string(req.ToolChoice))
		}
	}
	if t := req.Temperature; t != nil {
		v, err := json.Marshal(*t) // encoding/json's float format; refuses NaN and infinities
		if err != nil {
			return nil, fmt.Errorf("temperature: %w", err)
		}
		b = append(b, `,"temperature":`...)
		b = append(b, v...)
	}
	if req.MaxTokens > 0 {
		// OpenAI's reasoning models refuse max_tokens; compatible servers often only know it.
		if c.maxCompletionTokens {
			b = append(b, `,"max_completion_tokens":`...)
		} else {
			b = append(b, `,"max_tokens":`...)
		}
		b = strconv.AppendInt(b, int64(req.MaxTokens), 10)
	}
	if r := req.Reasoning; r != nil {
		if e := effort(r); e != "" {
			b = append(b, `,"reasoning_effort":`...)
			b = appendString(b, e)
		}
	}
	return append(b, `,"stream":true,"stream_options":{"include_usage":true}}`...), nil
}

// effort is the reasoning_effort of r: its Effort, or one derived from its budget.
func effort(r *llm.Reasoning) string {
	switch {
	case r.Effort != "":
		return r.Effort
	case r.BudgetTokens == 0:
		return ""
	case r.BudgetTokens < 2048:
		return "low"
	case r.BudgetTokens < 8192:
		return "medium"
	}
	return "high"
}

func appendMessage(b []byte, m *llm.Message) ([]byte, error) {
	switch m.Role {
	case llm.RoleSystem, llm.RoleUser:
		b = append(b, `{"role":`...)
		b = appendString(b, string(m.Role))
		b = append(b, `,"content":`...)
		b = appendUserContent(b, m.Parts)
		return append(b, '}'), nil
	case llm.RoleAssistant:
		b = append(b, `{"role":"assistant","content":`...)
		// Reasoning is not sent back: Chat Completions has no field for it and DeepSeek refuses it.
		// An assistant message that only calls tools has content null.
		if hasText(m.Parts) || len(m.ToolCalls) == 0 {
			b = appendTexts(b, m.Parts)
		} else {
			b = append(b, "null"...)
		}
		if len(m.ToolCalls) > 0 {
			b = append(b, `,"tool_calls":[`...)
			for i, tc := range m.ToolCalls {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(b, `{"id":`...)
				b = appendString(b, tc.ID)
				b = append(b, `,"type":"function","function":{"name":`...)
				b = appendString(b, tc.Name)
				b = append(b, `,"arguments":`...)
				if len(tc.Arguments) == 0 {
					b = append(b, `"{}"`...)
				} else {
					b = appendString(b, tc.Arguments) // a JSON text, sent as a string
				}
				b = append(b, "}}"...)
			}
			b = append(b, ']')
		}
		return append(b, '}'), nil
	case llm.RoleTool:
		b = append(b, `{"role":"tool","content":`...)
		b = appendTexts(b, m.Parts)
		if m.ToolCallID != "" {
			b = append(b, `,"tool_call_id":`...)
			b = appendString(b, m.ToolCallID)
		}
		return append(b, '}'), nil
	}
	return nil, fmt.Errorf("unknown role %q", m.Role)
}

// appendUserContent appends a plain string for text-only content and an array of parts when images are
// present.
func appendUserContent(b []byte, parts []llm.Part) []byte {
	hasImage := false
	for _, p := range parts {
		hasImage = hasImage || p.Kind == llm.PartImage
	}
	if !hasImage {
		return appendTexts(b, parts)
	}
	b = append(b, '[')
	first := true
	for _, p := range parts {
		switch p.Kind {
		case llm.PartText:
			if !first {
				b = append(b, ',')
			}
			b = append(b, `{"type":"text"`...)
			if p.Text != "" {
				b = append(b, `,"text":`...)
				b = appendString(b, p.Text)
			}
			b = append(b, '}')
		case llm.PartImage:
			if !first {
				b = append(b, ',')
			}
			b = append(b, `{"type":"image_url","image_url":{"url":"data:`...)
			b = appendStringBody(b, p.MediaType)
			b = append(b, ";base64,"...)
			b = base64.StdEncoding.AppendEncode(b, p.Data)
			b = append(b, `"}}`...)
		default:
			continue
		}
		first = false
	}
	return append(b, ']')
}

func hasText(parts []llm.Part) bool {
	for _, p := range parts {
		if p.Kind == llm.PartText && p.Text != "" {
			return true
		}
	}
	return false
}

// appendTexts appends the text parts of parts as one JSON string.
func appendTexts(b []byte, parts []llm.Part) []byte {
	b = append(b, '"')
	for _, p := range parts {
		if p.Kind == llm.PartText {
			b = appendStringBody(b, p.Text)
		}
	}
	return append(b, '"')
}

// appendCompact appends the JSON text raw without insignificant space, as encoding/json writes a
// json.RawMessage.
func appendCompact(b []byte, raw []byte) ([]byte, error) {
	for _, c := range raw {
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '<' || c == '>' || c == '&' || c == 0xE2 {
			buf := bytes.NewBuffer(b)
			if err := json.Compact(buf, raw); err != nil {
				return nil, err
			}
			// encoding/json escapes HTML characters in a RawMessage too.
			return htmlEscapeTail(buf.Bytes(), len(b)), nil
		}
	}
	if !json.Valid(raw) {
		return nil, fmt.Errorf("invalid JSON")
	}
	return append(b, raw...), nil
}

// htmlEscapeTail escapes <, >, & and U+2028/U+2029 in b[from:], which holds compact JSON.
func htmlEscapeTail(b []byte, from int) []byte {
	tail := string(b[from:])
	b = b[:from]
	start := 0
	for i := 0; i < len(tail); i++ {
		c := tail[i]
		if c == '<' || c == '>' || c == '&' {
			b = append(b, tail[start:i]...)
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			start = i + 1
		}
		if c == 0xE2 && i+2 < len(tail) && tail[i+1] == 0x80 && tail[i+2]&^1 == 0xA8 {
			b = append(b, tail[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[tail[i+2]&0xF])
			start = i + 3
		}
	}
	return append(b, tail[start:]...)
}

const hex = "0123456789abcdef"

// appendString appends s as a JSON string, escaped as encoding/json escapes it (HTML characters too).
func appendString[S ~[]byte | ~string](b []byte, s S) []byte {
	b = append(b, '"')
	b = appendStringBody(b, s)
	return append(b, '"')
}

// appendStringBody appends s escaped, without the quotes.
func appendStringBody[S ~[]byte | ~string](b []byte, s S) []byte {
	start := 0
	for i := 0; i < len(s); {
		// Eight bytes at a time while none needs a look of its own.
		for i+8 <= len(s) && plain8(uint64(s[i])|uint64(s[i+1])<<8|uint64(s[i+2])<<16|uint64(s[i+3])<<24|
			uint64(s[i+4])<<32|uint64(s[i+5])<<40|uint64(s[i+6])<<48|uint64(s[i+7])<<56) {
			i += 8
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if safe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default: // other control characters, and <, > and &
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		n := min(len(s)-i, utf8.UTFMax)
		r, size := utf8.DecodeRuneInString(string(s[i : i+n]))
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(b, s[start:]...)
}

// plain8 reports whether the eight bytes of x are all safe: none is 0x80 or above, a control character,
// or one of " \\ < > &. A control character is a byte with neither 0x20 nor 0x40 set. zero(v) sets the high
// bit of some byte when a byte of v is zero (of the lowest such byte at least), and of none otherwise.
func plain8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	zero := func(v uint64) uint64 { return (v - ones) &^ v }
	return (x|zero(x&(0x60*ones))|
		zero(x^('"'*ones))|zero(x^('\\'*ones))|zero(x^('<'*ones))|zero(x^('>'*ones))|zero(x^('&'*ones)))&highs == 0
}

// safe holds the ASCII bytes a JSON string holds as they are: not control characters, quote,
// backslash, or the HTML characters encoding/json escapes.
var safe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// requestSize estimates the length of req's body, to allocate it once.
func requestSize(req *llm.Request) int {
	n := 256 + len(req.Model) + len(req.System)
	for i := range req.Messages {
		m := &req.Messages[i]
		n += 48 + len(m.ToolCallID)
		for _, p := range m.Parts {
			n += len(p.Text) + len(p.Data)*4/3 + 16
		}
		for _, tc := range m.ToolCalls {
			n += 80 + len(tc.ID) + len(tc.Name) + len(tc.Arguments)*5/4
		}
	}
	for _, t := range req.Tools {
		n += 64 + len(t.Name) + len(t.Description) + len(t.InputSchema)
	}
	return n + n/16
}
