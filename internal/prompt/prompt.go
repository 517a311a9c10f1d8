// Package prompt builds what chatd sends to a model before every model call: the conversation, from the
// stored records, never by editing them. It pairs every tool call with exactly one result and drops what
// answers nothing, shows tool rounds older than the last few by name only, cuts oversized tool results,
// puts a stored summary in place of the records it replaces, and repairs whatever any provider would
// refuse (empty messages, roles out of turn, ids a provider rejects, tool blocks in a request without
// tools). It also estimates tokens, picks where a conversation is cut for a summary and writes the
// summary with the model (compact.go), and assembles the system prompt from its sections (system.go).
//
// The result is one provider-agnostic conversation every adapter accepts; building twice from the same
// records gives the same messages.
//
// It imports llm, store and the standard library.
package prompt

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"chatd/internal/llm"
	"chatd/internal/store"
)

// Defaults.
const (
	DefaultToolHistoryRounds = 10
	DefaultResultMaxBytes    = 32 << 10
	// MaxCallsPerTurn is more calls than one assistant record can hold: chatd runs at most 32 a turn, so
	// anything beyond is corrupt data, and only the first MaxCallsPerTurn are sent.
	MaxCallsPerTurn = 128
)

// Options are the rules of one conversation's context.
type Options struct {
	// ToolHistoryRounds is how many of the latest tool rounds (assistant turns with tool calls) are sent
	// in full; older rounds are shown by name only, without their results. 0 means
	// DefaultToolHistoryRounds; negative sends every round in full.
	ToolHistoryRounds int
	// ResultMaxBytes caps a tool result as the model sees it; 0 means DefaultResultMaxBytes.
	ResultMaxBytes int
	// Tools reports whether the request declares tools. Without tools, calls and results are sent as
	// text: Anthropic and Bedrock refuse tool blocks in a request that declares none.
	Tools bool
	// Estimates, when set, keeps the token estimates of the records between the builds of one
	// conversation (with the same options), so that each record is counted once.
	Estimates *Estimates
}

// Estimates are token estimates of the messages built from records, by record: stored records do not
// change. Not safe for concurrent use.
type Estimates struct {
	tokens    map[string]int  // of the message built from a record, by record id
	nameOnly  map[string]int  // of an assistant record's text, its calls shown by name only
	arguments map[string]bool // whether an assistant record's arguments are all JSON objects
}

func (o *Options) defaults() {
	if o.ToolHistoryRounds == 0 {
		o.ToolHistoryRounds = DefaultToolHistoryRounds
	}
	if o.ResultMaxBytes <= 0 {
		o.ResultMaxBytes = DefaultResultMaxBytes
	}
}

// Built is a conversation ready to send.
type Built struct {
	Messages []llm.Message
	// Tokens is the local estimate of Messages, uncalibrated.
	Tokens int
	// Summary is the summary record in effect, nil when none; From is the index of the first record
	// after the records it replaces.
	Summary *store.Record
	From    int
	// Repairs counts, by reason, what was changed so that every provider accepts the conversation.
	Repairs map[string]int
	// Clamped are the figures of stored data that cannot be right, left out of the conversation.
	Clamped Clamped

	// points are where a summary may end: before a user or assistant record (never between a call and
	// its result), with the tokens of the messages built from the records before it; recordTokens are
	// the tokens of the messages built from records[From:].
	points       []point
	recordTokens int
}

type point struct {
	rec    int // index into the records
	before int // tokens of the messages built from records[From:rec]
}

// Clamped counts the stored records that cannot be right and were left out or filled in.
type Clamped struct {
	OrphanResults    int // tool records answering no call of the assistant record before them
	DuplicateResults int // second and later results of one call
	ExcessCalls      int // calls of one record beyond MaxCallsPerTurn
	DuplicateCalls   int // calls repeating an id of the same record
	MissingResults   int // calls no tool record answers: sent with a failed result
}

// Any reports whether anything was clamped.
func (c Clamped) Any() bool { return c != Clamped{} }

func (c Clamped) String() string {
	return fmt.Sprintf("orphan_results=%d duplicate_results=%d excess_calls=%d duplicate_calls=%d missing_results=%d",
		c.OrphanResults, c.DuplicateResults, c.ExcessCalls, c.DuplicateCalls, c.MissingResults)
}

// Repair reasons.
const (
	RepairEmptyMessage     = "empty_message"      // a message with no content left out
	RepairEmptyPart        = "empty_text"         // a blank text part left out
	RepairMergedRoles      = "merged_roles"       // consecutive messages of one role sent as one
	RepairFirstNotUser     = "first_not_user"     // a user message put first
	RepairLastAssistant    = "last_assistant"     // a user message put after a last assistant message
	RepairArguments        = "tool_arguments"     // arguments that are not a JSON object sent as {}
	RepairToolID           = "tool_call_id"       // an id a provider refuses, or repeated, replaced
	RepairToolName         = "tool_name"          // a call's name a provider refuses, replaced
	RepairToolsAsText      = "tools_as_text"      // calls and results sent as text: the request declares no tools
	RepairSummaryUnmatched = "summary_unmatched"  // a summary naming a record the session does not hold, ignored
	RepairReplayDropped    = "replay_of_other"    // signatures of another model dropped from a merged message
	RepairResultCut        = "tool_result_capped" // a tool result over the cap, cut
)

// Notes the model reads in place of what is not sent.
const (
	missingResult = "No result was stored for this call."
	emptyResult   = "(the tool returned no output)"
	firstUser     = "(The conversation continues from earlier messages that are not shown.)"
	lastUser      = "(Continue.)"
	summaryIntro  = "Summary of the earlier part of this conversation, which it replaces:\n\n"
)

// Build turns records (a session's records, oldest first) into the conversation to send.
func Build(records []store.Record, opt Options) *Built {
	opt.defaults()
	b := &Built{Repairs: map[string]int{}}
	from := b.summary(records)
	rounds, parts, calls := 0, 0, 0 // parts and calls: what the slabs are sized for
	for i := from; i < len(records); i++ {
		r := &records[i]
		switch r.Role {
		case store.RoleUser:
			parts += 1 + len(r.Attachments)
		case store.RoleAssistant:
			parts += 2
			calls += len(r.ToolCalls)
			if len(r.ToolCalls) > 0 {
				rounds++
			}
		}
	}
	full := rounds // rounds sent in full
	if opt.ToolHistoryRounds >= 0 {
		full = min(rounds, opt.ToolHistoryRounds)
	}
	n := len(records) - from
	c := converter{b: b, opt: opt, records: records, nameOnly: rounds - full, msgs: make([]draft, 0, n+1),
		est: opt.Estimates, recTok: make([]int, 0, n),
		parts: make([]llm.Part, 0, parts), tcs: make([]llm.ToolCall, 0, calls), names: make([]string, 0, calls)}
	b.points = make([]point, 0, n)
	if c.est == nil {
		c.est = &Estimates{}
	} else if c.est.tokens == nil {
		c.est.tokens, c.est.nameOnly, c.est.arguments = map[string]int{}, map[string]int{}, map[string]bool{}
	}
	c.run(from)
	c.normalize()
	c.finish()
	return b
}

// summary finds the summary in effect and returns the index of the first record it does not replace.
func (b *Built) summary(records []store.Record) int {
	for i := len(records) - 1; i >= 0; i-- {
		r := &records[i]
		if r.Role != store.RoleSystem || r.SummaryThrough == "" {
			continue
		}
		for j := i - 1; j >= 0; j-- {
			if records[j].ID == r.SummaryThrough {
				b.Summary, b.From = r, j+1
				return j + 1
			}
		}
		b.Repairs[RepairSummaryUnmatched]++
	}
	return 0
}

// draft is a message being built, with where it came from.
type draft struct {
	llm.Message
	rec      int      // index of the record it was built from; -1 for what chatd adds
	nameOnly []string // names of calls shown by name only
	tokens   int      // the estimate of the message, merged ones included
}

type converter struct {
	b        *Built
	opt      Options
	records  []store.Record
	nameOnly int // rounds left to show by name only
	msgs     []draft
	est      *Estimates      // kept between builds; an empty one when the options hold none
	ids      map[string]bool // tool call ids sent so far
	recTok   []int           // tokens of the drafts built from each record, by index from From

	// the assistant record whose results are being collected
	open    int // index in msgs; -1 when none
	calls   []llm.ToolCall
	results []*store.Record // reused from one assistant record to the next

	// Slabs the messages' parts, calls and call names are cut from: a few allocations for a whole
	// conversation instead of some for every record.
	parts []llm.Part
	tcs   []llm.ToolCall
	names []string
}

// slab cuts a slice of length 0 and capacity n from the front of *free, which Build sizes for the
// records (a slab that runs out is refilled). The slice's capacity is exact, so appending beyond n
// copies it and never writes into the next one's.
func slab[T any](free *[]T, n int) []T {
	if n > cap(*free) {
		*free = make([]T, 0, max(n, 16))
	}
	f := (*free)[:n]
	*free = (*free)[n:n]
	return f[:0:n]
}

func (c *converter) run(from int) {
	c.open = -1
	for i := from; i < len(c.records); i++ {
		r := &c.records[i]
		switch r.Role {
		case store.RoleUser:
			c.close()
			c.point(i)
			c.push(draft{Message: c.userMessage(r), rec: i}, c.est.tokens, r.ID)
		case store.RoleAssistant:
			c.close()
			c.point(i)
			c.assistant(i, r)
		case store.RoleTool:
			c.result(r)
		}
		// System records (summaries, notes) are not part of the conversation.
	}
	c.close()
}

// push appends a draft built from a record, counting its tokens for that record. cache is where the
// estimate is kept between builds, under the record's id; nil or "" keeps none.
func (c *converter) push(d draft, cache map[string]int, id string) {
	if cache != nil && id != "" {
		n, ok := cache[id]
		if !ok {
			n = estimateMessage(&d.Message)
			cache[id] = n
		}
		d.tokens = n
	} else {
		d.tokens = estimateMessage(&d.Message)
	}
	k := d.rec - c.b.From
	for len(c.recTok) <= k {
		c.recTok = append(c.recTok, 0)
	}
	c.recTok[k] += d.tokens
	c.msgs = append(c.msgs, d)
}

// point marks records[i] as a place a summary may end before.
func (c *converter) point(i int) {
	c.b.points = append(c.b.points, point{rec: i})
}

func (c *converter) assistant(i int, r *store.Record) {
	m := c.assistantMessage(r)
	if len(m.ToolCalls) == 0 {
		c.push(draft{Message: m, rec: i}, c.est.tokens, r.ID)
		return
	}
	if n := len(m.ToolCalls); n > MaxCallsPerTurn {
		c.b.Clamped.ExcessCalls += n - MaxCallsPerTurn
		m.ToolCalls = m.ToolCalls[:MaxCallsPerTurn]
	}
	m.ToolCalls = c.uniqueCalls(m.ToolCalls)
	c.fixNames(m.ToolCalls)
	if ok, known := c.est.arguments[r.ID]; !known || !ok || r.ID == "" {
		ok = c.fixArguments(m.ToolCalls)
		if c.est.arguments != nil && r.ID != "" {
			c.est.arguments[r.ID] = ok
		}
	}
	if c.nameOnly > 0 {
		// An old round: the calls by name, no results, and no reasoning, whose signatures cover the calls.
		c.nameOnly--
		d := draft{rec: i, Message: llm.Message{Role: llm.RoleAssistant, Origin: m.Origin}}
		d.Parts = m.Parts[:0] // the text parts of m, in place: m is not sent
		for _, p := range m.Parts {
			if p.Kind == llm.PartText {
				d.Parts = append(d.Parts, p)
			}
		}
		d.nameOnly = slab(&c.names, len(m.ToolCalls))
		for _, call := range m.ToolCalls {
			d.nameOnly = append(d.nameOnly, call.Name)
		}
		c.push(d, c.est.nameOnly, r.ID)
		c.collect(-2, m.ToolCalls) // results dropped
		return
	}
	c.push(draft{Message: m, rec: i}, c.est.tokens, r.ID)
	c.collect(len(c.msgs)-1, m.ToolCalls)
}

// collect makes msgs[open] the assistant message whose results the tool records that follow answer.
func (c *converter) collect(open int, calls []llm.ToolCall) {
	c.open, c.calls = open, calls
	c.results = slices.Grow(c.results[:0], len(calls))[:len(calls)]
	clear(c.results)
}

// fixArguments sends arguments that are not a JSON object (only data chatd did not write holds such) as
// {}: Anthropic and Gemini take nothing else.
// It reports whether all were objects.
func (c *converter) fixArguments(calls []llm.ToolCall) bool {
	ok := true
	for i := range calls {
		a := calls[i].Arguments
		if len(a) >= 2 && a[0] == '{' && json.Valid(a) {
			continue
		}
		ok = false
		c.b.Repairs[RepairArguments]++
		calls[i].Arguments = json.RawMessage("{}")
	}
	return ok
}

// fixNames gives calls whose name a provider refuses (empty, from a server that sent none, or outside
// ^[a-zA-Z0-9_-]{1,64}$) one every provider takes; their results follow, as they take the call's name.
func (c *converter) fixNames(calls []llm.ToolCall) {
	for i := range calls {
		if validName(calls[i].Name) {
			continue
		}
		c.b.Repairs[RepairToolName]++
		calls[i].Name = cleanName(calls[i].Name)
	}
}

func validName(s string) bool {
	return s != "" && len(s) <= 64 && validChars(s)
}

func validChars(s string) bool {
	for i := 0; i < len(s); i++ {
		if !validByte(s[i]) {
			return false
		}
	}
	return true
}

// validByte reports whether every provider takes b in a tool name or call id: [a-zA-Z0-9_-].
func validByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-'
}

// cleanName replaces what a provider refuses in a tool name with _.
func cleanName(s string) string {
	if s == "" {
		return "unnamed_tool"
	}
	b := []byte(s)
	for i, ch := range b {
		if !validByte(ch) {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	return string(b)
}

// uniqueCalls drops calls repeating an id of the same record.
func (c *converter) uniqueCalls(calls []llm.ToolCall) []llm.ToolCall {
	for i := 1; i < len(calls); i++ {
		for j := range i {
			if calls[j].ID == calls[i].ID {
				c.b.Clamped.DuplicateCalls++
				calls = slices.Delete(slices.Clone(calls), i, i+1)
				i--
				break
			}
		}
	}
	return calls
}

// result files a tool record under the call it answers.
func (c *converter) result(r *store.Record) {
	if c.open == -1 || (r.ParentID != "" && c.open >= 0 && r.ParentID != c.records[c.msgs[c.open].rec].ID) {
		c.b.Clamped.OrphanResults++
		return
	}
	i := slices.IndexFunc(c.calls, func(call llm.ToolCall) bool { return call.ID == r.ToolCallID })
	switch {
	case i < 0:
		c.b.Clamped.OrphanResults++
	case c.results[i] != nil:
		c.b.Clamped.DuplicateResults++
	default:
		c.results[i] = r
	}
}

// close appends the results of the open assistant message in its calls' order, a failed result for
// each call none answers.
func (c *converter) close() {
	if c.open == -1 {
		return
	}
	open := c.open
	c.open = -1
	if open == -2 { // a round shown by name only
		return
	}
	rec := c.msgs[open].rec
	for i, call := range c.calls {
		r := c.results[i]
		m := llm.Message{Role: llm.RoleTool, ToolCallID: call.ID, ToolName: call.Name, IsError: true}
		id := ""
		if r == nil {
			c.b.Clamped.MissingResults++
			m.Parts = []llm.Part{{Kind: llm.PartText, Text: missingResult}}
		} else {
			m.IsError = r.Success == nil || !*r.Success
			m.Parts = []llm.Part{{Kind: llm.PartText, Text: c.capResult(r.Content)}}
			id = r.ID
		}
		c.push(draft{Message: m, rec: rec}, c.est.tokens, id)
	}
}

// capResult cuts a result over the cap at a character boundary, with a note saying so.
func (c *converter) capResult(s string) string {
	if strings.TrimSpace(s) == "" {
		return emptyResult
	}
	limit := c.opt.ResultMaxBytes
	if len(s) <= limit {
		return s
	}
	c.b.Repairs[RepairResultCut]++
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "\n\n[Result cut for the model: showing the first " + strconv.Itoa(cut) + " of " +
		strconv.Itoa(len(s)) + " bytes. The full result is stored and shown to the user.]"
}

func (c *converter) userMessage(r *store.Record) llm.Message {
	m := llm.Message{Role: llm.RoleUser, Parts: slab(&c.parts, 1+len(r.Attachments))}
	if r.Content != "" {
		m.Parts = append(m.Parts, llm.Part{Kind: llm.PartText, Text: r.Content})
	}
	for _, a := range r.Attachments {
		m.Parts = append(m.Parts, llm.Part{Kind: llm.PartImage, MediaType: a.MediaType, Data: a.Data})
	}
	return m
}

// normalize makes the drafts a conversation every provider accepts: no blank text, no empty message,
// roles taking turns (tool results answer the assistant message before them), a user message first,
// and — without tools declared — calls and results as text.
func (c *converter) normalize() {
	if !c.opt.Tools {
		c.toolsAsText()
	}
	out := c.msgs[:0]
	for _, d := range c.msgs {
		c.dropBlank(&d)
		if len(d.Parts) == 0 && len(d.ToolCalls) == 0 && len(d.nameOnly) == 0 && d.Role != llm.RoleTool {
			c.b.Repairs[RepairEmptyMessage]++
			continue
		}
		if n := len(out); n > 0 && d.Role != llm.RoleTool && out[n-1].Role == d.Role {
			c.b.Repairs[RepairMergedRoles]++
			c.merge(&out[n-1], &d)
			continue
		}
		out = append(out, d)
	}
	c.msgs = out
	if c.b.Summary != nil {
		s := draft{rec: -1, Message: llm.TextMessage(llm.RoleUser, summaryIntro+c.b.Summary.Content)}
		s.tokens = estimateMessage(&s.Message)
		if len(c.msgs) > 0 && c.msgs[0].Role == llm.RoleUser {
			c.merge(&s, &c.msgs[0])
			c.msgs[0] = s
		} else {
			c.msgs = slices.Insert(c.msgs, 0, s)
		}
	}
	if n := len(c.msgs); n > 0 && c.msgs[n-1].Role == llm.RoleAssistant {
		// A model call answers the user or a tool; a conversation ending with the assistant (its user
		// message lost) would be read as a prefill, which Anthropic refuses with thinking on.
		c.b.Repairs[RepairLastAssistant]++
		last := draft{rec: -1, Message: llm.TextMessage(llm.RoleUser, lastUser)}
		last.tokens = estimateMessage(&last.Message)
		c.msgs = append(c.msgs, last)
	}
	if len(c.msgs) == 0 || c.msgs[0].Role != llm.RoleUser {
		c.b.Repairs[RepairFirstNotUser]++
		first := draft{rec: -1, Message: llm.TextMessage(llm.RoleUser, firstUser)}
		first.tokens = estimateMessage(&first.Message)
		c.msgs = slices.Insert(c.msgs, 0, first)
	}
	c.fixIDs()
}

// dropBlank removes text parts with nothing but white space, and reasoning with neither text nor
// signature.
func (c *converter) dropBlank(d *draft) {
	if slices.ContainsFunc(d.Parts, blank) {
		d.Parts = slices.DeleteFunc(slices.Clone(d.Parts), blank)
		c.b.Repairs[RepairEmptyPart]++
	}
}

func blank(p llm.Part) bool {
	switch p.Kind {
	case llm.PartText:
		return strings.TrimSpace(p.Text) == ""
	case llm.PartReasoning:
		return p.Text == "" && p.Signature == "" && p.ID == ""
	}
	return false
}

// merge appends b to a, a message of the same role. Replay data goes only to the model that wrote it:
// parts of another model lose theirs. An assistant message keeps its reasoning first: Anthropic
// refuses a thinking turn that does not start with its thinking.
func (c *converter) merge(a, b *draft) {
	a.tokens += b.tokens
	if len(a.nameOnly) > 0 && len(b.nameOnly) == 0 {
		// The note on a's old calls goes right after a's own text, before what b said next.
		note := llm.Part{Kind: llm.PartText, Text: nameOnlyNote(a.nameOnly)}
		a.Parts, a.nameOnly = append(a.Parts, note), nil // a's parts are its own
		a.tokens += Estimate(note.Text)
	}
	if a.Role == llm.RoleAssistant {
		if a.Origin != b.Origin {
			if stripReplay(&a.Message) {
				c.b.Repairs[RepairReplayDropped]++
			}
			a.Origin = b.Origin
		}
		if !slices.ContainsFunc(b.Parts, isReasoning) || !slices.ContainsFunc(a.Parts, func(p llm.Part) bool { return !isReasoning(p) }) {
			a.Parts = append(a.Parts, b.Parts...) // already in order: a's reasoning and text, then b's
		} else {
			parts := make([]llm.Part, 0, len(a.Parts)+len(b.Parts))
			for _, reasoning := range []bool{true, false} {
				for _, ps := range [][]llm.Part{a.Parts, b.Parts} {
					for _, p := range ps {
						if isReasoning(p) == reasoning {
							parts = append(parts, p)
						}
					}
				}
			}
			a.Parts = parts
		}
	} else {
		a.Parts = append(slices.Clip(a.Parts), b.Parts...)
		a.Parts = joinTexts(a.Parts)
	}
	if len(b.ToolCalls) > 0 {
		a.ToolCalls = append(a.ToolCalls, b.ToolCalls...)
	}
	if len(b.nameOnly) > 0 {
		a.nameOnly = append(a.nameOnly, b.nameOnly...)
	}
}

func isReasoning(p llm.Part) bool {
	return p.Kind == llm.PartReasoning || p.Kind == llm.PartRedactedReasoning
}

// joinTexts joins adjacent text parts into one, a paragraph apart: a user message of one text is what
// every OpenAI-compatible server reads, some of them nothing else.
func joinTexts(parts []llm.Part) []llm.Part {
	out := parts[:0:0]
	for _, p := range parts {
		if n := len(out); n > 0 && p.Kind == llm.PartText && out[n-1].Kind == llm.PartText && p.Signature == "" && out[n-1].Signature == "" {
			out[n-1].Text += "\n\n" + p.Text
			continue
		}
		out = append(out, p)
	}
	return out
}

// stripReplay drops what only m's own model can read back; it reports whether there was any.
func stripReplay(m *llm.Message) bool {
	had := false
	parts := make([]llm.Part, 0, len(m.Parts))
	for _, p := range m.Parts {
		if p.HasReplay() {
			had = true
			if p.Kind == llm.PartRedactedReasoning {
				continue
			}
			p.Signature, p.ID = "", ""
		}
		parts = append(parts, p)
	}
	m.Parts = parts
	calls := slices.Clone(m.ToolCalls)
	for i := range calls {
		if calls[i].Signature != "" {
			had, calls[i].Signature = true, ""
		}
	}
	m.ToolCalls = calls
	return had
}

// toolsAsText turns calls into text of their assistant message and results into user messages.
func (c *converter) toolsAsText() {
	out := make([]draft, 0, len(c.msgs))
	for _, d := range c.msgs {
		switch {
		case d.Role == llm.RoleTool:
			c.b.Repairs[RepairToolsAsText]++
			status := "returned"
			if d.IsError {
				status = "failed"
			}
			nd := draft{rec: d.rec, Message: llm.TextMessage(llm.RoleUser,
				"[Tool "+d.ToolName+" "+status+", call "+d.ToolCallID+"]\n"+d.Text())}
			nd.tokens = estimateMessage(&nd.Message)
			out = append(out, nd)
		case len(d.ToolCalls) > 0:
			var sb strings.Builder
			for i, call := range d.ToolCalls {
				if i > 0 {
					sb.WriteByte('\n')
				}
				sb.WriteString("[Called tool " + call.Name + ", call " + call.ID + ", with " + string(call.Arguments) + "]")
			}
			stripReplay(&d.Message)
			d.Parts = append(slices.Clip(d.Parts), llm.Part{Kind: llm.PartText, Text: sb.String()})
			d.ToolCalls = nil
			d.tokens = estimateMessage(&d.Message)
			out = append(out, d)
		default:
			out = append(out, d)
		}
	}
	c.msgs = out
}

// fixIDs gives every call an id all providers accept, unique in the request, and its result the same.
// Stored ids come from many providers: Kimi's "functions.search:0", ids over OpenAI's 40 characters,
// one id repeated across turns.
func (c *converter) fixIDs() {
	c.ids = map[string]bool{}
	var renamed map[string]string // of the current assistant message
	for i := range c.msgs {
		d := &c.msgs[i]
		switch {
		case d.Role == llm.RoleAssistant && len(d.ToolCalls) > 0:
			renamed = nil
			for j := range d.ToolCalls {
				id := d.ToolCalls[j].ID
				if validID(id) && !c.ids[id] {
					c.ids[id] = true
					continue
				}
				c.b.Repairs[RepairToolID]++
				if renamed == nil {
					d.ToolCalls = slices.Clone(d.ToolCalls)
					renamed = map[string]string{}
				}
				nid := c.newID(id, i, j)
				renamed[id] = nid
				d.ToolCalls[j].ID = nid
			}
		case d.Role == llm.RoleTool:
			if nid, ok := renamed[d.ToolCallID]; ok {
				d.ToolCallID = nid
			}
		}
	}
}

// newID derives a replacement id from the old one and its place: the same records give the same ids.
func (c *converter) newID(old string, msg, call int) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s#%d#%d", old, msg, call)
	id := "call_" + strconv.FormatUint(h.Sum64(), 36)
	for c.ids[id] {
		id += "x"
	}
	c.ids[id] = true
	return id
}

// validID reports whether every provider accepts id: Anthropic's ^[a-zA-Z0-9_-]+$ and OpenAI's 40
// characters at most.
func validID(id string) bool {
	return id != "" && len(id) <= 40 && validChars(id)
}

// finish renders the name-only notes, marks the cache breakpoints, and counts the tokens.
func (c *converter) finish() {
	b := c.b
	b.Messages = make([]llm.Message, len(c.msgs))
	for i := range c.msgs {
		d := &c.msgs[i]
		if len(d.nameOnly) > 0 {
			note := nameOnlyNote(d.nameOnly)
			d.Parts = append(slices.Clip(d.Parts), llm.Part{Kind: llm.PartText, Text: note})
			d.tokens += Estimate(note)
		}
		b.Messages[i] = d.Message
		b.Tokens += d.tokens
	}
	// Cache breakpoints (Anthropic): the end of the conversation, which the next call reads back, and
	// the end of the previous call's conversation (before the latest assistant turn), which this call
	// reads back when more than the lookback of blocks was added since.
	if n := len(b.Messages); n > 0 {
		b.Messages[n-1].Cache = true
		for i := n - 1; i > 0; i-- {
			if b.Messages[i].Role == llm.RoleAssistant {
				b.Messages[i-1].Cache = true
				break
			}
		}
	}
	// The points count the tokens of each record as built, before merging moved them between messages.
	sum, k := 0, 0
	for i := range b.points {
		p := &b.points[i]
		for ; k < p.rec-b.From && k < len(c.recTok); k++ {
			sum += c.recTok[k]
		}
		p.before = sum
	}
	for ; k < len(c.recTok); k++ {
		sum += c.recTok[k]
	}
	b.recordTokens = sum
}

// nameOnlyNote tells the model which calls an old round made, in order, repeats counted.
func nameOnlyNote(names []string) string {
	var sb strings.Builder
	sb.WriteString("[Earlier tool calls, their results no longer shown: ")
	for i := 0; i < len(names); {
		j := i + 1
		for j < len(names) && names[j] == names[i] {
			j++
		}
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(names[i])
		if j-i > 1 {
			sb.WriteString(" ×" + strconv.Itoa(j-i))
		}
		i = j
	}
	sb.WriteByte(']')
	return sb.String()
}

// Cut returns where a summary should end so that the messages after it take at most keep tokens: the
// index of the first record kept. It keeps as much as fits, and at least the latest user message or
// assistant turn; ok is false when nothing before that can be summarized.
func (b *Built) Cut(keep int) (rec int, ok bool) {
	if len(b.points) < 2 {
		return 0, false
	}
	for _, p := range b.points[1:] {
		if b.recordTokens-p.before <= keep {
			return p.rec, true
		}
	}
	return b.points[len(b.points)-1].rec, true
}

// Kept returns the tokens of the messages built from the records a cut at rec keeps.
func (b *Built) Kept(rec int) int {
	for _, p := range b.points {
		if p.rec == rec {
			return b.recordTokens - p.before
		}
	}
	return b.recordTokens
}

// assistantMessage is an assistant record as the model is sent it: as its provider wrote it when the
// record holds a replay whose text still matches the record's text as written (RawContent, when chatd
// took marked blocks out of it), else from the record's fields.
func (c *converter) assistantMessage(r *store.Record) llm.Message {
	written := r.Content
	if r.RawContent != "" {
		written = r.RawContent
	}
	if r.Replay != nil && replayText(r.Replay) == written {
		return replayMessage(r)
	}
	m := llm.Message{Role: llm.RoleAssistant, Parts: slab(&c.parts, 2)}
	// Unsigned reasoning is kept for the providers that read it.
	if r.Reasoning != "" {
		m.Parts = append(m.Parts, llm.Part{Kind: llm.PartReasoning, Text: r.Reasoning})
	}
	if r.Content != "" {
		m.Parts = append(m.Parts, llm.Part{Kind: llm.PartText, Text: r.Content})
	}
	if len(r.ToolCalls) > 0 {
		m.ToolCalls = slab(&c.tcs, len(r.ToolCalls))
		for _, call := range r.ToolCalls {
			m.ToolCalls = append(m.ToolCalls, llm.ToolCall{ID: call.ID, Name: call.Name, Arguments: call.Arguments})
		}
	}
	return m
}

// replayMessage is an assistant record as its provider wrote it: parts in order, with signatures.
func replayMessage(r *store.Record) llm.Message {
	m := llm.Message{Role: llm.RoleAssistant, Origin: r.Replay.Model}
	var sigs map[string]string
	for _, p := range r.Replay.Parts {
		switch p.Kind {
		case store.PartText:
			m.Parts = append(m.Parts, llm.Part{Kind: llm.PartText, Text: p.Text, Signature: p.Signature})
		case store.PartReasoning:
			m.Parts = append(m.Parts, llm.Part{Kind: llm.PartReasoning, Text: p.Text, Signature: p.Signature, ID: p.ID})
		case store.PartRedactedReasoning:
			m.Parts = append(m.Parts, llm.Part{Kind: llm.PartRedactedReasoning, Signature: p.Signature})
		case store.PartToolCall:
			if sigs == nil {
				sigs = map[string]string{}
			}
			sigs[p.ID] = p.Signature
		}
	}
	for _, call := range r.ToolCalls {
		m.ToolCalls = append(m.ToolCalls, llm.ToolCall{ID: call.ID, Name: call.Name, Arguments: call.Arguments, Signature: sigs[call.ID]})
	}
	return m
}

func replayText(rp *store.Replay) string {
	if len(rp.Parts) == 1 && rp.Parts[0].Kind == store.PartText {
		return rp.Parts[0].Text
	}
	var sb strings.Builder
	for _, p := range rp.Parts {
		if p.Kind == store.PartText {
			sb.WriteString(p.Text)
		}
	}
	return sb.String()
}

// Describe summarizes the repairs for a log line: "merged_roles=2 empty_message=1", sorted.
func Describe(repairs map[string]int) string {
	keys := make([]string, 0, len(repairs))
	for k := range repairs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.Itoa(repairs[k])
	}
	return strings.Join(parts, " ")
}
