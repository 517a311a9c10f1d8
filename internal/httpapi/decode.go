package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// bodyTimeout bounds the reading of a request body.
const bodyTimeout = time.Minute

// decode reads a JSON object body into v, within the body limit. A body not declared as JSON is refused
// (415), and so is one that is not UTF-8 text (400 invalid_utf8).
func (s *server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	return s.decodeLimit(w, r, v, s.MaxBodyBytes)
}

// decodeLimit is decode with a body limit of its own.
func (s *server) decodeLimit(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	if err := checkJSONType(r.Header.Get("Content-Type")); err != nil {
		return err
	}
	// The server has no read timeout (streams outlive any), so the body gets its own deadline.
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(bodyTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	rc.SetReadDeadline(time.Time{})
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return err
		}
		return &apiError{status: http.StatusBadRequest, code: "bad_body", message: "the request body could not be read"}
	}
	// encoding/json would turn invalid UTF-8 into U+FFFD without a word: refuse it instead.
	if !utf8.Valid(body) {
		return invalidUTF8(fmt.Sprintf("the request body is not valid UTF-8 (at byte %d)", invalidUTF8At(body)))
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return badJSON("the request body is empty; send a JSON object")
	}
	if trimmed[0] != '{' {
		return badJSON("the request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if err := dec.Decode(v); err != nil {
		return badJSON(describeJSONError(err, trimmed))
	}
	// dec.More is false before a stray '}' or ']': anything but space after the value is refused.
	if len(bytes.TrimSpace(trimmed[dec.InputOffset():])) > 0 {
		return badJSON(fmt.Sprintf("the request body holds more than one JSON value, or something else after its object (at byte %d)", dec.InputOffset()))
	}
	// The value is valid JSON, so every backslash in it begins an escape; a lone surrogate escape would
	// be decoded as U+FFFD too.
	value := trimmed[:dec.InputOffset()]
	if hasSurrogateEscape(value) {
		if i := loneSurrogate(value); i >= 0 {
			at := len(body) - len(bytes.TrimLeftFunc(body, unicode.IsSpace)) + i
			return invalidUTF8(fmt.Sprintf("the request body is not valid UTF-8: the escape %s (at byte %d) is half of a UTF-16 surrogate pair without the other half", value[i:i+6], at))
		}
	}
	return nil
}

// checkJSONType refuses a body not declared as JSON: browsers send text/plain and form types cross-site
// without asking first, and a client that declares nothing may not be sending JSON at all.
func checkJSONType(ct string) error {
	if ct == "" {
		return &apiError{status: http.StatusUnsupportedMediaType, code: "unsupported_media_type",
			message: "the request has no Content-Type; send the body as JSON with Content-Type: application/json"}
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return &apiError{status: http.StatusUnsupportedMediaType, code: "unsupported_media_type",
			message: "send the body as JSON with Content-Type: application/json"}
	}
	return nil
}

func invalidUTF8(msg string) error {
	return &apiError{status: http.StatusBadRequest, code: "invalid_utf8", message: msg + "; send text as UTF-8"}
}

// invalidUTF8At returns the offset of the first byte of b that is not part of a valid UTF-8 character,
// or -1.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// hasSurrogateEscape reports whether b holds `\u` followed by d or D: the cheap test before loneSurrogate.
func hasSurrogateEscape(b []byte) bool {
	for {
		i := bytes.IndexByte(b, '\\')
		if i < 0 || i+2 >= len(b) {
			return false
		}
		if b[i+1] == 'u' && (b[i+2] == 'd' || b[i+2] == 'D') {
			return true
		}
		b = b[i+1:]
	}
}

// loneSurrogate returns the offset in b, a valid JSON value, of the first \uD800–\uDFFF escape that is not
// half of a pair (a high surrogate followed by a low one), or -1.
func loneSurrogate(b []byte) int {
	for i := 0; i < len(b); {
		j := bytes.IndexByte(b[i:], '\\')
		if j < 0 || i+j+1 >= len(b) {
			return -1
		}
		i += j
		if b[i+1] != 'u' {
			i += 2 // \" \\ \/ \b \f \n \r \t
			continue
		}
		r := hex4(b[i+2:])
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				if lo := hex4(b[i+8:]); lo >= 0xDC00 && lo < 0xE000 {
					i += 12
					continue
				}
			}
			return i
		case r >= 0xDC00 && r < 0xE000:
			return i
		}
		i += 6
	}
	return -1
}

// hex4 returns the value of the four hex digits that begin b, or -1.
func hex4(b []byte) int {
	if len(b) < 4 {
		return -1
	}
	n := 0
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		n = n<<4 | int(c)
	}
	return n
}

func badJSON(msg string) error {
	return &apiError{status: http.StatusBadRequest, code: "invalid_json", message: msg}
}

// describeJSONError says where and why a body is not the JSON expected.
func describeJSONError(err error, body []byte) string {
	if e, ok := errors.AsType[*json.SyntaxError](err); ok {
		return fmt.Sprintf("the request body is not valid JSON: %s (at byte %d)", e.Error(), e.Offset)
	}
	if e, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		field := e.Field
		if field == "" {
			field = "(root)"
		}
		return fmt.Sprintf("field %q must be %s, not %s", field, jsonKind(e.Type.Kind().String()), e.Value)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "the request body is not valid JSON: it ends too early"
	}
	return "the request body is not valid JSON: " + err.Error()
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	case "bool":
		return "a boolean"
	case "ptr":
		return "a value of another type"
	}
	return "a number"
}

// decodeBase64 accepts attachment data as standard or URL-safe base64, padded or not, or as a data URL.
func decodeBase64(s string) ([]byte, error) {
	if i := bytes.IndexByte([]byte(s), ','); len(s) > 5 && s[:5] == "data:" && i > 0 {
		s = s[i+1:]
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
