// Package tool owns what the model can call: the Tool interface, the
// Registry that checks a call's arguments against the tool's JSON Schema and
// runs it with a timeout and panic recovery, and the built-in tools.
//
// Whatever goes wrong in a call — an unknown name, arguments that are not
// JSON or do not fit the schema, a tool that fails, hangs or panics — comes
// back as an Outcome with Success false and a message the model can act on.
//
// It imports only the standard library and
// github.com/santhosh-tekuri/jsonschema/v6; it must not import llm, agent,
// mcpclient or any other chatd package, so that every one of them can use it.
package tool

import (
	"context"
	"encoding/json"
	"time"
)

// Tool is something the model can call.
type Tool interface {
	// Info describes the tool; the registry reads it once, at Register.
	Info() Info
	// Call runs the tool with arguments that have been validated against
	// Info.InputSchema. It should return when ctx is done.
	Call(ctx context.Context, args json.RawMessage) (Result, error)
}

// Info describes a tool to the model and to the registry.
type Info struct {
	Name        string          // ^[A-Za-z0-9_-]{1,64}$
	Description string          // what the tool does, for the model
	InputSchema json.RawMessage // a JSON Schema object; nil means {"type":"object"}
	ReadOnly    bool            // may start while the model is still streaming
	Timeout     time.Duration   // 0: the registry's default
	Source      string          // "builtin", or "mcp:<server>"; "" is reported as "builtin"
	// Destructive: the tool may change or delete data in ways that cannot be undone (an MCP server's
	// destructiveHint, not read-only). An approval policy asks a person before it runs by default.
	Destructive bool
	// Asks: the tool may ask the person behind the call while it runs (an MCP server's elicitation);
	// only its calls get an Asker in their context.
	Asks bool
}

// Result is what a tool returns to the registry.
type Result struct {
	Content     string          // text for the model
	Payload     json.RawMessage // optional structured data for the UI
	Attachments []Attachment    // binary content (images) kept on the tool record
	IsError     bool            // the tool reports failure itself
}

// Attachment is binary content a tool returned, such as an image.
type Attachment struct {
	MediaType string
	Name      string
	Data      []byte
}

// Outcome is the result of Registry.Call: always usable as a tool result for
// the model, whether the call succeeded or not.
type Outcome struct {
	Arguments   json.RawMessage // the arguments as validated and run; always a JSON object, "{}" when unusable
	Content     string          // the tool's text, or why the call failed
	Payload     json.RawMessage // the tool's structured data for the UI, if any
	Attachments []Attachment    // the tool's binary content, if any
	Success     bool
	Duration    time.Duration
}
