package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// emptyObject is what a call with no usable arguments reports and runs with.
var emptyObject = json.RawMessage("{}")

// maxListedErrors keeps a validation failure readable when arguments are
// wrong in many places at once.
const maxListedErrors = 20

// prepareArguments turns the model's raw arguments into the object the tool
// runs with, checked against sch. The returned arguments are set whenever an
// object could be decoded, also when the error is not nil, so the caller can
// record what the model sent.
func prepareArguments(name string, raw json.RawMessage, sch *jsonschema.Schema) (json.RawMessage, error) {
	obj, args, err := decodeObject(raw, true)
	if err != nil {
		return emptyObject, fmt.Errorf("invalid arguments for %s: %w", name, err)
	}
	verr := sch.Validate(obj)
	if verr == nil {
		return args, nil
	}
	if fixed, ok := repair(args, verr); ok && sch.Validate(fixed) == nil {
		return encode(fixed)
	}
	// The errors of the original arguments are reported, not those of the
	// repair: they describe what the model actually sent.
	return args, fmt.Errorf("invalid arguments for %s:\n%s", name, describe(verr))
}

// decodeObject decodes raw as a JSON object, returning it both as a value for
// the validator and as compact JSON that keeps the model's key order.
// Missing arguments mean none. When unwrap is set, an object encoded a
// second time as a JSON string ("{\"a\":1}") is decoded: some providers send
// the arguments that way.
func decodeObject(raw []byte, unwrap bool) (map[string]any, json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return map[string]any{}, emptyObject, nil
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, nil, fmt.Errorf("not valid JSON: %s", jsonReason(err))
	}
	if s, ok := v.(string); ok && unwrap {
		if obj, args, err := decodeObject([]byte(s), false); err == nil {
			return obj, args, nil
		}
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, nil, fmt.Errorf("the arguments must be a JSON object, not %s", jsonType(v))
	}
	if !utf8.Valid(raw) {
		// The decoder replaced the bad bytes; keep its valid version so
		// that what is stored is the JSON that was validated.
		args, err := encode(obj)
		return obj, args, err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, nil, fmt.Errorf("not valid JSON: %s", jsonReason(err))
	}
	return obj, buf.Bytes(), nil
}

// repair decodes, in a copy of args, every string that failed validation
// and holds a JSON object or array: providers often encode nested values a
// second time ({"q":"{\"a\":1}"}). Only values the schema rejected are
// touched, so a string parameter that legitimately holds JSON text stays
// as it is. It reports whether anything changed.
func repair(args json.RawMessage, verr error) (any, bool) {
	var ve *jsonschema.ValidationError
	if !errors.As(verr, &ve) {
		return nil, false
	}
	fixed, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return nil, false
	}
	changed := false
	for _, leaf := range leafErrors(ve, nil) {
		if loc := leaf.InstanceLocation; len(loc) > 0 {
			changed = decodeAt(fixed, loc) || changed
		}
	}
	return fixed, changed
}

// decodeAt replaces the string at the JSON pointer tokens loc inside doc by
// the object or array it holds, and reports whether it did.
func decodeAt(doc any, loc []string) bool {
	parent := doc
	for _, tok := range loc[:len(loc)-1] {
		if parent = child(parent, tok); parent == nil {
			return false
		}
	}
	last := loc[len(loc)-1]
	s, ok := child(parent, last).(string)
	if !ok {
		return false
	}
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "{") && !strings.HasPrefix(s, "[") {
		return false
	}
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(s))
	if err != nil {
		return false
	}
	switch p := parent.(type) {
	case map[string]any:
		p[last] = v
	case []any:
		i, _ := strconv.Atoi(last) // child has checked it
		p[i] = v
	}
	return true
}

// child returns the member tok of an object or array, or nil.
func child(v any, tok string) any {
	switch v := v.(type) {
	case map[string]any:
		return v[tok]
	case []any:
		i, err := strconv.Atoi(tok)
		if err != nil || i < 0 || i >= len(v) {
			return nil
		}
		return v[i]
	}
	return nil
}

// leafErrors collects the errors that have no causes: the concrete
// problems, each at its instance location, without the schema's grouping.
func leafErrors(ve *jsonschema.ValidationError, dst []*jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(ve.Causes) == 0 {
		return append(dst, ve)
	}
	for _, c := range ve.Causes {
		dst = leafErrors(c, dst)
	}
	return dst
}

// describe lists every problem of a failed validation on its own line,
// prefixed by the JSON pointer of the value it concerns.
func describe(verr error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(verr, &ve) {
		return verr.Error()
	}
	var lines []string
	for _, leaf := range leafErrors(ve, nil) {
		// BasicOutput of a leaf carries its message in English, without
		// the schema URL that Error() would add.
		lines = append(lines, "- "+pointer(leaf.InstanceLocation)+": "+leaf.BasicOutput().Error.String())
	}
	// The validator walks objects in map order; sorting makes the message
	// stable, and alternatives of an anyOf can repeat the same line.
	slices.Sort(lines)
	lines = slices.Compact(lines)
	if n := len(lines) - maxListedErrors; n > 0 {
		lines = append(lines[:maxListedErrors], fmt.Sprintf("- and %d more", n))
	}
	return strings.Join(lines, "\n")
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// pointer formats JSON pointer tokens; the root has the empty pointer,
// which a reader would miss, so it is named.
func pointer(loc []string) string {
	if len(loc) == 0 {
		return "(root)"
	}
	var b strings.Builder
	for _, tok := range loc {
		b.WriteByte('/')
		b.WriteString(pointerEscaper.Replace(tok))
	}
	return b.String()
}

// jsonReason is a decoding error in a few words, with the position when known.
func jsonReason(err error) string {
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return fmt.Sprintf("%s (at byte %d)", se, se.Offset)
	}
	return err.Error()
}

// jsonType names the JSON type of a decoded value.
func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case json.Number, float64:
		return "a number"
	case []any:
		return "an array"
	}
	return "an object"
}

// encode writes v as compact JSON, leaving <, > and & readable.
func encode(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return emptyObject, fmt.Errorf("encode arguments: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
