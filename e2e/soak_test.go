package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/llm/llmtest"
)

// TestSoak runs many concurrent chats against the real binary for a while, with a model that mixes
// every fault chatd must survive — answers that drip until the run's time limit, streams that stall
// until the idle limit, cut connections, tool-call arguments over the limit, 429s, errors in the stream —
// and with clients that read slowly, disconnect and resume, cancel, interrupt, queue and regenerate.
// Each client checks what it may rely on as it reads: event ids increase by one, no id comes twice with
// other data, done comes last and once. Then every run the clients started must have ended with a sound
// event log, every session's records must pair every tool call with its result and take one more message
// that completes through the model in strict mode, chatd must not have panicked, and the model must
// never have been sent a request the OpenAI API rejects.
//
// By default it is a short run in the normal suite: 15s of load from 40 chats, chatd's RSS logged every
// 5s. CHATD_SOAK=30m (any duration) selects a long run, CHATD_SOAK_CHATS its chats (default 200): RSS is
// sampled every minute and every sample after the warm-up (5 minutes, or the first third of a shorter
// run) must be within 20% of their median. CHATD_SOAK_SEED replays the clients' choices (not their timing).
func TestSoak(t *testing.T) {
	t.Parallel() // each test has its own processes, ports and files
	if testing.Short() {
		t.Skip("runs chatd under load")
	}
	opts := soakOptionsFromEnv(t)
	t.Logf("soak: %s, %d chats, CHATD_SOAK_SEED=%d", opts.duration, opts.chats, opts.seed)
	s := newSoak(t, opts)
	s.load(t)
	checking := time.Now()
	s.settle(t)
	s.checkOutput(t)
	s.checkUpstream(t)
	t.Logf("the checks took %s", time.Since(checking).Round(time.Millisecond))
	s.report(t)
	s.checkRSS(t)
}

// soakOptions size a soak run.
type soakOptions struct {
	duration time.Duration
	chats    int
	long     bool          // RSS must stay flat
	sample   time.Duration // how often RSS is sampled
	warmUp   time.Duration // RSS samples before this are not held to the median
	seed     int64
}

func soakOptionsFromEnv(t *testing.T) soakOptions {
	o := soakOptions{duration: 15 * time.Second, chats: 40, sample: 5 * time.Second}
	if v := os.Getenv("CHATD_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("CHATD_SOAK=%q: want a duration such as 30m", v)
		}
		o = soakOptions{duration: d, chats: 200, long: true, sample: time.Minute, warmUp: min(5*time.Minute, d/3)}
	}
	o.chats = int(envInt(t, "CHATD_SOAK_CHATS", int64(o.chats)))
	o.seed = envInt(t, "CHATD_SOAK_SEED", time.Now().UnixNano())
	if o.chats <= 0 {
		t.Fatalf("CHATD_SOAK_CHATS=%d: want at least one chat", o.chats)
	}
	return o
}

// soak is one soak run: chatd, its model, the clients' shared HTTP client, and what they saw.
type soak struct {
	t      *testing.T
	opts   soakOptions
	model  *soakModel
	p      *process
	db     string
	client *http.Client
	// loadTime is how long the load lasted: the duration, and the runs the chats were reading then.
	loadTime time.Duration

	mu         sync.Mutex
	runs       map[string]string // run id → session id, for every run a send started
	order      []string          // the runs in the order they started
	sessions   map[string]bool
	counts     map[string]int // sends, resumes, reading modes …
	refusals   map[string]int // "409 session_busy" → count
	cancels    map[string]int // "202 cancelling" → count
	cancelled  map[string]bool
	events     int64
	violations int
	rss        []rssSample
	statuses   map[string]int // runs by final status
	failures   map[string]int // failed runs by the code of their error event
	finals     int            // sessions that took the final message
}

type rssSample struct {
	at  time.Duration // since the load began
	kB  int64
	tag string
}

// maxReported bounds the violations reported in full; the rest are counted.
const maxReported = 40

func newSoak(t *testing.T, opts soakOptions) *soak {
	s := &soak{t: t, opts: opts, model: newSoakModel(t), runs: map[string]string{}, sessions: map[string]bool{},
		counts: map[string]int{}, refusals: map[string]int{}, cancels: map[string]int{}, cancelled: map[string]bool{},
		statuses: map[string]int{}, failures: map[string]int{}}
	dir := t.TempDir()
	config := filepath.Join(dir, "chatd.yaml")
	// Tight limits, so that every fault ends its run within seconds: a drip by run_time, a stall by
	// idle_time, huge arguments by tool_argument_bytes.
	yaml := "limits:\n  run_time: 5s\n  idle_time: 2s\n  tool_argument_bytes: 65536\n"
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	s.db = filepath.Join(dir, "chatd.db")
	// The process's output is kept in memory whole: at warn level it stays small.
	env := append(chatdEnv(s.model.gen.up, "5s"), "OPENAI_BASE_URL="+s.model.front.URL+"/v1",
		"CHATD_LOG_LEVEL=warn", "CHATD_CONFIG="+config)
	s.p = startChatd(t, "chatd", buildChatd(t), s.db, env...)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 4*opts.chats, 4*opts.chats
	// A hung stream fails its client after a minute instead of holding the test; no run lasts more than
	// a few seconds.
	s.client = &http.Client{Transport: tr, Timeout: 60 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	return s
}

// violate records a broken invariant, reported in full for the first maxReported.
func (s *soak) violate(format string, args ...any) {
	s.mu.Lock()
	s.violations++
	n := s.violations
	s.mu.Unlock()
	if n <= maxReported {
		s.t.Errorf("violation: "+format, args...)
	}
}

func (s *soak) count(name string, n int) {
	s.mu.Lock()
	s.counts[name] += n
	s.mu.Unlock()
}

// load runs the chats until the duration has passed, sampling chatd's RSS meanwhile.
func (s *soak) load(t *testing.T) {
	began := time.Now()
	deadline := began.Add(s.opts.duration)
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() { s.sampleRSS(began, stop) })
	var chats sync.WaitGroup
	for i := range s.opts.chats {
		chats.Go(func() { s.newChatter(i).loop(t.Context(), deadline) })
	}
	chats.Wait()
	close(stop)
	sampler.Wait()
	s.sample(began, "end of load")
	s.loadTime = time.Since(began)
	t.Logf("the load ended after %s (the chats finish the run they were reading)", s.loadTime.Round(time.Millisecond))
}

// sampleRSS samples chatd's RSS every opts.sample until stop is closed.
func (s *soak) sampleRSS(began time.Time, stop <-chan struct{}) {
	tick := time.NewTicker(s.opts.sample)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			s.sample(began, "")
		case <-stop:
			return
		}
	}
}

func (s *soak) sample(began time.Time, tag string) {
	kB, err := vmRSS(s.p.cmd.Process.Pid)
	if err != nil {
		s.t.Logf("RSS: %v", err)
		return
	}
	at := time.Since(began)
	s.mu.Lock()
	s.rss = append(s.rss, rssSample{at: at, kB: kB, tag: tag})
	s.mu.Unlock()
	s.t.Logf("RSS at %s: %.1f MB %s", at.Round(time.Second), float64(kB)/1024, tag)
}

// vmRSS reads a process's resident set size in kB from /proc/<pid>/status.
func vmRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// chatter is one client: it talks in one session at a time, now and then starting another.
type chatter struct {
	s       *soak
	i       int
	rng     *rand.Rand
	session string
	sent    int
}

func (s *soak) newChatter(i int) *chatter {
	return &chatter{s: s, i: i, rng: rand.New(rand.NewPCG(uint64(s.opts.seed), uint64(i)))}
}

func (c *chatter) loop(ctx context.Context, deadline time.Time) {
	for time.Now().Before(deadline) && ctx.Err() == nil {
		c.send(ctx)
	}
}

// send sends one message (or a regeneration) and reads its answer in one of the ways clients do.
func (c *chatter) send(ctx context.Context) {
	body := c.nextBody()
	c.s.count("sends", 1)
	if body["regenerate"] != nil {
		c.s.count("send regenerate", 1)
	}
	if body["on_active_run"] != nil {
		c.s.count(fmt.Sprint("send on_active_run ", body["on_active_run"]), 1)
	}
	resp, err := c.s.post(ctx, "/v1/chat/stream", body)
	if err != nil {
		c.s.violate("chat %d: send %v: %v", c.i, body, err)
		c.pause(100, 300)
		return
	}
	if resp.StatusCode != http.StatusOK {
		c.refused(resp, body)
		return
	}
	runID, sessionID := resp.Header.Get("X-Run-Id"), resp.Header.Get("X-Session-Id")
	if runID == "" || sessionID == "" {
		resp.Body.Close()
		c.s.violate("chat %d: send %v answered 200 without X-Run-Id (%q) or X-Session-Id (%q)", c.i, body, runID, sessionID)
		return
	}
	c.session = sessionID
	c.s.started(runID, sessionID)
	v := &runView{c: c, id: runID, seen: map[int]event{}}
	mode := c.pickMode()
	c.s.count("read "+mode, 1)
	switch mode {
	case "whole":
		v.read(resp.Body, "stream", 0, 0)
	case "slow":
		v.read(resp.Body, "stream", 0, 20*time.Millisecond)
	case "resume":
		if v.read(resp.Body, "stream", 1+c.rng.IntN(40), 0) {
			c.pause(0, 300)
		}
	case "cancel":
		if v.read(resp.Body, "stream", 1+c.rng.IntN(20), 0) {
			c.cancel(ctx, runID)
		}
	case "abandon": // gone without waiting for the end; the run goes on, and the next send finds it
		v.read(resp.Body, "stream", 1+c.rng.IntN(20), 0)
		return
	}
	c.resumeUntilDone(ctx, v)
}

// nextBody is the next send: usually a message to the chat's session, now and then to a new one or a
// regeneration, mostly without on_active_run.
func (c *chatter) nextBody() map[string]any {
	body := map[string]any{}
	if c.session != "" && c.rng.IntN(12) != 0 {
		body["session_id"] = c.session
	}
	c.sent++
	if body["session_id"] != nil && c.rng.IntN(25) == 0 {
		body["regenerate"] = true
	} else {
		body["message"] = fmt.Sprintf("Chat %d, message %d: what time is it in Paris and in Tokyo?", c.i, c.sent)
	}
	switch c.rng.IntN(10) {
	case 0:
		body["on_active_run"] = "enqueue"
	case 1:
		body["on_active_run"] = "interrupt"
	}
	return body
}

func (c *chatter) pickMode() string {
	switch n := c.rng.IntN(100); {
	case n < 55:
		return "whole"
	case n < 67:
		return "slow"
	case n < 82:
		return "resume"
	case n < 93:
		return "cancel"
	}
	return "abandon"
}

// pause waits between lo and hi milliseconds: a client's think time, not a wait the test relies on.
func (c *chatter) pause(lo, hi int) {
	time.Sleep(time.Duration(lo+c.rng.IntN(hi-lo+1)) * time.Millisecond)
}

// refused counts a refused send; a busy session (409) and shutting down (503) are what a client must
// expect, anything else is a violation.
func (c *chatter) refused(resp *http.Response, body map[string]any) {
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e struct{ Error struct{ Code string } }
	json.Unmarshal(raw, &e)
	key := fmt.Sprintf("%d %s", resp.StatusCode, e.Error.Code)
	c.s.mu.Lock()
	c.s.refusals[key]++
	c.s.mu.Unlock()
	switch {
	case key == "409 session_busy", key == "409 queue_full", key == "409 conversation_changed":
	case resp.StatusCode == http.StatusServiceUnavailable:
	default:
		c.s.violate("chat %d: send %v answered %d %s", c.i, body, resp.StatusCode, raw)
	}
	c.pause(20, 100)
}

// cancel cancels the run, as a stop button does.
func (c *chatter) cancel(ctx context.Context, runID string) {
	resp, err := c.s.post(ctx, "/v1/runs/"+runID+"/cancel", map[string]any{})
	if err != nil {
		c.s.violate("chat %d: cancel run %s: %v", c.i, runID, err)
		return
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var r struct{ Status string }
	json.Unmarshal(raw, &r)
	c.s.mu.Lock()
	c.s.cancels[fmt.Sprintf("%d %s", resp.StatusCode, r.Status)]++
	if resp.StatusCode == http.StatusAccepted {
		c.s.cancelled[runID] = true
	}
	c.s.mu.Unlock()
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
		c.s.violate("chat %d: cancel run %s: %d %s", c.i, runID, resp.StatusCode, raw)
	}
}

// resumeUntilDone resumes the run's events after the last id the client saw until done, as an
// EventSource reconnecting with Last-Event-ID does; now and then it drops the resumed stream too.
func (c *chatter) resumeUntilDone(ctx context.Context, v *runView) {
	for attempt := 0; !v.done; attempt++ {
		if attempt == 10 {
			c.s.violate("run %s: no done after 10 resumes; the client saw up to id %d", v.id, v.last)
			return
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", c.s.p.base+"/v1/runs/"+v.id+"/events", nil)
		if v.last > 0 {
			req.Header.Set("Last-Event-ID", strconv.Itoa(v.last))
		}
		c.s.count("resumes", 1)
		resp, err := c.s.client.Do(req)
		if err != nil {
			c.s.violate("run %s: resume after %d: %v", v.id, v.last, err)
			return
		}
		if resp.StatusCode != http.StatusOK {
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			c.s.violate("run %s: resume after %d: %d %s", v.id, v.last, resp.StatusCode, raw)
			return
		}
		stopAfter := 0
		if c.rng.IntN(4) == 0 {
			stopAfter = 1 + c.rng.IntN(20)
		}
		v.read(resp.Body, "resume after "+strconv.Itoa(v.last), stopAfter, 0)
	}
}

// runView is what one client saw of one run, over its stream and its resumes.
type runView struct {
	c    *chatter
	id   string
	seen map[int]event
	last int // the last id seen
	done bool
}

// read reads the run's events from body to the body's end or, when stopAfter > 0, until that many events
// came before done (then the client hangs up). A slow reader pauses after each of its first 50 events.
// It closes the body and reports whether the client hung up before done.
func (v *runView) read(body io.ReadCloser, where string, stopAfter int, pause time.Duration) (hungUp bool) {
	defer body.Close()
	n := 0
	err := readEvents(body, func(ev event) bool {
		n++
		v.take(ev, where)
		if pause > 0 && n <= 50 {
			time.Sleep(pause)
		}
		hungUp = !v.done && n == stopAfter
		return !hungUp // after done, read on: the stream must end there
	})
	v.c.s.mu.Lock()
	v.c.s.events += int64(n)
	v.c.s.mu.Unlock()
	switch {
	case err != nil:
		v.c.s.violate("run %s (%s): the stream broke after %d events, the last id %d: %v", v.id, where, n, v.last, err)
	case !v.done && !hungUp:
		v.c.s.violate("run %s (%s): the stream ended after %d events without done; the last id %d", v.id, where, n, v.last)
	}
	return hungUp
}

// take checks one event against what the client saw of the run before: ids go up by one from 1 (no
// crash here, so no gap is allowed), an id seen before never comes with other data, done comes once.
func (v *runView) take(ev event, where string) {
	seq := ev.seq()
	switch prev, seen := v.seen[seq]; {
	case seq <= 0:
		v.c.s.violate("run %s (%s): event %v has no numeric id", v.id, where, ev)
	case seen && !cmp.Equal(prev, ev):
		v.c.s.violate("run %s (%s): id %d came again with other data: first %v, now %v", v.id, where, seq, prev, ev)
	case seen:
		v.c.s.violate("run %s (%s): id %d came again, after id %d", v.id, where, seq, v.last)
	case v.done:
		v.c.s.violate("run %s (%s): event %v after done", v.id, where, ev)
	case seq != v.last+1:
		v.c.s.violate("run %s (%s): id %d follows id %d", v.id, where, seq, v.last)
	}
	if ev.Type == "run_start" && ev.Data["run_id"] != v.id {
		v.c.s.violate("run %s (%s): run_start names run %v", v.id, where, ev.Data["run_id"])
	}
	v.seen[seq] = ev
	v.last = max(v.last, seq)
	v.done = v.done || ev.Type == "done"
}

// post sends body as JSON with the clients' shared client. The caller closes the answer's body.
func (s *soak) post(ctx context.Context, path string, body any) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", s.p.base+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	return s.client.Do(req)
}

func (s *soak) started(runID, sessionID string) {
	s.mu.Lock()
	_, again := s.runs[runID]
	if !again {
		s.runs[runID] = sessionID
		s.order = append(s.order, runID)
		s.sessions[sessionID] = true
	}
	s.mu.Unlock()
	if again {
		s.violate("run %s was started twice (session %s)", runID, sessionID)
	}
}

// settle checks every session the clients used, in shards: once each of its runs has ended, the runs'
// event logs, then one more message through the strict model, then the records. The shards are subtests
// run from goroutines of their own, not parallel subtests: -parallel (GOMAXPROCS by default) would let
// two run at a time, and a final message waits mostly on the event log's batches, not on a CPU.
func (s *soak) settle(t *testing.T) {
	bySession := map[string][]string{}
	for _, run := range s.order {
		bySession[s.runs[run]] = append(bySession[s.runs[run]], run)
	}
	sessions := slices.Sorted(maps.Keys(bySession))
	shards := min(16, len(sessions))
	t.Logf("checking %d sessions and %d runs", len(sessions), len(s.order))
	var wg sync.WaitGroup
	for k := range shards {
		wg.Go(func() {
			t.Run(fmt.Sprintf("sessions%02d", k), func(t *testing.T) {
				for i := k; i < len(sessions); i += shards {
					s.checkSession(t, sessions[i], bySession[sessions[i]])
				}
			})
		})
	}
	wg.Wait()
}

// finalMark in a message asks the model for a clean answer, without faults.
const finalMark = "(final)"

func (s *soak) checkSession(t *testing.T, session string, runs []string) {
	for _, id := range runs {
		run := s.p.waitEnded(t, id)
		s.mu.Lock()
		s.statuses[run.Status]++
		uncancelled := 0
		if s.cancelled[id] && run.Status != "cancelled" {
			s.counts["cancel accepted, run ended "+run.Status]++
			s.counts["cancel accepted, run not cancelled"]++
			uncancelled = s.counts["cancel accepted, run not cancelled"]
		}
		s.mu.Unlock()
		log := s.p.replay(t, id, "")
		if err := checkLog(log, run); err != nil {
			t.Errorf("violation: session %s, event log of run %s (%s): %v\nthe log's last events:\n%s",
				session, id, run.Status, err, eventList(log[max(0, len(log)-12):]))
		}
		if run.Status == "failed" {
			s.failed(log)
		}
		if uncancelled > 0 && uncancelled <= 3 {
			t.Logf("run %s was cancelled (202 cancelling) and ended %s; the end of its log:\n%s",
				id, run.Status, eventList(log[max(0, len(log)-8):]))
		}
	}
	text := fmt.Sprintf("Session %s: and in London? %s", session, finalMark)
	r := s.p.chat(t, map[string]any{"message": text, "session_id": session, "on_active_run": "enqueue"}, "")
	switch {
	case r.status != http.StatusOK:
		t.Errorf("violation: session %s: the final message was answered %d %s", session, r.status, r.body)
	case r.err != nil || r.last().Type != "done" || r.last().Data["status"] != "completed":
		t.Errorf("violation: session %s: the final message's run %s ended %v (%v), want done completed:\n%s",
			session, r.header.Get("X-Run-Id"), r.last(), r.err, eventList(r.events[max(0, len(r.events)-12):]))
	default:
		s.mu.Lock()
		s.finals++
		s.mu.Unlock()
	}
	recs := s.p.records(t, session)
	if err := checkRecords(recs); err != nil {
		t.Errorf("violation: session %s, stored records:\n%v\nrecords:\n%s", session, err, describe(recs))
	}
}

// failed counts a failed run by the code of its last error event.
func (s *soak) failed(log []event) {
	code := "(no error event)"
	for _, ev := range slices.Backward(log) {
		if ev.Type == "error" {
			code = fmt.Sprint(ev.Data["code"])
			break
		}
	}
	s.mu.Lock()
	s.failures[code]++
	s.mu.Unlock()
}

// checkOutput fails on any sign of a panic in chatd's output.
func (s *soak) checkOutput(t *testing.T) {
	out := s.p.out.String()
	panics := 0
	for line := range strings.Lines(out) {
		if strings.Contains(strings.ToLower(line), "panic") {
			if panics++; panics <= 10 {
				t.Errorf("violation: chatd's output: %s", strings.TrimSpace(line))
			}
		}
	}
	s.mu.Lock()
	s.counts["panics in chatd's output"] = panics
	s.mu.Unlock()
	t.Logf("chatd's output: %d bytes, %d lines; warnings and errors by message:\n%s", len(out), strings.Count(out, "\n"), logSummary(out))
}

// logSummary counts chatd's log lines by level, message and error (its first 60 bytes), with the first
// line of each.
func logSummary(out string) string {
	byMsg, first := map[string]int{}, map[string]string{}
	for line := range strings.Lines(out) {
		level, msg, err := logField(line, "level"), logField(line, "msg"), logField(line, "err")
		if level == "" && msg == "" {
			msg = strings.TrimSpace(line)
		}
		if len(err) > 60 {
			err = err[:60] + "…"
		}
		k := fmt.Sprintf("%-5s %s: %s", level, msg, err)
		if byMsg[k]++; byMsg[k] == 1 {
			first[k] = strings.TrimSpace(line)
		}
	}
	var b strings.Builder
	keys := slices.Sorted(maps.Keys(byMsg))
	if len(keys) > 30 {
		fmt.Fprintf(&b, "  (%d kinds of line; the first 30)\n", len(keys))
		keys = keys[:30]
	}
	for _, k := range keys {
		line := first[k]
		if len(line) > 400 {
			line = line[:400] + "…"
		}
		fmt.Fprintf(&b, "  %6d %s\n         first: %s\n", byMsg[k], k, line)
	}
	return b.String()
}

// logField is the value of key in a line of slog's text format.
func logField(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := line[i+len(key)+2:]
	if strings.HasPrefix(v, `"`) {
		if s, err := strconv.QuotedPrefix(v); err == nil {
			u, _ := strconv.Unquote(s)
			return u
		}
	}
	if j := strings.IndexByte(v, ' '); j >= 0 {
		v = v[:j]
	}
	return strings.TrimSpace(v)
}

// checkUpstream waits for the model's retired servers to be checked, and checks the current one.
func (s *soak) checkUpstream(t *testing.T) {
	m := s.model
	m.retired.Wait()
	m.mu.Lock()
	g := m.gen
	m.mu.Unlock()
	m.check(g)
	m.mu.Lock()
	defer m.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts["model requests"] = m.requests
	s.counts["model requests rejected"] = m.rejected
	s.counts["model request MB"] = int(m.rawBytes >> 20)
	s.counts["model servers"] = m.gens
}

// report logs the run's figures in a form to paste into a report.
func (s *soak) report(t *testing.T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counts
	var b strings.Builder
	fmt.Fprintf(&b, "soak report\n  duration %s (the load ended after %s: each chat finishes the run it reads), %d chats, seed %d\n",
		s.opts.duration, s.loadTime.Round(time.Second), s.opts.chats, s.opts.seed)
	fmt.Fprintf(&b, "  sends %d (on_active_run: %s; regenerations %d); runs started %d, in %d sessions\n",
		c["sends"], formatCounts(withPrefix(c, "send on_active_run ")), c["send regenerate"], len(s.runs), len(s.sessions))
	fmt.Fprintf(&b, "  refusals by status and code: %s\n", formatCounts(s.refusals))
	fmt.Fprintf(&b, "  runs by final status: %s\n", formatCounts(s.statuses))
	fmt.Fprintf(&b, "  failed runs by error code: %s\n", formatCounts(s.failures))
	fmt.Fprintf(&b, "  streams read: %s; resumes (GET events with Last-Event-ID) %d; events read by clients %d\n",
		formatCounts(withPrefix(c, "read ")), c["resumes"], s.events)
	fmt.Fprintf(&b, "  cancels by status: %s; accepted (202) but the run ended otherwise: %s\n",
		formatCounts(s.cancels), formatCounts(withPrefix(c, "cancel accepted, run ended ")))
	fmt.Fprintf(&b, "  sessions that took the final message and completed: %d of %d\n", s.finals, len(s.sessions))
	fmt.Fprintf(&b, "  model requests %d (%d MB, %d llmtest servers), rejected by strict mode %d; turns by kind: %s\n",
		c["model requests"], c["model request MB"], c["model servers"], c["model requests rejected"], formatCounts(s.model.turns.snapshot()))
	fmt.Fprintf(&b, "  lines of chatd's output with \"panic\": %d\n", c["panics in chatd's output"])
	var series []string
	for _, r := range s.rss {
		at := r.at.Round(time.Second).String()
		if r.tag != "" {
			at += " (" + r.tag + ")"
		}
		series = append(series, fmt.Sprintf("%s=%.1f", at, float64(r.kB)/1024))
	}
	fmt.Fprintf(&b, "  RSS (MB): %s\n", strings.Join(series, " "))
	if kB, err := vmRSS(s.p.cmd.Process.Pid); err == nil {
		fmt.Fprintf(&b, "  final RSS (after the checks): %.1f MB\n", float64(kB)/1024)
	}
	fmt.Fprintf(&b, "  database: %s\n", dbSize(s.db))
	if kB, err := vmRSS(os.Getpid()); err == nil {
		fmt.Fprintf(&b, "  the test process's own RSS (clients and model): %.1f MB\n", float64(kB)/1024)
	}
	fmt.Fprintf(&b, "  violations seen by clients: %d\n", s.violations)
	t.Log(b.String())
	if s.violations > maxReported {
		t.Errorf("%d violations seen by clients; the first %d are reported above", s.violations, maxReported)
	}
}

// withPrefix returns the counts whose name starts with prefix, by the rest of their name.
func withPrefix(m map[string]int, prefix string) map[string]int {
	out := map[string]int{}
	for k, n := range m {
		if rest, ok := strings.CutPrefix(k, prefix); ok {
			out[rest] = n
		}
	}
	return out
}

func formatCounts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// dbSize is the size of the SQLite file with its WAL and shared-memory files.
func dbSize(db string) string {
	var total int64
	var parts []string
	for _, name := range []string{db, db + "-wal", db + "-shm"} {
		if fi, err := os.Stat(name); err == nil {
			total += fi.Size()
			parts = append(parts, fmt.Sprintf("%s %.1f MB", filepath.Base(name), float64(fi.Size())/(1<<20)))
		}
	}
	return fmt.Sprintf("%.1f MB (%s)", float64(total)/(1<<20), strings.Join(parts, ", "))
}

// checkRSS holds a long run's RSS samples after the warm-up to within 20% of their median.
func (s *soak) checkRSS(t *testing.T) {
	if !s.opts.long {
		return
	}
	var after []int64
	for _, r := range s.rss {
		if s.afterWarmUp(r) {
			after = append(after, r.kB)
		}
	}
	if len(after) == 0 {
		t.Errorf("no RSS sample after the warm-up of %s", s.opts.warmUp)
		return
	}
	sorted := slices.Sorted(slices.Values(after))
	median := float64(sorted[len(sorted)/2])
	if len(sorted)%2 == 0 {
		median = float64(sorted[len(sorted)/2-1]+sorted[len(sorted)/2]) / 2
	}
	t.Logf("RSS after the warm-up of %s: %d samples, median %.1f MB, min %.1f MB, max %.1f MB",
		s.opts.warmUp, len(after), median/1024, float64(sorted[0])/1024, float64(sorted[len(sorted)-1])/1024)
	for _, r := range s.rss {
		if s.afterWarmUp(r) && (float64(r.kB) < 0.8*median || float64(r.kB) > 1.2*median) {
			t.Errorf("RSS at %s is %.1f MB, more than 20%% from the median %.1f MB after the warm-up",
				r.at.Round(time.Second), float64(r.kB)/1024, median/1024)
		}
	}
}

// soakModel is the model chatd talks to: a server that hands each request to the current llmtest
// server, in strict mode. A server's journal keeps every request whole, which over a long run would be
// gigabytes; so every requestsPerModel requests a fresh server takes over, and the retired one's requests
// are validated once those it serves have ended, and then dropped.
type soakModel struct {
	t       *testing.T
	turns   *soakTurns
	front   *httptest.Server
	retired sync.WaitGroup

	mu                 sync.Mutex
	gen                *modelGen
	gens               int
	requests, rejected int
	rawBytes           int64
}

// modelGen is one llmtest server of the model's.
type modelGen struct {
	up       *llmtest.Server
	owner    *detachedTB
	base     int // the number of its first request in the whole run
	count    int
	inflight sync.WaitGroup
}

const requestsPerModel = 5000

func newSoakModel(t *testing.T) *soakModel {
	m := &soakModel{t: t, turns: &soakTurns{}}
	m.gen = m.newGen(0)
	m.front = httptest.NewServer(m)
	t.Cleanup(m.front.Close)
	t.Cleanup(func() {
		m.mu.Lock()
		g := m.gen
		m.mu.Unlock()
		g.owner.close()
	})
	// A retired server is checked once its requests end, which chatd's end ends at the latest: its
	// report must come before the test completes.
	t.Cleanup(m.retired.Wait)
	return m
}

func (m *soakModel) newGen(base int) *modelGen {
	g := &modelGen{owner: &detachedTB{TB: m.t}, base: base}
	g.up = llmtest.NewServer(g.owner)
	g.up.Respond = func(n int, req llmtest.Request) llmtest.Turn { return m.turns.respond(base+n, req) }
	g.up.Strict = true
	m.gens++
	return g
}

// ServeHTTP passes the request to the current server's handler (its own listener stays unused).
func (m *soakModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	if m.gen.count == requestsPerModel {
		old := m.gen
		m.gen = m.newGen(old.base + old.count)
		m.retired.Go(func() { m.retire(old) })
	}
	g := m.gen
	g.count++
	g.inflight.Add(1)
	m.mu.Unlock()
	defer g.inflight.Done()
	g.up.Config.Handler.ServeHTTP(w, r)
}

// retire checks a server's requests once every request it serves has ended, and closes it.
func (m *soakModel) retire(g *modelGen) {
	g.inflight.Wait()
	m.check(g)
	g.owner.close()
}

// check validates a server's requests as the OpenAI API would: strict mode answered an invalid one 400;
// this names it.
func (m *soakModel) check(g *modelGen) {
	reqs := g.up.Requests()
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, r := range reqs {
		m.requests++
		m.rawBytes += int64(len(r.Raw))
		if err := llmtest.Validate(r.Body); err != nil {
			if m.rejected++; m.rejected <= 10 {
				raw := string(r.Raw)
				if len(raw) > 4000 {
					raw = raw[:4000] + "…"
				}
				m.t.Errorf("violation: model request %d is one the OpenAI API rejects: %v\n%s", g.base+i+1, err, raw)
			}
		}
	}
}

// detachedTB is a testing.TB whose cleanups run when close is called rather than at the test's end, so
// that what they hold can be freed while the test goes on.
type detachedTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
}

func (d *detachedTB) Cleanup(f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cleanups = append(d.cleanups, f)
}

func (d *detachedTB) close() {
	d.mu.Lock()
	fs := d.cleanups
	d.cleanups = nil
	d.mu.Unlock()
	for _, f := range slices.Backward(fs) {
		f()
	}
}

// afterWarmUp reports whether a sample is held to the median: the sample that ends the warm-up, a tick
// late by a few milliseconds, is still part of it.
func (s *soak) afterWarmUp(r rssSample) bool {
	return r.at.Round(time.Second) > s.opts.warmUp
}

// soakTurns picks the model's turn for each request: a deterministic mix, by the request's number, of
// answers, tool calls and faults. A message holding finalMark gets clean turns.
type soakTurns struct {
	mu         sync.Mutex
	byKind     map[string]int
	fragmented int // the next thousand requests whose huge arguments are not yet sent in fragments
}

// soakKinds is the mix, per 100 requests.
var soakKinds = func() []string {
	var out []string
	for _, k := range []struct {
		kind string
		n    int
	}{{"drip", 5}, {"stall", 5}, {"cut", 6}, {"huge arguments", 5}, {"429", 8}, {"in-band error", 4}, {"tool calls", 25}} {
		for range k.n {
			out = append(out, k.kind)
		}
	}
	for len(out) < 100 {
		out = append(out, "answer")
	}
	return out
}()

func (st *soakTurns) respond(n int, req llmtest.Request) llmtest.Turn {
	msgs := req.Messages()
	afterTools := len(msgs) > 0 && msgs[len(msgs)-1]["role"] == "tool"
	kind := soakKinds[(n*37)%len(soakKinds)] // 37 is prime to 100: every kind, spread out
	if strings.Contains(lastUserText(msgs), finalMark) {
		kind = "tool calls"
	}
	if afterTools && (kind == "tool calls" || kind == "huge arguments") {
		kind = "answer" // a tool loop ends after one round
	}
	st.mu.Lock()
	if kind == "huge arguments" && n/1000 >= st.fragmented {
		// The first huge arguments of each thousand requests come in fragments.
		kind, st.fragmented = "huge arguments in fragments", n/1000+1
	}
	if st.byKind == nil {
		st.byKind = map[string]int{}
	}
	st.byKind[kind]++
	st.mu.Unlock()
	return soakTurn(kind, n)
}

func (st *soakTurns) snapshot() map[string]int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return maps.Clone(st.byKind)
}

// soakTurn is the turn of a kind. Every text starts with the request's number, so that no two stored
// answers are the same text.
func soakTurn(kind string, n int) llmtest.Turn {
	answer := fmt.Sprintf("#%d Paris runs on Central European Time and Tokyo on Japan Standard Time, eight hours apart in winter.", n)
	switch kind {
	case "tool calls":
		return llmtest.Turn{Text: fmt.Sprintf("#%d Let me look up both clocks.", n), ChunkRunes: 8, Delay: time.Millisecond,
			ToolCalls: []llmtest.ToolCall{
				{ID: fmt.Sprintf("call_%d_paris", n), Name: "current_time", Arguments: `{"timezone":"Europe/Paris"}`},
				{ID: fmt.Sprintf("call_%d_tokyo", n), Name: "current_time", Arguments: `{"timezone":"Asia/Tokyo"}`},
			}}
	case "drip": // one rune every 300ms: the run's time limit (5s) ends it
		return llmtest.Turn{Text: fmt.Sprintf("#%d %s", n, strings.Repeat("drip ", 20)), ChunkRunes: 1, Delay: 300 * time.Millisecond, Block: true}
	case "stall": // nothing after the first chunk: the idle limit (2s) ends the call
		return llmtest.Turn{Block: true}
	case "cut": // the connection drops, before the text (retried) or in it (the run fails)
		return llmtest.Turn{Text: answer, ChunkRunes: 4, Delay: time.Millisecond, CutAfterChunks: 1 + n%8}
	case "huge arguments", "huge arguments in fragments":
		// ~100 KB of arguments, over the 64 KiB limit: the call is not run. Mostly sent whole, as a
		// few servers do; now and then in fragments of a few bytes, as OpenAI does, each of them a
		// tool_call_delta event until the limit: some 20,000 events and 3 MB of event log, which would
		// make most of the database if it were frequent.
		args := fmt.Sprintf(`{"timezone":"Europe/Paris","note":%q}`, strings.Repeat("x", 100_000))
		return llmtest.Turn{Text: fmt.Sprintf("#%d Let me check, at length.", n), WholeArguments: kind == "huge arguments",
			ToolCalls: []llmtest.ToolCall{{ID: fmt.Sprintf("call_%d_huge", n), Name: "current_time", Arguments: args}}}
	case "429":
		return llmtest.Turn{Status: http.StatusTooManyRequests, RetryAfter: strconv.Itoa(n % 2)}
	case "in-band error":
		return llmtest.Turn{Text: fmt.Sprintf("#%d Partial answer, then", n), InBandError: "The server had an error while processing your request."}
	}
	return llmtest.Turn{Text: answer, ChunkRunes: 8, Delay: 2 * time.Millisecond}
}
