package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/llm/llmtest"
)

// TestCrashRecovery kills chatd with SIGKILL at random points of a run — before the send is answered,
// while the model streams, between a tool call and its result, after the run ended — and restarts it on
// the same database each time, which grows a history of interrupted runs. After each restart the
// message is stored at most once (exactly once if the send was answered), a retried send with the same
// Idempotency-Key returns the original run, the records keep every tool call paired with its result, the
// run has ended with an event log without gaps, and the session takes a next message whose history the
// OpenAI API accepts (the model is llmtest in strict mode).
//
// CHATD_CRASH_ITERATIONS sets the number of kills (default 8, 30 under CI); CHATD_CRASH_SEED replays the
// kill points of a logged run.
func TestCrashRecovery(t *testing.T) {
	t.Parallel() // each test has its own processes, ports and files
	if testing.Short() {
		t.Skip("starts and kills chatd dozens of times")
	}
	c := &crashTest{
		seed:     envInt(t, "CHATD_CRASH_SEED", time.Now().UnixNano()),
		up:       newModel(t),
		bin:      buildChatd(t),
		db:       filepath.Join(t.TempDir(), "chatd.db"),
		outcomes: map[string]int{},
	}
	c.env = chatdEnv(c.up, "5s")
	iterations := 8
	if os.Getenv("CHATD_CI") != "" {
		iterations = 30
	}
	iterations = int(envInt(t, "CHATD_CRASH_ITERATIONS", int64(iterations)))
	t.Logf("%d kills; CHATD_CRASH_SEED=%d reproduces their points", iterations, c.seed)
	began, kills := time.Now(), 0
	for i := range iterations {
		kills++
		if !t.Run(fmt.Sprintf("kill%02d", i), func(t *testing.T) { c.iteration(t, i) }) {
			break // later kills would build on a broken history; this one's log says what broke
		}
	}
	t.Logf("%d kills in %s; how the killed runs ended: %v; %d killed streams resumed, %d of them after seeing %d events the crash lost, and told so",
		kills, time.Since(began).Round(time.Millisecond), c.outcomes, c.resumes, c.told, c.lost)
}

type crashTest struct {
	seed     int64
	up       *llmtest.Server
	bin, db  string
	env      []string
	session  string         // every iteration talks in this session
	checked  int            // the model requests checked so far
	outcomes map[string]int // how the killed runs ended, to see that the kills hit every phase
	// resumes counts the clients that resumed a killed stream; told those that had seen lost events
	// (lost, in all) and were told so.
	resumes, told, lost int
}

// killPoint is when an iteration kills chatd: after a delay since the send, or after the client has read
// a number of events, whichever the iteration's seed picked.
type killPoint struct {
	after  time.Duration
	events int
}

func (k killPoint) String() string {
	if k.events > 0 {
		return fmt.Sprintf("SIGKILL after the client read %d events", k.events)
	}
	return fmt.Sprintf("SIGKILL %s after sending", k.after)
}

// A slow run streams for about 0.6s and sends about 180 events. The kill points cover it, a little after
// it ended, and the few milliseconds in which the send is stored and answered.
func randomKillPoint(rng *rand.Rand) killPoint {
	switch rng.IntN(6) {
	case 0:
		return killPoint{after: time.Duration(rng.IntN(15000)) * time.Microsecond}
	case 1, 2:
		return killPoint{after: time.Duration(rng.IntN(800)) * time.Millisecond}
	}
	return killPoint{events: 1 + rng.IntN(200)}
}

func (c *crashTest) iteration(t *testing.T, i int) {
	kill := randomKillPoint(rand.New(rand.NewPCG(uint64(c.seed), uint64(i))))
	t.Logf("seed %d, kill %d: %s", c.seed, i, kill)
	first := startChatd(t, "chatd (killed)", c.bin, c.db, c.env...)
	if c.session == "" {
		c.session = first.createSession(t)
	}
	text := fmt.Sprintf("Message %d (slow): what time is it in Paris and in Tokyo?", i)
	send := map[string]any{"message": text, "session_id": c.session}
	key := fmt.Sprintf("crash-%d", i)
	live := sendAndKill(t, first, send, key, kill)

	p := startChatd(t, "chatd (restarted)", c.bin, c.db, c.env...)
	runID, stored := c.checkStoredOnce(t, p, text, live)
	runID = c.checkRetry(t, p, send, key, runID, stored, live)
	if runID == "" {
		return
	}
	recs := p.records(t, c.session)
	if mine := userRecords(recs, text); len(mine) != 1 {
		t.Errorf("after the retried send, the message is stored %d times, want once", len(mine))
	}
	if err := checkRecords(recs); err != nil {
		t.Errorf("stored records of session %s:\n%v\nrecords:\n%s", c.session, err, describe(recs))
	}
	run := p.waitEnded(t, runID)
	c.outcomes[outcome(live, stored, run.Status)]++
	if run.Status != "completed" && run.Status != "interrupted" {
		t.Errorf("run %s ended %s; a killed run ends completed (killed after its end) or interrupted", runID, run.Status)
	}
	log := p.replay(t, runID, "")
	if err := checkLog(log, run); err != nil {
		t.Errorf("event log of run %s: %v\nlog:\n%s", runID, err, eventList(log))
	}
	if live.runID == runID {
		if err := checkLiveAgainstLog(live.events, log, run.Status); err != nil {
			t.Errorf("run %s: the events streamed before the kill and the stored log disagree: %v\nstreamed:\n%s\nlog:\n%s",
				runID, err, eventList(live.events), eventList(log))
		}
		c.checkResume(t, p, runID, live.events, log)
	}
	c.checkNextMessage(t, p, fmt.Sprintf("Follow-up %d: and in London?", i))
	t.Logf("acknowledged %v, stored %v, run %s %s: %d events streamed, %d in the log", live.acked, stored, runID, run.Status, len(live.events), len(log))
}

// sent is what the client of a killed send saw.
type sent struct {
	status int  // of the answer, 0 when none came
	acked  bool // the answer's headers came: 200 with X-Run-Id
	runID  string
	events []event
	err    error // why the send or its stream ended
}

// sendAndKill sends a message and kills chatd at the kill point (or when the stream ends before it).
func sendAndKill(t *testing.T, p *process, body map[string]any, key string, kill killPoint) *sent {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var s sent
	reached, finished := make(chan struct{}), make(chan struct{})
	go func() { // s is this goroutine's until finished is closed
		defer close(finished)
		resp, err := p.post(ctx, "/v1/chat/stream", body, key)
		if err != nil {
			s.err = err
			return
		}
		defer resp.Body.Close()
		if s.status = resp.StatusCode; s.status != 200 {
			raw, _ := io.ReadAll(resp.Body)
			s.err = fmt.Errorf("%s", raw)
			return
		}
		s.runID = resp.Header.Get("X-Run-Id")
		s.acked = s.runID != ""
		s.err = readEvents(resp.Body, func(ev event) bool {
			s.events = append(s.events, ev)
			if len(s.events) == kill.events {
				close(reached)
			}
			return true
		})
	}()
	var timer <-chan time.Time
	if kill.events == 0 {
		timer = time.After(kill.after)
	}
	select {
	case <-timer:
	case <-reached:
	case <-finished:
	}
	p.kill()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end within 10s of chatd being killed")
	}
	if s.status != 0 && s.status != 200 {
		t.Errorf("the send was answered %d %v before the kill; want 200 and a stream", s.status, s.err)
	}
	return &s
}

// checkStoredOnce checks that the message is stored once if its send was acknowledged and at most once
// otherwise, and returns the run it started, if known.
func (c *crashTest) checkStoredOnce(t *testing.T, p *process, text string, live *sent) (runID string, stored bool) {
	t.Helper()
	mine := userRecords(p.records(t, c.session), text)
	switch {
	case live.acked && len(mine) != 1:
		t.Errorf("the send was acknowledged (run %s) and the message is stored %d times after the restart, want once", live.runID, len(mine))
	case len(mine) > 1:
		t.Errorf("the message is stored %d times, want at most once", len(mine))
	}
	if len(mine) == 0 {
		return live.runID, false
	}
	if live.acked && mine[0].RunID != live.runID {
		t.Errorf("the stored message belongs to run %q; the send started run %s", mine[0].RunID, live.runID)
	}
	if mine[0].RunID == "" {
		t.Errorf("the stored user record %s has no run_id", mine[0].ID)
		return live.runID, true
	}
	return mine[0].RunID, true
}

// checkRetry sends the message again with the same Idempotency-Key: a stored message answers with its
// run, replayed; one that was lost starts its run now. It returns the message's run.
func (c *crashTest) checkRetry(t *testing.T, p *process, send map[string]any, key, runID string, stored bool, live *sent) string {
	t.Helper()
	r := p.chat(t, send, key)
	if r.status != 200 {
		t.Errorf("retried send: %d %s", r.status, r.body)
		return ""
	}
	got, replayed := r.header.Get("X-Run-Id"), r.header.Get("Idempotent-Replayed") == "true"
	switch {
	case stored && (got != runID || !replayed):
		t.Errorf("retried send of a stored message: X-Run-Id %s, Idempotent-Replayed %v; want the original run %s, replayed", got, replayed, runID)
	case !stored && replayed:
		t.Errorf("retried send of a message the store does not hold was answered as a replay of run %s", got)
	case !stored:
		if last := r.last(); last.Type != "done" || last.Data["status"] != "completed" {
			t.Errorf("the run the retried send started (%s) ended with %v, want done completed:\n%s", got, last, eventList(r.events))
		}
	}
	if r.err != nil {
		t.Errorf("retried send: stream: %v", r.err)
	}
	if live.acked && !stored {
		return "" // reported by checkStoredOnce
	}
	c.checkBatchRetry(t, p, send, key, got)
	return got
}

// checkBatchRetry sends the message once more with its Idempotency-Key, to POST /v1/chat: whatever the
// run's end (interrupted too), the answer is 200 with the run as it ended — a retry cannot change it,
// so it must not invite another. (An interrupted run answered 500 "retryable" forever.)
func (c *crashTest) checkBatchRetry(t *testing.T, p *process, send map[string]any, key, runID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	resp, err := p.post(ctx, "/v1/chat", send, key)
	if err != nil {
		t.Errorf("retried batch send: %v", err)
		return
	}
	defer resp.Body.Close()
	var body struct {
		RunID  string `json:"run_id"`
		Status string `json:"status"`
	}
	raw, _ := io.ReadAll(resp.Body)
	json.Unmarshal(raw, &body)
	run := p.run(t, runID)
	if resp.StatusCode != 200 || body.RunID != runID || body.Status != run.Status {
		t.Errorf("retried batch send: %d %s; want 200 with run %s, %s", resp.StatusCode, raw, runID, run.Status)
	}
}

// checkResume resumes the stream where the killed client stopped, as an EventSource reconnecting with
// Last-Event-ID does. The client gets exactly the log's events after its id — never an event under an id
// it already saw — ending with done; when it had seen events the crash lost, the first it gets says so
// (error, code events_lost). (A resume from 44 once got a stream starting at 28.)
func (c *crashTest) checkResume(t *testing.T, p *process, runID string, streamed, log []event) {
	t.Helper()
	if len(streamed) == 0 || streamed[len(streamed)-1].Type == "done" {
		return
	}
	lastSeen := streamed[len(streamed)-1].seq()
	got := p.replay(t, runID, strconv.Itoa(lastSeen))
	var want []event
	for _, ev := range log {
		if ev.seq() > lastSeen {
			want = append(want, ev)
		}
	}
	if len(want) == 0 {
		want = log[len(log)-1:] // past the end: done, which says how the run ended
	}
	lost := lostEvents(streamed, log)
	var err error
	switch {
	case !cmp.Equal(got, want):
		err = errors.New("the events are not the log's after the client's id")
	case lost > 0 && (got[0].Type != "error" || got[0].Data["code"] != "events_lost"):
		err = fmt.Errorf("the client had seen %d events the crash lost, and the first event it gets does not say so", lost)
	}
	if err != nil {
		t.Errorf("resuming run %s with Last-Event-ID %d, the last id the killed client read: %v\ngot:\n%s\nthe client read:\n%s\nthe log after the restart:\n%s",
			runID, lastSeen, err, eventList(got), eventList(streamed[max(0, len(streamed)-5):]), eventList(log[max(0, len(log)-8):]))
	}
	c.resumes++
	if lost > 0 {
		c.lost += lost
		c.told++
	}
}

// lostEvents counts the streamed events the log does not hold under their id.
func lostEvents(streamed, log []event) int {
	bySeq := map[int]bool{}
	for _, ev := range log {
		bySeq[ev.seq()] = true
	}
	n := 0
	for _, ev := range streamed {
		if !bySeq[ev.seq()] {
			n++
		}
	}
	return n
}

// checkNextMessage sends the next message of the session: the model (strict) must accept the history.
func (c *crashTest) checkNextMessage(t *testing.T, p *process, text string) {
	t.Helper()
	r := p.chat(t, map[string]any{"message": text, "session_id": c.session, "on_active_run": "enqueue"}, "")
	if r.status != 200 {
		t.Errorf("next message: %d %s", r.status, r.body)
	} else if last := r.last(); last.Type != "done" || last.Data["status"] != "completed" {
		t.Errorf("next message: the run ended with %v, want done completed:\n%s", last, eventList(r.events))
	}
	c.checked = checkModelRequests(t, c.up, c.checked)
}

// outcome names how a killed send ended, for the summary.
func outcome(live *sent, stored bool, status string) string {
	switch {
	case !stored:
		return "lost before stored"
	case !live.acked:
		return "stored, unanswered, " + status
	}
	return status
}

// newModel starts llmtest in strict mode, answering as respond scripts.
func newModel(t *testing.T) *llmtest.Server {
	up := llmtest.NewServer(t)
	up.Respond = respond
	up.Strict = true
	// The server reads both fields under its lock, which Requests takes: this orders the writes above
	// before every request.
	up.Requests()
	return up
}

func chatdEnv(up *llmtest.Server, drainTimeout string) []string {
	return []string{
		"OPENAI_API_KEY=" + apiKey,
		"OPENAI_BASE_URL=" + up.BaseURL(),
		"CHATD_MODEL=openai/llmtest-1",
		"CHATD_DRAIN_TIMEOUT=" + drainTimeout,
		"CHATD_LOG_LEVEL=debug",
		"CHATD_CONFIG=", "CHATD_MCP_CONFIG=", // not the developer's
	}
}

// theAnswer ends every final answer; a test waits for it to know the answer was streamed whole.
const theAnswer = "Paris runs on Central European Time and Tokyo on Japan Standard Time, eight hours apart in " +
	"winter and seven in summer, so a call at nine in the morning in Paris reaches Tokyo in the late " +
	"afternoon. That is the end of the answer."

// respond scripts the model by the run's message: to the message, a short text and two parallel
// current_time calls; to their results, a long answer. A message containing "(slow)" is answered two
// runes per chunk 3ms apart, "(very slow)" 10ms apart; with "(never finishes)" the answer to the tool
// results streams (slowly) and then never finishes. Texts and call ids carry the request's number, so
// that every stored one is unique.
func respond(n int, req llmtest.Request) llmtest.Turn {
	msgs := req.Messages()
	msg := lastUserText(msgs)
	var turn llmtest.Turn
	if len(msgs) > 0 && msgs[len(msgs)-1]["role"] == "tool" {
		turn.Text = fmt.Sprintf("Answer %d. %s", n, theAnswer)
		turn.Block = strings.Contains(msg, "(never finishes)")
	} else {
		turn.Text = fmt.Sprintf("Request %d: let me look up both clocks.", n)
		turn.ToolCalls = []llmtest.ToolCall{
			{ID: fmt.Sprintf("call_%d_paris", n), Name: "current_time", Arguments: `{"timezone":"Europe/Paris"}`},
			{ID: fmt.Sprintf("call_%d_tokyo", n), Name: "current_time", Arguments: `{"timezone":"Asia/Tokyo"}`},
		}
	}
	switch {
	case strings.Contains(msg, "(very slow)"):
		turn.ChunkRunes, turn.Delay = 2, 10*time.Millisecond
	case strings.Contains(msg, "(slow)"), strings.Contains(msg, "(never finishes)"):
		turn.ChunkRunes, turn.Delay = 2, 3*time.Millisecond
	}
	return turn
}

// lastUserText is the text of the last user message of a Chat Completions request.
func lastUserText(msgs []map[string]any) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i]["role"] != "user" {
			continue
		}
		switch c := msgs[i]["content"].(type) {
		case string:
			return c
		case []any:
			var b strings.Builder
			for _, part := range c {
				if p, ok := part.(map[string]any); ok && p["type"] == "text" {
					b.WriteString(fmt.Sprint(p["text"]))
				}
			}
			return b.String()
		}
	}
	return ""
}

// checkModelRequests validates the model requests after the first from as the OpenAI API would (strict
// mode already answered an invalid one with a 400; this names it) and returns how many there are.
func checkModelRequests(t *testing.T, up *llmtest.Server, from int) int {
	t.Helper()
	reqs := up.Requests()
	if len(reqs) == from {
		t.Errorf("chatd sent no request to the model since request %d", from)
	}
	for i, r := range reqs[from:] {
		if err := llmtest.Validate(r.Body); err != nil {
			t.Errorf("model request %d is one the OpenAI API rejects: %v\n%s", from+i+1, err, r.Raw)
		}
	}
	return len(reqs)
}

func userRecords(recs []record, text string) []record {
	var out []record
	for _, r := range recs {
		if r.Role == "user" && r.Content == text {
			out = append(out, r)
		}
	}
	return out
}

// checkRecords checks a session's records: ids are unique; no user text is stored twice, nor an
// assistant text twice in one run (every scripted text is unique); every tool call of an assistant record has exactly one tool record,
// right after it; every tool record answers such a call, and a failed one says why.
func checkRecords(recs []record) error {
	var errs []error
	ids := map[string]int{}
	texts := map[string]int{}
	for i, r := range recs {
		if j, ok := ids[r.ID]; ok || r.ID == "" {
			errs = append(errs, fmt.Errorf("record %d has the id %q of record %d", i, r.ID, j))
		}
		ids[r.ID] = i
		// Two partial answers may both be "Re", but not in one run.
		text := r.Role + "\x00" + r.Content
		if r.Role == "assistant" {
			text = r.RunID + "\x00" + text
		}
		if (r.Role == "user" || r.Role == "assistant") && r.Content != "" {
			if j, ok := texts[text]; ok {
				errs = append(errs, fmt.Errorf("records %d and %d are the same %s text %.60q", j, i, r.Role, r.Content))
			}
			texts[text] = i
		}
	}
	for i := 0; i < len(recs); {
		r := recs[i]
		i++
		if r.Role == "tool" {
			errs = append(errs, fmt.Errorf("tool record %d (%s) follows no assistant record calling %s", i-1, r.ID, r.ToolCallID))
			continue
		}
		if r.Role != "assistant" || len(r.ToolCalls) == 0 {
			continue
		}
		a := i - 1
		open := map[string]bool{}
		for _, call := range r.ToolCalls {
			if open[call.ID] {
				errs = append(errs, fmt.Errorf("assistant record %d calls %s twice", a, call.ID))
			}
			open[call.ID] = true
		}
		for ; i < len(recs) && recs[i].Role == "tool"; i++ {
			tr := recs[i]
			if !open[tr.ToolCallID] {
				errs = append(errs, fmt.Errorf("tool record %d answers %q, which assistant record %d does not call or which is answered already", i, tr.ToolCallID, a))
			}
			delete(open, tr.ToolCallID)
			if tr.Success == nil || (!*tr.Success && tr.Content == "") {
				errs = append(errs, fmt.Errorf("tool record %d (%s): success %v, content %q", i, tr.ToolCallID, tr.Success, tr.Content))
			}
		}
		for id := range open {
			errs = append(errs, fmt.Errorf("call %s of assistant record %d has no tool record right after it", id, a))
		}
	}
	return errors.Join(errs...)
}

// checkLog checks a run's event log as replayed: ids increasing by one, but for one gap after a crash
// (see checkSeq), done last with the run's status, and the run's last_event_id; an interrupted run's log
// ends with error (code interrupted), then done. (A run killed in its first 100ms may have lost even
// run_start: its log is only what the recovery wrote.)
func checkLog(log []event, run runInfo) error {
	if err := checkSeq(log); err != nil {
		return err
	}
	last := log[len(log)-1]
	if last.Type != "done" || last.Data["status"] != run.Status {
		return fmt.Errorf("the last event is %v; the run is %s", last, run.Status)
	}
	if run.LastEventID != last.seq() {
		return fmt.Errorf("the run's last_event_id is %d; the log ends with %d", run.LastEventID, last.seq())
	}
	if run.Status == "interrupted" {
		if len(log) < 2 || log[len(log)-2].Type != "error" || log[len(log)-2].Data["code"] != "interrupted" {
			return fmt.Errorf("an interrupted run's log must end with error (code interrupted), then done")
		}
	}
	if run.Status == "cancelled" && (len(log) < 2 || log[len(log)-2].Type != "cancelled") {
		return fmt.Errorf("a cancelled run's log must end with cancelled, then done")
	}
	return nil
}

// checkSeq checks that events are numbered 1, 2, 3 … and end with done, and only there. One gap is
// allowed: where a crash lost events, recovery goes on past every id the dead process may have sent,
// and its first event (an error, code events_lost) says so.
func checkSeq(events []event) error {
	if len(events) == 0 {
		return errors.New("no events")
	}
	gap := false
	for i, ev := range events {
		want := 1
		if i > 0 {
			want = events[i-1].seq() + 1
		}
		if ev.seq() != want {
			lost := ev.Type == "error" && ev.Data["code"] == "events_lost"
			if gap || ev.seq() < want || !lost {
				return fmt.Errorf("event %d has id %q after %d: ids must increase by one, but for one gap that an events_lost error follows", i+1, ev.ID, want-1)
			}
			gap = true
		}
		if ev.Type == "done" && i != len(events)-1 {
			return fmt.Errorf("done at event %d is not the last of %d", i+1, len(events))
		}
	}
	if last := events[len(events)-1]; last.Type != "done" {
		return fmt.Errorf("the last event is %v, want done", last)
	}
	return nil
}

// checkLiveAgainstLog checks that every event the client streamed before the kill is in the log under
// its id with the same data, or was lost with the dead process — and then that the run was recovered
// and its log says events were lost. It returns how many were lost.
func checkLiveAgainstLog(streamed, log []event, status string) error {
	bySeq := map[int]event{}
	told := false
	for _, ev := range log {
		bySeq[ev.seq()] = ev
		told = told || (ev.Type == "error" && ev.Data["code"] == "events_lost")
	}
	for _, ev := range streamed {
		stored, ok := bySeq[ev.seq()]
		switch {
		case ok && !cmp.Equal(ev, stored):
			return fmt.Errorf("the client saw %v under id %s; the log holds %v there", ev, ev.ID, stored)
		case !ok && (status != "interrupted" || !told):
			return fmt.Errorf("the client saw %v, which the log does not hold, and the log does not say events were lost", ev)
		}
	}
	return nil
}

func at(log []event, i int) any {
	if i < len(log) {
		return log[i]
	}
	return "(end of the log)"
}

func describe(recs []record) string {
	var b strings.Builder
	for i, r := range recs {
		fmt.Fprintf(&b, "%3d %s run=%s %-9s", i, r.ID, r.RunID, r.Role)
		if r.ToolCallID != "" {
			fmt.Fprintf(&b, " answers=%s success=%v", r.ToolCallID, r.Success != nil && *r.Success)
		}
		for _, c := range r.ToolCalls {
			fmt.Fprintf(&b, " calls=%s", c.ID)
		}
		if r.FinishReason != "" {
			fmt.Fprintf(&b, " finish=%s", r.FinishReason)
		}
		fmt.Fprintf(&b, " %.70q\n", r.Content)
	}
	return b.String()
}

func eventList(events []event) string {
	var b strings.Builder
	for _, ev := range events {
		switch ev.Type {
		case "text_delta":
			fmt.Fprintf(&b, "%s %s %q\n", ev.ID, ev.Type, ev.Data["text"])
			continue
		case "tool_call_delta":
			fmt.Fprintf(&b, "%s %s %v %q\n", ev.ID, ev.Type, ev.Data["index"], ev.Data["arguments_delta"])
			continue
		}
		fmt.Fprintln(&b, ev)
	}
	return b.String()
}

func envInt(t testing.TB, name string, def int64) int64 {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: want an integer", name, v)
	}
	return n
}

// TestGracefulShutdown stops chatd with SIGTERM, as a service manager does. A run in progress finishes
// within the drain timeout while new sends are refused; a run that cannot finish in time is cancelled,
// keeps its partial answer, and leaves its session ready for the next message after a restart.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts and stops chatd")
	}
	up := newModel(t)
	bin := buildChatd(t)
	db := filepath.Join(t.TempDir(), "chatd.db")
	var drained string
	t.Run("drain", func(t *testing.T) { drained = testDrain(t, up, bin, db) })
	t.Run("drain timeout", func(t *testing.T) { testDrainTimeout(t, up, bin, db, drained) })
}

// testDrain stops chatd while a run streams and returns the run, which finished during the drain. The
// drain timeout is long enough for the run to finish on a loaded machine; chatd exits once it has.
func testDrain(t *testing.T, up *llmtest.Server, bin, db string) string {
	p := startChatd(t, "chatd", bin, db, chatdEnv(up, drainTimeout)...)
	s := p.openStream(t, map[string]any{"message": "What time is it in Paris and in Tokyo? (very slow)"})
	runID := s.header.Get("X-Run-Id")
	seen, err := s.until(func(ev event) bool { return ev.Type == "text_delta" }, patience)
	if err != nil {
		t.Fatalf("waiting for the answer to stream: %v", err)
	}
	p.terminate(t)
	stopped := time.Now()
	if !p.waitLog("shutting down", patience) {
		t.Logf(`chatd logged no "shutting down" within %s of SIGTERM; sending during the drain anyway`, patience)
	}
	if r := p.chat(t, map[string]any{"message": "Are you there?"}, ""); r.status != 503 || r.errorCode() != "shutting_down" {
		t.Errorf("a send during the drain was answered %d %s %v; want 503 with code shutting_down", r.status, r.body, r.last())
	}
	// Refusing sends, chatd is not ready: a load balancer takes it out while its runs finish.
	if resp, err := http.Get(p.base + "/readyz"); err != nil {
		t.Errorf("GET /readyz during the drain: %v", err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || !strings.Contains(string(body), `"draining"`) {
			t.Errorf("GET /readyz during the drain: %d %s, want 503 draining", resp.StatusCode, body)
		}
	}
	if r := p.run(t, runID); r.Status != "running" {
		t.Errorf("during the drain, run %s is %s, want running", runID, r.Status)
	}
	rest, err := s.rest(patience)
	events := append(seen, rest...)
	if err != nil {
		t.Errorf("the stream of the draining run: %v", err)
	}
	if err := checkSeq(events); err != nil {
		t.Errorf("the stream of the draining run: %v\n%s", err, eventList(events))
	} else if last := events[len(events)-1]; last.Data["status"] != "completed" {
		t.Errorf("the draining run ended %v, want done completed:\n%s", last, eventList(events))
	}
	code, ok := p.waitExit(patience)
	if !ok {
		t.Fatalf("chatd is still running %s after SIGTERM and the end of the last run", time.Since(stopped).Round(time.Millisecond))
	}
	if code != 0 {
		t.Errorf("chatd exited with code %d after SIGTERM, want 0", code)
	}
	t.Logf("run %s completed during the drain; chatd exited %d, %s after SIGTERM", runID, code, time.Since(stopped).Round(time.Millisecond))
	return runID
}

// drainTimeout is testDrain's: a run that streams for a second or two finishes well within it.
const drainTimeout = "5m"

// testDrainTimeout stops chatd while a run waits for a model that never finishes its answer: at the
// drain timeout the run is cancelled, with the answer so far stored.
func testDrainTimeout(t *testing.T, up *llmtest.Server, bin, db, drained string) {
	p := startChatd(t, "chatd", bin, db, chatdEnv(up, "1s")...)
	s := p.openStream(t, map[string]any{"message": "What time is it in Paris and in Tokyo? (never finishes)"})
	runID, sessionID := s.header.Get("X-Run-Id"), s.header.Get("X-Session-Id")
	var answer strings.Builder // the text after the last record: the answer to the tool results
	seen, err := s.until(func(ev event) bool {
		switch ev.Type {
		case "record":
			answer.Reset()
		case "text_delta":
			answer.WriteString(fmt.Sprint(ev.Data["text"]))
		}
		return strings.HasSuffix(answer.String(), theAnswer)
	}, patience)
	if err != nil {
		t.Fatalf("waiting for the answer to stream: %v\n%s", err, eventList(seen))
	}
	p.terminate(t)
	stopped := time.Now()
	code, ok := p.waitExit(patience)
	if !ok {
		t.Fatalf("chatd is still running %s after SIGTERM (drain timeout 1s)", time.Since(stopped).Round(time.Millisecond))
	}
	if code != 0 {
		t.Errorf("chatd exited with code %d after SIGTERM, want 0", code)
	}
	t.Logf("chatd exited %d, %s after SIGTERM (drain timeout 1s)", code, time.Since(stopped).Round(time.Millisecond))
	rest, err := s.rest(5 * time.Second)
	streamed := append(seen, rest...)
	if n := len(streamed); n < 2 || streamed[n-2].Type != "cancelled" || streamed[n-1].Type != "done" {
		t.Logf("the stream ended (%v) without cancelled and done; the replay must have them:\n%s", err, eventList(streamed[max(0, n-5):]))
		streamed = nil
	}

	p = startChatd(t, "chatd (restarted)", bin, db, chatdEnv(up, "1s")...)
	run := p.run(t, runID)
	log := p.replay(t, runID, "")
	if run.Status != "cancelled" {
		t.Errorf("after the restart run %s is %s, want cancelled", runID, run.Status)
	}
	if err := checkLog(log, run); err != nil {
		t.Errorf("event log of run %s: %v\n%s", runID, err, eventList(log))
	}
	if streamed != nil {
		if diff := cmp.Diff(streamed, log); diff != "" {
			t.Errorf("the stream and the stored log of run %s differ (-streamed +log):\n%s", runID, diff)
		}
	}
	recs := p.records(t, sessionID)
	if err := checkRecords(recs); err != nil {
		t.Errorf("stored records:\n%v\n%s", err, describe(recs))
	}
	if n := len(recs); n == 0 || recs[n-1].Role != "assistant" || recs[n-1].RunID != runID || recs[n-1].Content != answer.String() {
		t.Errorf("the partial answer %.40q… is not the last record:\n%s", answer.String(), describe(recs))
	}
	if drained != "" {
		if r := p.run(t, drained); r.Status != "completed" {
			t.Errorf("the run that finished during the drain, %s, is %s", drained, r.Status)
		}
	}
	r := p.chat(t, map[string]any{"message": "Thanks. (And in London?)", "session_id": sessionID}, "")
	if r.status != 200 {
		t.Errorf("next message in the session: %d %s", r.status, r.body)
	} else if last := r.last(); last.Type != "done" || last.Data["status"] != "completed" {
		t.Errorf("next message: the run ended with %v, want done completed:\n%s", last, eventList(r.events))
	}
	checkModelRequests(t, up, 0)
}
