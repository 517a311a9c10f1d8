package chat_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"chatd/internal/chat"
	"chatd/internal/llm/llmtest"
	"chatd/internal/mcpclient"
	"chatd/internal/runevent"
	"chatd/internal/store"
	"chatd/internal/tool"
)

// The tests of this file put questions of a real MCP server (the Go SDK's, over streamable HTTP) to
// the person behind a run, through chatd's MCP client.

// proxy is one tool of a real MCP server, as mcpclient registers it, in the fixture's registry.
type proxy struct {
	reg  *tool.Registry
	info tool.Info
}

func (p proxy) Info() tool.Info { return p.info }

func (p proxy) Call(ctx context.Context, args json.RawMessage) (tool.Result, error) {
	out := p.reg.Call(ctx, p.info.Name, args)
	return tool.Result{Content: out.Content, IsError: !out.Success}, nil
}

// mcpFixture serves srv over streamable HTTP, connects chatd's MCP client to it as "srv", and runs a
// service whose model calls srv__<toolName> once, then says Done.
func mcpFixture(t *testing.T, srv *mcp.Server, toolName string) *fixture {
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	servers, err := mcpclient.ParseConfig([]byte(`{"mcpServers":{"srv":{"url":"`+hs.URL+`"}}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	inner := tool.NewRegistry(tool.Options{DefaultTimeout: 10 * time.Minute})
	m := mcpclient.New(servers, mcpclient.Options{Registry: inner, ConnectTimeout: patience})
	m.Start(context.Background())
	t.Cleanup(inner.Close)
	t.Cleanup(m.Close)
	info, ok := inner.Info("srv__" + toolName)
	if !ok {
		t.Fatalf("no srv__%s", toolName)
	}
	return newFixture(t, setup{Tools: []tool.Tool{proxy{reg: inner, info: info}}, Respond: func(n int, req llmtest.Request) llmtest.Turn {
		if n == 0 {
			return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: info.Name, Arguments: `{}`}}}
		}
		return llmtest.Turn{Text: "Done."}
	}})
}

// mcpServer is an MCP server speaking protocols up to 2025-11-25 (legacy: questions come as
// elicitation/create) or the latest (questions come as input requests of the call's result).
func mcpServer(legacy bool) *mcp.Server {
	var opts *mcp.ServerOptions
	if legacy {
		opts = &mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25", "2025-06-18"}}
	}
	return mcp.NewServer(&mcp.Implementation{Name: "test", Version: "v1"}, opts)
}

func rawTool(srv *mcp.Server, name string, h mcp.ToolHandler) {
	srv.AddTool(&mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)}, h)
}

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// answerOf is what an elicitation got, as a tool's result: {"action":…,"content":…}, or the error.
func answerOf(res *mcp.ElicitResult, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	b, _ := json.Marshal(map[string]any{"action": res.Action, "content": res.Content})
	return string(b)
}

// decided returns the run's approval_decided events.
func decided(t *testing.T, events []chat.Event) []runevent.ApprovalDecided {
	t.Helper()
	var out []runevent.ApprovalDecided
	for _, e := range events {
		if e.Type == runevent.TypeApprovalDecided {
			d, err := runevent.Decode[runevent.ApprovalDecided](e.Data)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
	}
	return out
}

// TestElicitationAnswerAsTheServerChecksIt: an answer the SDK would refuse against the requested schema
// (a pattern, uniqueItems: more than chatd's fields say) is refused with invalid_answer naming the
// field, and the question still waits; the answer taken is recorded as the server receives it, with
// the schema's defaults filled in.
func TestElicitationAnswerAsTheServerChecksIt(t *testing.T) {
	srv := mcpServer(true)
	rawTool(srv, "pin", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult(answerOf(req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "Your 4-digit code?", RequestedSchema: map[string]any{
			"type": "object", "required": []string{"code"}, "properties": map[string]any{
				"code":  map[string]any{"type": "string", "pattern": "^[0-9]{4}$"},
				"pets":  map[string]any{"type": "array", "uniqueItems": true, "items": map[string]any{"type": "string", "enum": []string{"cat", "dog"}}},
				"note":  map[string]any{"type": "string", "default": "none"},
				"count": map[string]any{"type": "integer", "multipleOf": 2},
			}}}))), nil
	})
	f := mcpFixture(t, srv, "pin")
	st := f.send(t, chat.Request{Message: "go"}, chat.StartOptions{})
	questionOf(t, f.follow(t, st.RunID, 0))
	answer := func(content string) error {
		_, err := f.svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_1", Decision: chat.DecisionAnswer, Content: json.RawMessage(content)})
		return err
	}
	for content, field := range map[string]string{
		`{"code":"abcd"}`:                      `field "code"`,
		`{"code":"1234","pets":["cat","cat"]}`: `field "pets"`,
		`{"code":"1234","count":3}`:            `field "count"`,
	} {
		if err := answer(content); decideErr(err) != "invalid_answer" || !strings.Contains(err.Error(), field) {
			t.Errorf("answer %s: %v, want invalid_answer naming %s", content, err, field)
		}
		if aw := f.svc.LiveAwaiting(user, st.RunID); aw == nil || len(aw.Calls) != 1 {
			t.Fatalf("after a refused answer the question no longer waits: %+v", aw)
		}
	}
	if err := answer(`{"code":"1234","pets":["cat"]}`); err != nil {
		t.Fatalf("a fitting answer: %v", err)
	}
	if o := f.wait(t, st.RunID); o.Status != store.RunCompleted {
		t.Fatalf("run: %+v", o)
	}
	const want = `{"code":"1234","note":"none","pets":["cat"]}`
	if got := toolRecord(t, f.db, st.SessionID, "call_1").Content; got != `{"action":"accept","content":`+want+`}` {
		t.Errorf("the server got %s, want the answer with its default: %s", got, want)
	}
	ds := decided(t, stored(t, f.db, st.RunID))
	if len(ds) != 1 || string(ds[0].Content) != want {
		t.Errorf("approval_decided: %+v, want content %s (what the server got)", ds, want)
	}
}
