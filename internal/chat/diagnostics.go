package chat

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"

	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/store"
)

// A service keeps the diagnostics of its keptDiagnostics most recently started runs, and fewer when
// their requests hold more than its diagnostics limit (Limits.DiagnosticsBytes) together. A request
// larger than a quarter of the limit is not kept at all: its diagnostics say so instead.
const keptDiagnostics = 64

// Diagnostics is what a run sent its model: the settings it resolved, its system prompt and tools, and
// the body of its latest model call as the provider encodes it. It is kept in memory for the service's
// most recent runs only (keptDiagnostics): not across a restart, and not for another chatd instance's
// runs.
type Diagnostics struct {
	RunID         string
	SessionID     string
	Agent         string
	Model         string // provider/model of the latest call (a fallback's, when one answered)
	SystemPrompt  string
	Tools         []string
	Temperature   *float64
	MaxTokens     int
	MaxIterations int
	Context       map[string]any
	// ModelCalls counts the calls sent so far, retries and continuations included.
	ModelCalls int
	// Request is the JSON body of the latest model call; null before the first call, when the
	// provider cannot show its body, or when it was too large to keep (RequestOmitted says so).
	Request json.RawMessage
	// RequestOmitted says why Request is null although the run called its model.
	RequestOmitted string
}

// diagnostics keeps the latest request of recent runs: a run's loop reports each call it sends
// (sending), and Service.Diagnostics reads them back (lookup).
type diagnostics struct {
	limit int // bytes the kept diagnostics may hold together
	log   *slog.Logger

	mu    sync.Mutex
	runs  map[string]*diagEntry
	order []string // run ids, oldest first
	bytes int      // the bytes the kept diagnostics hold
}

type diagEntry struct {
	user  string
	d     Diagnostics
	prov  llm.Provider // of the latest call
	req   llm.Request  // the latest call; its slices are never changed once sent
	sent  bool
	bytes int // the bytes the entry holds: its system prompt and context, and req's text, data and arguments
	base  int // of those, the system prompt's and the context's
}

// newDiagnostics keeps the diagnostics of recent runs within limit bytes.
func newDiagnostics(limit int, log *slog.Logger) *diagnostics {
	return &diagnostics{limit: limit, log: log, runs: map[string]*diagEntry{}}
}

// track starts keeping a run's diagnostics, forgetting the oldest run's beyond the limits. Its system
// prompt and context count toward them from the start.
func (g *diagnostics) track(run *Run, p *plan, system string) *diagEntry {
	e := &diagEntry{user: p.user, d: Diagnostics{RunID: run.ID, SessionID: run.SessionID, Agent: p.agentNm,
		Model: p.model, SystemPrompt: system, Tools: make([]string, len(p.tools.specs)),
		Temperature: cmp.Or(p.req.Temperature, p.agent.Temperature), MaxTokens: cmp.Or(p.req.MaxTokens, p.agent.MaxTokens),
		MaxIterations: cmp.Or(p.req.MaxIterations, p.agent.MaxIterations), Context: p.req.Context}}
	for i, t := range p.tools.specs {
		e.d.Tools[i] = t.Name
	}
	e.base = len(system) + p.contextBytes
	e.bytes = e.base
	g.mu.Lock()
	defer g.mu.Unlock()
	g.runs[run.ID] = e
	g.order = append(g.order, run.ID)
	g.bytes += e.bytes
	g.evict()
	return e
}

// evict forgets the oldest runs beyond the limits, never the latest. The caller holds g.mu.
func (g *diagnostics) evict() {
	for len(g.order) > 1 && (len(g.order) > keptDiagnostics || g.bytes > g.limit) {
		g.bytes -= g.runs[g.order[0]].bytes
		delete(g.runs, g.order[0])
		g.order = append(g.order[:0], g.order[1:]...)
	}
}

// sending is the agent loop's Config.Sending for the entry's run. A request over a quarter of the
// limit is not kept: it would pin that much memory (a long conversation's every record) for a view.
func (g *diagnostics) sending(e *diagEntry) func(agent.Model, *llm.Request) {
	return func(m agent.Model, req *llm.Request) {
		n := requestBytes(req)
		g.mu.Lock()
		defer g.mu.Unlock()
		e.prov, e.sent = m.Provider, true
		e.d.Model = m.ProviderName + "/" + m.Name
		e.d.ModelCalls++
		if g.limit > 0 && n > g.limit/4 {
			e.req, n = llm.Request{}, 0
			e.d.RequestOmitted = fmt.Sprintf("the request was %d bytes; chatd keeps requests of at most %d for diagnostics", requestBytes(req), g.limit/4)
		} else {
			e.req, e.d.RequestOmitted = *req, ""
		}
		if g.runs[e.d.RunID] == e { // still kept
			g.bytes += e.base + n - e.bytes
			e.bytes = e.base + n
			g.evict()
		}
	}
}

// requestBytes is about the memory a request holds: its texts, data, arguments and tool schemas.
func requestBytes(req *llm.Request) int {
	n := len(req.System)
	for _, t := range req.Tools {
		n += len(t.Name) + len(t.Description) + len(t.InputSchema)
	}
	for _, msg := range req.Messages {
		for _, p := range msg.Parts {
			n += len(p.Text) + len(p.Data) + len(p.Signature) + len(p.ID)
		}
		for _, c := range msg.ToolCalls {
			n += len(c.ID) + len(c.Name) + len(c.Arguments) + len(c.Signature)
		}
	}
	return n
}

// Diagnostics returns what one of the user's recent runs sent its model. A run this service does not
// keep (too old, started before a restart, or not the user's) is an *Error with code
// diagnostics_unavailable and Kind store.ErrNotFound.
func (s *Service) Diagnostics(_ context.Context, user, runID string) (*Diagnostics, error) {
	return s.diag.lookup(user, runID)
}

// lookup returns the diagnostics of the user's run, its latest request encoded as its provider sends it.
func (g *diagnostics) lookup(user, runID string) (*Diagnostics, error) {
	g.mu.Lock()
	e := g.runs[runID]
	if e == nil || e.user != user {
		g.mu.Unlock()
		return nil, &Error{Kind: store.ErrNotFound, Code: "diagnostics_unavailable",
			Message: "no diagnostics for run " + runID + ": they are kept in memory for the last runs this chatd started"}
	}
	d, prov, req, sent := e.d, e.prov, e.req, e.sent
	d.Tools = append([]string(nil), d.Tools...)
	g.mu.Unlock()
	if enc, ok := prov.(llm.Encoder); ok && sent && d.RequestOmitted == "" {
		body, err := enc.Encode(&req)
		if err != nil {
			g.log.Warn("encode a run's request for its diagnostics", "run", runID, "err", err)
		} else {
			d.Request = body
		}
	}
	return &d, nil
}
