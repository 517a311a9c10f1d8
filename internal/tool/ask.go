package tool

import (
	"context"
	"encoding/json"
	"strconv"
)

// A running tool may need something from the person whose run called it — an MCP server's
// elicitation (form mode) is one. The caller of the tool puts an Asker in the call's context; the
// tool asks through it and waits for the answer, bounded by the call's context.

// Actions of an Answer, as MCP names them.
const (
	ActionAccept  = "accept"  // the person answered: Content holds the values
	ActionDecline = "decline" // the person said no
	ActionCancel  = "cancel"  // nobody answered: the call or the run ended, or the wait expired
)

// Limits of a Question: a server is not trusted to be reasonable, and the question goes to a person.
const (
	MaxQuestionMessage = 4 << 10  // bytes of the message
	MaxQuestionSchema  = 16 << 10 // bytes of the requested schema
	MaxQuestionFields  = 32       // properties of the requested schema
	MaxQuestionChoices = 100      // choices of one property (enum, oneOf, anyOf, or its items')
)

// Question is what a running tool asks the person: a message, and the values it wants as a flat JSON
// Schema object whose properties are strings, numbers, integers, booleans or arrays of enum strings
// (MCP's form elicitation).
type Question struct {
	Message string
	Schema  json.RawMessage
	// Check, when set, checks accepted content as the one who asked will (an MCP client's SDK validates
	// it against the requested schema, then fills in the schema's defaults), and returns the content
	// that one will receive; a misfit is an *AnswerError.
	Check func(content map[string]any) (map[string]any, error)
}

// AnswerError is why an answer does not fit its question; Field names the field at fault, if one is.
type AnswerError struct {
	Field   string
	Problem string
}

func (e *AnswerError) Error() string {
	if e.Field == "" {
		return e.Problem
	}
	return "field " + strconv.Quote(e.Field) + ": " + e.Problem
}

// Answer is the person's answer to a Question: the action, and with accept the values, one per
// property of the schema answered.
type Answer struct {
	Action  string
	Content map[string]any
}

// Asker asks the person behind a tool call a question and waits for the answer. Ask returns when the
// person answers, or with ctx's error when ctx ends first.
type Asker interface {
	Ask(ctx context.Context, q Question) (Answer, error)
}

type askerKey struct{}

// WithAsker returns a context whose tool calls may ask questions through a.
func WithAsker(ctx context.Context, a Asker) context.Context {
	return context.WithValue(ctx, askerKey{}, a)
}

// AskerFrom returns the asker of ctx, if it has one.
func AskerFrom(ctx context.Context) (Asker, bool) {
	a, ok := ctx.Value(askerKey{}).(Asker)
	return a, ok && a != nil
}
