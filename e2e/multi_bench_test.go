package e2e

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"chatd/internal/llm/llmtest"
	"chatd/internal/store/postgres/pgtest"
)

// BenchmarkMultiInstance measures three chatd instances on one PostgreSQL database behind HAProxy, the
// model being llmtest streaming tokens, and prints the figures of docs/multi-instance.md "Measured":
//
//   - events per second written through PostgreSQL by 200 concurrent streams sent through the balancer
//     (rows added to run_events over the time the streams took), and the NOTIFYs per second meanwhile,
//     counted by a LISTEN connection of the benchmark on the instances' channels;
//   - the latency a follower on another instance adds over a follower on the run's own instance: both
//     follow the same runs, each on its instance directly, and each event's arrival is compared;
//   - the recovery time after SIGKILL: from the kill to the run's done (interrupted) seen by a follower
//     on another instance, with a 2s lease and a 250ms sweep.
//
// It measures once whatever b.N is; run it with
//
//	go test -run '^$' -bench MultiInstance -benchtime 1x ./e2e
//
// MULTI_BENCH_STREAMS (200), MULTI_BENCH_RUNS (runs per stream, 3), MULTI_BENCH_KILLS (5) change its size.
func BenchmarkMultiInstance(b *testing.B) {
	haproxy := needHAProxy(b)
	dsn := pgtest.NewSchema(b)
	bin := buildChatd(b)
	up := llmtest.NewServer(b)
	up.Respond = benchRespond
	// The instances log at info: debug lines for every event would be what is measured.
	env := append(chatdEnv(up, "5s"), "CHATD_LEASE_TTL=2s", "CHATD_SWEEP_INTERVAL=250ms", "CHATD_LOG_LEVEL=info")
	var inst []*process
	for i := range 3 {
		inst = append(inst, startChatd(b, fmt.Sprintf("chatd-%d", i+1), bin, dsn, env...))
	}
	lb := startHAProxy(b, haproxy, inst)
	n := newNotifyCounter(b, dsn)

	streams := int(envInt(b, "MULTI_BENCH_STREAMS", 200))
	runs := int(envInt(b, "MULTI_BENCH_RUNS", 3))
	kills := int(envInt(b, "MULTI_BENCH_KILLS", 5))
	load := benchLoad(b, lb, dsn, n, streams, runs)
	idle := benchFollowers(b, inst, 5)
	recovery := benchRecovery(b, bin, dsn, env, inst, kills)

	b.ReportMetric(load.eventsPerSec, "events/s")
	b.ReportMetric(load.notifiesPerSec, "notifies/s")
	b.ReportMetric(ms(quantile(idle, 0.5)), "xfollow-p50-ms")
	b.ReportMetric(ms(quantile(idle, 0.99)), "xfollow-p99-ms")
	b.ReportMetric(quantile(recovery, 0.5).Seconds(), "recovery-p50-s")
	fmt.Fprintf(os.Stdout, `
three chatd on one PostgreSQL behind HAProxy; llmtest streaming; lease 2s, sweep 250ms
| figure | value |
|---|---|
| streams at once (through HAProxy) | %d (%d runs of %d events, %d refused or broken) in %s |
| events written through PostgreSQL | %.0f events/s (%d rows of run_events) |
| NOTIFYs | %.0f/s (events %d, session %d, cancel %d): %.1f events per NOTIFY |
| cross-instance follower, added latency (%d events of 5 runs, idle) | p50 %.1f ms, p99 %.1f ms |
| recovery after SIGKILL, kill → done seen on another instance (%d kills) | min %s, p50 %s, max %s |
`, streams, load.runs, load.eventsPerRun, load.failed, load.took.Round(time.Millisecond),
		load.eventsPerSec, load.rows,
		load.notifiesPerSec, load.notifies["events"], load.notifies["session"], load.notifies["cancel"], float64(load.rows)/float64(max(1, load.notifies["events"])),
		len(idle), ms(quantile(idle, 0.5)), ms(quantile(idle, 0.99)),
		len(recovery), quantile(recovery, 0).Round(time.Millisecond), quantile(recovery, 0.5).Round(time.Millisecond), quantile(recovery, 1).Round(time.Millisecond))
}

// benchRespond answers "bench load" at once with 200 deltas of 4 runes, "bench follow" with 200 deltas
// of 4 runes 5ms apart, and "bench hold" with a few deltas, then holds the answer open.
func benchRespond(n int, req llmtest.Request) llmtest.Turn {
	msg := lastUserText(req.Messages())
	turn := llmtest.Turn{Text: fmt.Sprintf("Answer %d. ", n) + strings.Repeat("tok ", 200), ChunkRunes: 4}
	switch {
	case strings.Contains(msg, "bench follow"):
		turn.Delay = 5 * time.Millisecond
	case strings.Contains(msg, "bench hold"):
		turn.Text, turn.Delay, turn.Block = "Held open.", 5*time.Millisecond, true
	}
	return turn
}

type loadFigures struct {
	runs, failed, eventsPerRun int
	took                       time.Duration
	rows                       int64
	eventsPerSec               float64
	notifies                   map[string]int
	notifiesPerSec             float64
}

// benchLoad sends streams runs at once through the balancer, each stream runs of them one after the
// other, each in a session of its own, and reads every stream to its end.
func benchLoad(b *testing.B, lb *process, dsn string, n *notifyCounter, streams, runs int) loadFigures {
	db, err := pgx.Connect(b.Context(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close(context.Background())
	count := func() int64 {
		var c int64
		if err := db.QueryRow(b.Context(), "SELECT count(*) FROM run_events").Scan(&c); err != nil {
			b.Fatal(err)
		}
		return c
	}
	var f loadFigures
	before, notified := count(), n.snapshot()
	began := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			for j := range runs {
				events, err := streamRun(b.Context(), lb, fmt.Sprintf("bench load %d.%d", i, j))
				mu.Lock()
				f.runs++
				if err != nil {
					f.failed++
					if f.failed <= 3 {
						b.Logf("stream %d run %d: %v", i, j, err)
					}
				}
				f.eventsPerRun = max(f.eventsPerRun, events)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	f.took = time.Since(began)
	f.rows = count() - before
	f.eventsPerSec = float64(f.rows) / f.took.Seconds()
	f.notifies = n.since(notified)
	total := 0
	for _, c := range f.notifies {
		total += c
	}
	f.notifiesPerSec = float64(total) / f.took.Seconds()
	return f
}

// streamRun sends a message to p and reads its stream to the end; it returns the number of events.
func streamRun(ctx context.Context, p *process, msg string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	resp, err := p.post(ctx, "/v1/chat/stream", map[string]any{"message": msg}, "")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	events, last := 0, event{}
	err = readEvents(resp.Body, func(ev event) bool {
		events++
		last = ev
		return true
	})
	if err == nil && (last.Type != "done" || last.Data["status"] != "completed") {
		err = fmt.Errorf("the run ended with %v", last)
	}
	return events, err
}

// benchFollowers sends runs to the first instance and follows each from it and from the second
// instance, and returns, for every event both saw, how much later it reached the second instance's
// follower. The first events are left out: the followers connect while they are written.
func benchFollowers(b *testing.B, inst []*process, runs int) []time.Duration {
	var added []time.Duration
	for i := range runs {
		s := inst[0].send(b, map[string]any{"message": fmt.Sprintf("bench follow %d", i)}, "")
		id := s.header.Get("X-Run-Id")
		var same, other map[int]time.Time
		var wg sync.WaitGroup
		wg.Go(func() { same = follow(b, inst[0], id) })
		wg.Go(func() { other = follow(b, inst[1], id) })
		wg.Wait()
		s.rest(patience)
		for seq, at := range other {
			if seq > 20 && !same[seq].IsZero() {
				added = append(added, at.Sub(same[seq]))
			}
		}
	}
	return added
}

// follow reads run id's events on p to the end and returns when each arrived, by Seq.
func follow(b *testing.B, p *process, id string) map[int]time.Time {
	ctx, cancel := context.WithTimeout(b.Context(), patience)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", p.base+"/v1/runs/"+id+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Error(err)
		return nil
	}
	defer resp.Body.Close()
	at := map[int]time.Time{}
	readEvents(resp.Body, func(ev event) bool {
		at[ev.seq()] = time.Now()
		return true
	})
	return at
}

// benchRecovery kills, kills times, the instance running a run whose model holds its answer open, and
// returns how long each took from the kill to the done event on a follower of another instance. The
// killed instance is started again on its address.
func benchRecovery(b *testing.B, bin, dsn string, env []string, inst []*process, kills int) []time.Duration {
	var took []time.Duration
	for i := range kills {
		v := i % len(inst)
		victim := inst[v]
		s := victim.send(b, map[string]any{"message": fmt.Sprintf("bench hold %d", i)}, "")
		id := s.header.Get("X-Run-Id")
		f := inst[(v+1)%len(inst)].get(b, "/v1/runs/"+id+"/events", "")
		if _, err := f.until(isEvent("text_delta"), patience); err != nil {
			b.Fatal(err)
		}
		victim.kill()
		killed := time.Now()
		rest, err := f.rest(patience)
		took = append(took, time.Since(killed))
		if err != nil || len(rest) == 0 || rest[len(rest)-1].Data["status"] != "interrupted" {
			b.Fatalf("the follower after kill %d: %v %v", i, err, rest)
		}
		inst[v] = startChatdAt(b, victim.name, bin, dsn, strings.TrimPrefix(victim.base, "http://"), env...)
	}
	return took
}

// notifyCounter LISTENs on the instances' notification channels (docs/multi-instance.md) and counts
// what arrives on each.
type notifyCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func newNotifyCounter(b *testing.B, dsn string) *notifyCounter {
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	// The channels are named as store/postgres names them: after the database and schema.
	var where string
	if err := conn.QueryRow(ctx, `SELECT current_database() || '.' || COALESCE(current_schema(), '')`).Scan(&where); err != nil {
		b.Fatal(err)
	}
	h := fnv.New64a()
	h.Write([]byte(where))
	prefix := "chatd_" + strconv.FormatUint(h.Sum64(), 36)
	for _, c := range []string{"events", "session", "cancel"} {
		if _, err := conn.Exec(ctx, "LISTEN "+prefix+"_"+c); err != nil {
			b.Fatal(err)
		}
	}
	n := &notifyCounter{counts: map[string]int{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			msg, err := conn.WaitForNotification(ctx)
			if err != nil {
				return
			}
			n.mu.Lock()
			n.counts[strings.TrimPrefix(msg.Channel, prefix+"_")]++
			n.mu.Unlock()
		}
	})
	b.Cleanup(func() {
		cancel()
		wg.Wait()
		conn.Close(context.Background())
	})
	return n
}

func (n *notifyCounter) snapshot() map[string]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return maps.Clone(n.counts)
}

func (n *notifyCounter) since(before map[string]int) map[string]int {
	now := n.snapshot()
	for k, v := range before {
		now[k] -= v
	}
	return now
}

// quantile is the q-quantile of ds (nearest rank); 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
