package chat

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/logging"
	"chatd/internal/runevent"
	"chatd/internal/store"

	"go.opentelemetry.io/otel/trace"
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
	provName string // the provider's configured name
	// fallbacks are the agent's fallback models, resolved.
	fallbacks []agent.Model
	tools     *toolSet
	// session is the run's session; newSession, instead, one to create with the run (its ID set).
	session    *store.Session
	newSession *store.Session
	// retracts is, for a regeneration, the user record whose answer the run replaces.
	retracts string
	// contextBytes is the size of the request's context as JSON.
	contextBytes int
	account      Account
	// parser takes the marked blocks out of the run's answers.
	parser *answerParser
	// actionArgs are, for a server action, its tool's arguments as checked.
	actionArgs json.RawMessage
	// hadTitle says the run's session had a title before the run: one the user gave it, which a
	// generated title never replaces.
	hadTitle bool
	// parent is the trace of the request that sent the run (its HTTP request's span), which the run's
	// span continues; invalid when untraced.
	parent trace.SpanContext
	// decided is, for a run resumed after its approvals, the calls it waited on, decided: they run (or
	// are denied) before the loop goes on.
	decided *awaiting
}

// sessionID is the id of the plan's session, existing or to be created.
func (p *plan) sessionID() string {
	switch {
	case p.session != nil:
		return p.session.ID
	case p.newSession != nil:
		return p.newSession.ID
	}
	return ""
}

// title is the title the run gives its session when it has none: from the message, never for a
// regeneration.
func (p *plan) title() string {
	if p.req.Regenerate || (p.session != nil && p.session.Title != "") {
		return ""
	}
	return title(p.req.Message)
}

// first is the record a run starts with: the user's message, or for a regeneration the marker that
// retracts the last answer.
func (p *plan) first(sessionID string) *store.Record {
	if p.req.Action != nil {
		return p.actionRecord(sessionID)
	}
	if p.req.Regenerate {
		return &store.Record{SessionID: sessionID, Role: store.RoleSystem, Retracts: p.retracts,
			Content: "The last answer was regenerated."}
	}
	return &store.Record{SessionID: sessionID, Role: store.RoleUser, Content: p.req.Message, Attachments: p.req.Attachments}
}

// Start checks req, stores the user's message and starts the run — or, under OnActiveEnqueue when the
// session is busy, queues it. Nothing is stored for a request it refuses: a new session is stored with
// the run and its message, in one transaction. The run belongs to the service, not to ctx: it goes on
// when the caller goes away, and only Cancel or Close stop it. When Start returns a running run, its
// user message is stored; a queued run keeps the request in the store and stores the message when it
// starts.
//
// Its steps: a retried send returns the run the first one started (replay); the request is checked and
// resolved (plan); then the run is created, queued or refused as the session's state asks (place), and
// a created run is launched.
func (s *Service) Start(ctx context.Context, user string, req Request, opt StartOptions) (*Started, error) {
	if s.isClosing() {
		return nil, errClosing()
	}
	sd := send{key: opt.IdempotencyKey, onActive: cmp.Or(opt.OnActiveRun, OnActiveReject)}
	if sd.key != "" {
		sd.hash = requestHash(req)
		if st, err := s.replay(ctx, user, sd.key, sd.hash); st != nil || err != nil {
			return st, err
		}
	}
	p, err := s.plan(ctx, user, req, opt.Account)
	if err != nil {
		return nil, err
	}
	if sd.onActive == OnActiveInterrupt && p.session != nil {
		// Interrupting sends to one session take turns: each cancels the run the one before started,
		// rather than all of them racing for the moment the session is free.
		unlock, err := s.interrupters.lock(ctx, p.session.ID)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	sd.deadline = time.Now().Add(s.opts.InterruptWait)
	return s.place(ctx, p, sd)
}

// send is how a Start was asked to start its run.
type send struct {
	key, hash string // the idempotency key and the request's hash; "" without a key
	onActive  string // OnActiveReject, OnActiveInterrupt or OnActiveEnqueue
	deadline  time.Time
}

// place creates and launches the planned run, or queues or refuses it while its session has an active
// run, as the send asks.
func (s *Service) place(ctx context.Context, p *plan, sd send) (*Started, error) {
	for attempt := 0; ; attempt++ {
		st, err := s.begin(ctx, p, sd.key, sd.hash, attempt)
		switch {
		case errors.Is(err, store.ErrStale):
			// The run started early on the records kept here, and another writer added one since: it
			// was abandoned, and the send goes on as any other, its history read from the store.
			continue
		case errors.Is(err, store.ErrDuplicate):
			// The same key, sent twice at once: the other send won.
			return s.replay(ctx, p.user, sd.key, sd.hash)
		case errors.Is(err, store.ErrConflict) && p.newSession != nil:
			// The new session's id was taken meanwhile: by this user's other send, whose session this
			// one joins, or by another user, for whom it does not exist.
			if err := s.joinSession(ctx, p); err != nil {
				return nil, err
			}
			continue
		case !errors.Is(err, store.ErrBusy):
			return st, err
		}
		st, again, err := s.whenBusy(ctx, p, sd, attempt)
		if !again {
			return st, err
		}
	}
}

// whenBusy does what the send asks of a session that has an active run: queue the run behind it,
// interrupt it, or refuse. It reports again when the session may be free now, and the run is to be
// created again.
func (s *Service) whenBusy(ctx context.Context, p *plan, sd send, attempt int) (st *Started, again bool, err error) {
	active, err := s.opts.Store.ActiveRun(ctx, p.user, p.session.ID)
	if errors.Is(err, store.ErrNotFound) && attempt < 3 {
		return nil, true, nil // it ended meanwhile
	}
	if err != nil {
		return nil, false, err
	}
	switch sd.onActive {
	case OnActiveEnqueue:
		if p.req.Regenerate {
			return nil, false, &Error{Kind: ErrBusy, Code: "session_busy", RunID: active.ID,
				Message: fmt.Sprintf("session %s has an active run (%s), and a regeneration cannot wait behind it: cancel it first, or send with on_active_run=interrupt", p.session.ID, active.ID)}
		}
		st, err := s.enqueue(ctx, p, sd.key, sd.hash, active.ID)
		if errors.Is(err, store.ErrDuplicate) {
			st, err = s.replay(ctx, p.user, sd.key, sd.hash)
		}
		return st, false, err
	case OnActiveInterrupt:
		if time.Now().Before(sd.deadline) {
			// A send its budget would refuse must not cost the session its active run.
			if err := s.overBudget(ctx, p.user, p.account); err != nil {
				return nil, false, err
			}
			if err := s.interruptActive(ctx, p.user, active.ID, sd.deadline, attempt); err != nil {
				return nil, false, err
			}
			return nil, true, nil
		}
	}
	return nil, false, &Error{Kind: ErrBusy, Code: "session_busy", RunID: active.ID,
		Message: fmt.Sprintf("session %s already has an active run (%s); wait for it to end, cancel it, or send with on_active_run=enqueue or interrupt", p.session.ID, active.ID)}
}

// joinSession makes a plan whose new session's id is taken use the session under that id, when it is
// the user's and the request fits it.
func (s *Service) joinSession(ctx context.Context, p *plan) error {
	req := p.req
	req.CreateSession = false
	req.SessionID = p.newSession.ID
	np, err := s.plan(ctx, p.user, req, p.account)
	if err != nil {
		return err
	}
	*p = *np
	return nil
}

// replay returns the run an earlier send with the same idempotency key started, or nil when there is
// none.
func (s *Service) replay(ctx context.Context, user, key, hash string) (*Started, error) {
	r, err := s.opts.Store.RunByKey(ctx, user, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if r.RequestHash != hash {
		return nil, &Error{Kind: ErrKeyReused, Code: "idempotency_key_reused", RunID: r.ID,
			Message: "this Idempotency-Key was already used for another request (run " + r.ID + "); use a new key for a new message"}
	}
	st := &Started{RunID: r.ID, SessionID: r.SessionID, Status: r.Status, Replayed: true}
	if live := s.live(user, r.ID); live != nil {
		st.Status = live.Status()
	}
	return st, nil
}

// requestHash identifies a request, so that a key sent again with another request can be told apart.
func requestHash(req Request) string {
	b, err := json.Marshal(req)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// interruptActive cancels the session's running run and waits until it has ended, or until deadline.
// A run not live here (ending right now, or one whose end the store has not taken) is waited for a
// little, longer on each attempt, so that the caller's retries do not spin.
func (s *Service) interruptActive(ctx context.Context, user, runID string, deadline time.Time, attempt int) error {
	live := s.live(user, runID)
	if live == nil {
		if r, err := s.opts.Store.Run(ctx, user, runID); err == nil && r.Status == store.RunAwaiting {
			// Waiting for a person, it runs nowhere: it ends here, at once.
			if _, err := s.cancelAwaiting(ctx, user, r, "interrupted by a new message"); err == nil {
				return nil
			}
		}
		s.cancelElsewhere(ctx, user, runID, "interrupted by a new message") // another instance's run
		pause := time.NewTimer(min(time.Duration(1<<min(attempt, 6))*10*time.Millisecond, time.Until(deadline)))
		defer pause.Stop()
		select {
		case <-pause.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	live.requestCancel("interrupted by a new message")
	wait := time.NewTimer(time.Until(deadline))
	defer wait.Stop()
	select {
	case <-live.Done():
		return nil
	case <-wait.C:
		return &Error{Kind: ErrBusy, Code: "session_busy", RunID: runID,
			Message: fmt.Sprintf("the active run %s did not stop within %s", runID, s.opts.InterruptWait)}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// plan validates the request and resolves its agent, model, tools and session.
func (s *Service) plan(ctx context.Context, user string, req Request, acct Account) (*plan, error) {
	if err := req.validate(&s.opts.Limits); err != nil {
		return nil, err
	}
	p := &plan{user: user, req: req, account: acct, parent: trace.SpanContextFromContext(ctx)}
	if req.Context != nil {
		b, err := json.Marshal(req.Context)
		if err != nil {
			return nil, invalid("invalid_context", "context cannot be encoded as JSON: %v", err)
		}
		if len(b) > s.opts.Limits.ContextBytes {
			return nil, invalid("context_too_large", "context is %d bytes as JSON; the limit is %d", len(b), s.opts.Limits.ContextBytes)
		}
		p.contextBytes = len(b)
	}
	if req.SessionID != "" {
		sess, err := s.opts.Store.Session(ctx, user, req.SessionID)
		switch {
		case errors.Is(err, store.ErrNotFound) && req.CreateSession && !req.Regenerate:
			p.newSession = &store.Session{ID: req.SessionID}
		case errors.Is(err, store.ErrNotFound):
			return nil, &Error{Kind: store.ErrNotFound, Code: "session_not_found", Message: fmt.Sprintf("no session %q", req.SessionID)}
		case err != nil:
			return nil, err
		default:
			p.session = sess
			p.hadTitle = sess.Title != ""
		}
	} else {
		p.newSession = &store.Session{ID: newID()}
	}
	if p.session != nil {
		if req.Regenerate {
			if err := s.planRegenerate(ctx, p); err != nil {
				return nil, err
			}
		}
		switch {
		case req.Agent == "":
			req.Agent = p.session.Agent
		case req.Agent != p.session.Agent:
			return nil, invalid("agent_mismatch", "session %s belongs to agent %q, not %q; start a new session for another agent", p.session.ID, p.session.Agent, req.Agent)
		}
	}
	p.agentNm = req.Agent
	if p.agentNm == "" {
		p.agentNm = "default"
	}
	a, ok := s.opts.Agents[p.agentNm]
	if !ok {
		// Only the agents the caller may use are named: a key limited to some must not learn the others.
		names := slices.DeleteFunc(s.AgentNames(), func(n string) bool { return acct.Agent != nil && !acct.Agent(n) })
		return nil, invalid("unknown_agent", "no agent %q; agents you may use: %s", p.agentNm, strings.Join(names, ", "))
	}
	if acct.Agent != nil && !acct.Agent(p.agentNm) {
		return nil, &Error{Kind: ErrForbidden, Code: "agent_not_allowed",
			Message: fmt.Sprintf("this API key may not use agent %q", p.agentNm)}
	}
	p.agent = a
	if p.newSession != nil {
		p.newSession.Agent, p.newSession.Title = p.agentNm, title(req.Message)
	}
	if err := s.resolveModel(p); err != nil {
		return nil, err
	}
	tools, err := s.toolsFor(p.agentNm, a, req.Context, req.SelectedTools)
	if err != nil {
		return nil, err
	}
	p.tools = tools
	p.parser = newAnswerParser(activePayloadTypes(s.payloadTypes[p.agentNm], req.Context), s.opts.Limits.MarkerBytes)
	if req.Action != nil {
		if err := s.planAction(ctx, p); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// planRegenerate finds the user message whose answer a regeneration replaces: the session's last. It
// refuses when that answer includes a server action's run.
func (s *Service) planRegenerate(ctx context.Context, p *plan) error {
	recs, err := s.opts.Store.Records(ctx, p.user, p.session.ID)
	if err != nil {
		return err
	}
	cur := store.Current(recs)
	i := len(cur) - 1
	for i >= 0 && cur[i].Role != store.RoleUser {
		i--
	}
	if i < 0 {
		return invalid("nothing_to_regenerate", "session %s has no message to answer again", p.session.ID)
	}
	p.retracts = cur[i].ID
	if slices.ContainsFunc(cur[i+1:], func(r store.Record) bool { return store.IsAction(&r) }) {
		// Its tool has run: retracting the run would hide what it did from the conversation.
		return &Error{Kind: ErrConflict, Code: "action_not_regenerable",
			Message: fmt.Sprintf("the last answer in session %s includes a server action's run, whose tool has already run; send a new message instead of regenerating", p.session.ID)}
	}
	if run := p.req.ReplacesRun; run != "" {
		// Every stored record from the question on answers it, the retracted answers included.
		at := slices.IndexFunc(recs, func(r store.Record) bool { return r.ID == p.retracts })
		if !slices.ContainsFunc(recs[at:], func(r store.Record) bool { return r.RunID == run }) {
			return conversationChanged(p.session.ID)
		}
	}
	return nil
}

// conversationChanged refuses a regeneration whose answer is no longer the session's last.
func conversationChanged(sessionID string) error {
	return &Error{Kind: ErrBusy, Code: "conversation_changed",
		Message: fmt.Sprintf("session %s has a newer message than the answer to regenerate; reload the conversation and ask again", sessionID)}
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
	p.provider, p.upstream, p.provName = prov, upstream, providerName(p.model)
	for _, name := range p.agent.Fallbacks {
		if name == p.model {
			continue
		}
		prov, upstream, err := s.opts.Models.Resolve(name)
		if err != nil {
			return invalid("invalid_model", "agent %q: fallback: %s", p.agentNm, err.Error())
		}
		p.fallbacks = append(p.fallbacks, agent.Model{Provider: prov, Name: upstream, ProviderName: providerName(name)})
	}
	return s.checkPriced(p)
}

// checkPriced refuses, for a sender with a spend budget, a model the price table does not know: its
// calls would cost nothing, and the budget would not hold.
func (s *Service) checkPriced(p *plan) error {
	if !slices.ContainsFunc(p.account.Quota, func(l store.Limit) bool { return l.Name == store.LimitSpend }) {
		return nil
	}
	models := []string{p.model}
	for _, f := range p.fallbacks {
		models = append(models, llm.Origin(f.ProviderName, f.Name))
	}
	for _, m := range models {
		if _, ok := s.opts.Prices[m]; !ok {
			return &Error{Kind: ErrForbidden, Code: "model_not_priced",
				Message: fmt.Sprintf("model %s has no price in chatd's price table, and your spend budget needs one; use a priced model, or ask the operator to add it under prices:", m)}
		}
	}
	return nil
}

// providerName is the provider part of a provider/model name.
func providerName(model string) string {
	name, _, _ := strings.Cut(model, "/")
	return name
}

// begin stores a running run with the user's message — and its session, when new — and starts it. The
// store refuses it with store.ErrBusy while the session has a running run, and with store.ErrStale when
// the run started early on a history a record stored since has made stale. attempt counts the sends
// of this request before it: a retry never starts early.
func (s *Service) begin(ctx context.Context, p *plan, key, hash string, attempt int) (*Started, error) {
	first := p.first(p.sessionID())
	history, after := s.earlyHistory(p, key, attempt, first)
	rp := p
	if history != nil {
		// The run reads its plan on its own goroutine while this one may go on with p (joinSession
		// rewrites it when the commit finds the session's id taken): the run gets a copy.
		cp := *p
		rp = &cp
	}
	run := s.newRun(newID(), p.user, rp)
	if err := s.admit(run); err != nil {
		return nil, err
	}
	sr := &store.Run{ID: run.ID, SessionID: run.SessionID, Agent: run.Agent, Model: run.Model,
		IdempotencyKey: key, RequestHash: hash, Title: p.title(),
		KeyID: p.account.KeyID, Quota: p.account.Quota, AfterSeq: after}
	if s.events != nil {
		sr.ReservedSeq = reserveAhead
	}
	if p.newSession != nil {
		ns := *p.newSession // the store completes it; p keeps the plan as made, for a retry
		sr.NewSession = &ns
	}
	var g *gate
	var obs *observer
	if history != nil {
		g = newGate()
		run.hold()
		obs = s.start(run, g, func(context.Context) ([]store.Record, error) { return history, nil })
	}
	t0 := time.Now()
	err := s.opts.Store.CreateRun(ctx, p.user, sr, first)
	s.opts.Metrics.StoreOp("create_run", time.Since(t0))
	if err != nil {
		return nil, s.notStored(p, run, g, err)
	}
	if sr.NewSession != nil {
		p.session, p.newSession = sr.NewSession, nil
	}
	runStart := runevent.Encode(runevent.RunStart{RunID: run.ID, SessionID: run.SessionID, Model: run.Model, Agent: run.Agent,
		Action: p.req.Action != nil})
	if g != nil {
		obs.metrics.Started() // a counter: safe beside the run's goroutine, which only reads obs.metrics
		// The run's first events go before what its loop emitted while the commit ran (the model's
		// first tokens, often), and readers see them all at once.
		run.open(runStart, runevent.Encode(runevent.RecordEvent{Message: runevent.RecordOf(first)}), sr.ReservedSeq)
		g.open(first, p.session.CreatedAt)
	} else {
		run.granted(sr.ReservedSeq)
		run.emit(runevent.TypeRunStart, runStart)
		s.launch(run, first)
	}
	return &Started{RunID: run.ID, SessionID: run.SessionID, Status: store.RunRunning}, nil
}

// notStored drops a run whose CreateRun failed with err — one started early is abandoned, its model
// call cancelled — and returns the error the send gets.
func (s *Service) notStored(p *plan, run *Run, g *gate, err error) error {
	if g != nil {
		g.fail(err) // the run's goroutine forgets it, and is counted until it has
		run.stop(errAbandoned)
	} else {
		s.retire(run)
		s.wg.Done()
	}
	if p.req.Regenerate && errors.Is(err, store.ErrConflict) {
		// A message came in since the plan (a queued run started, another client sent): the marker
		// would name a user record that is no longer the last.
		return conversationChanged(run.SessionID)
	}
	return err
}

// newRun makes a run of the service: its events go to the service's event log, within its limit.
func (s *Service) newRun(id, user string, p *plan) *Run {
	run := newRun(id, user, p, s.events)
	run.maxEvents = int64(s.opts.Limits.RunEvents)
	run.calls = newCallLog(run, p, s.opts.Limits.DiagnosticsBytes, s.log.With(runAttrs(run)...))
	return run
}

// admit makes run live and counts it as running. The count is taken under the lock that checks closing,
// so that Close never waits on a WaitGroup a starting run adds to.
func (s *Service) admit(run *Run) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return errClosing()
	}
	s.track(run)
	s.wg.Add(1)
	return nil
}

// track makes run live: s.runs and s.inSession hold it until retire. The caller holds s.mu.
func (s *Service) track(run *Run) {
	if old := s.runs[run.ID]; old == run {
		return
	} else if old != nil {
		s.untrack(old)
	}
	s.runs[run.ID] = run
	s.inSession[run.SessionID] = append(s.inSession[run.SessionID], run)
}

// untrack takes run out of s.inSession. The caller holds s.mu.
func (s *Service) untrack(run *Run) {
	runs := slices.DeleteFunc(s.inSession[run.SessionID], func(r *Run) bool { return r == run })
	if len(runs) == 0 {
		delete(s.inSession, run.SessionID)
	} else {
		s.inSession[run.SessionID] = runs
	}
}

// launch runs a stored run whose user message (first) is stored: it loads the history and executes the
// agent loop on its own goroutine, and then starts the session's next queued run. The caller counted it
// in s.wg.
func (s *Service) launch(run *Run, first *store.Record) {
	s.start(run, nil, func(ctx context.Context) ([]store.Record, error) {
		run.emit(runevent.TypeRecord, runevent.Encode(runevent.RecordEvent{Message: runevent.RecordOf(first)}))
		return s.history(ctx, run, first.ID)
	})
}

// history returns the records of run's session, whose last is the run's first (last): those kept from
// its last run here, and what was stored since. Kept records that do not lead to last (the session was
// deleted and made again under its id since the run was planned) are dropped, and all are read.
func (s *Service) history(ctx context.Context, run *Run, last string) ([]store.Record, error) {
	sess := run.plan.session
	if sess == nil {
		return s.opts.Store.Records(ctx, run.user, run.SessionID)
	}
	records := s.hist.get(run.user, run.SessionID, sess.CreatedAt)
	var after int64
	if len(records) > 0 {
		after = records[len(records)-1].Seq
	}
	fresh, err := s.opts.Store.RecordsAfter(ctx, run.user, run.SessionID, after)
	if err != nil {
		return nil, err
	}
	if len(records) == 0 {
		records = fresh
	} else if len(fresh) > 0 {
		records = append(records, fresh...) // records is clipped: this copies
	}
	if after > 0 && (len(records) == 0 || records[len(records)-1].ID != last) {
		s.hist.forget(run.user, run.SessionID)
		if records, err = s.opts.Store.Records(ctx, run.user, run.SessionID); err != nil {
			return nil, err
		}
	}
	s.hist.put(run.user, run.SessionID, sess.CreatedAt, records)
	return slices.Clip(records), nil
}

// start executes the agent loop of run on its own goroutine on the records history returns (all the
// session's, oldest first: the run keeps them, with those it adds, for the session's next run here),
// then starts the session's next queued run. A run started early (g not nil) waits at g before anything
// of it is seen or stored. The caller counted the run in s.wg.
func (s *Service) start(run *Run, g *gate, history func(context.Context) ([]store.Record, error)) *observer {
	runCtx, cancel := context.WithCancelCause(s.base)
	lim := s.opts.Limits.RunTime
	runCtx, stop := context.WithTimeoutCause(runCtx, lim, &agent.LimitError{Code: "run_timeout",
		Message: fmt.Sprintf("the run passed chatd's time limit of %s; what it said is kept", lim)})
	run.setRunning(runCtx, cancel)
	obs := s.newObserver(run.plan, run)
	obs.gate = g
	if sess := run.plan.session; sess != nil {
		obs.created = sess.CreatedAt // a new session's is known once stored (ready)
	}
	// The run's span continues the trace of the request that sent it, and the run's log lines carry
	// its ids and the trace's.
	runCtx = logging.WithRun(runCtx, logging.RunIdentity{RunID: run.ID, SessionID: run.SessionID, User: run.user})
	if run.plan.parent.IsValid() {
		runCtx = trace.ContextWithSpanContext(runCtx, run.plan.parent)
	}
	runCtx, obs.span = s.opts.Tracing.Run(runCtx, run.ID, run.SessionID, run.Agent, run.Model)
	obs.log = s.log.With(logging.RunAttrs(runCtx)...)
	// A run started early counts as started once it is stored (begin): one the store refused never
	// existed for its client, and is not counted at all.
	obs.metrics = s.opts.Metrics.Run(run.Agent, run.Model)
	if g == nil {
		obs.metrics.Started()
	}
	go func() { // counted by admit or startQueued
		defer s.wg.Done()
		// The session is free once the run has ended: its next queued run starts here, still counted,
		// so that Close waits for the start (one store write) as it waits for the run. An abandoned run
		// never held the session.
		defer func() {
			if !obs.abandoned {
				s.queues.kick(run.SessionID)
			}
		}()
		defer cancel(nil)
		defer stop()
		records, err := history(context.WithoutCancel(runCtx))
		if err != nil {
			obs.finish(agent.Result{Status: agent.StatusFailed, Err: fmt.Errorf("load history: %w", err)})
			return
		}
		// Clipped, the records the run keeps and its context's are one array until either appends.
		obs.kept = slices.Clip(records)
		if g != nil {
			obs.own = records // earlyHistory's own array: only this run has it
		}
		s.execute(runCtx, run.plan, run, store.Current(obs.kept), obs)
	}()
	return obs
}

// retire forgets a run that ended, or never started.
func (s *Service) retire(run *Run) {
	s.mu.Lock()
	if s.runs[run.ID] == run {
		delete(s.runs, run.ID)
		s.untrack(run)
	}
	s.mu.Unlock()
}

// busyHere reports whether a run of the user's session is live here and has not ended: the session is
// busy, or about to be, and may get records no history kept here holds.
func (s *Service) busyHere(user, sessionID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.inSession[sessionID] {
		if r.user == user && !r.hasEnded() {
			return true
		}
	}
	return false
}

// live returns the user's live run with this id, or nil.
func (s *Service) live(user, id string) *Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.runs[id]; r != nil && r.user == user {
		return r
	}
	return nil
}

// count returns how many live runs have the status (queued or running), for the metrics.
func (s *Service) count(status string) int {
	s.mu.Lock()
	runs := make([]*Run, 0, len(s.runs))
	for _, r := range s.runs {
		runs = append(runs, r)
	}
	s.mu.Unlock()
	n := 0
	for _, r := range runs {
		if r.Status() == status {
			n++
		}
	}
	return n
}

// Draining reports whether the service has stopped accepting runs: it drains for a shutdown, or is
// closed. A readiness probe says so, so that a load balancer sends new chats elsewhere.
func (s *Service) Draining() bool { return s.isClosing() }

func (s *Service) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

func errClosing() error {
	return &Error{Kind: ErrClosed, Code: "shutting_down", Message: ErrClosed.Error()}
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

// execute runs the agent loop on the session's records (its new user message last) and ends the run.
// The run's goroutine reads the model's stream under this frame for as long as the run lasts, and its
// stack grows past 8 KB if the frames under the per-token path are large: the loop's configuration is
// built, and a panic recovered, in functions of their own.
func (s *Service) execute(ctx context.Context, p *plan, run *Run, records []store.Record, obs *observer) {
	if p.req.Action != nil {
		s.executeAction(ctx, p, run, records, obs)
		return
	}
	cfg := s.agentConfig(ctx, p, run, records, obs)
	defer obs.recoverRun()
	obs.finish(agent.Run(ctx, *cfg, obs, obs))
}

// agentConfig readies the run's tools, system prompt and conversation, and returns the agent loop's
// configuration.
func (s *Service) agentConfig(ctx context.Context, p *plan, run *Run, records []store.Record, obs *observer) *agent.Config {
	p.tools = p.tools.withPayloads(p.agent, store.Current(records))
	system := systemPrompt(p, records)
	obs.conv = s.newConversation(p, run, records, system, obs)
	if job := s.titleFor(p, run, records); job != nil {
		obs.completed = func(answer string) { s.startTitle(job, answer) }
	}
	if p.decided != nil {
		s.runDecided(ctx, p, obs)
	}
	return &agent.Config{
		Models:        append([]agent.Model{{Provider: p.provider, Name: p.upstream, ProviderName: p.provName}}, p.fallbacks...),
		Reasoning:     p.agent.Reasoning,
		System:        system,
		ToolSpecs:     p.tools.specs,
		Tools:         p.tools.observed(obs),
		Temperature:   cmp.Or(p.req.Temperature, p.agent.Temperature),
		MaxTokens:     cmp.Or(p.req.MaxTokens, p.agent.MaxTokens),
		MaxIterations: cmp.Or(p.req.MaxIterations, p.agent.MaxIterations),
		RetryBase:     s.opts.RetryBase,
		Limits:        s.opts.Limits.Model,
		Context:       obs.conv,
		Cache:         true,
		Logger:        obs.log,
		Sending:       run.calls.sending,
		Calls:         obs,
	}
}

// recoverRun, deferred, ends a run whose loop panicked: a bug must cost one run, not the process and
// every other run with it; the run still ends, with its open calls closed.
func (o *observer) recoverRun() {
	if v := recover(); v != nil {
		o.log.Error("run panicked", "panic", v, "stack", string(debug.Stack()))
		if !o.finished {
			o.finish(agent.Result{Status: agent.StatusFailed, Err: errPanic})
		}
	}
}

var errPanic = errors.New("internal error")

// CreateSession stores a new session of the user under one of the configured agents ("" is the
// default agent).
func (s *Service) CreateSession(ctx context.Context, user string, sess *store.Session) error {
	sess.Agent = cmp.Or(sess.Agent, "default")
	if _, ok := s.opts.Agents[sess.Agent]; !ok {
		return invalid("unknown_agent", "no agent %q", sess.Agent)
	}
	return s.opts.Store.CreateSession(ctx, user, sess)
}

// DeleteSession deletes one of the user's sessions with its records and runs. The store refuses while
// the session has a queued or running run: ErrBusy naming the run.
func (s *Service) DeleteSession(ctx context.Context, user, id string) error {
	err := s.opts.Store.DeleteSession(ctx, user, id)
	if err == nil {
		s.hist.forget(user, id)
	}
	if busy, ok := errors.AsType[*store.BusyError](err); ok {
		return &Error{Kind: ErrBusy, Code: "session_busy", RunID: busy.RunID,
			Message: "the session has an active run; wait for it to end before deleting the session"}
	}
	if errors.Is(err, store.ErrNotFound) {
		return &Error{Kind: store.ErrNotFound, Code: "session_not_found", Message: fmt.Sprintf("no session %q", id)}
	}
	return err
}

// HasAgent reports whether an agent is configured.
func (s *Service) HasAgent(name string) bool {
	_, ok := s.opts.Agents[name]
	return ok
}

// AgentNames lists the configured agents.
func (s *Service) AgentNames() []string {
	return slices.Sorted(maps.Keys(s.opts.Agents))
}

// Drain stops accepting new runs and waits for the running ones to end, or for ctx. Queued runs do not
// start any more; Close cancels them.
func (s *Service) Drain(ctx context.Context) error {
	s.stopAccepting()
	err := waitFor(ctx, &s.wg)
	// Title calls are waited for within the drain's time only, then cancelled (their sessions keep
	// the title cut from the first message): a title call may take longer than a drain.
	if waitFor(ctx, &s.titles) != nil {
		s.stopTitles()
		s.titles.Wait()
	}
	return err
}

// shutdownReason is the cancelled event's reason of the runs Close stops.
const shutdownReason = "chatd is shutting down"

// Close stops accepting runs, cancels the running and queued ones (each keeps its partial answer),
// waits for them to be stored, or for ctx, and writes the rest of the event log.
func (s *Service) Close(ctx context.Context) error {
	s.stopAccepting()
	s.mu.Lock()
	var queued []*Run
	for _, r := range s.runs {
		if !r.requestCancel(shutdownReason) && r.Status() == store.RunQueued {
			queued = append(queued, r)
		}
	}
	s.mu.Unlock()
	for _, r := range queued {
		if !s.queues.cancel(r, shutdownReason) {
			r.requestCancel(shutdownReason) // it started meanwhile
		}
	}
	s.cancel()
	s.mu.Lock()
	for id, t := range s.expiries {
		t.Stop()
		delete(s.expiries, id)
	}
	s.mu.Unlock()
	err := s.wait(ctx)
	if s.events != nil {
		s.events.close()
	}
	s.stopLeases()
	return err
}

func (s *Service) stopAccepting() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
}

// wait waits for the runs, then the title calls, or for ctx.
func (s *Service) wait(ctx context.Context) error {
	if err := waitFor(ctx, &s.wg); err != nil {
		return err
	}
	return waitFor(ctx, &s.titles)
}

func waitFor(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("chat: runs still running: %w", ctx.Err())
	}
}
