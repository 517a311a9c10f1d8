package mcpclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// serverEnv, when set in a process's environment, makes the test binary an MCP server on stdio instead
// of running the tests: "1" serves the test server, "hang" reads stdin and never answers.
const serverEnv = "MCPCLIENT_TEST_SERVER"

// serveStdio is the test binary's life as a stdio child.
func serveStdio(mode string) int {
	switch mode {
	case "hang":
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	default:
		ts := newTestServer(nil)
		if err := ts.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, "test server:", err)
			return 1
		}
		return 0
	}
}

// testServer is a go-sdk MCP server with the tools the tests call, and what it saw of them.
type testServer struct {
	*mcp.Server
	counted   atomic.Int64  // runs of "count"
	cancelled atomic.Int64  // tool contexts that ended before the tool returned
	notified  atomic.Int64  // notifications/cancelled received
	late      atomic.Int64  // progress notifications sent after their call had returned or ended
	release   chan struct{} // closed to let "hang" return
	proceed   chan struct{} // lets a "progress" call return
	lastMu    sync.Mutex
	last      progressed // the last "progress" call's session and token, for "report_late"
	closeOnce sync.Once
	traceMu   sync.Mutex
	trace     []string
}

// pngBytes is not a whole PNG, only bytes to carry.
var pngBytes = []byte("\x89PNG\r\n\x1a\nnot really")

func newTestServer(opts *mcp.ServerOptions) *testServer {
	if opts == nil {
		opts = &mcp.ServerOptions{PageSize: 2} // every listing takes several pages
	}
	ts := &testServer{
		Server:  mcp.NewServer(&mcp.Implementation{Name: "test", Version: "v1"}, opts),
		release: make(chan struct{}),
		proceed: make(chan struct{}, 1),
	}
	ts.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "notifications/cancelled" {
				ts.notified.Add(1)
			}
			ts.traceMu.Lock()
			b, _ := json.Marshal(req.GetParams())
			ts.trace = append(ts.trace, time.Now().Format("15:04:05.000000")+" "+method+" "+string(b))
			ts.traceMu.Unlock()
			return next(ctx, method, req)
		}
	})
	ts.addTools()
	return ts
}

// unblock lets every "hang" call return.
func (ts *testServer) unblock() { ts.closeOnce.Do(func() { close(ts.release) }) }

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

var objectSchema = json.RawMessage(`{"type":"object"}`)

// raw adds a tool that takes any object.
func (ts *testServer) raw(name string, h mcp.ToolHandler) {
	ts.AddTool(&mcp.Tool{Name: name, InputSchema: objectSchema}, h)
}

type echoArgs struct {
	Text string `json:"text"`
}

type sleepArgs struct {
	MS int `json:"ms"`
}

func (ts *testServer) addTools() {
	// echo says it is idempotent, so that a call cut by a 404 is sent again; count says nothing.
	mcp.AddTool(ts.Server, &mcp.Tool{Name: "echo", Description: "Echoes text.", Annotations: &mcp.ToolAnnotations{IdempotentHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoArgs) (*mcp.CallToolResult, any, error) {
			return text(in.Text), nil, nil
		})
	ts.AddTool(&mcp.Tool{Name: "look", Description: "Reads nothing.", InputSchema: objectSchema,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("looked"), nil })
	destructive := true
	ts.AddTool(&mcp.Tool{Name: "wipe", Description: "Wipes nothing.", InputSchema: objectSchema,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &destructive}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("wiped"), nil })
	ts.raw("args", func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text(string(req.Params.Arguments)), nil
	})
	ts.raw("meta", func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		b, _ := json.Marshal(req.Params.Meta)
		return text(string(b)), nil
	})
	ts.raw("two_texts", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "one"}, &mcp.TextContent{Text: "two"}}}, nil
	})
	ts.raw("fail", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "the disk is full"}}}, nil
	})
	ts.raw("image", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a chart"},
			&mcp.ImageContent{MIMEType: "image/png", Data: pngBytes}}}, nil
	})
	ts.raw("structured", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{StructuredContent: map[string]any{"temp": 21.5, "unit": "C"}, Content: []mcp.Content{}}, nil
	})
	ts.raw("link", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ResourceLink{URI: "file:///srv/report.txt", Name: "report",
			MIMEType: "text/plain", Description: "the weekly report"}}}, nil
	})
	ts.raw("resource", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
			URI: "mem://notes/1", MIMEType: "text/plain", Text: "buy milk"}}}}, nil
	})
	ts.raw("progress", ts.progress)
	ts.raw("proceed", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		select {
		case ts.proceed <- struct{}{}:
		default:
		}
		return text("proceeding"), nil
	})
	ts.raw("report_late", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ts.lastMu.Lock()
		last := ts.last
		ts.lastMu.Unlock()
		if last.session == nil {
			return text("no progress call to report on"), nil
		}
		ts.lateProgress(last.session, last.token)
		return text("reported"), nil
	})
	ts.raw("block", ts.block)
	ts.raw("hang", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		<-ts.release // ignores its context
		return text("released"), nil
	})
	mcp.AddTool(ts.Server, &mcp.Tool{Name: "sleep"},
		func(ctx context.Context, _ *mcp.CallToolRequest, in sleepArgs) (*mcp.CallToolResult, any, error) {
			select {
			case <-time.After(time.Duration(in.MS) * time.Millisecond):
				return text("slept"), nil, nil
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		})
	ts.raw("count", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text(strconv.FormatInt(ts.counted.Add(1), 10)), nil
	})
	ts.AddTool(&mcp.Tool{Name: "count_idem", InputSchema: objectSchema, Annotations: &mcp.ToolAnnotations{IdempotentHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(strconv.FormatInt(ts.counted.Add(1), 10)), nil
		})
	ts.raw("seen", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text(fmt.Sprintf("cancelled=%d notified=%d late=%d", ts.cancelled.Load(), ts.notified.Load(), ts.late.Load())), nil
	})
	ts.raw("protocol_error", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "no such thing"}
	})
	// grow and shrink change the server's tool list while it is connected.
	ts.raw("grow", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ts.raw("grown", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("new"), nil })
		return text("grew"), nil
	})
	ts.raw("shrink", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ts.RemoveTools("grown")
		return text("shrank"), nil
	})
	ts.raw("env", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		env := os.Environ()
		slices.Sort(env)
		return text(strings.Join(env, "\n")), nil
	})
	ts.raw("pid", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text(strconv.Itoa(os.Getpid())), nil
	})
	ts.raw("wait_for_kill", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(),
			Progress: 1, Message: "started"})
		<-ctx.Done()
		return nil, ctx.Err()
	})
	ts.raw("elicit", ts.elicit)
	ts.raw("elicit_url", func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if r, ok := req.Params.InputResponses["site"].(*mcp.ElicitResult); ok {
			return text(r.Action), nil
		}
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"site": &mcp.ElicitParams{Mode: "url",
			Message: "Sign in there.", URL: "https://example.com/signin", ElicitationID: "e1"}}}, nil
	})
	for _, ref := range []string{"file:///etc/passwd", "http://127.0.0.1:1/schema.json"} {
		name := "ref_" + strings.SplitN(ref, ":", 2)[0]
		schema := json.RawMessage(`{"type":"object","properties":{"p":{"$ref":"` + ref + `"}}}`)
		ts.AddTool(&mcp.Tool{Name: name, InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text("must not be called"), nil
		})
	}
}

// elicit asks the client for a name and an age — or, with {"fields": n}, for n strings, or with
// {"choices": n}, for one of n, or with {"schema": s}, for what s asks — as an input
// request of its result (the SDK's server sends it as elicitation/create to a client on an earlier
// protocol), and returns what it got as JSON: {"action": …, "content": …}.
func (ts *testServer) elicit(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if r, ok := req.Params.InputResponses["who"].(*mcp.ElicitResult); ok {
		b, _ := json.Marshal(map[string]any{"action": r.Action, "content": r.Content})
		return text(string(b)), nil
	}
	var in struct {
		Fields  int             `json:"fields"`
		Choices int             `json:"choices"`
		Schema  json.RawMessage `json:"schema"`
	}
	_ = json.Unmarshal(req.Params.Arguments, &in)
	schema := map[string]any{"type": "object", "required": []string{"name"}, "properties": map[string]any{
		"name": map[string]any{"type": "string", "title": "Name"},
		"age":  map[string]any{"type": "integer", "minimum": 0},
	}}
	if in.Fields > 0 {
		props := map[string]any{}
		for i := range in.Fields {
			props["f"+strconv.Itoa(i)] = map[string]any{"type": "string"}
		}
		schema = map[string]any{"type": "object", "properties": props}
	}
	if in.Choices > 0 {
		enum := make([]string, in.Choices)
		for i := range enum {
			enum[i] = "c" + strconv.Itoa(i)
		}
		schema = map[string]any{"type": "object", "properties": map[string]any{"pick": map[string]any{"type": "string", "enum": enum}}}
	}
	if in.Schema != nil {
		schema = nil
		_ = json.Unmarshal(in.Schema, &schema)
	}
	return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{
		"who": &mcp.ElicitParams{Message: "Who are you?", RequestedSchema: schema}}}, nil
}

// progressed is a progress call's session and token.
type progressed struct {
	session *mcp.ServerSession
	token   any
}

// progress reports three steps and returns once "proceed" is called; "report_late" then reports once
// more on its token, which is late.
//
// It waits before it returns: the SDK's client hands notifications to their handler on a goroutine of
// their own, after the responses read behind them, so a report sent just before the result may be
// handled once the call has returned, and dropped. The test calls "proceed" when it has the reports.
func (ts *testServer) progress(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	token := req.Params.GetProgressToken()
	if token == nil {
		return text("no progress token"), nil
	}
	ts.lastMu.Lock()
	ts.last = progressed{req.Session, token}
	ts.lastMu.Unlock()
	for i := 1; i <= 3; i++ {
		err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token,
			Progress: float64(i), Total: 3, Message: "step " + strconv.Itoa(i)})
		if err != nil {
			return nil, err
		}
	}
	select {
	case <-ts.proceed:
		return text("done"), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// block waits for its context to end, counts that, and reports progress once it has been cancelled.
func (ts *testServer) block(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	token := req.Params.GetProgressToken()
	_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: 1, Message: "started"})
	select {
	case <-ctx.Done():
	case <-ts.release:
		return text("released"), nil
	}
	ts.cancelled.Add(1)
	go ts.lateProgress(req.Session, token)
	return nil, ctx.Err()
}

// lateProgress reports progress on the token of a call that has ended.
func (ts *testServer) lateProgress(ss *mcp.ServerSession, token any) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: 99, Message: "late"})
	ts.late.Add(1)
}

// httpServer serves ts over streamable HTTP on 127.0.0.1; wrap, if set, sits in front of the handler.
func httpServer(t testing.TB, ts *testServer, wrap func(http.Handler) http.Handler) *httptest.Server {
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ts.Server }, nil)
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		if t.Failed() {
			ts.traceMu.Lock()
			t.Logf("server trace:\n%s", strings.Join(ts.trace, "\n"))
			ts.traceMu.Unlock()
		}
	})
	t.Cleanup(ts.closeSessions)
	t.Cleanup(func() { stopHTTP(srv) })
	t.Cleanup(ts.unblock) // before the server stops: a blocked handler would keep Close waiting
	return srv
}

// sseServer serves ts over the 2024-11-05 HTTP+SSE transport.
func sseServer(t testing.TB, ts *testServer) *httptest.Server {
	srv := httptest.NewServer(mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return ts.Server }, nil))
	t.Cleanup(ts.closeSessions)
	t.Cleanup(func() { stopHTTP(srv) })
	t.Cleanup(ts.unblock)
	return srv
}

// stopHTTP stops srv without waiting for the long-lived SSE streams that would keep Close waiting.
func stopHTTP(srv *httptest.Server) {
	srv.CloseClientConnections()
	srv.Close()
}

// closeSessions ends the sessions that clients left without a DELETE (their server went away, or a
// test expired them), which the SDK keeps until then.
func (ts *testServer) closeSessions() {
	for ss := range ts.Sessions() {
		_ = ss.Close()
	}
}

// restartHTTP serves h again on addr, the address of a server that was stopped.
func restartHTTP(t testing.TB, addr string, h http.Handler) *httptest.Server {
	var l net.Listener
	eventually(t, func() bool {
		var err error
		l, err = net.Listen("tcp", addr)
		return err == nil
	})
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(func() { stopHTTP(srv) })
	return srv
}
