package prompt_test

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"maps"
	"math/rand/v2"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"

	"chatd/internal/llm"
	"chatd/internal/llm/anthropic"
	"chatd/internal/llm/gemini"
	"chatd/internal/llm/llmtest"
	"chatd/internal/llm/openai"
	"chatd/internal/llm/responses"
	"chatd/internal/prompt"
	"chatd/internal/store"
)

// The promise under test: whatever a session's records hold — results out of order, missing,
// repeated or answering nothing, ids no provider takes, calls cut by a crash, summaries naming
// nothing, another model's signatures — Build gives messages every adapter encodes into a body its
// API accepts, the same messages every time, and never edits the records.

// FuzzBuild holds random sessions to the promise. The fuzzer steers the session's first choices
// with data; seed draws the rest.
func FuzzBuild(f *testing.F) {
	for _, seed := range []uint64{0, 1, 2, 3, 42, 1 << 40} {
		f.Add(seed, []byte(nil))
	}
	f.Add(uint64(7), []byte("\x00\x01\x02\x03\xff\xfe\xfd\xfc tool rounds"))
	ch := newChecker(f)
	f.Fuzz(func(t *testing.T, seed uint64, data []byte) {
		recs := genSession(rand.New(&fuzzSource{data: data, pcg: rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)}))
		if fl := ch.session(recs); fl != nil {
			t.Fatalf("seed %d, data %q: %v", seed, data, ch.report(fl))
		}
	})
}

// TestBuildRandomRecords is FuzzBuild over a fixed set of seeds, for every go test run, in as many
// shards as there are CPUs. It reports each kind of failure once, at its lowest seed, with the
// smallest session it shrinks to.
func TestBuildRandomRecords(t *testing.T) {
	const seeds = 500
	ch := newChecker(t)
	shards := runtime.GOMAXPROCS(0)
	found := make([]map[string]seededFailure, shards) // by shard, the first failure of each kind
	t.Run("shards", func(t *testing.T) {
		for shard := range shards {
			found[shard] = map[string]seededFailure{}
			t.Run(strconv.Itoa(shard), func(t *testing.T) {
				t.Parallel()
				for seed := uint64(shard); seed < seeds; seed += uint64(shards) {
					fl := ch.session(genSession(rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))))
					if fl == nil {
						continue
					}
					if _, ok := found[shard][fl.kind()]; !ok {
						found[shard][fl.kind()] = seededFailure{seed, fl}
					}
				}
			})
		}
	})
	first := map[string]seededFailure{}
	for _, byKind := range found {
		for kind, sf := range byKind {
			if prev, ok := first[kind]; !ok || sf.seed < prev.seed {
				first[kind] = sf
			}
		}
	}
	sorted := slices.SortedFunc(maps.Values(first), func(a, b seededFailure) int { return cmp.Compare(a.seed, b.seed) })
	for i, sf := range sorted {
		if i == 5 {
			t.Fatalf("%d more kinds of failure, not shown", len(sorted)-i)
		}
		t.Errorf("seed %d: %v", sf.seed, ch.report(sf.fl))
	}
}

type seededFailure struct {
	seed uint64
	fl   *failure
}

// fuzzSource is a rand.Source reading the fuzzer's bytes first, then a PCG.
type fuzzSource struct {
	data []byte
	pcg  *rand.PCG
}

func (s *fuzzSource) Uint64() uint64 {
	if len(s.data) == 0 {
		return s.pcg.Uint64()
	}
	var b [8]byte
	n := copy(b[:], s.data)
	s.data = s.data[n:]
	return binary.LittleEndian.Uint64(b[:])
}

// Origins of replayed turns, and the request models of the targets they belong to.
const (
	originAnthropic = "anthropic/claude-sonnet-4-5"
	originGemini    = "gemini/gemini-3-pro-preview"
	originResponses = "responses/gpt-5"
)

// tinyPNG is a valid 1×1 PNG.
var tinyPNG = func() []byte {
	img := image.NewRGBA(image.Rect(0, 0, 1, 1))
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		panic(err)
	}
	return buf.Bytes()
}()

// hugeText is cut to the huge tool results: multi-byte characters, so a cut may land inside one.
var hugeText = strings.Repeat("line of output — résultat 結果 ✓ 0123456789\n", 200<<10/40)

// sessionGen makes one random session.
type sessionGen struct {
	r     *rand.Rand
	recs  []store.Record
	calls []string // call ids made so far, for the ids providers repeat across turns
	turns []string // ids of the assistant records so far
}

// genSession returns 1–60 records of a session, oldest first, each with an id and a seq.
func genSession(r *rand.Rand) []store.Record {
	g := &sessionGen{r: r}
	n := 1 + r.IntN(1+r.IntN(60)) // short sessions more often: they cost less and fail as well
	for len(g.recs) < n {
		switch k := r.IntN(100); {
		case k < 25:
			g.user()
		case k < 40:
			g.assistant(0)
		case k < 80:
			g.round()
		case k < 85:
			g.tool(store.ToolCall{ID: g.callID(), Name: "search"}, g.someTurn()) // answering no call before it
		case k < 93:
			g.summary()
		default:
			g.add(store.Record{Role: store.RoleSystem, Content: "note"})
		}
	}
	return g.recs[:n] // a session may end anywhere, in the middle of a round too
}

func (g *sessionGen) chance(n int) bool { return g.r.IntN(n) == 0 }

func (g *sessionGen) add(rec store.Record) *store.Record {
	rec.Seq = int64(len(g.recs) + 1)
	rec.ID = "r" + strconv.FormatInt(rec.Seq, 10)
	rec.SessionID = "s1"
	g.recs = append(g.recs, rec)
	return &g.recs[len(g.recs)-1]
}

func (g *sessionGen) user() {
	rec := store.Record{Role: store.RoleUser, Content: g.text("question")}
	if g.chance(8) {
		rec.Attachments = []store.Attachment{{MediaType: "image/png", Name: "dot.png", Data: tinyPNG}}
	}
	g.add(rec)
}

// text is a message's text: mostly words, sometimes nothing, blanks, or trailing white space.
func (g *sessionGen) text(word string) string {
	switch g.r.IntN(12) {
	case 0:
		return ""
	case 1:
		return " \n\t "
	case 2:
		return word + " with trailing space \n"
	case 3:
		return strings.Repeat(word+" ", 1+g.r.IntN(30))
	}
	return word + " " + strconv.Itoa(len(g.recs)+1)
}

// round adds an assistant turn with 1–4 calls and the tool records answering them, in random order,
// some missing, repeated or cut off by a user message.
func (g *sessionGen) round() {
	calls := 1 + g.r.IntN(4)
	if g.chance(300) {
		calls = prompt.MaxCallsPerTurn + 2
	}
	turn := g.assistant(calls)
	id, tcs := turn.ID, slices.Clone(turn.ToolCalls)
	cut := -1 // where a crash cut the round and the user wrote again
	if g.chance(12) {
		cut = g.r.IntN(len(tcs) + 1)
	}
	for i, k := range g.r.Perm(len(tcs)) {
		if i == cut {
			g.user()
		}
		switch g.r.IntN(20) {
		case 0: // missing
		case 1:
			g.tool(tcs[k], id)
			g.tool(tcs[k], id)
		default:
			g.tool(tcs[k], id)
		}
	}
	if g.chance(10) {
		g.tool(store.ToolCall{ID: "call_nobody_made", Name: "search"}, id)
	}
}

// assistant adds an assistant turn with calls tool calls.
func (g *sessionGen) assistant(calls int) *store.Record {
	rec := store.Record{Role: store.RoleAssistant, Content: g.text("answer")}
	if g.chance(3) {
		rec.Reasoning = "thinking about it"
	}
	for i := range calls {
		id := g.callID()
		if i > 0 && g.chance(15) {
			id = rec.ToolCalls[i-1].ID // one id twice in a turn
		}
		rec.ToolCalls = append(rec.ToolCalls, store.ToolCall{ID: id, Name: g.toolName(), Arguments: g.arguments()})
		g.calls = append(g.calls, id)
	}
	if g.chance(3) {
		rec.Replay = g.replay(&rec)
	}
	p := g.add(rec)
	g.turns = append(g.turns, p.ID)
	return p
}

// callID is a tool call id as providers send them, well or badly.
func (g *sessionGen) callID() string {
	switch g.r.IntN(20) {
	case 0:
		return ""
	case 1:
		return "functions.search:" + strconv.Itoa(g.r.IntN(3)) // Kimi
	case 2:
		return "call_" + strings.Repeat("a", 36+g.r.IntN(20)) // over OpenAI's 40 characters
	case 3:
		return "call_1|fc_1" // Responses call id and item id
	case 4, 5:
		if len(g.calls) > 0 {
			return g.calls[g.r.IntN(len(g.calls))] // repeated across turns
		}
	case 6:
		return "toolu_01"
	}
	return fmt.Sprintf("call_%d_%d", len(g.recs)+1, g.r.IntN(1000))
}

// toolName is a declared tool's name, or none: chatd stores a call that named no tool, unrun.
func (g *sessionGen) toolName() string {
	switch g.r.IntN(40) {
	case 0:
		return ""
	case 1, 2, 3, 4, 5, 6, 7, 8, 9:
		return "read_file"
	}
	return "search"
}

func (g *sessionGen) arguments() json.RawMessage {
	switch g.r.IntN(100) {
	case 0:
		return nil
	case 1:
		return json.RawMessage(`[1,2]`) // not an object: a store other than chatd's may hold it
	case 2:
		return json.RawMessage(`{"q":"cut off`)
	case 3, 4, 5, 6, 7, 8, 9, 10, 11, 12:
		return json.RawMessage(`{}`)
	case 13, 14, 15, 16, 17, 18, 19, 20, 21, 22:
		return json.RawMessage(`{"q":"a \"quoted\" word","n":3,"deep":{"list":[1,2,{"x":null}]}}`)
	}
	return json.RawMessage(`{"q":"w` + strconv.Itoa(g.r.IntN(100)) + `"}`)
}

// replay is what the provider of a random origin would have stored for rec: its signed reasoning,
// text and call signatures; sometimes stale (the text no longer matches) or missing a signature.
func (g *sessionGen) replay(rec *store.Record) *store.Replay {
	sig := func() string {
		if g.chance(8) {
			return ""
		}
		return "c2ln" + strconv.Itoa(g.r.IntN(1000))
	}
	text := rec.Content
	if g.chance(8) {
		text = "stale " + text
	}
	var rp store.Replay
	switch g.r.IntN(3) {
	case 0:
		rp.Model = originAnthropic
		rp.Parts = append(rp.Parts, store.ReplayPart{Kind: store.PartReasoning, Text: "thinking", Signature: sig()})
		if g.chance(4) {
			rp.Parts = append(rp.Parts, store.ReplayPart{Kind: store.PartRedactedReasoning, Signature: "cmVkYWN0ZWQ="})
		}
		if text != "" {
			rp.Parts = append(rp.Parts, store.ReplayPart{Kind: store.PartText, Text: text})
		}
	case 1:
		rp.Model = originGemini
		if g.chance(2) {
			rp.Parts = append(rp.Parts, store.ReplayPart{Kind: store.PartReasoning, Text: "thought", Signature: sig()})
		}
		if text != "" {
			rp.Parts = append(rp.Parts, store.ReplayPart{Kind: store.PartText, Text: text, Signature: sig()})
		}
		for i, c := range rec.ToolCalls {
			if i == 0 || g.chance(3) {
				rp.Parts = append(rp.Parts, store.ReplayPart{Kind: store.PartToolCall, ID: c.ID, Signature: sig()})
			}
		}
	default:
		rp.Model = originResponses
		for i := range 1 + g.r.IntN(2) {
			id := "rs_" + strconv.Itoa(len(g.recs)+1) + "_" + strconv.Itoa(i)
			for range 1 + g.r.IntN(2) {
				rp.Parts = append(rp.Parts, store.ReplayPart{Kind: store.PartReasoning, ID: id, Text: "summary", Signature: sig()})
			}
		}
		if text != "" {
			rp.Parts = append(rp.Parts, store.ReplayPart{Kind: store.PartText, Text: text})
		}
	}
	return &rp
}

// tool adds a tool record answering call, mostly of parent.
func (g *sessionGen) tool(call store.ToolCall, parent string) {
	rec := store.Record{Role: store.RoleTool, ToolCallID: call.ID, Name: call.Name, ParentID: parent}
	switch g.r.IntN(15) {
	case 0:
		rec.ParentID = g.someTurn()
	case 1:
		rec.ParentID = ""
	}
	switch g.r.IntN(200) { // a huge result costs more to check than the rest of a session
	case 0:
		rec.Content = hugeText[:40<<10+g.r.IntN(160<<10)]
	case 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20:
		rec.Content = ""
	default:
		rec.Content = "result of " + call.Name + ": " + strings.Repeat("data ", g.r.IntN(50))
	}
	ok := !g.chance(6)
	if !g.chance(10) {
		rec.Success = &ok
	}
	g.add(rec)
}

// someTurn is the id of a random assistant record so far, or none.
func (g *sessionGen) someTurn() string {
	if len(g.turns) == 0 {
		return ""
	}
	return g.turns[g.r.IntN(len(g.turns))]
}

// summary adds a summary through a random earlier record, or through one the session does not hold.
func (g *sessionGen) summary() {
	through := "r999"
	if len(g.recs) > 0 && !g.chance(5) {
		through = g.recs[g.r.IntN(len(g.recs))].ID
	}
	g.add(store.Record{Role: store.RoleSystem, Content: "The user asked things; tools ran.", SummaryThrough: through})
}

// target is one provider's adapter and its API's rules, for one model.
type target struct {
	name      string // the provider's name: it reads back the signatures of name/model
	model     string
	reasoning *llm.Reasoning
	enc       llm.Encoder
	validate  func(body map[string]any) *llmtest.APIError
}

// checker builds sessions under every option set and holds the result to the promise.
type checker struct {
	targets []target
}

func newChecker(tb testing.TB) *checker {
	tb.Helper()
	must := func(enc llm.Encoder, err error) llm.Encoder {
		if err != nil {
			tb.Fatal(err)
		}
		return enc
	}
	const base = "http://upstream.invalid"
	oa := must(openai.New(openai.Options{Name: "openai", BaseURL: base + "/v1", APIKey: "k"}))
	an := must(anthropic.New(anthropic.Options{Name: "anthropic", BaseURL: base, APIKey: "k"}))
	ge := must(gemini.New(gemini.Options{Name: "gemini", BaseURL: base, APIKey: "k"}))
	re := must(responses.New(responses.Options{Name: "responses", BaseURL: base + "/v1", APIKey: "k"}))
	geminiModel := func(model string) func(map[string]any) *llmtest.APIError {
		return func(body map[string]any) *llmtest.APIError { return llmtest.ValidateGeminiModel(model, body) }
	}
	return &checker{targets: []target{
		{"openai", "gpt-4.1", nil, oa, llmtest.Validate},
		{"anthropic", "claude-sonnet-4-5", nil, an, llmtest.ValidateAnthropic},
		// With thinking on, the API also wants a tool turn to go on from its own signed thinking.
		{"anthropic", "claude-sonnet-4-5", &llm.Reasoning{BudgetTokens: 2048}, an, llmtest.ValidateAnthropic},
		{"gemini", "gemini-2.5-flash", nil, ge, geminiModel("gemini-2.5-flash")},
		{"gemini", "gemini-3-pro-preview", nil, ge, geminiModel("gemini-3-pro-preview")},
		{"responses", "gpt-5", nil, re, llmtest.ValidateResponses},
	}}
}

// optionSets are the options every session is built with.
var optionSets = func() []prompt.Options {
	var out []prompt.Options
	for _, tools := range []bool{true, false} {
		for _, rounds := range []int{1, 2, 10, -1} {
			out = append(out, prompt.Options{Tools: tools, ToolHistoryRounds: rounds})
		}
	}
	return out
}()

var fuzzTools = []llm.ToolSpec{
	{Name: "search", Description: "Searches the web.", InputSchema: json.RawMessage(
		`{"type":"object","properties":{"q":{"type":"string","description":"what to look for"}},"required":["q"]}`)},
	{Name: "read_file", Description: "Reads a file.", InputSchema: json.RawMessage(
		`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`)},
}

// failure is one way a session breaks the promise.
type failure struct {
	recs  []store.Record
	opt   prompt.Options
	where string // the target, or the invariant
	err   error
}

func (fl *failure) Error() string {
	return fmt.Sprintf("%s with %+v: %v", fl.where, fl.opt, fl.err)
}

// particulars are the parts of an error message that name this session's things: numbers, quoted
// ids and texts, tool names in parentheses.
var particulars = regexp.MustCompile(`[0-9]+|"(?:[^"\\]|\\.)*"|'[^']*'|\x60[^\x60]*\x60|\([^)]*\)`)

// kind names the failure without its particulars, so that one cause is reported once.
func (fl *failure) kind() string {
	msg, _, _ := strings.Cut(fl.err.Error(), "\n")
	return fl.where + " " + clip(particulars.ReplaceAllString(msg, "_"), 120)
}

// session checks recs under every option set and returns the first failure, nil when there is none.
func (ch *checker) session(recs []store.Record) *failure {
	before := cloneRecords(recs)
	var sent []sentBuild // conversations already held to the APIs' rules
	for _, opt := range optionSets {
		if fl := ch.check(recs, opt, &sent); fl != nil {
			return fl
		}
	}
	if !equal(before, recs) {
		return &failure{recs: recs, where: "invariant", err: fmt.Errorf("Build edited the records (-before +after):\n%s", gocmp.Diff(before, recs))}
	}
	return nil
}

// sentBuild is a conversation checked against every target.
type sentBuild struct {
	tools bool
	msgs  []llm.Message
}

// equal is cmp.Equal, made fast for the messages: compared several times a session, they take
// cmp.Equal ten times as long to walk as reflect.DeepEqual, which for these types (no unexported
// fields, no cycles, nothing with an Equal method) is the same test. cmp.Diff explains a difference.
func equal(a, b any) bool { return reflect.DeepEqual(a, b) }

// check builds recs with opt and holds the messages to the promise. A conversation equal to one in
// sent (another option set often gives the same) is not encoded again.
func (ch *checker) check(recs []store.Record, opt prompt.Options, sent *[]sentBuild) *failure {
	fail := func(where string, err error) *failure { return &failure{recs: recs, opt: opt, where: where, err: err} }
	b := prompt.Build(recs, opt)
	if again := prompt.Build(recs, opt); !equal(b.Messages, again.Messages) {
		return fail("invariant", fmt.Errorf("two builds differ (-first +second):\n%s", gocmp.Diff(b.Messages, again.Messages)))
	}
	if err := pairing(b.Messages, opt.Tools); err != nil {
		return fail("invariant", err)
	}
	if slices.ContainsFunc(*sent, func(s sentBuild) bool { return s.tools == opt.Tools && equal(s.msgs, b.Messages) }) {
		return nil
	}
	*sent = append(*sent, sentBuild{opt.Tools, b.Messages})
	req := llm.Request{System: "s", Messages: b.Messages, MaxTokens: 1024}
	if opt.Tools {
		req.Tools = fuzzTools
	}
	var prev []byte // the body of the target before, and its decoding, which the validators only read
	var m map[string]any
	for _, tg := range ch.targets {
		req.Model, req.Reasoning = tg.model, tg.reasoning
		where := tg.name + "/" + tg.model
		if tg.reasoning != nil {
			where += " (thinking)"
		}
		body, err := tg.enc.Encode(&req)
		if err != nil {
			return fail(where, fmt.Errorf("encode: %w", err))
		}
		if !bytes.Equal(body, prev) { // the two Gemini models are often sent the same body
			m = nil
			if err := json.Unmarshal(body, &m); err != nil {
				return fail(where, fmt.Errorf("decode the body: %w", err))
			}
			prev = body
		}
		if apiErr := tg.validate(m); apiErr != nil {
			return fail(where, fmt.Errorf("refused: %w\nbody: %s", apiErr, clip(string(body), 4000)))
		}
	}
	return nil
}

// pairing checks the conversation's shape: a user message first; without tools, no calls or results;
// every call id once in the request; and every call answered by exactly one tool message in the run of
// tool messages right after its assistant message, which answer nothing else.
func pairing(msgs []llm.Message, tools bool) error {
	if len(msgs) == 0 || msgs[0].Role != llm.RoleUser {
		return fmt.Errorf("the first message is not the user's")
	}
	ids := map[string]bool{}
	open := -1                  // the assistant message whose results the current run of tool messages is
	answers := map[string]int{} // of its calls, by id
	closeRun := func() error {
		if open < 0 {
			return nil
		}
		for _, c := range msgs[open].ToolCalls {
			if n := answers[c.ID]; n != 1 {
				return fmt.Errorf("message %d: call %q answered %d times", open, c.ID, n)
			}
		}
		open = -1
		return nil
	}
	for i, m := range msgs {
		if m.Role == llm.RoleTool {
			if !tools {
				return fmt.Errorf("message %d: a tool message in a request without tools", i)
			}
			if _, ok := answers[m.ToolCallID]; !ok || open < 0 {
				return fmt.Errorf("message %d: tool result %q answers no call of the assistant message before it", i, m.ToolCallID)
			}
			answers[m.ToolCallID]++
			continue
		}
		if err := closeRun(); err != nil {
			return err
		}
		if len(m.ToolCalls) == 0 {
			continue
		}
		if !tools {
			return fmt.Errorf("message %d: tool calls in a request without tools", i)
		}
		if m.Role != llm.RoleAssistant {
			return fmt.Errorf("message %d: tool calls in a %s message", i, m.Role)
		}
		open = i
		clear(answers)
		for _, c := range m.ToolCalls {
			if ids[c.ID] {
				return fmt.Errorf("message %d: call id %q appears twice", i, c.ID)
			}
			ids[c.ID] = true
			answers[c.ID] = 0
		}
	}
	return closeRun()
}

// report describes fl and the smallest session it shrinks to that fails the same way.
func (ch *checker) report(fl *failure) string {
	small := ch.shrink(fl)
	return fmt.Sprintf("%v\n\nsmallest session failing so (%d of %d records), with %+v:\n%s\n%v\n\nwhole session:\n%s",
		fl, len(small.recs), len(fl.recs), small.opt, describeRecords(small.recs), small.err, describeRecords(fl.recs))
}

// shrink drops records, then details of records, as long as the session fails at the same place.
func (ch *checker) shrink(fl *failure) *failure {
	same := func(recs []store.Record) *failure {
		var f *failure
		if fl.where == "invariant" {
			f = ch.session(recs) // that Build edited the records is found after all the builds
		} else {
			f = ch.check(recs, fl.opt, new([]sentBuild))
		}
		if f != nil && f.kind() == fl.kind() {
			return f
		}
		return nil
	}
	best := fl
	for changed := true; changed; {
		changed = false
		for i := len(best.recs) - 1; i >= 0; i-- {
			recs := slices.Delete(slices.Clone(best.recs), i, i+1)
			if f := same(recs); f != nil {
				best, changed = f, true
			}
		}
		for i := range best.recs {
			for _, simplify := range simplifications {
				recs := cloneRecords(best.recs)
				if !simplify(&recs[i]) {
					continue
				}
				if f := same(recs); f != nil {
					best, changed = f, true
				}
			}
		}
	}
	return best
}

// simplifications make a record plainer; each reports whether it changed anything.
var simplifications = []func(r *store.Record) bool{
	func(r *store.Record) bool { had := r.Replay != nil; r.Replay = nil; return had },
	func(r *store.Record) bool { had := r.Reasoning != ""; r.Reasoning = ""; return had },
	func(r *store.Record) bool { had := r.Attachments != nil; r.Attachments = nil; return had },
	func(r *store.Record) bool { had := r.Success == nil; r.Success = new(true); return had },
	func(r *store.Record) bool {
		if len(r.Content) <= 20 {
			return false
		}
		r.Content = r.Content[:20]
		return true
	},
	func(r *store.Record) bool {
		if len(r.ToolCalls) <= 1 {
			return false
		}
		r.ToolCalls = r.ToolCalls[:len(r.ToolCalls)-1]
		return true
	},
}

// describeRecords writes records one a line: id, role and what matters to the conversation.
func describeRecords(recs []store.Record) string {
	var sb strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&sb, "  %s %s", r.ID, r.Role)
		if r.Content != "" || r.Role == store.RoleUser || r.Role == store.RoleAssistant {
			fmt.Fprintf(&sb, " %q", clip(r.Content, 40))
			if len(r.Content) > 40 {
				fmt.Fprintf(&sb, "(%dB)", len(r.Content))
			}
		}
		if len(r.Attachments) > 0 {
			fmt.Fprintf(&sb, " +%d image", len(r.Attachments))
		}
		if r.Reasoning != "" {
			fmt.Fprintf(&sb, " reasoning=%q", clip(r.Reasoning, 20))
		}
		if len(r.ToolCalls) > 0 {
			calls := make([]string, len(r.ToolCalls))
			for i, c := range r.ToolCalls {
				calls[i] = fmt.Sprintf("%q:%s%s", c.ID, c.Name, c.Arguments)
			}
			fmt.Fprintf(&sb, " calls=[%s]", clip(strings.Join(calls, " "), 400))
		}
		if r.Replay != nil {
			parts := make([]string, len(r.Replay.Parts))
			for i, p := range r.Replay.Parts {
				parts[i] = p.Kind
				if p.ID != "" {
					parts[i] += " id=" + p.ID
				}
				if p.Signature != "" {
					parts[i] += " signed"
				}
				if p.Text != "" {
					parts[i] += fmt.Sprintf(" %q", clip(p.Text, 20))
				}
			}
			fmt.Fprintf(&sb, " replay=%s[%s]", r.Replay.Model, strings.Join(parts, ", "))
		}
		if r.Role == store.RoleTool {
			fmt.Fprintf(&sb, " call=%q name=%s parent=%q", r.ToolCallID, r.Name, r.ParentID)
			if r.Success != nil {
				fmt.Fprintf(&sb, " success=%v", *r.Success)
			}
		}
		if r.SummaryThrough != "" {
			fmt.Fprintf(&sb, " summary_through=%s", r.SummaryThrough)
		}
		sb.WriteByte('\n')
	}
	return sb.String()
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// cloneRecords copies records deeply, so that a change Build makes to them shows.
func cloneRecords(recs []store.Record) []store.Record {
	out := slices.Clone(recs)
	for i := range out {
		r := &out[i]
		r.Attachments = slices.Clone(r.Attachments)
		for j := range r.Attachments {
			r.Attachments[j].Data = slices.Clone(r.Attachments[j].Data)
		}
		r.ToolCalls = slices.Clone(r.ToolCalls)
		for j := range r.ToolCalls {
			r.ToolCalls[j].Arguments = slices.Clone(r.ToolCalls[j].Arguments)
		}
		if r.Success != nil {
			ok := *r.Success
			r.Success = &ok
		}
		if r.Replay != nil {
			rp := *r.Replay
			rp.Parts = slices.Clone(rp.Parts)
			r.Replay = &rp
		}
	}
	return out
}
