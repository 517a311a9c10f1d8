package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"chatd/internal/tool"
	"chatd/internal/tracing"
)

// Limits on what one call returns; a server is not trusted to be reasonable.
const (
	maxText        = 1 << 20 // bytes of text for the model
	maxAttachments = 8 << 20 // bytes of images and other binary content kept on the record
	maxDescription = 4096    // bytes of a tool's description
)

// mcpTool is one of a server's tools in the registry.
type mcpTool struct {
	s    *server
	name string // the server's name for it
	info tool.Info
	// repeatable: the server says a second call does no harm (readOnlyHint or idempotentHint).
	repeatable bool
}

func (s *server) newTool(t *mcp.Tool) (*mcpTool, error) {
	if t == nil || t.Name == "" {
		return nil, errors.New("a tool without a name")
	}
	schema, err := json.Marshal(t.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	if string(schema) == "null" {
		schema = nil
	}
	desc := t.Description
	if desc == "" && t.Annotations != nil {
		desc = t.Annotations.Title
	}
	if len(desc) > maxDescription {
		desc = cutUTF8(desc, maxDescription) + "…"
	}
	timeout := s.cfg.Timeout
	if d, ok := s.cfg.ToolTimeouts[t.Name]; ok {
		timeout = d
	}
	ann := t.Annotations
	return &mcpTool{s: s, name: t.Name, repeatable: ann != nil && (ann.ReadOnlyHint || ann.IdempotentHint), info: tool.Info{
		Name:        ToolName(s.cfg.Name, t.Name),
		Description: desc,
		InputSchema: schema,
		ReadOnly:    ann != nil && ann.ReadOnlyHint,
		// Only an explicit destructiveHint counts: the spec's default (true) would make every tool of
		// a server that says nothing wait for a person.
		Destructive: ann != nil && !ann.ReadOnlyHint && ann.DestructiveHint != nil && *ann.DestructiveHint,
		Timeout:     timeout,
		Source:      s.source,
		Asks:        true, // elicitation
	}}, nil
}

func (t *mcpTool) Info() tool.Info { return t.info }

// Call runs the tool on the server. The registry bounds it with the tool's timeout; when ctx ends the
// SDK sends notifications/cancelled and the call returns at once.
func (t *mcpTool) Call(ctx context.Context, args json.RawMessage) (tool.Result, error) {
	sess, err := t.s.session(ctx, false)
	if err != nil {
		return tool.Result{}, err
	}
	res, err := t.s.call(ctx, sess, t.name, args)
	if errors.Is(err, mcp.ErrSessionMissing) && ctx.Err() == nil {
		// HTTP 404: the server forgot the session (it restarted, or expired it). A call whose own
		// request got the 404 did not run, but the SDK fails every call in flight on the session with
		// the same error, and those may have run: only a tool the server calls repeatable is sent again.
		t.s.lost(sess, err)
		if !t.repeatable {
			return tool.Result{}, fmt.Errorf("MCP server %s lost its session (HTTP 404) during the call, which may or may not have run; "+
				"chatd does not send it again on its own and is reconnecting", t.s.cfg.Name)
		}
		if sess, err = t.s.session(ctx, true); err != nil {
			return tool.Result{}, err
		}
		res, err = t.s.call(ctx, sess, t.name, args)
	}
	if err == nil {
		return convert(res), nil
	}
	if ctx.Err() != nil {
		return tool.Result{}, ctx.Err() // the registry says whether it timed out or was cancelled
	}
	var rpc *jsonrpc.Error
	isRPC := errors.As(err, &rpc)
	msg := t.s.redact(err.Error())
	switch {
	case isRPC && answered(rpc):
		// The server answered with an error (unknown tool, bad params): the connection is fine.
		return tool.Result{IsError: true, Content: t.s.redact(fmt.Sprintf("MCP server %s refused the call: %s", t.s.cfg.Name, rpc.Message))}, nil
	case errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, mcp.ErrSessionMissing) ||
		isRPC && (rpc.Code == codeClientClosing || rpc.Code == codeServerClosing):
		t.s.lost(sess, err)
		return tool.Result{}, fmt.Errorf("MCP server %s: the connection broke during the call, which may or may not have run: %s; chatd is reconnecting",
			t.s.cfg.Name, msg)
	case isRPC && rpc.Code == codeRejected:
		// The transport says it could not deliver it (a refused connection, an HTTP 5xx or 429), which
		// is sure only for a connection that never opened: a gateway's 502 or 504 may come after it
		// forwarded the call. The session may be fine (a busy server), so it is checked, not dropped.
		t.s.poke(t.s.check)
		return tool.Result{}, fmt.Errorf("MCP server %s %s: %s", t.s.cfg.Name, undelivered(err), msg)
	default:
		// Something else — a reply chatd cannot read, for one — which says nothing sure about the
		// connection: it is checked with a ping.
		t.s.poke(t.s.check)
		return tool.Result{}, fmt.Errorf("MCP server %s: the call failed, and may or may not have run: %s", t.s.cfg.Name, msg)
	}
}

// Codes of the SDK's own errors, which are JSON-RPC errors too: the transport did not deliver the call
// (a refused connection, an HTTP 5xx), or one side is closing. None of them is the server's answer.
const (
	codeClientClosing = -32003
	codeServerClosing = -32004
	codeRejected      = -32005
)

// answered reports whether rpc is the server's answer to a call, rather than the SDK's word that the
// call did not get through.
func answered(rpc *jsonrpc.Error) bool {
	switch rpc.Code {
	case codeClientClosing, codeServerClosing, codeRejected:
		return false
	}
	return true
}

// undelivered says what is known of a call the transport reports it did not deliver, from the HTTP
// status of its reply, if it had one.
func undelivered(err error) string {
	switch code := httpStatusOf(err); {
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		return fmt.Sprintf("refused the call (HTTP %d %s); it most likely did not run", code, http.StatusText(code))
	case code != 0:
		return fmt.Sprintf("answered the call with HTTP %d %s (perhaps from a gateway in front of it); the call may or may not have run", code, http.StatusText(code))
	case isDial(err):
		return "could not be reached; the call did not run"
	}
	return "could not be reached, and the call may or may not have run"
}

// serverAnswered reports whether err, a call's, is the server's own answer: a JSON-RPC error it sent.
// Any other — a transport's rejection (an HTTP 5xx or 429, perhaps from a gateway that forwarded the
// call), a broken connection, a reply chatd cannot read — leaves the server perhaps at work on it.
func serverAnswered(err error) bool {
	var rpc *jsonrpc.Error
	return errors.As(err, &rpc) && answered(rpc)
}

// call sends tools/call with a progress token, so that the server's progress reaches the call's
// reporter; reports arriving once it has returned are dropped.
func (s *server) call(ctx context.Context, sess *mcp.ClientSession, name string, args json.RawMessage) (*mcp.CallToolResult, error) {
	token := "chatd-" + strconv.FormatUint(s.tokens.Add(1), 10)
	ctx = context.WithValue(ctx, callKey{}, token)
	s.calls.Store(token, &inFlight{ctx: ctx, sess: sess})
	p := &mcp.CallToolParams{Name: name, Arguments: args}
	p.SetProgressToken(token)
	// The call's span, per the MCP semantic conventions; its trace context goes to the server in the
	// request's _meta (traceparent, tracestate).
	transport, protocol := "tcp", ""
	if s.cfg.Transport == TransportStdio {
		transport = "pipe"
	}
	if init := sess.InitializeResult(); init != nil {
		protocol = init.ProtocolVersion
	}
	ctx, span, meta := s.m.opts.Tracing.MCP(ctx, "tools/call", name, transport, sess.ID(), protocol)
	for k, v := range meta {
		p.Meta[k] = v
	}
	status := new(httpStatus)
	res, err := sess.CallTool(withHTTPStatus(ctx, status), p)
	if err != nil {
		err = status.wrap(err)
	}
	// Only the server's own answer frees the call's place at once: after a cancel, or an error that is
	// not its answer, it may still be at work on the call, and ask its question later (linger).
	s.returned(token, err != nil && (ctx.Err() != nil || !serverAnswered(err)))
	tracing.EndMCP(span, err, err == nil && res.IsError)
	return res, err
}

// progressed hands a progress notification to the call it belongs to, if that call is still running.
func (s *server) progressed(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	if req == nil || req.Params == nil {
		return
	}
	token, ok := req.Params.ProgressToken.(string)
	if !ok {
		return // not one of chatd's tokens
	}
	v, ok := s.calls.Load(token)
	if !ok {
		return // late: the call has returned
	}
	c := v.(*inFlight)
	ctx := c.ctx
	if !c.until.IsZero() || ctx.Err() != nil {
		return // cancelled: the server may not have stopped yet
	}
	p := req.Params
	tool.ReportProgress(ctx, tool.Progress{Progress: p.Progress, Total: p.Total, Message: cutUTF8(p.Message, 1024)})
}

// convert maps a tools/call result: text joined for the model, images and audio kept as attachments
// with a note in the text, resource links and embedded text resources as text, structuredContent as
// the payload, isError as a failed result.
func convert(res *mcp.CallToolResult) tool.Result {
	out := tool.Result{IsError: res.IsError}
	var text []string
	kept := 0
	attach := func(kind, mediaType string, data []byte) {
		if kept+len(data) > maxAttachments {
			text = append(text, fmt.Sprintf("[%s: %s, %d bytes, left out: the result's binary content is over %d bytes]", kind, mediaType, len(data), maxAttachments))
			return
		}
		kept += len(data)
		n := len(out.Attachments) + 1
		out.Attachments = append(out.Attachments, tool.Attachment{MediaType: mediaType, Name: kind + "-" + strconv.Itoa(n), Data: data})
		text = append(text, fmt.Sprintf("[%s %d: %s, %d bytes, shown to the user]", kind, n, mediaType, len(data)))
	}
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			text = append(text, c.Text)
		case *mcp.ImageContent:
			attach("image", c.MIMEType, c.Data)
		case *mcp.AudioContent:
			attach("audio", c.MIMEType, c.Data)
		case *mcp.ResourceLink:
			text = append(text, resourceLink(c))
		case *mcp.EmbeddedResource:
			r := c.Resource
			switch {
			case r == nil:
			case r.Text != "":
				text = append(text, "[resource "+r.URI+"]\n"+r.Text)
			case strings.HasPrefix(r.MIMEType, "image/"):
				attach("image", r.MIMEType, r.Blob)
			default:
				text = append(text, fmt.Sprintf("[resource %s: %s, %d bytes of binary content not shown]", r.URI, r.MIMEType, len(r.Blob)))
			}
		default:
			if b, err := c.MarshalJSON(); err == nil {
				text = append(text, string(b))
			}
		}
	}
	if res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil && string(b) != "null" {
			out.Payload = b
			if len(text) == 0 {
				text = append(text, string(b)) // the model reads the structured result when there is no text
			}
		}
	}
	out.Content = strings.Join(text, "\n")
	if len(out.Content) > maxText {
		out.Content = cutUTF8(out.Content, maxText) + fmt.Sprintf("\n[cut: the server returned %d bytes of text]", len(out.Content))
	}
	if out.Content == "" && out.IsError {
		out.Content = "The tool reported an error without saying what it was."
	}
	return out
}

func resourceLink(c *mcp.ResourceLink) string {
	var b strings.Builder
	b.WriteString("[resource link: ")
	b.WriteString(c.URI)
	if name := strings.TrimSpace(c.Title + " " + c.Name); name != "" {
		b.WriteString(" (" + name + ")")
	}
	if c.MIMEType != "" {
		b.WriteString(", " + c.MIMEType)
	}
	if c.Description != "" {
		b.WriteString(": " + c.Description)
	}
	b.WriteString("]")
	return b.String()
}

// cutUTF8 cuts s to at most n bytes at a rune boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// isDial reports whether err is a failure to open the connection: the call never left.
func isDial(err error) bool {
	opErr, ok := errors.AsType[*net.OpError](err)
	return ok && opErr.Op == "dial"
}
