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
)

// bodyTimeout bounds the reading of a request body.
const bodyTimeout = time.Minute

// decode reads a JSON object body into v, within the body limit. A body declared as anything but JSON
// is refused: browsers send text/plain and form types cross-site without asking first.
func (s *server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	return s.decodeLimit(w, r, v, s.MaxBodyBytes)
}

// decodeLimit is decode with a body limit of its own.
func (s *server) decodeLimit(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return &apiError{status: http.StatusUnsupportedMediaType, code: "unsupported_media_type",
				message: "send the body as JSON with Content-Type: application/json"}
		}
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
	if dec.More() {
		return badJSON("the request body holds more than one JSON value")
	}
	return nil
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
