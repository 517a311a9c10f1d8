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
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/store"
)

// A run's diagnostics are stored call by call (store.ModelCall), in the writes the run makes anyway:
// with the turn a call made (AppendTurn) or with the run's end (FinishRun). Until such a write returns,
// the calls a run sent are kept with the run in memory (callLog), where they are also shown. What a call
// stores: its system prompt (once, while it stays the same), the names of its tools, its settings (the
// request's context with the run's first call only), the request body as its provider encodes it,
// compressed, and the model's raw answer. Limits.DiagnosticsBytes bounds what one run stores, all of it
// counted: a system prompt or context over a quarter of it, or past what the run has left, is cut or left
// out; so is a request (one larger than the limit before compression is not even compressed), and an
// answer past what is left. Each call keeps its small parts whatever is left (model, tool names,
// settings, why something was left out). A negative limit stores nothing and keeps nothing.

// gzipWriters are reused: a compressor's state is about a megabyte, which a model call would otherwise
// allocate each time (BenchmarkCallLogTake, a 107 KB request: 1.4 MB and 4 ms a call without the pool,
// 150 KB and 0.4-0.9 ms with it, on the 2-core machine with other tests running).
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
	return zw
}}

// gzipChunk is how much of a request is compressed before the compressed size is checked again: a
// request that will not fit stops being compressed soon after it has passed the bound.
const gzipChunk = 256 << 10

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
	// Context is the request's context, stored with the run's first call; ContextOmitted says why it
	// is not.
	Context        map[string]any `json:"context,omitempty"`
	ContextOmitted string         `json:"context_omitted,omitempty"`
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
// writes take the pending ones (take) and say when they have returned (stored); a reader of the run's
// diagnostics copies the calls not stored yet (pending), those taken by a write still going included.
// A nil *callLog keeps nothing (limits.diagnostics_bytes: -1).
type callLog struct {
	runID, sessionID string
	maxIterations    int
	context          map[string]any
	limit            int // bytes the run's stored diagnostics may hold
	log              *slog.Logger

	mu    sync.Mutex
	sent  int         // calls sent
	open  []*sentCall // sent, not taken
	taken []*sentCall // taken by a write that has not returned
	// Touched by take only, on the run's goroutine.
	used          int    // bytes stored
	lastSystem    string // the system prompt last stored
	stored1st     bool   // a call stored a system prompt
	contextStored bool   // a call stored the context (or why not)
}

// sentCall is a model call sent: its request, kept as the loop sent it (the loop never changes it), the
// body its provider sent (handed over by the provider's Stream, on the run's goroutine, while a reader
// of the running run may be compressing the call), and that body compressed, made once for the write
// and every reader.
type sentCall struct {
	n        int
	model    string // provider/model
	prov     llm.Provider
	req      llm.Request // without its Encoded hook
	attached int         // bytes of attachments in req
	at       time.Time

	mu     sync.Mutex
	sent   []byte // the body the provider sent, until compressed; nil when over the limit
	size   int    // its length
	handed bool   // the provider handed its body over
	sealed bool   // the call is compressed: a body handed over now is not kept

	once    sync.Once
	body    []byte // compressed; nil when not kept
	omitted string // why body is nil
}

func newCallLog(run *Run, p *plan, limit int, log *slog.Logger) *callLog {
	if limit < 0 {
		return nil
	}
	return &callLog{runID: run.ID, sessionID: run.SessionID, limit: limit, log: log, context: p.req.Context,
		maxIterations: cmp.Or(p.req.MaxIterations, p.agent.MaxIterations, agent.DefaultMaxIterations)}
}

// sending is the agent loop's Config.Sending: it keeps the call until it is stored, and sets the
// request's Encoded hook so that the body stored is the one the provider sends, not encoded again. A
// request whose attachments alone pass the limit is not kept, so it gets no hook; nor does a request to
// a provider that cannot show its body. The loop sends every attempt of a call with the same request,
// so the hook is set (or cleared) for each.
func (l *callLog) sending(m agent.Model, req *llm.Request) {
	if l == nil {
		return
	}
	c := &sentCall{model: llm.Origin(m.ProviderName, m.Name), prov: m.Provider, req: *req, at: time.Now()}
	c.req.Encoded = nil
	for _, msg := range req.Messages {
		for _, p := range msg.Parts {
			c.attached += len(p.Data)
		}
	}
	req.Encoded = nil
	if _, ok := m.Provider.(llm.Encoder); ok && c.attached <= l.limit {
		limit := l.limit
		req.Encoded = func(body []byte) { c.keep(body, limit) }
	}
	// The calls sent before this one have ended (the loop sends one at a time): a turn of many attempts
	// (retries, fallbacks, continuations) compresses each as the next goes out, so that it holds one
	// body sent at most, not one per attempt until the turn is stored. It is the work take would do.
	l.mu.Lock()
	earlier := slices.Clone(l.open)
	l.mu.Unlock()
	for _, o := range earlier {
		o.compressed(l.limit, l.log, l.runID)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent++
	c.n = l.sent
	l.open = append(l.open, c)
}

// keep is the request's Encoded hook: it holds the body the provider sends until the call is
// compressed — only its size when it is over limit, which is all its diagnostics will say of it. A body
// handed over after a reader has compressed the call (encoding it itself) is not kept.
func (c *sentCall) keep(body []byte, limit int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sealed {
		return
	}
	c.sent, c.size, c.handed = nil, len(body), true
	if len(body) <= limit {
		c.sent = body
	}
}

// take returns the calls sent and not stored yet, in their stored form, out (when not nil) as the
// last one's answer: the caller stores them, then calls stored. Until then readers still see them.
func (l *callLog) take(out *callOutput) []store.ModelCall {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	open := l.open
	l.open = nil
	l.taken = append(l.taken, open...)
	l.mu.Unlock()
	calls := make([]store.ModelCall, len(open))
	for i, c := range open {
		var o *callOutput
		if i == len(open)-1 {
			o = out
		}
		calls[i] = l.storedForm(c, o)
	}
	return calls
}

// stored says that the write given the calls taken has returned: readers find them in the store now
// (or, when the write failed, the run's end carries them).
func (l *callLog) stored() {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.taken = nil
	l.mu.Unlock()
}

// storedForm is a call in its stored form, within what the run may store: every part of it counted.
func (l *callLog) storedForm(c *sentCall, out *callOutput) store.ModelCall {
	mc := store.ModelCall{RunID: l.runID, SessionID: l.sessionID, N: c.n, Model: c.model, Tools: toolNames(&c.req),
		CreatedAt: c.at}
	l.used += len(mc.Model)
	for _, t := range mc.Tools {
		l.used += len(t) + 3
	}
	set := callSettings{Temperature: c.req.Temperature, MaxTokens: c.req.MaxTokens, MaxIterations: l.maxIterations,
		Reasoning: c.req.Reasoning}
	if l.stored1st && c.req.System == l.lastSystem {
		mc.SameSystem = true
	} else {
		l.lastSystem, l.stored1st = c.req.System, true
		mc.System = l.fit(c.req.System)
		l.used += len(mc.System)
	}
	if !l.contextStored && len(l.context) > 0 {
		l.contextStored = true
		raw, err := json.Marshal(l.context)
		switch room := l.room(); {
		case err != nil:
			set.ContextOmitted = "the context could not be encoded: " + err.Error()
		case len(raw) > room:
			set.ContextOmitted = fmt.Sprintf("the context was %d bytes; the run's diagnostics had room for %d (a quarter of limits.diagnostics_bytes at most)", len(raw), room)
		default:
			set.Context = l.context
		}
	}
	mc.Settings, _ = json.Marshal(set)
	l.used += len(mc.Settings)
	mc.Request, mc.RequestOmitted = c.compressed(l.limit, l.log, l.runID)
	if n := len(mc.Request); n > 0 && l.used+n > l.limit {
		mc.Request, mc.RequestOmitted = nil, fmt.Sprintf("the run's diagnostics reached their limit of %d bytes (limits.diagnostics_bytes); this request (%d bytes compressed) was not stored", l.limit, n)
	}
	l.used += len(mc.Request) + len(mc.RequestOmitted)
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

// room is what one part of a call may store: a quarter of the limit, within what the run has left.
func (l *callLog) room() int {
	return max(min(l.limit/4, l.limit-l.used), 0)
}

// fit is a system prompt as stored: whole, or cut to the room left with a note saying so.
func (l *callLog) fit(system string) string {
	room := l.room()
	if len(system) <= room {
		return system
	}
	note := fmt.Sprintf("\n[… cut: the system prompt was %d bytes; the run's diagnostics had room for %d (limits.diagnostics_bytes)]", len(system), room)
	n := max(room-len(note), 0)
	for n > 0 && !utf8.RuneStart(system[n]) {
		n--
	}
	return system[:n] + note
}

// compressed is the call's request body as its provider sent it, gzip-compressed, or why it is not
// kept: made once, however many readers and writes ask. The body is the one the provider handed over
// (keep); only when it handed none over — its call failed before, or a reader asks before the provider
// has encoded it — is the request encoded again. A request larger than limit, or whose attachments alone
// are, is not compressed (nor encoded); one whose compressed body passes a quarter of limit stops being
// compressed there.
func (c *sentCall) compressed(limit int, log *slog.Logger, runID string) ([]byte, string) {
	c.once.Do(func() { c.body, c.omitted = compress(c, limit, log, runID) })
	return c.body, c.omitted
}

func compress(c *sentCall, limit int, log *slog.Logger, runID string) ([]byte, string) {
	// The body sent is let go of here, whatever becomes of it: the compressed form is all that is kept.
	c.mu.Lock()
	body, size, handed := c.sent, c.size, c.handed
	c.sent, c.sealed = nil, true
	c.mu.Unlock()
	enc, ok := c.prov.(llm.Encoder)
	if !ok {
		return nil, "this provider cannot show the body of its requests"
	}
	if c.attached > limit {
		return nil, fmt.Sprintf("the request carried %d bytes of attachments, more than a run's diagnostics may hold (limits.diagnostics_bytes, %d)", c.attached, limit)
	}
	if !handed {
		var err error
		if body, err = enc.Encode(&c.req); err != nil {
			log.Warn("encode a model call's request for its diagnostics", "call", c.n, "err", err)
			return nil, "the request could not be encoded again: " + err.Error()
		}
		size = len(body)
	}
	if size > limit {
		return nil, fmt.Sprintf("the request was %d bytes, more than a run's diagnostics may hold (limits.diagnostics_bytes, %d)", size, limit)
	}
	bound := limit / 4
	var buf bytes.Buffer
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(&buf)
	for rest := body; len(rest) > 0; {
		n := min(len(rest), gzipChunk)
		zw.Write(rest[:n])
		rest = rest[n:]
		if buf.Len() > bound {
			return nil, fmt.Sprintf("the request was %d bytes (more than %d compressed); chatd stores requests of at most %d compressed bytes for diagnostics (a quarter of limits.diagnostics_bytes)", len(body), buf.Len(), bound)
		}
	}
	zw.Close()
	if buf.Len() > bound {
		return nil, fmt.Sprintf("the request was %d bytes (%d compressed); chatd stores requests of at most %d compressed bytes for diagnostics (a quarter of limits.diagnostics_bytes)", len(body), buf.Len(), bound)
	}
	return bytes.Clone(buf.Bytes()), ""
}

// pending returns copies of the calls not stored yet — sent, or taken by a write that has not returned
// — in their stored form, without counting them: what a reader of a running run is shown besides the
// stored calls.
func (l *callLog) pending() []store.ModelCall {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	open := append(append([]*sentCall(nil), l.taken...), l.open...)
	l.mu.Unlock()
	shown := &callLog{runID: l.runID, sessionID: l.sessionID, limit: l.limit, log: l.log, context: l.context,
		maxIterations: l.maxIterations}
	out := make([]store.ModelCall, len(open))
	for i, c := range open {
		out[i] = shown.storedForm(c, nil)
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
	// The calls not stored yet are read before the store: a call a write stores meanwhile is then in
	// one or the other (or both: the store's is shown), never in neither.
	var pending []store.ModelCall
	if live := s.live(user, runID); live != nil {
		pending = live.calls.pending()
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
	for _, c := range pending {
		if indexOfCall(calls, c.N) < 0 {
			calls = append(calls, c)
		}
	}
	slices.SortFunc(calls, func(a, b store.ModelCall) int { return a.N - b.N })
	if len(calls) == 0 {
		if s.opts.Limits.DiagnosticsBytes < 0 {
			return nil, unavailable("this chatd keeps no diagnostics (limits.diagnostics_bytes is negative)")
		}
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
			break
		}
	}
	for _, c := range calls { // the context is stored with the run's first call (before: with each new system prompt)
		var first callSettings
		if json.Unmarshal(c.Settings, &first) == nil && (first.Context != nil || first.ContextOmitted != "") {
			d.Context = first.Context
			break
		}
	}
	if c.Request != nil {
		// Nothing larger than the limit is stored (compress): that bounds what a read may take too.
		body, err := gunzip(c.Request, max(s.opts.Limits.DiagnosticsBytes, DefaultDiagnosticsBytes))
		switch {
		case err != nil:
			s.log.Warn("read a stored request for diagnostics", append(storedRunAttrs(run), "call", c.N, "err", err)...)
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

// gunzip decompresses b, refusing to make more than limit bytes of it.
func gunzip(b []byte, limit int) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(io.LimitReader(zr, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(body) > limit {
		return nil, errors.New("over " + strconv.Itoa(limit) + " bytes")
	}
	return body, nil
}
