package mcpclient

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp/syntax"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"chatd/internal/tool"
)

// A server's requested schema is taken only in MCP's flat form subset: an object whose properties are
// strings, numbers, integers, booleans or arrays of enum strings, each with the few keywords the
// specification names. Anything else is refused with an error to the server, before anyone is asked:
// the SDK checks only a schema's type and properties, and a schema it lets through with a $ref cycle
// ({"$ref":"#"}, a $defs loop, an allOf of itself) makes the validator recurse until the stack
// overflows, which kills the process — chatd's check of the answer, or the SDK's own after it. The
// schema chatd checks an answer with is built from the keywords it read, not from the server's JSON.

// Limits of a property's pattern: compiling it costs memory and time in its size with its repeats
// unrolled ("[a-z]{1000}" is a thousand instructions), and a server is not trusted to be reasonable.
const (
	maxPattern       = 512  // bytes
	maxPatternRepeat = 100  // the largest count of a repeat ({n}, {n,m})
	maxPatternSize   = 2000 // its size with repeats unrolled, about its compiled instructions
)

// The keywords chatd takes: at the root, in a property, in an array property's items, in a titled
// choice ({"const": value, "title": label}).
var (
	rootKeywords     = []string{"$schema", "description", "properties", "required", "title", "type"}
	propertyKeywords = []string{"anyOf", "default", "description", "enum", "enumNames", "format", "items", "maxItems", "maxLength",
		"maximum", "minItems", "minLength", "minimum", "multipleOf", "oneOf", "pattern", "title", "type", "uniqueItems"}
	itemsKeywords  = []string{"anyOf", "enum", "type"}
	choiceKeywords = []string{"const", "title"}
)

// formSubset says what chatd takes, for the errors that refuse a schema.
const formSubset = "chatd takes MCP's flat form schemas only: an object whose properties are strings, numbers, integers, booleans or arrays of enum strings"

// formOf reads a requested schema in the flat form subset, and returns the schema built from what it
// read. It compiles nothing: a pattern is parsed, and refused over the limits above.
func formOf(raw json.RawMessage) (*jsonschema.Schema, error) {
	root, err := keywords(raw, rootKeywords, "the elicitation's requestedSchema")
	if err != nil {
		return nil, err
	}
	s := &jsonschema.Schema{Type: "object"}
	var typ string
	if err := keyword(root, "type", &typ); err != nil {
		return nil, err
	}
	if typ != "" && typ != "object" {
		return nil, fmt.Errorf("the elicitation's requestedSchema is of type %q; %s", typ, formSubset)
	}
	var props map[string]json.RawMessage
	if err := keyword(root, "properties", &props); err != nil {
		return nil, err
	}
	if n := len(props); n > tool.MaxQuestionFields {
		return nil, fmt.Errorf("the elicitation asks for %d fields; chatd takes at most %d", n, tool.MaxQuestionFields)
	}
	if err := keyword(root, "$schema", &s.Schema); err != nil {
		return nil, err
	}
	if err := keyword(root, "required", &s.Required); err != nil {
		return nil, err
	}
	s.Properties = make(map[string]*jsonschema.Schema, len(props))
	for _, name := range slices.Sorted(maps.Keys(props)) {
		if s.Properties[name], err = fieldSchema(name, props[name]); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// fieldSchema reads one property.
func fieldSchema(name string, raw json.RawMessage) (*jsonschema.Schema, error) {
	what := fmt.Sprintf("the elicitation's field %q", name)
	p, err := keywords(raw, propertyKeywords, what)
	if err != nil {
		return nil, err
	}
	s := &jsonschema.Schema{}
	var enum, enumNames []string
	for key, v := range map[string]any{"type": &s.Type, "title": &s.Title, "description": &s.Description, "default": &s.Default,
		"enum": &enum, "enumNames": &enumNames, "format": &s.Format, "pattern": &s.Pattern, "minLength": &s.MinLength,
		"maxLength": &s.MaxLength, "minimum": &s.Minimum, "maximum": &s.Maximum, "multipleOf": &s.MultipleOf,
		"minItems": &s.MinItems, "maxItems": &s.MaxItems, "uniqueItems": &s.UniqueItems} {
		if err := keyword(p, key, v); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	switch s.Type {
	case "string", "number", "integer", "boolean", "array":
	default:
		return nil, fmt.Errorf("%s has type %q; %s", what, s.Type, formSubset)
	}
	if s.MultipleOf != nil && *s.MultipleOf <= 0 {
		return nil, fmt.Errorf("%s has multipleOf %v; it must be over 0", what, *s.MultipleOf)
	}
	s.Enum = strings2any(enum)
	if s.OneOf, err = choiceSchemas(p, "oneOf", what); err != nil {
		return nil, err
	}
	if s.AnyOf, err = choiceSchemas(p, "anyOf", what); err != nil {
		return nil, err
	}
	n := len(s.Enum) + len(s.OneOf) + len(s.AnyOf)
	if items, ok := p["items"]; ok {
		if s.Items, err = itemsSchema(items, what); err != nil {
			return nil, err
		}
		n += len(s.Items.Enum) + len(s.Items.AnyOf)
	}
	if s.Type == "array" && s.Items == nil {
		return nil, fmt.Errorf("%s is an array without items; %s", what, formSubset)
	}
	if n > tool.MaxQuestionChoices {
		return nil, fmt.Errorf("%s has %d choices; chatd takes at most %d", what, n, tool.MaxQuestionChoices)
	}
	if err := checkPattern(s.Pattern); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return s, nil
}

// itemsSchema reads an array property's items: enum strings, or titled choices (anyOf).
func itemsSchema(raw json.RawMessage, what string) (*jsonschema.Schema, error) {
	what += "'s items"
	p, err := keywords(raw, itemsKeywords, what)
	if err != nil {
		return nil, err
	}
	s := &jsonschema.Schema{}
	var enum []string
	if err := keyword(p, "type", &s.Type); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := keyword(p, "enum", &enum); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if s.Type != "" && s.Type != "string" {
		return nil, fmt.Errorf("%s have type %q; %s", what, s.Type, formSubset)
	}
	s.Enum = strings2any(enum)
	if s.AnyOf, err = choiceSchemas(p, "anyOf", what); err != nil {
		return nil, err
	}
	return s, nil
}

// choiceSchemas reads a property's titled choices under key (oneOf or anyOf).
func choiceSchemas(p map[string]json.RawMessage, key, what string) ([]*jsonschema.Schema, error) {
	var raws []json.RawMessage
	if err := keyword(p, key, &raws); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if len(raws) > tool.MaxQuestionChoices {
		return nil, fmt.Errorf("%s has %d choices; chatd takes at most %d", what, len(raws), tool.MaxQuestionChoices)
	}
	var out []*jsonschema.Schema
	for _, raw := range raws {
		c, err := keywords(raw, choiceKeywords, what+"'s "+key)
		if err != nil {
			return nil, err
		}
		var value, title string
		if err := keyword(c, "const", &value); err != nil {
			return nil, fmt.Errorf("%s's %s: %w", what, key, err)
		}
		if err := keyword(c, "title", &title); err != nil {
			return nil, fmt.Errorf("%s's %s: %w", what, key, err)
		}
		v := any(value)
		out = append(out, &jsonschema.Schema{Const: &v, Title: title})
	}
	return out, nil
}

// keywords reads a JSON object and refuses any key outside allowed.
func keywords(raw json.RawMessage, allowed []string, what string) (map[string]json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("%s is not a JSON object; %s", what, formSubset)
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if !slices.Contains(allowed, k) {
			return nil, fmt.Errorf("%s has %q, which chatd does not take (it takes %s); %s", what, k, strings.Join(allowed, ", "), formSubset)
		}
	}
	return obj, nil
}

// keyword decodes obj's key, when it has it, into v.
func keyword(obj map[string]json.RawMessage, key string, v any) error {
	raw, ok := obj[key]
	if !ok || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("keyword %q: %w", key, err)
	}
	return nil
}

// checkPattern refuses a pattern that does not parse (as regexp.Compile parses it), or is over the
// limits.
func checkPattern(pattern string) error {
	if pattern == "" {
		return nil
	}
	if len(pattern) > maxPattern {
		return fmt.Errorf("its pattern is %d bytes; chatd takes at most %d", len(pattern), maxPattern)
	}
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return fmt.Errorf("its pattern is not a regular expression: %w", err)
	}
	if n := patternSize(re); n > maxPatternSize {
		return fmt.Errorf("its pattern unrolls to about %d steps; chatd takes at most %d (at most %d repeats each)", n, maxPatternSize, maxPatternRepeat)
	}
	return nil
}

// patternSize is re's size with its repeats unrolled; a repeat's count over maxPatternRepeat counts as
// over maxPatternSize.
func patternSize(re *syntax.Regexp) int {
	n := 1
	for _, sub := range re.Sub {
		n += patternSize(sub)
	}
	if re.Op == syntax.OpRepeat {
		count := max(re.Min, re.Max)
		if count > maxPatternRepeat {
			return maxPatternSize + 1
		}
		n = 1 + max(count, 1)*(n-1)
	}
	return min(n, maxPatternSize+1)
}

func strings2any(ss []string) []any {
	if ss == nil {
		return nil
	}
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
