package chat

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strings"
	"unicode"

	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/store"
)

// ErrClosed is the Kind of the *Error Start returns once the service is shutting down.
var ErrClosed = errors.New("chatd is shutting down")

// plan is a checked request with everything it resolved.
type plan struct {
	user     string
	req      Request
	agentNm  string
	agent    Agent
	model    string // provider/model
	provider llm.Provider
	upstream string // the provider's model name
	tools    *toolSet
	session  *store.Session
}

// Start checks req, stores the user's message and starts the run. The run belongs to the service, not
// to ctx: it goes on when the caller goes away, and Close cancels it. When Start returns a run, the
// user's message is stored.
func (s *Service) Start(ctx context.Context, user string, req Request) (*Run, error) {
	p, err := s.plan(ctx, user, req)
	if err != nil {
		return nil, err
	}
	run, err := s.reserve(p)
	if err != nil {
		return nil, err
	}
	history, err := s.begin(ctx, p, run)
	if err != nil {
		s.release(run)
		s.wg.Done()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(s.base)
	go func() { // counted by reserve
		defer s.wg.Done()
		defer cancel()
		defer s.release(run)
		s.execute(runCtx, p, run, history)
	}()
	return run, nil
}

// plan validates the request and resolves its agent, model, tools and session.
func (s *Service) plan(ctx context.Context, user string, req Request) (*plan, error) {
	if err := req.validate(); err != nil {
		return nil, err
	}
	p := &plan{user: user, req: req}
	if req.SessionID != "" {
		sess, err := s.opts.Store.Session(ctx, user, req.SessionID)
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return nil, &Error{Kind: store.ErrNotFound, Code: "session_not_found", Message: fmt.Sprintf("no session %q", req.SessionID)}
			}
			return nil, err
		}
		p.session = sess
		switch {
		case req.Agent == "":
			req.Agent = sess.Agent
		case req.Agent != sess.Agent:
			return nil, invalid("agent_mismatch", "session %s belongs to agent %q, not %q; start a new session for another agent", sess.ID, sess.Agent, req.Agent)
		}
	}
	p.agentNm = req.Agent
	if p.agentNm == "" {
		p.agentNm = "default"
	}
	a, ok := s.opts.Agents[p.agentNm]
	if !ok {
		return nil, invalid("unknown_agent", "no agent %q; configured agents: %s", p.agentNm, strings.Join(s.AgentNames(), ", "))
	}
	p.agent = a
	if err := s.resolveModel(p); err != nil {
		return nil, err
	}
	tools, err := s.toolsFor(a, req.SelectedTools)
	if err != nil {
		return nil, err
	}
	p.tools = tools
	return p, nil
}

func (s *Service) resolveModel(p *plan) error {
	p.model = cmp.Or(p.req.Model, p.agent.Model, s.opts.DefaultModel)
	if p.model == "" {
		return invalid("no_model", "no model is configured: start chatd with a provider (OPENAI_API_KEY; OPENAI_BASE_URL for an OpenAI-compatible server; or OLLAMA_HOST), set CHATD_MODEL=provider/model, or send \"model\" in the request")
	}
	prov, upstream, err := s.opts.Models.Resolve(p.model)
	if err != nil {
		return invalid("invalid_model", "%s", err.Error())
	}
	p.provider, p.upstream = prov, upstream
	return nil
}

// reserve makes the run the session's active one (a session has at most one) and counts it as running.
// The count is taken under the lock that checks closing, so that Close never waits on a WaitGroup a
// starting run adds to.
func (s *Service) reserve(p *plan) (*Run, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, &Error{Kind: ErrClosed, Code: "shutting_down", Message: ErrClosed.Error()}
	}
	if p.session != nil {
		if r := s.active[p.session.ID]; r != nil {
			return nil, &Error{Kind: ErrBusy, Code: "session_busy", RunID: r.ID,
				Message: fmt.Sprintf("session %s already has an active run (%s); wait for it to end", p.session.ID, r.ID)}
		}
	}
	sessionID := ""
	if p.session != nil {
		sessionID = p.session.ID
	}
	run := newRun(newID(), sessionID, p.agentNm, p.model)
	if sessionID != "" {
		s.active[sessionID] = run
	}
	s.wg.Add(1)
	return run, nil
}

func (s *Service) release(run *Run) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active[run.SessionID] == run {
		delete(s.active, run.SessionID)
	}
}

// begin creates the session when needed, stores the run and the user's message, and returns the history
// the model sees. Its events are the run's first.
func (s *Service) begin(ctx context.Context, p *plan, run *Run) ([]llm.Message, error) {
	if p.session == nil {
		sess := &store.Session{Agent: p.agentNm, Title: title(p.req.Message)}
		if err := s.opts.Store.CreateSession(ctx, p.user, sess); err != nil {
			return nil, fmt.Errorf("create session: %w", err)
		}
		p.session = sess
		s.mu.Lock()
		run.SessionID = sess.ID
		s.active[sess.ID] = run
		s.mu.Unlock()
	} else if p.session.Title == "" {
		t := title(p.req.Message)
		if _, err := s.opts.Store.UpdateSession(ctx, p.user, p.session.ID, store.SessionPatch{Title: &t}); err != nil {
			return nil, fmt.Errorf("title session: %w", err)
		}
	}
	records, err := s.opts.Store.Records(ctx, p.user, p.session.ID)
	if err != nil {
		return nil, fmt.Errorf("load history: %w", err)
	}
	if err := s.opts.Store.CreateRun(ctx, p.user, &store.Run{ID: run.ID, SessionID: p.session.ID, Agent: p.agentNm, Model: p.model}); err != nil {
		return nil, fmt.Errorf("create run: %w", err)
	}
	user := &store.Record{SessionID: p.session.ID, RunID: run.ID, Role: store.RoleUser, Content: p.req.Message, Attachments: p.req.Attachments}
	if err := s.opts.Store.AppendRecord(ctx, p.user, user); err != nil {
		// The run exists: end it so that it is not left running.
		s.finishStored(p, run, store.RunEnd{Status: store.RunFailed, Error: "the user's message could not be stored"})
		if errors.Is(err, store.ErrConflict) {
			// Only a run of another chatd process could hold a call open now.
			return nil, &Error{Kind: ErrBusy, Code: "session_busy", Message: "the session has a tool call still running; try again when its run has ended"}
		}
		return nil, fmt.Errorf("store user message: %w", err)
	}
	run.emit(EventRunStart, mustJSON(runStartData{RunID: run.ID, SessionID: p.session.ID, Model: p.model, Agent: p.agentNm}))
	run.emit(EventRecord, mustJSON(recordData{Message: user}))
	return append(history(records), userMessage(user)), nil
}

// finishStored ends a stored run that never started its loop.
func (s *Service) finishStored(p *plan, run *Run, end store.RunEnd) {
	if _, err := s.opts.Store.FinishRun(context.WithoutCancel(s.base), p.user, run.ID, end); err != nil {
		s.log.Error("finish run", "run", run.ID, "err", err)
	}
}

// title makes a session title from the first message: its first line, cut at a word near 60 characters.
func title(msg string) string {
	msg = strings.TrimSpace(msg)
	if i := strings.IndexAny(msg, "\r\n"); i >= 0 {
		msg = msg[:i]
	}
	msg = strings.Join(strings.Fields(msg), " ")
	runes := []rune(msg)
	if len(runes) <= maxTitleRunes {
		return msg
	}
	cut := maxTitleRunes
	for i := maxTitleRunes; i > maxTitleRunes/2; i-- {
		if unicode.IsSpace(runes[i]) {
			cut = i
			break
		}
	}
	return strings.TrimSpace(string(runes[:cut])) + "…"
}

// execute runs the agent loop and ends the run.
func (s *Service) execute(ctx context.Context, p *plan, run *Run, history []llm.Message) {
	obs := newObserver(s, p, run)
	cfg := agent.Config{
		Provider:      p.provider,
		Model:         p.upstream,
		System:        systemPrompt(p),
		ToolSpecs:     p.tools.specs,
		Tools:         p.tools,
		Temperature:   cmp.Or(p.req.Temperature, p.agent.Temperature),
		MaxTokens:     cmp.Or(p.req.MaxTokens, p.agent.MaxTokens),
		MaxIterations: cmp.Or(p.req.MaxIterations, p.agent.MaxIterations),
		RetryBase:     s.opts.RetryBase,
		Logger:        s.log.With("run", run.ID),
	}
	defer func() {
		// A bug must cost one run, not the process and every other run with it; the run still ends,
		// with its open calls closed.
		if v := recover(); v != nil {
			s.log.Error("run panicked", "run", run.ID, "panic", v, "stack", string(debug.Stack()))
			if !obs.finished {
				obs.finish(agent.Result{Status: agent.StatusFailed, Err: errPanic})
			}
		}
	}()
	res := agent.Run(ctx, cfg, history, obs)
	obs.finish(res)
}

var errPanic = errors.New("internal error")

// ActiveRun returns the id of the session's active run, or "".
func (s *Service) ActiveRun(sessionID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.active[sessionID]; r != nil {
		return r.ID
	}
	return ""
}

// AgentNames lists the configured agents.
func (s *Service) AgentNames() []string {
	return slices.Sorted(maps.Keys(s.opts.Agents))
}

// Recover ends the runs a previous process left running — it died or was killed mid-run — as
// interrupted, closing their open tool calls, so that their sessions accept the next message. Call it
// at start-up, before serving.
func (s *Service) Recover(ctx context.Context) error {
	ended, err := s.opts.Store.InterruptRunning(ctx, "chatd stopped before this call finished.")
	for _, r := range ended {
		s.log.Warn("run interrupted by a previous stop", "run", r.ID, "session", r.SessionID)
	}
	if err != nil {
		return fmt.Errorf("recover runs: %w", err)
	}
	return nil
}

// Drain stops accepting new runs and waits for the running ones to end, or for ctx.
func (s *Service) Drain(ctx context.Context) error {
	s.stopAccepting()
	return s.wait(ctx)
}

// Close stops accepting runs, cancels the running ones (each keeps its partial answer) and waits for
// them to be stored, or for ctx.
func (s *Service) Close(ctx context.Context) error {
	s.stopAccepting()
	s.cancel()
	return s.wait(ctx)
}

func (s *Service) stopAccepting() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
}

func (s *Service) wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("chat: runs still running: %w", ctx.Err())
	}
}
