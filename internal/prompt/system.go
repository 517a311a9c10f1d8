package prompt

import (
	"encoding/json"
	"slices"
	"strings"

	"chatd/internal/llm"
	"chatd/internal/store"
)

// Sections are the parts of a system prompt, in the order they are assembled: who the
// assistant is, the state of the application the user is in, the payloads earlier turns produced, what
// the assistant can do, the instructions of this deployment, and how to answer. Each is left out when
// empty.
type Sections struct {
	Identity     string
	Context      map[string]any // the request's context object
	Payloads     []Payload
	Tools        []llm.ToolSpec
	Instructions string
	Guidelines   string
}

// Payload is one entry of the payload manifest: structured data an earlier tool call returned, which the
// user sees and may refer to.
type Payload struct {
	ID      string // the tool record's id
	Tool    string
	Summary string
}

// maxManifest is how many payloads the manifest lists, the latest.
const maxManifest = 20

// System assembles the system prompt.
func System(s Sections) string {
	var sb strings.Builder
	section := func(heading, body string) {
		body = strings.TrimSpace(body)
		if body == "" {
			return
		}
		if sb.Len() > 0 {
			sb.WriteString("\n\n")
		}
		if heading != "" {
			sb.WriteString("# ")
			sb.WriteString(heading)
			sb.WriteString("\n")
		}
		sb.WriteString(body)
	}
	section("", s.Identity)
	section("Context", renderContext(s.Context))
	section("Payloads", renderPayloads(s.Payloads))
	section("Capabilities", renderTools(s.Tools))
	section("Instructions", s.Instructions)
	section("Guidelines", s.Guidelines)
	return sb.String()
}

func renderContext(v map[string]any) string {
	if len(v) == 0 {
		return ""
	}
	b, err := json.MarshalIndent(v, "", "  ") // object keys come out sorted: the same context, the same prompt
	if err != nil {
		return ""
	}
	return "The user is working in an application; its current state, as JSON:\n" + string(b)
}

func renderPayloads(ps []Payload) string {
	if len(ps) == 0 {
		return ""
	}
	if len(ps) > maxManifest {
		ps = ps[len(ps)-maxManifest:]
	}
	var sb strings.Builder
	sb.WriteString("Earlier tool calls in this conversation returned structured data the user can see (payloads):")
	for _, p := range ps {
		sb.WriteString("\n- ")
		sb.WriteString(p.ID)
		sb.WriteString(" from ")
		sb.WriteString(p.Tool)
		if p.Summary != "" {
			sb.WriteString(": ")
			sb.WriteString(p.Summary)
		}
	}
	return sb.String()
}

func renderTools(specs []llm.ToolSpec) string {
	if len(specs) == 0 {
		return ""
	}
	var sb strings.Builder
	sb.WriteString("You can call these tools when they help answer the user:")
	for _, t := range specs {
		sb.WriteString("\n- ")
		sb.WriteString(t.Name)
		if d := firstSentence(t.Description); d != "" {
			sb.WriteString(": ")
			sb.WriteString(d)
		}
	}
	return sb.String()
}

func firstSentence(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if i := strings.Index(s, ". "); i >= 0 {
		s = s[:i+1]
	}
	if len(s) > 200 {
		s = strings.TrimSpace(string(cutBytes([]byte(s), 200)))
	}
	return s
}

// Manifest lists the payloads of the tool records among records, oldest first: the latest maxManifest.
func Manifest(records []store.Record) []Payload {
	var out []Payload
	for i := len(records) - 1; i >= 0 && len(out) < maxManifest; i-- {
		r := &records[i]
		if r.Role != store.RoleTool || len(r.Payload) == 0 {
			continue
		}
		out = append(out, Payload{ID: r.ID, Tool: r.Name, Summary: describeJSON(r.Payload)})
	}
	slices.Reverse(out)
	return out
}

// describeJSON says what a payload holds: "an object with keys a, b, c", "a list of 12 items".
func describeJSON(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return ""
	}
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if len(keys) > 8 {
			keys = append(keys[:8], "…")
		}
		return "an object with keys " + strings.Join(keys, ", ")
	case []any:
		return "a list of " + plural(len(v), "item")
	case string:
		return "a string"
	default:
		return "a value"
	}
}
