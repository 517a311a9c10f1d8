package chat

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/store"
)

// A run's diagnostics are stored call by call (store.ModelCall), in the writes the run makes anyway:
// with the turn a call made (AppendTurn) or with the run's end (FinishRun). Until then the calls a run
// sent are kept with the run in memory (callLog), where they are also shown. What a call stores: its
// system prompt (once, while it stays the same), the names of its tools, its settings, the request body
// as its provider encodes it, compressed, and the model's raw answer. Limits.DiagnosticsBytes bounds
// what one run stores: a call's request larger than a quarter of it, or one past what the run has left,
// is not stored, and the call says so.

// gzipWriters are reused: a compressor's state is about a megabyte, which a model call would otherwise
// allocate each time (BenchmarkCallLogTake, a 107 KB request: 1.4 MB and 4 ms a call without the pool,
// 150 KB and 0.4-0.9 ms with it, on the 2-core machine with other tests running).
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
	return zw
}}

// maxRequestRead bounds what a stored request may decompress to when it is read back: far beyond any
// request a provider takes, so that a corrupted row cannot take the process's memory.
const maxRequestRead = 256 << 20

// Diagnostics is what one model call of a run was sent and answered, with the run's other calls
// listed: the settings the run resolved, the system prompt and tools of the call, the request body as
// its provider encoded it, and the model's raw answer before chatd parsed it.
type Diagnostics struct {
	RunID         string
	SessionID     string
	Agent         string
	Model         string // provider/model of the call shown (a fallback's, when one answered)
	SystemPrompt  string
	Tools         []string
	Temperature   *float64
	MaxTokens     int
	MaxIterations int
	Context       map[string]any
	// ModelCalls counts the calls the run has sent so far, retries and continuations included.
	ModelCalls int
	// Call is the number of the call shown (1 … ModelCalls): the latest unless one was asked for.
	Call int
	// Request is the JSON body of the call shown; null when it was not kept (RequestOmitted says why).
	Request        json.RawMessage
	RequestOmitted string
	// Output is the model's raw answer of the turn the call ended (text, reasoning, tool calls, finish
	// reason); null for a call that ended none (it failed, or a continuation followed it).
	Output json.RawMessage
	// Calls lists every call of the run, in order.
	Calls []CallInfo
}

// CallInfo is one model call of a run, listed.
type CallInfo struct {
	N              int
	Model          string
	At             time.Time
	RequestOmitted string
	Output         bool // the call ended a turn: its Output is kept
}

// callSettings are the settings a call stores, as JSON.
type callSettings struct {
	Temperature   *float64       `json:"temperature,omitempty"`
	MaxTokens     int            `json:"max_tokens,omitempty"`
	MaxIterations int            `json:"max_iterations,omitempty"`
	Reasoning     *llm.Reasoning `json:"reasoning,omitempty"`
	// Context is the request's context, stored with the calls whose system prompt is stored.
	Context map[string]any `json:"context,omitempty"`
}

// callOutput is a model's raw answer of one turn, as a call stores it: its text as the model wrote it
// (continuations joined), before anything of chatd's reads it, and its tool calls as the loop put them
// together (arguments repaired when double-encoded).
type callOutput struct {
	Text         string         `json:"text,omitempty"`
	Reasoning    string         `json:"reasoning,omitempty"`
	ToolCalls    []callToolCall `json:"tool_calls,omitempty"`
	FinishReason string         `json:"finish_reason,omitempty"`
	Omitted      string         `json:"omitted,omitempty"`
}

type callToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// outputOf is the raw answer of a turn of the agent loop.
func outputOf(t *agent.Turn) *callOutput {
	out := &callOutput{Text: t.Text, Reasoning: t.Reasoning, FinishReason: t.FinishReason}
	for _, c := range t.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, callToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	return out
}

// callLog is one run's record of its model calls: those sent and not stored yet, and what the run has
// stored so far. The agent loop reports each call it sends (sending, on the loop's goroutine); the run's
// writes take the pending ones (take); a reader of the run's diagnostics copies them (pending).
type callLog struct {
	runID, sessionID string
	maxIterations    int
	context          map[string]any
	limit            int // bytes the run's stored diagnostics may hold
	log              *slog.Logger

	mu   sync.Mutex
	sent int // calls sent
	open []sentCall
	// Touched by take only, on the run's goroutine.
	used       int    // bytes stored
	lastSystem string // the system prompt last stored
	stored     bool   // a call stored a system prompt
}

// sentCall is a model call sent: its request, kept as the loop sent it (the loop never changes it).
type sentCall struct {
	n     int
	model string // provider/model
	prov  llm.Provider
	req   llm.Request
	at    time.Time
}

func newCallLog(run *Run, p *plan, limit int, log *slog.Logger) *callLog {
	return &callLog{runID: run.ID, sessionID: run.SessionID, limit: limit, log: log, context: p.req.Context,
		maxIterations: cmp.Or(p.req.MaxIterations, p.agent.MaxIterations, agent.DefaultMaxIterations)}
}

// sending is the agent loop's Config.Sending: it keeps the call until it is stored.
func (l *callLog) sending(m agent.Model, req *llm.Request) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent++
	l.open = append(l.open, sentCall{n: l.sent, model: llm.Origin(m.ProviderName, m.Name), prov: m.Provider, req: *req,
		at: time.Now()})
}

// take returns the calls sent and not stored yet, in their stored form, out (when not nil) as the
// last one's answer, and forgets them: the caller stores them.
func (l *callLog) take(out *callOutput) []store.ModelCall {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	open := l.open
	l.open = nil
	l.mu.Unlock()
	calls := make([]store.ModelCall, len(open))
	for i, c := range open {
		var o *callOutput
		if i == len(open)-1 {
			o = out
		}
		calls[i] = l.stored1(c, o)
	}
	return calls
}

// stored1 is a call in its stored form, within what the run may store.
func (l *callLog) stored1(c sentCall, out *callOutput) store.ModelCall {
	mc := store.ModelCall{RunID: l.runID, SessionID: l.sessionID, N: c.n, Model: c.model, Tools: toolNames(&c.req),
		CreatedAt: c.at}
	set := callSettings{Temperature: c.req.Temperature, MaxTokens: c.req.MaxTokens, MaxIterations: l.maxIterations,
		Reasoning: c.req.Reasoning}
	if l.stored && c.req.System == l.lastSystem {
		mc.SameSystem = true
	} else {
		mc.System, l.lastSystem, l.stored = c.req.System, c.req.System, true
		l.used += len(mc.System)
		set.Context = l.context
	}
	mc.Settings, _ = json.Marshal(set)
	mc.Request, mc.RequestOmitted = l.compressed(c)
	if out != nil {
		raw, err := json.Marshal(out)
		if err == nil && l.used+len(raw) > l.limit {
			raw, err = json.Marshal(callOutput{Omitted: fmt.Sprintf("the answer was %d bytes, past what the run's diagnostics may hold (limits.diagnostics_bytes, %d)", len(raw), l.limit)})
		}
		if err == nil {
			mc.Output = raw
			l.used += len(raw)
		}
	}
	return mc
}

// compressed is a call's request body as its provider encodes it, gzip-compressed, or why it is not
// kept.
func (l *callLog) compressed(c sentCall) ([]byte, string) {
	enc, ok := c.prov.(llm.Encoder)
	if !ok {
		return nil, "this provider cannot show the body of its requests"
	}
	body, err := enc.Encode(&c.req)
	if err != nil {
		l.log.Warn("encode a model call's request for its diagnostics", "run", l.runID, "call", c.n, "err", err)
		return nil, "the request could not be encoded again: " + err.Error()
	}
	var buf bytes.Buffer
	zw := gzipWriters.Get().(*gzip.Writer)
	zw.Reset(&buf)
	zw.Write(body)
	zw.Close()
	gzipWriters.Put(zw)
	n := buf.Len()
	switch {
	case n > l.limit/4:
		return nil, fmt.Sprintf("the request was %d bytes (%d compressed); chatd stores requests of at most %d compressed bytes for diagnostics (a quarter of limits.diagnostics_bytes)", len(body), n, l.limit/4)
	case l.used+n > l.limit:
		return nil, fmt.Sprintf("the run's diagnostics reached their limit of %d bytes (limits.diagnostics_bytes); this request (%d bytes) was not stored", l.limit, len(body))
	}
	l.used += n
	return bytes.Clone(buf.Bytes()), ""
}

// pending returns copies of the calls sent and not stored yet, in their stored form, without counting
// them: what a reader of a running run is shown besides the stored calls.
func (l *callLog) pending() []store.ModelCall {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	open := append([]sentCall(nil), l.open...)
	l.mu.Unlock()
	shown := &callLog{runID: l.runID, sessionID: l.sessionID, limit: l.limit, log: l.log, context: l.context,
		maxIterations: l.maxIterations}
	out := make([]store.ModelCall, len(open))
	for i, c := range open {
		out[i] = shown.stored1(c, nil)
	}
	return out
}

func toolNames(req *llm.Request) []string {
	names := make([]string, len(req.Tools))
	for i, t := range req.Tools {
		names[i] = t.Name
	}
	return names
}

// Diagnostics returns what one of the user's runs sent its model: call n (1 …), or the latest for 0,
// with the run's calls listed. It reads the calls the store holds — also for runs of another process,
// or before a restart — and, for a run of this process still going, the calls it sent since its last
// write. A run that is not the user's, or has no call to show, is an *Error with code
// diagnostics_unavailable and Kind store.ErrNotFound.
func (s *Service) Diagnostics(ctx context.Context, user, runID string, n int) (*Diagnostics, error) {
	unavailable := func(why string) error {
		return &Error{Kind: store.ErrNotFound, Code: "diagnostics_unavailable", Message: "no diagnostics for run " + runID + ": " + why}
	}
	run, err := s.opts.Store.Run(ctx, user, runID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, unavailable("no such run")
	}
	if err != nil {
		return nil, err
	}
	calls, err := s.opts.Store.ModelCalls(ctx, user, runID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, unavailable("no such run")
	}
	if err != nil {
		return nil, err
	}
	if live := s.live(user, runID); live != nil {
		for _, c := range live.calls.pending() {
			if len(calls) == 0 || c.N > calls[len(calls)-1].N {
				calls = append(calls, c)
			}
		}
	}
	if len(calls) == 0 {
		return nil, unavailable("it has sent no model call yet, or ran before chatd stored diagnostics")
	}
	i := len(calls) - 1
	if n > 0 {
		if i = indexOfCall(calls, n); i < 0 {
			return nil, &Error{Kind: store.ErrNotFound, Code: "call_not_found",
				Message: fmt.Sprintf("run %s has no model call %d; its calls are 1 to %d", runID, n, calls[len(calls)-1].N)}
		}
	}
	return s.diagnosticsOf(run, calls, i), nil
}

func indexOfCall(calls []store.ModelCall, n int) int {
	for i, c := range calls {
		if c.N == n {
			return i
		}
	}
	return -1
}

// diagnosticsOf shows calls[i] of run: its system prompt and context are those of the latest call up
// to it that stored them.
func (s *Service) diagnosticsOf(run *store.Run, calls []store.ModelCall, i int) *Diagnostics {
	c := calls[i]
	d := &Diagnostics{RunID: run.ID, SessionID: run.SessionID, Agent: run.Agent, Model: c.Model, Tools: c.Tools,
		ModelCalls: calls[len(calls)-1].N, Call: c.N, RequestOmitted: c.RequestOmitted, Output: c.Output}
	var set callSettings
	if err := json.Unmarshal(c.Settings, &set); err == nil {
		d.Temperature, d.MaxTokens, d.MaxIterations = set.Temperature, set.MaxTokens, set.MaxIterations
	}
	for j := i; j >= 0; j-- {
		if !calls[j].SameSystem {
			d.SystemPrompt = calls[j].System
			var first callSettings
			if json.Unmarshal(calls[j].Settings, &first) == nil {
				d.Context = first.Context
			}
			break
		}
	}
	if c.Request != nil {
		body, err := gunzip(c.Request)
		switch {
		case err != nil:
			s.log.Warn("read a stored request for diagnostics", "run", run.ID, "call", c.N, "err", err)
			d.RequestOmitted = "the stored request could not be read"
		case !json.Valid(body):
			d.RequestOmitted = "the stored request is not JSON"
		default:
			d.Request = body
		}
	}
	for _, c := range calls {
		d.Calls = append(d.Calls, CallInfo{N: c.N, Model: c.Model, At: c.CreatedAt, RequestOmitted: c.RequestOmitted,
			Output: c.Output != nil})
	}
	return d
}

func gunzip(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(io.LimitReader(zr, maxRequestRead+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxRequestRead {
		return nil, errors.New("over " + strconv.Itoa(maxRequestRead) + " bytes")
	}
	return body, nil
}
