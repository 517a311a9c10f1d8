package chat

import (
	"cmp"
	"context"
	"log/slog"

	"chatd/internal/agent"
	"chatd/internal/llm"
	"chatd/internal/prompt"
	"chatd/internal/runevent"
	"chatd/internal/store"
)

// ContextOptions are the defaults of what every model call is sent; an agent overrides each.
type ContextOptions struct {
	// ToolHistoryRounds is how many of the latest tool rounds are sent in full (0: 10; negative: all).
	ToolHistoryRounds int
	// ResultMaxBytes caps a tool result as the model sees it (0: 32 KiB).
	ResultMaxBytes int
	// CompactAt is the share of the context window at which older turns are summarized (0: 0.8).
	CompactAt float64
	// Windows are configured context windows (see prompt.Windows); the known families fill in.
	Windows prompt.Windows
}

// DefaultCompactAt is the share of the window a request may fill before older turns are summarized.
const DefaultCompactAt = 0.8

// defaultIdentity is the system prompt's identity section of an agent that sets none.
const defaultIdentity = "You are a helpful assistant."

// conversation is the context of one run: the session's records, kept as they are stored, from which
// the conversation of every model call is built. It is the agent loop's agent.Context, and is used from
// the loop's goroutine only.
type conversation struct {
	s       *Service
	p       *plan
	run     *Run
	log     *slog.Logger
	records []store.Record
	opts    prompt.Options
	model   string // the primary model, provider/model: the calibration's key
	window  int
	limit   int // estimated tokens above which older turns are summarized
	fixed   int // estimated tokens of the system prompt and the tool declarations
	// estimate is the estimate of the last conversation built, fixed included, for calibration.
	estimate int
	logged   map[string]bool // repair reasons already logged
	warned   bool            // about clamped records
	summary  prompt.Summarizer
	// stuck is the size (tokens) at which compaction last failed or could not help: it is not tried
	// again before the conversation has grown by a tenth, unless the provider refuses it.
	stuck int
}

var _ agent.Context = (*conversation)(nil)

func newConversation(s *Service, p *plan, run *Run, records []store.Record, system string, obs *observer) *conversation {
	a, d := p.agent, s.opts.Context
	c := &conversation{s: s, p: p, run: run, records: records, model: p.model, logged: map[string]bool{},
		log: s.log.With("run", run.ID, "session", run.SessionID)}
	c.opts = prompt.Options{
		ToolHistoryRounds: cmp.Or(a.ToolHistoryRounds, d.ToolHistoryRounds),
		ResultMaxBytes:    d.ResultMaxBytes,
		Tools:             len(p.tools.specs) > 0,
		Estimates:         s.takeEstimates(run.SessionID),
	}
	c.window = cmp.Or(a.ContextWindow, d.Windows.Lookup(p.provName, p.upstream))
	at := cmp.Or(a.CompactAt, d.CompactAt, DefaultCompactAt)
	reserve := cmp.Or(p.req.MaxTokens, a.MaxTokens)
	c.limit = max(int(at*float64(c.window))-reserve, c.window/4)
	c.fixed = prompt.Estimate(system) + prompt.EstimateTools(p.tools.specs)
	c.summary = prompt.Summarizer{Provider: p.provider, Model: p.upstream, Window: c.window,
		Usage: func(u llm.Usage) { obs.recordUsage(p.model, u) }, IdleTime: s.opts.Limits.Model.IdleTime}
	return c
}

// release hands the conversation's token estimates back for the session's next run.
func (c *conversation) release() {
	c.s.keepEstimates(c.run.SessionID, c.opts.Estimates)
}

// add appends a record the run stored.
func (c *conversation) add(r *store.Record) {
	c.records = append(c.records, *r)
}

// Messages builds the conversation for the next model call, summarizing older turns first when it
// would not fit, or when asked to.
func (c *conversation) Messages(ctx context.Context, compact bool) ([]llm.Message, error) {
	b := prompt.Build(c.records, c.opts)
	c.report(b)
	tokens := c.s.calibrated(c.model, c.fixed+b.Tokens)
	if compact || tokens > c.limit && tokens > c.stuck+c.stuck/10 {
		if nb := c.compact(ctx, b, tokens, compact); nb != nil {
			b = nb
		}
	}
	c.estimate = c.fixed + b.Tokens
	return b.Messages, nil
}

// observe calibrates the estimate by the input tokens the provider reported for the request last built.
// Only the first report counts: a continuation of the same turn sends more than was built.
func (c *conversation) observe(inputTokens int64) {
	if inputTokens > 0 && c.estimate > 0 {
		c.s.calibrate(c.model, c.estimate, int(inputTokens))
		c.estimate = 0
	}
}

// compact summarizes the turns before a cut into a stored summary record and returns the conversation
// built with it; nil when there is nothing to summarize or the summary failed (the conversation is then
// sent as it is: if it does not fit, the provider says so and the run fails with its error).
func (c *conversation) compact(ctx context.Context, b *prompt.Built, tokens int, forced bool) *prompt.Built {
	ratio := c.s.ratio(c.model)
	allowance := prompt.SummaryTokens(c.window) // what the summary will take
	keep := int(float64(c.limit/2)/ratio) - c.fixed - allowance
	if forced {
		keep /= 2 // the estimate was wrong by more than the margin: keep less
	}
	cut, ok := b.Cut(max(keep, 0))
	after := c.s.calibrated(c.model, c.fixed+allowance+b.Kept(cut))
	if !ok || (!forced && after >= c.limit) {
		c.stuck = tokens
		c.log.Warn("the conversation nears the context window, and summarizing the older turns would not bring it under the limit",
			"tokens", tokens, "limit", c.limit, "window", c.window, "system_and_tools", c.s.calibrated(c.model, c.fixed))
		return nil
	}
	prev := ""
	if b.Summary != nil {
		prev = b.Summary.Content
	}
	c.run.emit(runevent.TypeStatus, runevent.EncodeStatus("Summarizing the earlier conversation…"))
	c.summary.Ratio = ratio
	text, err := c.summary.Summarize(ctx, prev, c.records[b.From:cut])
	if err != nil {
		c.stuck = tokens
		c.log.Warn("summarize the earlier conversation", "err", err)
		return nil
	}
	rec := &store.Record{SessionID: c.run.SessionID, RunID: c.run.ID, Role: store.RoleSystem, Content: text,
		SummaryThrough: c.records[cut-1].ID}
	if err := c.s.opts.Store.AppendRecord(context.WithoutCancel(ctx), c.p.user, rec); err != nil {
		c.stuck = tokens
		c.log.Error("store the summary", "err", err)
		return nil
	}
	c.run.emit(runevent.TypeRecord, runevent.Encode(runevent.RecordEvent{Message: runevent.RecordOf(rec)}))
	c.add(rec)
	nb := prompt.Build(c.records, c.opts)
	c.log.Info("summarized the earlier conversation", "records", cut-b.From, "tokens_before", tokens,
		"tokens_after", c.s.calibrated(c.model, c.fixed+nb.Tokens), "limit", c.limit, "forced", forced)
	return nb
}

// report logs each kind of repair once a run, and warns once about stored records that cannot be right.
func (c *conversation) report(b *prompt.Built) {
	var fresh map[string]int
	for reason, n := range b.Repairs {
		if !c.logged[reason] {
			c.logged[reason] = true
			if fresh == nil {
				fresh = map[string]int{}
			}
			fresh[reason] = n
		}
	}
	if fresh != nil {
		c.log.Info("repaired the conversation for the model; the stored records are unchanged", "repairs", prompt.Describe(fresh))
	}
	if b.Clamped.Any() && !c.warned {
		c.warned = true
		c.log.Warn("the session holds records that cannot be right; they were left out of what the model is sent",
			"figures", b.Clamped.String(), "records", len(c.records))
	}
}

// systemPrompt assembles the run's system prompt from the agent's sections, the request's context, the
// payloads of the stored records and the tools offered.
func systemPrompt(p *plan, records []store.Record) string {
	return prompt.System(prompt.Sections{
		Identity:     cmp.Or(p.agent.SystemPrompt, defaultIdentity),
		Context:      p.req.Context,
		Payloads:     prompt.Manifest(records),
		Tools:        p.tools.specs,
		Instructions: p.agent.Instructions,
		Guidelines:   p.agent.Guidelines,
	})
}

// calibrated returns an estimate corrected by what the model's provider reported before.
func (s *Service) calibrated(model string, estimate int) int {
	s.calibMu.Lock()
	defer s.calibMu.Unlock()
	c := s.calib[model]
	if c == nil {
		return estimate
	}
	return c.Apply(estimate)
}

func (s *Service) ratio(model string) float64 {
	s.calibMu.Lock()
	defer s.calibMu.Unlock()
	if c := s.calib[model]; c != nil {
		return c.Ratio()
	}
	return 1
}

func (s *Service) calibrate(model string, estimate, actual int) {
	s.calibMu.Lock()
	defer s.calibMu.Unlock()
	c := s.calib[model]
	if c == nil {
		if len(s.calib) >= maxCalibrations {
			clear(s.calib) // models come from configuration, but a request may name any
		}
		c = new(prompt.Calibration)
		s.calib[model] = c
	}
	c.Observe(estimate, actual)
}

// maxCalibrations bounds the models calibrated at once.
const maxCalibrations = 256

// maxEstimates bounds the sessions whose token estimates are kept between runs.
const maxEstimates = 1024

// takeEstimates returns the token estimates a session's last run kept, or new ones. A run has them to
// itself: they are taken out, and kept again when it ends.
func (s *Service) takeEstimates(session string) *prompt.Estimates {
	s.calibMu.Lock()
	defer s.calibMu.Unlock()
	if e := s.estimates[session]; e != nil {
		delete(s.estimates, session)
		return e
	}
	return new(prompt.Estimates)
}

func (s *Service) keepEstimates(session string, e *prompt.Estimates) {
	s.calibMu.Lock()
	defer s.calibMu.Unlock()
	if len(s.estimates) >= maxEstimates {
		clear(s.estimates)
	}
	s.estimates[session] = e
}
