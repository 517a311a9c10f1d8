package chat

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/marker"
	"chatd/internal/store"
	"chatd/internal/tool"
)

// PayloadType is a kind of structured data an agent's answers may carry (seed 003): the model writes
// its Marker at the start of a line, then the data as JSON; chatd takes the block out of the text,
// checks the data against Schema, and stores and sends it as a payload.
type PayloadType struct {
	Name   string // e.g. schema_proposal
	Marker string // e.g. SCHEMA_PROPOSAL:
	// Schema is the JSON Schema the data must match; nil: any JSON object or array.
	Schema json.RawMessage
	// Instructions tell the model when and how to write the block; they go into the system prompt.
	Instructions string
	// Page, Tab and Subtab bind the type to a request context, as tool scopes do: the type is offered
	// (and its marker parsed) only when the context's page (and tab, and subtab, when set) match.
	// All empty: everywhere.
	Page, Tab, Subtab string
}

// payloadType is a PayloadType with its schema compiled.
type payloadType struct {
	PayloadType
	schema *jsonschema.Schema
}

var markerPattern = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,62}:$`)

// CheckPayloadTypes reports the first payload type of an agent that cannot work: a name missing or
// repeated, a marker that is not upper-case letters, digits and _ ending in ":" (or is one of the
// standard ones, or repeated), a schema that does not compile, a tab without its page.
func CheckPayloadTypes(types []PayloadType) error {
	_, err := compilePayloadTypes(types)
	return err
}

func compilePayloadTypes(types []PayloadType) ([]payloadType, error) {
	var out []payloadType
	names, markers := map[string]bool{}, map[string]bool{marker.SuggestedValues: true, marker.SuggestedActions: true}
	for _, t := range types {
		switch {
		case t.Name == "" || strings.TrimSpace(t.Name) != t.Name || len(t.Name) > 64:
			return nil, fmt.Errorf("payload type %q: a name is required (at most 64 characters, no surrounding spaces)", t.Name)
		case names[t.Name]:
			return nil, fmt.Errorf("payload type %q is defined twice", t.Name)
		case !markerPattern.MatchString(t.Marker):
			return nil, fmt.Errorf("payload type %q: marker %q must be upper-case letters, digits and _, ending in \":\" (e.g. SCHEMA_PROPOSAL:)", t.Name, t.Marker)
		case markers[t.Marker]:
			return nil, fmt.Errorf("payload type %q: marker %q is taken", t.Name, t.Marker)
		case (t.Tab != "" && t.Page == "") || (t.Subtab != "" && t.Tab == ""):
			return nil, fmt.Errorf("payload type %q: a tab needs its page, a subtab its tab", t.Name)
		}
		names[t.Name], markers[t.Marker] = true, true
		pt := payloadType{PayloadType: t}
		if len(t.Schema) > 0 {
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(t.Schema))
			if err != nil {
				return nil, fmt.Errorf("payload type %q: schema: %w", t.Name, err)
			}
			c := jsonschema.NewCompiler()
			c.UseLoader(denyLoader{}) // a schema refers to nothing outside itself
			url := "chatd:payload/" + t.Name
			if err := c.AddResource(url, doc); err != nil {
				return nil, fmt.Errorf("payload type %q: schema: %w", t.Name, err)
			}
			if pt.schema, err = c.Compile(url); err != nil {
				return nil, fmt.Errorf("payload type %q: schema: %w", t.Name, err)
			}
		}
		out = append(out, pt)
	}
	return out, nil
}

type denyLoader struct{}

func (denyLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("a payload schema may not refer to %s", url)
}

// active reports whether the type is offered in the request context reqCtx.
func (t *PayloadType) active(reqCtx map[string]any) bool {
	for _, kv := range [][2]string{{"page", t.Page}, {"tab", t.Tab}, {"subtab", t.Subtab}} {
		if kv[1] == "" {
			return true
		}
		if v, _ := reqCtx[kv[0]].(string); v != kv[1] {
			return false
		}
	}
	return true
}

// activePayloadTypes returns the agent's payload types offered in reqCtx.
func activePayloadTypes(types []payloadType, reqCtx map[string]any) []payloadType {
	var out []payloadType
	for _, t := range types {
		if t.active(reqCtx) {
			out = append(out, t)
		}
	}
	return out
}

// answerParser parses the marked blocks out of a run's answers: the markers of its payload types.
type answerParser struct {
	types    []payloadType
	markers  []string
	maxBlock int
}

func newAnswerParser(types []payloadType, maxBlock int) *answerParser {
	p := &answerParser{types: types, maxBlock: maxBlock}
	for _, t := range types {
		p.markers = append(p.markers, t.Marker)
	}
	return p
}

func (p *answerParser) splitter() *marker.Splitter { return marker.New(p.markers, p.maxBlock) }

// maxAnswerPayloads is how many marker payloads one answer keeps, as it keeps marker.MaxSuggestions
// values and actions.
const maxAnswerPayloads = 20

// parse sets rec's content from text: the text without its marked blocks, and what they held. A block
// that is not valid is dropped, and a note logged; so are the values, actions and payload blocks past
// the first 20 of each.
func (p *answerParser) parse(text string, rec *store.Record, note func(marker, reason string)) {
	clean, blocks, notes := marker.Split(text, p.markers, p.maxBlock)
	rec.Content = clean
	if clean != text {
		rec.RawContent = text
	}
	for _, n := range notes {
		note(n.Marker, n.Reason)
	}
	var values []marker.Value
	var actions []marker.Action
	extra := 0 // payload blocks past the first maxAnswerPayloads
	for _, b := range blocks {
		switch b.Marker {
		case marker.SuggestedValues:
			vs, err := marker.ParseValues(b.JSON)
			if err != nil {
				note(b.Marker, err.Error())
				continue
			}
			values = append(values, vs...)
		case marker.SuggestedActions:
			as, err := marker.ParseActions(b.JSON)
			if err != nil {
				note(b.Marker, err.Error())
				continue
			}
			actions = append(actions, as...)
		default:
			if len(rec.Payloads) == maxAnswerPayloads {
				extra++
				continue
			}
			pl, err := p.payload(b)
			if err != nil {
				note(b.Marker, err.Error())
				continue
			}
			rec.Payloads = append(rec.Payloads, pl)
		}
	}
	if len(values) > marker.MaxSuggestions {
		note(marker.SuggestedValues, fmt.Sprintf("gave %d values; the first %d are kept", len(values), marker.MaxSuggestions))
		values = values[:marker.MaxSuggestions]
	}
	if len(actions) > marker.MaxSuggestions {
		note(marker.SuggestedActions, fmt.Sprintf("gave %d actions; the first %d are kept", len(actions), marker.MaxSuggestions))
		actions = actions[:marker.MaxSuggestions]
	}
	if extra > 0 {
		note("payload markers", fmt.Sprintf("gave %d more payload blocks; the first %d are kept", extra, maxAnswerPayloads))
	}
	if len(values) > 0 {
		rec.SuggestedValues, _ = json.Marshal(values)
	}
	if len(actions) > 0 {
		rec.SuggestedActions, _ = json.Marshal(actions)
	}
}

// payload makes a stored payload of a block of one of the types.
func (p *answerParser) payload(b marker.Block) (store.Payload, error) {
	i := slices.IndexFunc(p.types, func(t payloadType) bool { return t.Marker == b.Marker })
	if i < 0 {
		return store.Payload{}, fmt.Errorf("is not a marker of this agent")
	}
	t := p.types[i]
	if t.schema != nil {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b.JSON))
		if err != nil {
			return store.Payload{}, fmt.Errorf("has invalid JSON: %w", err)
		}
		if err := t.schema.Validate(v); err != nil {
			return store.Payload{}, fmt.Errorf("does not match the schema of %s: %s", t.Name, oneLine(err.Error()))
		}
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b.JSON); err != nil {
		return store.Payload{}, fmt.Errorf("has invalid JSON: %w", err)
	}
	data := json.RawMessage(buf.Bytes())
	return store.Payload{ID: newPayloadID(), Type: t.Name, Summary: t.Name + ": " + store.DescribeJSON(data), Data: data,
		Source: store.PayloadMarker}, nil
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// newPayloadID is a marker payload's id, in the shape of store.PayloadID's.
func newPayloadID() string {
	var b [5]byte
	rand.Read(b[:])
	return "pl_" + hex.EncodeToString(b[:])
}

// hasPayloads reports whether any of records carries a payload.
func hasPayloads(records []store.Record) bool {
	return slices.ContainsFunc(records, func(r store.Record) bool { return store.CountPayloads(&r) > 0 })
}

// GetPayloadTool is the name of the built-in tool that reads an earlier payload of the conversation.
const GetPayloadTool = "get_payload"

var getPayloadSpec = llm.ToolSpec{
	Name: GetPayloadTool,
	Description: "Read one payload of this conversation in full: structured data an earlier tool call or answer produced, " +
		"listed by id in the system prompt's Payloads section.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string","description":"the payload's id, such as pl_1a2b3c4d5e"}},"required":["id"],"additionalProperties":false}`),
}

// withPayloads returns a copy of ts that also offers get_payload over records (the session's current
// records as the run started), when they carry payloads and the agent allows the tool. The request's
// selected_tools do not take it away: it reads only what the conversation already holds, GET /v1/tools
// does not list it, and a client that selects tools cannot know to name it.
func (ts *toolSet) withPayloads(a Agent, records []store.Record) *toolSet {
	if (a.Tools != nil && !tool.MatchAny(a.Tools, GetPayloadTool)) || ts.allowed[GetPayloadTool] || !hasPayloads(records) {
		return ts
	}
	c := *ts
	c.allowed = make(map[string]bool, len(ts.allowed)+1)
	for k, v := range ts.allowed {
		c.allowed[k] = v
	}
	c.allowed[GetPayloadTool] = true
	c.specs = append(slices.Clip(ts.specs), getPayloadSpec)
	c.payloads = records
	return &c
}

// getPayload runs a get_payload call: the payload's data, as JSON, or a failed result naming the ids.
// The payload is looked for among the session's records only when asked for, the newest first.
func (ts *toolSet) getPayload(_ context.Context, call llm.ToolCall) agent.ToolResult {
	var args struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(call.Arguments, &args); err != nil || args.ID == "" {
		return agent.ToolResult{Arguments: call.Arguments, Content: `get_payload needs {"id": "<payload id>"}`}
	}
	if p, ok := findPayload(ts.payloads, strings.TrimSpace(args.ID)); ok {
		return agent.ToolResult{Arguments: call.Arguments, Success: true,
			Content: fmt.Sprintf("Payload %s (%s, from %s): %s\n%s", p.ID, p.Type, p.Source, p.Summary, p.Data)}
	}
	return agent.ToolResult{Arguments: call.Arguments,
		Content: fmt.Sprintf("no payload %q in this conversation; the Payloads section of the system prompt lists their ids", args.ID)}
}

// findPayload returns the payload of records with this id.
func findPayload(records []store.Record, id string) (store.Payload, bool) {
	for i := len(records) - 1; i >= 0; i-- {
		r := &records[i]
		switch {
		case r.Role == store.RoleTool && len(r.Payload) > 0:
			if store.PayloadID(r.ID, 0) == id {
				return store.RecordPayloads(r)[0], true
			}
		default:
			for _, p := range r.Payloads {
				if p.ID == id {
					return p, true
				}
			}
		}
	}
	return store.Payload{}, false
}
