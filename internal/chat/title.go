package chat

import (
	"chatd/internal/logging"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"chatd/internal/llm"
	"chatd/internal/metrics"
	"chatd/internal/store"
)

// TitleNone, as an agent's or the service's TitleModel, keeps the title cut from the first message.
const TitleNone = "none"

// Bounds of a title call: what it is shown of the first exchange, what it may answer, and how long it
// may take. It runs after its run has ended, so it holds up nobody; a drain cancels it when its own,
// shorter, time is up.
const (
	titleExcerptBytes = 2000
	titleMaxTokens    = 64
	titleReadBytes    = 4 << 10
	titleTimeout      = 30 * time.Second
)

const titleSystem = "You name conversations. Given the first message of a conversation and the answer to it, " +
	"reply with a title of two to six words that says what the conversation is about, in the language of the " +
	"user's message. Reply with the title alone: no quotes, no label, no punctuation at the end."

// titleJob is a session's first exchange, to be titled once its run has ended.
type titleJob struct {
	user, sessionID, runID string
	agentNm                string
	account                Account
	model                  string // provider/model
	provider               llm.Provider
	upstream               string
	question               string
}

// titleFor returns the title job of a run, or nil when the run does not title its session: only the
// first answer of a session does (not a regeneration), only with a title model other than none, and not
// in a session that had a title before its first message (the user gave it one).
func (s *Service) titleFor(p *plan, run *Run, records []store.Record) *titleJob {
	if p.req.Regenerate || slices.IndexFunc(records, func(r store.Record) bool { return r.Role == store.RoleUser }) != len(records)-1 {
		return nil
	}
	if p.hadTitle {
		return nil
	}
	name := cmp.Or(p.agent.TitleModel, s.opts.TitleModel, p.model)
	if name == TitleNone || strings.TrimSpace(p.req.Message) == "" {
		return nil
	}
	prov, upstream, err := s.opts.Models.Resolve(name)
	if err != nil {
		s.log.Warn("title model: keeping the title cut from the first message", "session", run.SessionID, "model", name, "err", err)
		return nil
	}
	if slices.ContainsFunc(p.account.Quota, func(l store.Limit) bool { return l.Name == store.LimitSpend }) {
		if _, ok := s.opts.Prices[name]; !ok {
			return nil // a spend budget holds only with priced models (checkPriced)
		}
	}
	return &titleJob{user: p.user, sessionID: run.SessionID, runID: run.ID, agentNm: p.agentNm, account: p.account,
		model: name, provider: prov, upstream: upstream, question: p.req.Message}
}

// startTitle titles a session from its first exchange on a goroutine of its own, after the run has
// ended: the run's done and its client never wait for it. Drain waits for it within its time, then
// cancels it; Close cancels it and waits for it.
func (s *Service) startTitle(job *titleJob, answer string) {
	if job == nil || strings.TrimSpace(answer) == "" {
		return
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.titles.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.titles.Done()
		ctx, cancel := context.WithTimeout(s.titleCtx, titleTimeout)
		defer cancel()
		if err := s.title(ctx, job, answer); err != nil {
			s.log.Warn("title the session: keeping the title cut from the first message", append(logging.RunIdentity{
				RunID: job.runID, SessionID: job.sessionID, User: job.user}.Attrs(), "model", job.model, "err", err)...)
		}
	}()
}

// title asks the title model for a title of the first exchange, counts its usage as any model call's,
// and stores it unless the user has set the session's title.
func (s *Service) title(ctx context.Context, job *titleJob, answer string) error {
	if e, err := budgetReached(ctx, s.opts.Store, job.user, job.account.Quota); err != nil || e != nil {
		return cmp.Or(err, error(e))
	}
	var in strings.Builder
	in.WriteString("The user's message:\n<message>\n")
	in.WriteString(excerpt(job.question, titleExcerptBytes))
	in.WriteString("\n</message>\n\nThe answer:\n<answer>\n")
	in.WriteString(excerpt(answer, titleExcerptBytes))
	in.WriteString("\n</answer>\n\nThe title:")
	req := &llm.Request{Model: job.upstream, System: titleSystem, MaxTokens: titleMaxTokens,
		Messages: []llm.Message{llm.TextMessage(llm.RoleUser, in.String())}}
	var text strings.Builder
	var usage llm.Usage
	var streamErr error
	t0 := time.Now()
	for ev, err := range job.provider.Stream(ctx, req) {
		if err != nil {
			streamErr = err
			break
		}
		switch ev.Kind {
		case llm.EventText:
			if text.Len() < titleReadBytes {
				text.WriteString(ev.Text)
			}
		case llm.EventUsage:
			usage = ev.Usage
		}
	}
	s.opts.Metrics.ModelCall(providerName(job.model), job.model, time.Since(t0), errorKind(streamErr))
	// The title is stored before the call's usage: once the ledger has the call, the session has its
	// title, or keeps the one it had. A call refused or failed before it streamed anything (a bad key,
	// a rate limit, no connection, a cancel at shutdown) cost nothing and is not counted.
	if streamErr == nil || text.Len() > 0 || usage != (llm.Usage{}) {
		defer s.accountTitle(job, usage, len(req.System)+in.Len(), text.Len())
	}
	if streamErr != nil {
		return streamErr
	}
	t := cleanTitle(text.String())
	if t == "" {
		return fmt.Errorf("the model answered no title (%q)", excerpt(text.String(), 200))
	}
	set, err := s.opts.Store.TitleSession(context.WithoutCancel(ctx), job.user, job.sessionID, t)
	if err != nil {
		return err
	}
	if set {
		s.log.Info("titled the session", "session", job.sessionID, "model", job.model)
	} else {
		s.log.Info("the session's title was set by its user: kept", "session", job.sessionID)
	}
	return nil
}

// accountTitle stores the usage of a title call in the ledger, priced, with the run it titles (an
// estimate when the provider reported none, as for a run's calls: about a token for every four bytes
// of the prompt sent and of the answer streamed).
func (s *Service) accountTitle(job *titleJob, u llm.Usage, sent, streamed int) {
	su := storeUsage(u)
	estimated := su == (store.Usage{})
	if estimated {
		su = store.Usage{InputTokens: int64((sent + 3) / 4), OutputTokens: int64((streamed + 3) / 4)}
	}
	entry := store.UsageEntry{RunID: job.runID, SessionID: job.sessionID, KeyID: job.account.KeyID, Agent: job.agentNm,
		Model: job.model, Usage: su, CostNanoUSD: s.opts.Prices[job.model].cost(su), Estimated: estimated}
	if !estimated { // the metrics count tokens as providers report them
		s.opts.Metrics.Tokens(job.model, metrics.Usage{Input: su.InputTokens, Output: su.OutputTokens, CacheRead: su.CacheReadTokens,
			CacheWrite: su.CacheWriteTokens, Reasoning: su.ReasoningTokens, CostUSD: float64(entry.CostNanoUSD) / 1e9})
	}
	if err := s.opts.Store.AddUsage(context.WithoutCancel(s.base), job.user, entry); err != nil {
		s.log.Error("store the usage of a title call", "session", job.sessionID, "err", err)
	}
}

// cleanTitle makes a model's answer a title: its first line that has words, without a "Title:" label,
// quotes, markdown emphasis or a closing period, cut as a title from a message is.
func cleanTitle(s string) string {
	for line := range strings.SplitSeq(s, "\n") {
		line = strings.TrimSpace(line)
		line = strings.TrimLeft(line, "#*_ ")
		if low := strings.ToLower(line); strings.HasPrefix(low, "title:") {
			line = strings.TrimSpace(line[len("title:"):])
		}
		const quotes = "\"'`*_“”‘’«» "
		line = strings.TrimRight(strings.TrimLeft(line, quotes), quotes+".。")
		if strings.IndexFunc(line, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }) >= 0 {
			return title(line)
		}
	}
	return ""
}

// excerpt is s cut to at most n bytes at a character boundary, with an ellipsis when cut.
func excerpt(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
