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
	est     *estimator
	store   recordStore
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
	// ready waits until the run is stored (it may start early: gate.go) and reports whether it is: a
	// summary is stored only then. keep hands a stored summary to the records the run keeps.
	ready func() bool
	keep  func(...store.Record)
}

var _ agent.Context = (*conversation)(nil)

// recordStore is the part of the store that a run's context writes: the summaries it compacts to.
type recordStore interface {
	AppendRecord(ctx context.Context, user string, r *store.Record) error
}

// newConversation is the context of a run with the session's records; obs stores the usage of its
// summaries.
func (s *Service) newConversation(p *plan, run *Run, records []store.Record, system string, obs *observer) *conversation {
	a, d := p.agent, s.opts.Context
	c := &conversation{est: s.est, store: s.opts.Store, p: p, run: run, records: records, model: p.model,
		logged: map[string]bool{}, log: obs.log, ready: obs.ready, keep: obs.keep}
	c.opts = prompt.Options{
		ToolHistoryRounds: cmp.Or(a.ToolHistoryRounds, d.ToolHistoryRounds),
		ResultMaxBytes:    d.ResultMaxBytes,
		Tools:             len(p.tools.specs) > 0,
		Estimates:         s.est.take(run.SessionID),
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
	c.est.keep(c.run.SessionID, c.opts.Estimates)
}

// stored replaces the run's copy of a record it had before the store completed it (the user message
// of a run started early) with the stored one.
func (c *conversation) stored(r *store.Record) {
	for i := range c.records {
		if c.records[i].ID == r.ID {
			c.records[i] = *r
		}
	}
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
	tokens := c.est.calibrated(c.model, c.fixed+b.Tokens)
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
		c.est.calibrate(c.model, c.estimate, int(inputTokens))
		c.estimate = 0
	}
}

// compact summarizes the turns before a cut into a stored summary record and returns the conversation
// built with it; nil when there is nothing to summarize or the summary failed (the conversation is then
// sent as it is: if it does not fit, the provider says so and the run fails with its error).
func (c *conversation) compact(ctx context.Context, b *prompt.Built, tokens int, forced bool) *prompt.Built {
	ratio := c.est.ratio(c.model)
	allowance := prompt.SummaryTokens(c.window) // what the summary will take
	keep := int(float64(c.limit/2)/ratio) - c.fixed - allowance
	if forced {
		keep /= 2 // the estimate was wrong by more than the margin: keep less
	}
	cut, ok := b.Cut(max(keep, 0))
	after := c.est.calibrated(c.model, c.fixed+allowance+b.Kept(cut))
	if !ok || (!forced && after >= c.limit) {
		c.stuck = tokens
		c.log.Warn("the conversation nears the context window, and summarizing the older turns would not bring it under the limit",
			"tokens", tokens, "limit", c.limit, "window", c.window, "system_and_tools", c.est.calibrated(c.model, c.fixed))
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
	if !c.ready() {
		return nil // the run was not stored: it stops, and its summary with it
	}
	if err := c.store.AppendRecord(context.WithoutCancel(ctx), c.p.user, rec); err != nil {
		c.stuck = tokens
		c.log.Error("store the summary", "err", err)
		return nil
	}
	c.run.emit(runevent.TypeRecord, runevent.Encode(runevent.RecordEvent{Message: runevent.RecordOf(rec)}))
	c.add(rec)
	c.keep(*rec)
	nb := prompt.Build(c.records, c.opts)
	c.log.Info("summarized the earlier conversation", "records", cut-b.From, "tokens_before", tokens,
		"tokens_after", c.est.calibrated(c.model, c.fixed+nb.Tokens), "limit", c.limit, "forced", forced)
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
	sec := prompt.Sections{
		Identity:     cmp.Or(p.agent.SystemPrompt, defaultIdentity),
		Context:      p.req.Context,
		Tools:        p.tools.specs,
		Suggestions:  p.agent.Suggestions,
		Instructions: p.agent.Instructions,
		Guidelines:   p.agent.Guidelines,
	}
	sec.Payloads, sec.EarlierPayloads = prompt.Manifest(store.Current(records))
	if p.tools.payloads != nil {
		sec.PayloadTool = GetPayloadTool
	}
	if p.parser != nil {
		for _, t := range p.parser.types {
			sec.Blocks = append(sec.Blocks, prompt.Block{Name: t.Name, Marker: t.Marker, Instructions: t.Instructions, Schema: t.Schema})
		}
	}
	return prompt.System(sec)
}
