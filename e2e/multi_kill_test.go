package e2e

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/llm/llmtest"
	"chatd/internal/store/postgres/pgtest"
)

// TestMultiInstanceKill kills, again and again, the one of three chatd instances (one PostgreSQL
// database, HAProxy round-robin in front) that runs a run, at a point of the run that moves from kill
// to kill: while the model streams its first text, while it streams the tool calls, between a call
// and its result, while the answer to the results streams, and while the model holds the answer open.
// A follower on another instance waits for the run's done event; the survivors must recover the run
// once its lease ends. After each kill, through the balancer, as the SQLite crash test checks it: the
// acknowledged message is stored exactly once, every tool call is answered by exactly one tool record,
// the run ended interrupted and its log replays without a gap (or with the one events_lost gap) and as
// the follower saw it, and the session takes the next message, whose history the strict fake model
// accepts. The killed instance is started again on its address before the next kill.
//
// CHATD_MULTI_KILLS sets the number of kills (default 20); CHATD_MULTI_KILL_SEED replays the kill
// points of a logged run.
func TestMultiInstanceKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three chatd and kills them twenty times")
	}
	haproxy := needHAProxy(t)
	dsn := pgtest.NewSchema(t)
	k := &killTest{
		t:        t,
		seed:     envInt(t, "CHATD_MULTI_KILL_SEED", time.Now().UnixNano()),
		bin:      buildChatd(t),
		dsn:      dsn,
		up:       llmtest.NewServer(t),
		outcomes: map[string]int{},
	}
	k.up.Respond, k.up.Strict = killRespond, true
	k.up.Requests() // orders the writes above before every request, as newModel does
	// A short lease, so that each recovery takes seconds; renewed every 2s/3, it outlasts a loaded
	// machine's pauses.
	k.env = append(chatdEnv(k.up, "5s"), "CHATD_LEASE_TTL=2s", "CHATD_SWEEP_INTERVAL=250ms")
	for i := range 3 {
		k.inst = append(k.inst, startChatd(t, fmt.Sprintf("chatd-%d", i+1), k.bin, dsn, k.env...))
	}
	k.lb = startHAProxy(t, haproxy, k.inst)
	k.session = k.lb.createSession(t)
	kills := int(envInt(t, "CHATD_MULTI_KILLS", 20))
	t.Logf("%d kills; CHATD_MULTI_KILL_SEED=%d reproduces their points", kills, k.seed)
	began := time.Now()
	for i := range kills {
		if !t.Run(fmt.Sprintf("kill%02d", i), func(t *testing.T) { k.iteration(t, i) }) {
			break // later kills would build on a broken session; this one's log says what broke
		}
	}
	slices.Sort(k.recovered)
	if n := len(k.recovered); n > 0 {
		t.Logf("%d kills in %s; recovered (kill → done seen on another instance) min %s, median %s, max %s (lease 2s, sweep 250ms); what the recoveries found: %s",
			n, time.Since(began).Round(time.Millisecond), k.recovered[0], k.recovered[n/2], k.recovered[n-1], formatCounts(k.outcomes))
	}
}

type killTest struct {
	t       *testing.T // the test, which the restarted instances outlive
	seed    int64
	bin     string
	dsn     string
	env     []string
	up      *llmtest.Server
	inst    []*process
	lb      *process
	session string // every kill and its next message are in this session
	checked int    // the model requests checked so far
	// recovered are the times from a kill to the done event on another instance; outcomes count what
	// the recoveries found, to see that the kills hit every phase of a run.
	recovered []time.Duration
	outcomes  map[string]int
}

// A kill point is a phase of the run and the number of its events the client reads before the kill.
// The model is scripted by respond: a short text and two current_time calls, streamed slowly; then,
// to their results, a long answer streamed slowly and held open ("(never finishes)"), so that every
// kill finds the run running.
type multiKillPoint struct {
	phase string
	n     int
}

var multiKillPhases = []string{"first text", "tool call", "call and result", "answer", "answer held"}

func randomMultiKillPoint(rng *rand.Rand, i int) multiKillPoint {
	kp := multiKillPoint{phase: multiKillPhases[i%len(multiKillPhases)]}
	switch kp.phase {
	case "first text":
		kp.n = 1 + rng.IntN(15) // of about 19 deltas
	case "tool call":
		kp.n = 1 + rng.IntN(6)
	case "call and result":
		kp.n = rng.IntN(2) // 0: at the stored call (the record event), 1: at its tool_start
	case "answer":
		kp.n = 1 + rng.IntN(100) // of about 110 deltas
	}
	return kp
}

func (kp multiKillPoint) String() string {
	switch kp.phase {
	case "first text":
		return fmt.Sprintf("SIGKILL at the first text's delta %d", kp.n)
	case "tool call":
		return fmt.Sprintf("SIGKILL at tool_call_delta %d", kp.n)
	case "call and result":
		if kp.n == 0 {
			return "SIGKILL at the record of the calls, before their tool_start"
		}
		return "SIGKILL at the first tool_start, before its tool_complete"
	case "answer":
		return fmt.Sprintf("SIGKILL at the answer's delta %d", kp.n)
	}
	return "SIGKILL once the whole answer streamed and the model holds it open"
}

// reached returns a stop function for liveStream.until that holds at the kill point (or at the next
// phase, should the phase have fewer events than the point's number).
func (kp multiKillPoint) reached() func(event) bool {
	var texts, calls, results, answers int
	var answer strings.Builder
	return func(e event) bool {
		switch {
		case e.Type == "tool_complete":
			results++
		case e.Type == "tool_call_delta":
			calls++
		case e.Type == "text_delta" && results == 2:
			answers++
			answer.WriteString(fmt.Sprint(e.Data["text"]))
		case e.Type == "text_delta":
			texts++
		}
		switch kp.phase {
		case "first text":
			return texts == kp.n || e.Type == "tool_call_delta"
		case "tool call":
			return calls == kp.n || e.Type == "tool_start"
		case "call and result":
			if kp.n == 0 {
				return e.Type == "record" && calls > 0 || e.Type == "tool_start"
			}
			return e.Type == "tool_start"
		case "answer":
			return answers == kp.n
		}
		return strings.HasSuffix(answer.String(), theAnswer)
	}
}

// killRespond is respond, but for a message that only ends with "(never finishes)": a run killed
// before it stored an answer leaves its message without one, and the next message's history then holds
// two user messages in a row, which chatd sends the model merged into one; the next message must not
// inherit the held-open answer through it.
func killRespond(n int, req llmtest.Request) llmtest.Turn {
	turn := respond(n, req)
	if !strings.HasSuffix(lastUserText(req.Messages()), "(never finishes)") {
		turn.Block, turn.ChunkRunes, turn.Delay = false, 0, 0
	}
	return turn
}

func (k *killTest) iteration(t *testing.T, i int) {
	kp := randomMultiKillPoint(rand.New(rand.NewPCG(uint64(k.seed), uint64(i))), i)
	v := i % len(k.inst)
	victim, survivor := k.inst[v], k.inst[(v+1)%len(k.inst)]
	t.Logf("seed %d, kill %d of %s: %s", k.seed, i, victim.name, kp)
	text := fmt.Sprintf("Kill %d: what time is it in Paris and in Tokyo? (never finishes)", i)

	s := victim.send(t, map[string]any{"message": text, "session_id": k.session}, fmt.Sprintf("multi-kill-%d", i))
	id := s.header.Get("X-Run-Id")
	if id == "" {
		t.Fatalf("the send to %s was answered without X-Run-Id", victim.name)
	}
	follower := survivor.get(t, "/v1/runs/"+id+"/events", "")
	seen, err := s.until(kp.reached(), patience)
	if err != nil {
		t.Fatalf("waiting for the kill point: %v\n%s", err, eventList(seen))
	}
	victim.kill()
	killed := time.Now()
	rest, _ := s.rest(patience) // what the dead instance had sent on; the stream ends with the process
	streamed := append(seen, rest...)

	followed, err := follower.rest(patience)
	if err != nil {
		t.Fatalf("the follower on %s: %v\n%s", survivor.name, err, eventList(followed))
	}
	k.recovered = append(k.recovered, time.Since(killed))
	if last := followed[len(followed)-1]; last.Type != "done" || last.Data["status"] != "interrupted" {
		t.Fatalf("the follower on %s saw the run end with %v; want done interrupted", survivor.name, last)
	}

	run := k.lb.run(t, id)
	log := k.lb.replay(t, id, "")
	if err := checkLog(log, run); err != nil {
		t.Errorf("event log of run %s through the balancer: %v\n%s", id, err, eventList(log))
	}
	if diff := cmp.Diff(log, followed); diff != "" {
		t.Errorf("the follower on %s saw other events than the log holds (-log +followed):\n%s", survivor.name, diff)
	}
	if err := checkLiveAgainstLog(streamed, log, run.Status); err != nil {
		t.Errorf("the events the killed instance streamed and the log disagree: %v\nstreamed:\n%s\nlog:\n%s",
			err, eventList(streamed), eventList(log))
	}
	recs := k.lb.records(t, k.session)
	if mine := userRecords(recs, text); len(mine) != 1 || mine[0].RunID != id {
		t.Errorf("the acknowledged message of run %s is stored %d times (want once, in the run):\n%s", id, len(mine), describe(recs))
	}
	if err := checkRecords(recs); err != nil {
		t.Errorf("stored records of session %s:\n%v\n%s", k.session, err, describe(recs))
	}
	k.outcomes[killOutcome(recs, id, lostEvents(streamed, log))]++

	name := fmt.Sprintf("chatd-%d (restarted after kill %d)", v+1, i)
	k.inst[v] = startChatdAt(outliving{t, k.t}, name, k.bin, k.dsn, strings.TrimPrefix(victim.base, "http://"), k.env...)
	r := k.lb.chat(t, map[string]any{"message": fmt.Sprintf("Follow-up %d: and in London?", i), "session_id": k.session}, "")
	if r.status != 200 {
		t.Fatalf("next message: %d %s", r.status, r.body)
	} else if last := r.last(); last.Type != "done" || last.Data["status"] != "completed" {
		t.Fatalf("next message: the run ended with %v, want done completed:\n%s", last, eventList(r.events))
	}
	k.checked = checkModelRequests(t, k.up, k.checked)
	t.Logf("run %s interrupted, done seen on %s %s after the kill; %d events streamed, %d in the log",
		id, survivor.name, k.recovered[len(k.recovered)-1].Round(time.Millisecond), len(streamed), len(log))
}

// killOutcome names what the recovery of run id found, for the summary: the calls it closed with a
// failed result, the partial answer it kept, and whether events the client saw were lost.
func killOutcome(recs []record, id string, lost int) string {
	var calls, failed int
	answered := false
	for _, r := range recs {
		if r.RunID != id {
			continue
		}
		calls += len(r.ToolCalls)
		if r.Role == "tool" && r.Success != nil && !*r.Success {
			failed++
		}
		if r.Role == "assistant" && len(r.ToolCalls) == 0 && r.Content != "" {
			answered = true
		}
	}
	var parts []string
	switch {
	case calls == 0:
		parts = append(parts, "no calls stored")
	case failed > 0:
		parts = append(parts, fmt.Sprintf("%d calls closed failed", failed))
	default:
		parts = append(parts, "calls answered")
	}
	if answered {
		parts = append(parts, "partial answer kept")
	}
	if lost > 0 {
		parts = append(parts, "events lost")
	}
	return strings.Join(parts, " + ")
}

// outliving is a subtest whose cleanups, and the logs and checks they make, belong to its parent: what it
// starts outlives it.
type outliving struct {
	testing.TB
	parent testing.TB
}

func (o outliving) Cleanup(f func())             { o.parent.Cleanup(f) }
func (o outliving) Failed() bool                 { return o.parent.Failed() }
func (o outliving) Logf(format string, a ...any) { o.parent.Logf(format, a...) }
