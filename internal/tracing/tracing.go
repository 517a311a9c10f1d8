// Package tracing is chatd's OpenTelemetry tracing: set up from the standard OTEL_* variables, and off —
// a nil *Tracing, whose methods do nothing and cost nothing — unless an OTLP endpoint is set. It names
// spans and attributes after the OpenTelemetry semantic conventions: HTTP server spans, GenAI spans for
// a run (invoke_agent), each model call (chat) and each tool call (execute_tool), and MCP client spans
// (semantic conventions v1.43: gen_ai.*, mcp.*).
//
// A caller's trace context is continued only when it comes from a trusted peer (a proxy of the
// operator's); any other caller's starts a new trace, linked to the caller's, so that a client can neither
// force nor suppress sampling nor pick trace ids. A tracestate that came in is never sent on.
//
// No message content is recorded: prompts and answers never, tool calls' arguments and results only when
// OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT is true.
//
// It imports llm (to hand the trace context to the adapters), the OpenTelemetry API, SDK and OTLP HTTP
// exporter, and the standard library.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"chatd/internal/llm"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracing starts chatd's spans. A nil *Tracing starts none.
type Tracing struct {
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	capture  bool
	shutdown func(context.Context) error

	mu     sync.RWMutex
	models map[string]bool // configured provider/model names: the only ones named in span names
}

// CaptureEnv is the variable that turns on the recording of message content in spans.
const CaptureEnv = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

// Setup returns tracing as the OTEL_* variables (read through getenv) configure it: nil, without error,
// unless OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (and neither
// OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none says otherwise). The exporter speaks OTLP over
// HTTP (http/protobuf); the SDK itself reads the other OTEL_EXPORTER_OTLP_* variables (headers,
// timeout, certificates), OTEL_TRACES_SAMPLER and OTEL_BSP_*. OTEL_SERVICE_NAME defaults to chatd.
func Setup(ctx context.Context, getenv func(string) string, version string) (*Tracing, error) {
	if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(getenv("OTEL_TRACES_EXPORTER"), "none") {
		return nil, nil
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := getenv(v); p != "" {
			if p != "http/protobuf" {
				return nil, fmt.Errorf("%s=%s: chatd exports traces with OTLP over HTTP only; set http/protobuf (and the collector's HTTP port, usually 4318)", v, p)
			}
			break
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", "chatd"), attribute.String("service.version", version)))
	if err != nil {
		return nil, err
	}
	if name := getenv("OTEL_SERVICE_NAME"); name != "" {
		res, _ = resource.Merge(res, resource.NewSchemaless(attribute.String("service.name", name)))
	}
	if env, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		res, _ = resource.Merge(res, env)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithRawSpanLimits(spanLimits(getenv)))
	t := New(tp, strings.EqualFold(getenv(CaptureEnv), "true"))
	t.shutdown = tp.Shutdown
	return t, nil
}

// DefaultValueLength is the longest attribute value a span keeps (in characters) unless
// OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT or OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT says otherwise: the
// SDK's default is no limit.
const DefaultValueLength = 4096

// spanLimits are the SDK's limits from the environment, with attribute values bounded by default.
func spanLimits(getenv func(string) string) sdktrace.SpanLimits {
	l := sdktrace.NewSpanLimits()
	l.AttributeValueLengthLimit = DefaultValueLength
	for _, v := range []string{"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"} {
		if n, err := strconv.Atoi(getenv(v)); err == nil {
			l.AttributeValueLengthLimit = n
			break
		}
	}
	return l
}

// New returns tracing on tp (a test's, with an in-memory exporter); capture records message content.
func New(tp trace.TracerProvider, capture bool) *Tracing {
	return &Tracing{tracer: tp.Tracer("chatd"), prop: propagation.TraceContext{}, capture: capture, models: map[string]bool{}}
}

// KnownModels declares the configured models (provider/model): only they are named in a model call's
// span name, which is "chat" for any other.
func (t *Tracing) KnownModels(names ...string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range names {
		t.models[n] = true
	}
}

func (t *Tracing) known(model string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.models[model]
}

// Shutdown sends the spans not yet exported and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.shutdown == nil {
		return nil
	}
	return t.shutdown(ctx)
}

// Capture reports whether message content is recorded.
func (t *Tracing) Capture() bool { return t != nil && t.capture }

// noSpan is what a nil *Tracing returns: a span that records nothing, in no context.
var noSpan = trace.SpanFromContext(context.Background())

// Attribute names of the semantic conventions (v1.43).
const (
	OperationName     = attribute.Key("gen_ai.operation.name")
	ProviderName      = attribute.Key("gen_ai.provider.name")
	RequestModel      = attribute.Key("gen_ai.request.model")
	ResponseModel     = attribute.Key("gen_ai.response.model")
	RequestMaxTokens  = attribute.Key("gen_ai.request.max_tokens")
	RequestTemp       = attribute.Key("gen_ai.request.temperature")
	InputTokens       = attribute.Key("gen_ai.usage.input_tokens")
	OutputTokens      = attribute.Key("gen_ai.usage.output_tokens")
	CacheReadTokens   = attribute.Key("gen_ai.usage.cache_read.input_tokens")
	CacheWriteTokens  = attribute.Key("gen_ai.usage.cache_creation.input_tokens")
	FinishReasons     = attribute.Key("gen_ai.response.finish_reasons")
	ConversationID    = attribute.Key("gen_ai.conversation.id")
	AgentName         = attribute.Key("gen_ai.agent.name")
	ToolName          = attribute.Key("gen_ai.tool.name")
	ToolCallID        = attribute.Key("gen_ai.tool.call.id")
	ToolType          = attribute.Key("gen_ai.tool.type")
	ToolCallArguments = attribute.Key("gen_ai.tool.call.arguments")
	ToolCallResult    = attribute.Key("gen_ai.tool.call.result")
	ErrorType         = attribute.Key("error.type")
	MCPMethodName     = attribute.Key("mcp.method.name")
	MCPSessionID      = attribute.Key("mcp.session.id")
	MCPProtocol       = attribute.Key("mcp.protocol.version")
	NetworkTransport  = attribute.Key("network.transport")
	RunID             = attribute.Key("chatd.run.id")
	RunStatus         = attribute.Key("chatd.run.status")
)

// Provider is the gen_ai.provider.name of a configured provider: the conventions' names for the APIs
// chatd speaks, else the configured name.
func Provider(name string) string {
	switch name {
	case "gemini":
		return "gcp.gemini"
	}
	return name
}

// maxPath bounds the url.path of a request's span.
const maxPath = 256

// methods are the HTTP methods the conventions name; any other is "_OTHER".
var methods = map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "DELETE": true,
	"CONNECT": true, "OPTIONS": true, "TRACE": true, "PATCH": true}

// HTTP starts the server span of an HTTP request. From a trusted peer (trusted: a proxy of the
// operator's) it continues the trace the traceparent header names, without its tracestate; from any
// other caller it starts a new trace, linked to the caller's. The route is named later (Route), when the
// mux has matched it.
func (t *Tracing) HTTP(r *http.Request, trusted bool) (context.Context, trace.Span) {
	if t == nil {
		return r.Context(), noSpan
	}
	name, attrs := r.Method, []attribute.KeyValue{attribute.String("http.request.method", r.Method)}
	if !methods[r.Method] {
		// The conventions' rule for a method the instrumentation does not know: no method of the
		// caller's choosing in the span's name.
		name, attrs = "HTTP", []attribute.KeyValue{attribute.String("http.request.method", "_OTHER"),
			attribute.String("http.request.method_original", cut(r.Method, 32))}
	}
	attrs = append(attrs, attribute.String("url.path", cut(r.URL.Path, maxPath)))
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...)}
	ctx := r.Context()
	caller := trace.SpanContextFromContext(t.prop.Extract(context.Background(), propagation.HeaderCarrier(r.Header)))
	switch {
	case caller.IsValid() && trusted:
		ctx = trace.ContextWithRemoteSpanContext(ctx, caller.WithTraceState(trace.TraceState{}))
	case caller.IsValid():
		opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: caller.WithTraceState(trace.TraceState{})}))
	}
	return t.tracer.Start(ctx, name, opts...)
}

// cut cuts s to at most n bytes, at a character's start.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// inject writes the trace context of ctx into c: traceparent only. chatd keeps no tracestate of its
// own, and one a caller sent is not passed on to providers and MCP servers.
func (t *Tracing) inject(ctx context.Context, c propagation.TextMapCarrier) {
	sc := trace.SpanContextFromContext(ctx)
	if sc.TraceState().Len() > 0 {
		ctx = trace.ContextWithSpanContext(ctx, sc.WithTraceState(trace.TraceState{}))
	}
	t.prop.Inject(ctx, c)
}

// Route names the request's span after the route pattern that serves it ("GET /v1/runs/{id}").
func Route(ctx context.Context, pattern string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetName(pattern)
	if _, route, ok := strings.Cut(pattern, " "); ok {
		span.SetAttributes(attribute.String("http.route", route))
	}
}

// EndHTTP ends a request's span with its status.
func EndHTTP(span trace.Span, status int) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 {
		span.SetStatus(codes.Error, "")
		span.SetAttributes(ErrorType.String(fmt.Sprint(status)))
	}
	span.End()
}

// Run starts a run's span: invoke_agent {agent}.
func (t *Tracing) Run(ctx context.Context, runID, sessionID, agent, model string) (context.Context, trace.Span) {
	if t == nil {
		return ctx, noSpan
	}
	return t.tracer.Start(ctx, "invoke_agent "+agent, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		OperationName.String("invoke_agent"), AgentName.String(agent), RequestModel.String(model),
		ConversationID.String(sessionID), RunID.String(runID)))
}

// EndRun ends a run's span with its status and error code ("" when it did not fail).
func EndRun(span trace.Span, status, errCode string) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(RunStatus.String(status))
	if errCode != "" {
		span.SetStatus(codes.Error, errCode)
		span.SetAttributes(ErrorType.String(errCode))
	}
	span.End()
}

// ModelCall is what a model call's span starts with.
type ModelCall struct {
	Provider  string // the configured provider's name
	Model     string // the provider's model name
	MaxTokens int
	Temp      *float64
	Retry     bool // a retry of the call before, which failed without output
	Fallback  bool // the first call on a fallback model
}

// Chat starts a model call's span: chat {model}, for a configured model (KnownModels); "chat" for
// any other, so that requests cannot name spans. Its context carries the trace to the provider: the
// adapters send it as the traceparent header (llm.WithHeaders).
func (t *Tracing) Chat(ctx context.Context, c ModelCall) (context.Context, trace.Span) {
	if t == nil {
		return ctx, noSpan
	}
	attrs := []attribute.KeyValue{OperationName.String("chat"), ProviderName.String(Provider(c.Provider)), RequestModel.String(c.Model)}
	if c.MaxTokens > 0 {
		attrs = append(attrs, RequestMaxTokens.Int(c.MaxTokens))
	}
	if c.Temp != nil {
		attrs = append(attrs, RequestTemp.Float64(*c.Temp))
	}
	if c.Retry {
		attrs = append(attrs, attribute.Bool("chatd.retry", true))
	}
	if c.Fallback {
		attrs = append(attrs, attribute.Bool("chatd.fallback", true))
	}
	name := "chat"
	if t.known(llm.Origin(c.Provider, c.Model)) {
		name += " " + c.Model
	}
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	if span.IsRecording() {
		spanCtx := ctx
		ctx = llm.WithHeaders(ctx, func(h http.Header) { t.inject(spanCtx, propagation.HeaderCarrier(h)) })
	}
	return ctx, span
}

// ChatEnd is how a model call ended.
type ChatEnd struct {
	Model                             string // the model that answered
	InputTokens, OutputTokens         int64
	CacheReadTokens, CacheWriteTokens int64
	FinishReason                      string
	ErrKind                           string // "" when the call succeeded
}

// EndChat ends a model call's span.
func (t *Tracing) EndChat(span trace.Span, e ChatEnd) {
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{InputTokens.Int64(e.InputTokens), OutputTokens.Int64(e.OutputTokens)}
	if e.Model != "" {
		attrs = append(attrs, ResponseModel.String(e.Model))
	}
	if e.CacheReadTokens > 0 {
		attrs = append(attrs, CacheReadTokens.Int64(e.CacheReadTokens))
	}
	if e.CacheWriteTokens > 0 {
		attrs = append(attrs, CacheWriteTokens.Int64(e.CacheWriteTokens))
	}
	if e.FinishReason != "" {
		attrs = append(attrs, FinishReasons.StringSlice([]string{e.FinishReason}))
	}
	if e.ErrKind != "" {
		attrs = append(attrs, ErrorType.String(e.ErrKind))
		span.SetStatus(codes.Error, e.ErrKind)
	}
	span.SetAttributes(attrs...)
	span.End()
}

// Tool starts a tool call's span: execute_tool {name}. MCP tools are of type "extension", chatd's own
// "function".
func (t *Tracing) Tool(ctx context.Context, name, callID string, mcp bool, args []byte) (context.Context, trace.Span) {
	if t == nil {
		return ctx, noSpan
	}
	typ := "function"
	if mcp {
		typ = "extension"
	}
	attrs := []attribute.KeyValue{OperationName.String("execute_tool"), ToolName.String(name), ToolCallID.String(callID), ToolType.String(typ)}
	if t.capture && len(args) > 0 {
		attrs = append(attrs, ToolCallArguments.String(string(args)))
	}
	return t.tracer.Start(ctx, "execute_tool "+name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
}

// EndTool ends a tool call's span; content is its result, recorded only with capture on.
func (t *Tracing) EndTool(span trace.Span, success bool, content string) {
	if !span.IsRecording() {
		return
	}
	if t.Capture() && content != "" {
		span.SetAttributes(ToolCallResult.String(content))
	}
	if !success {
		span.SetStatus(codes.Error, "tool_error")
		span.SetAttributes(ErrorType.String("tool_error"))
	}
	span.End()
}

// MCP starts the client span of an MCP request: "{method} {target}" (target: the tool's name, for
// tools/call), and returns the _meta entries that carry the trace to the server (traceparent), nil when
// there is no trace.
func (t *Tracing) MCP(ctx context.Context, method, target, transport, sessionID, protocol string) (context.Context, trace.Span, map[string]any) {
	if t == nil {
		return ctx, noSpan, nil
	}
	name := method
	attrs := []attribute.KeyValue{MCPMethodName.String(method)}
	if target != "" {
		name += " " + target
		attrs = append(attrs, ToolName.String(target), OperationName.String("execute_tool"))
	}
	if sessionID != "" {
		attrs = append(attrs, MCPSessionID.String(sessionID))
	}
	if protocol != "" {
		attrs = append(attrs, MCPProtocol.String(protocol))
	}
	if transport != "" {
		attrs = append(attrs, NetworkTransport.String(transport))
	}
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	carrier := propagation.MapCarrier{}
	t.inject(ctx, carrier)
	if len(carrier) == 0 {
		return ctx, span, nil
	}
	meta := make(map[string]any, len(carrier))
	for k, v := range carrier {
		meta[k] = v
	}
	return ctx, span, meta
}

// EndMCP ends an MCP request's span; err is the request's failure, or nil.
func EndMCP(span trace.Span, err error, toolError bool) {
	if !span.IsRecording() {
		return
	}
	switch {
	case err != nil:
		kind := "error"
		if errors.Is(err, context.DeadlineExceeded) {
			kind = "timeout"
		} else if errors.Is(err, context.Canceled) {
			kind = "cancelled"
		}
		span.SetStatus(codes.Error, kind)
		span.SetAttributes(ErrorType.String(kind))
	case toolError:
		span.SetStatus(codes.Error, "tool_error")
		span.SetAttributes(ErrorType.String("tool_error"))
	}
	span.End()
}
