package marker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits of suggestions: an answer offers a few buttons, each with a short label. ParseValues and
// ParseActions check the lengths; the count is for their caller, which keeps the first MaxSuggestions
// of an answer's values (and of its actions) however many blocks they came in.
const (
	MaxSuggestions = 20
	MaxLabelBytes  = 200
	MaxValueBytes  = 4 << 10
)

// Value is a suggested value: a button that sends Value as the user's next message.
type Value struct {
	Label string `json:"label"`
	Value string `json:"value"`
}

// Action is a suggested action: a button that does Action. With Handler "client" the client acts on
// it (Data is for the client); with "server" Action names a tool chatd runs with Data as its arguments.
type Action struct {
	Label   string          `json:"label"`
	Action  string          `json:"action"`
	Handler string          `json:"handler"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// Handlers of an Action.
const (
	HandlerClient = "client"
	HandlerServer = "server"
)

// ParseValues reads a SUGGESTED_VALUES block: a JSON array of {"label","value"} objects or of strings
// (each both label and value). A value without a label is its own label, and the reverse. Other fields
// of an object are ignored. One value that is not right drops the block.
func ParseValues(raw json.RawMessage) ([]Value, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, errors.New("is not a JSON array")
	}
	out := make([]Value, 0, len(items))
	for i, it := range items {
		var v Value
		if s, ok := asString(it); ok {
			v = Value{Label: s, Value: s}
		} else if err := json.Unmarshal(it, &v); err != nil {
			return nil, fmt.Errorf("value %d is neither a string nor an object of strings {\"label\",\"value\"}", i)
		}
		if v.Label == "" {
			v.Label = v.Value
		}
		if v.Value == "" {
			v.Value = v.Label
		}
		if err := checkText(v.Label, MaxLabelBytes); err != nil {
			return nil, fmt.Errorf("value %d: label %w", i, err)
		}
		if err := checkText(v.Value, MaxValueBytes); err != nil {
			return nil, fmt.Errorf("value %d: value %w", i, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// ParseActions reads a SUGGESTED_ACTIONS block: a JSON array of {"label","action","handler","data"}
// objects. Handler is "client" (the default) or "server"; a server action's data, when present, is a
// JSON object (its tool's arguments). Other fields of an action are ignored: what a client needs beyond
// label and action goes in data. One action that is not right drops the block.
func ParseActions(raw json.RawMessage) ([]Action, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, errors.New("is not a JSON array")
	}
	out := make([]Action, 0, len(items))
	for i, it := range items {
		var a Action
		if err := json.Unmarshal(it, &a); err != nil {
			return nil, fmt.Errorf("action %d is not an object {\"label\",\"action\",\"handler\",\"data\"} of strings (and data)", i)
		}
		if a.Handler == "" {
			a.Handler = HandlerClient
		}
		switch {
		case a.Handler != HandlerClient && a.Handler != HandlerServer:
			return nil, fmt.Errorf("action %d: handler %q is neither client nor server", i, a.Handler)
		case a.Action == "":
			return nil, fmt.Errorf("action %d has no action", i)
		case a.Label == "":
			a.Label = a.Action
		}
		if err := checkText(a.Label, MaxLabelBytes); err != nil {
			return nil, fmt.Errorf("action %d: label %w", i, err)
		}
		if err := checkText(a.Action, MaxLabelBytes); err != nil {
			return nil, fmt.Errorf("action %d: action %w", i, err)
		}
		if a.Handler == HandlerServer && len(a.Data) > 0 && !bytes.HasPrefix(bytes.TrimSpace(a.Data), []byte("{")) &&
			string(bytes.TrimSpace(a.Data)) != "null" {
			return nil, fmt.Errorf("action %d: a server action's data must be a JSON object (its tool's arguments)", i)
		}
		if string(bytes.TrimSpace(a.Data)) == "null" {
			a.Data = nil
		}
		if a.Data != nil {
			var buf bytes.Buffer
			if err := json.Compact(&buf, a.Data); err == nil {
				a.Data = buf.Bytes()
			}
		}
		out = append(out, a)
	}
	return out, nil
}

func asString(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

func checkText(s string, max int) error {
	switch {
	case strings.TrimSpace(s) == "":
		return errors.New("is empty")
	case len(s) > max:
		return fmt.Errorf("is longer than %d bytes", max)
	case !utf8.ValidString(s):
		return errors.New("is not valid UTF-8")
	}
	return nil
}
