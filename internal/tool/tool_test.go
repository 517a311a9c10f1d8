package tool

import (
	"context"
	"encoding/json"
	"testing"
)

// fakeTool is a Tool whose behaviour each test writes as a function.
type fakeTool struct {
	info Info
	call func(ctx context.Context, args json.RawMessage) (Result, error)
}

func (f fakeTool) Info() Info { return f.info }

func (f fakeTool) Call(ctx context.Context, args json.RawMessage) (Result, error) {
	return f.call(ctx, args)
}

// echoTool answers with the arguments it was run with, so a test sees
// exactly what reached the tool.
func echoTool(name, schema string) Tool {
	info := Info{Name: name}
	if schema != "" {
		info.InputSchema = json.RawMessage(schema)
	}
	return fakeTool{info: info, call: func(_ context.Context, args json.RawMessage) (Result, error) {
		return Result{Content: string(args)}, nil
	}}
}

// outcome is the part of an Outcome a test compares; Duration is a timing.
type outcome struct {
	Arguments string
	Content   string
	Payload   string
	Success   bool
}

func summarize(o Outcome) outcome {
	return outcome{
		Arguments: string(o.Arguments),
		Content:   o.Content,
		Payload:   string(o.Payload),
		Success:   o.Success,
	}
}

// newTestRegistry returns a registry holding tools, closed when the test ends.
func newTestRegistry(t *testing.T, opts Options, tools ...Tool) *Registry {
	t.Helper()
	r := NewRegistry(opts)
	t.Cleanup(r.Close)
	for _, tl := range tools {
		if err := r.Register(tl); err != nil {
			t.Fatalf("Register(%s): %v", tl.Info().Name, err)
		}
	}
	return r
}
