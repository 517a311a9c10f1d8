package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// options are chatbench's flags.
type options struct {
	chatd       string
	conc        []int
	rounds      int
	tokens      int
	interval    time.Duration
	ramp        time.Duration
	minStreams  int
	history     []int
	historyRows int
	throughput  int
	tpTokens    int
	timeout     time.Duration
	dir         string
	keep        bool
	postgres    string // -postgres: the server whose database of its own chatd runs on, instead of SQLite
	json        bool
	reprint     string // -report: print a saved report's table, run nothing
	// traced adds a target: chatd on new sessions with its traces exported (OTLP/HTTP) to the mock,
	// which takes and drops them.
	traced bool
}

// bench is one benchmark run: its temporary folder, the chatd binary and database, and the processes.
type bench struct {
	opt      options
	self     string // this program, re-executed as the mock and the relay
	chatd    string
	work     string
	db       string // the SQLite file (the history runs write it directly)
	dbArg    string // chatd's --db: sqlite:FILE, or the URL of the run's PostgreSQL database
	pgName   string // the run's PostgreSQL database, dropped at the end
	config   string
	procs    *children
	history  map[int][]string // the continuing sessions, by their number of records
	rep      *report
	progress io.Writer
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.progress, "chatbench: "+format+"\n", args...)
}

// setup makes the temporary folder, measures its disk's fsync, builds chatd when no binary was given,
// and writes chatd's config.
func (b *bench) setup(ctx context.Context) error {
	var err error
	if b.self, err = os.Executable(); err != nil {
		return err
	}
	if b.work, err = os.MkdirTemp(b.opt.dir, "chatbench-"); err != nil {
		return err
	}
	b.db = filepath.Join(b.work, "chatd.db")
	b.dbArg = "sqlite:" + b.db
	if b.opt.postgres != "" {
		if b.dbArg, b.pgName, err = createDatabase(ctx, b.opt.postgres); err != nil {
			return err
		}
		b.rep.DB = "postgres"
	}
	b.rep.Dir = b.work
	if err := b.measureFsync(); err != nil {
		return err
	}
	if b.chatd = b.opt.chatd; b.chatd == "" {
		if b.chatd, err = buildChatd(ctx, b.work); err != nil {
			return err
		}
	}
	// No compaction: the history runs measure loading and sending a long conversation, not summarizing it.
	b.config = filepath.Join(b.work, "chatd.yaml")
	// No title calls: a session's title is a second model call after its first run has ended, off the
	// chat's path, which would double the mock's streams for every new session measured.
	return os.WriteFile(b.config, []byte("context_windows: {\"openai/m\": 1000000000}\ntitle_model: none\n"), 0o600)
}

// measureFsync measures the fsync of the temp dir's disk once more: at the start and in every round,
// since other work on the machine may share the disk, and the report gives the median of them all.
func (b *bench) measureFsync() error {
	us, err := fsyncCost(b.work, 20)
	if err != nil {
		return fmt.Errorf("measure fsync in %s: %w", b.work, err)
	}
	b.rep.FsyncSamplesUS = append(b.rep.FsyncSamplesUS, us)
	b.rep.FsyncUS = median(b.rep.FsyncSamplesUS)
	b.logf("one 4 KiB write + fsync in %s: %.0f µs (median of 20)", b.work, us)
	return nil
}

// buildChatd builds ./cmd/chatd of the module chatbench is run in.
func buildChatd(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("build chatd: run chatbench inside the chatd repository, or give -chatd PATH")
	}
	bin := filepath.Join(dir, "chatd")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/chatd")
	cmd.Dir = filepath.Dir(mod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build chatd: %w\n%s", err, out)
	}
	return bin, nil
}

// startMock starts a fresh mock streaming tokens chunks and returns it with its base URL.
func (b *bench) startMock(ctx context.Context, tokens int) (*child, string, error) {
	args := []string{"-serve", "mock", "-tokens", strconv.Itoa(tokens), "-interval", b.opt.interval.String()}
	return b.startServe(ctx, "mock", args)
}

func (b *bench) startRelay(ctx context.Context, upstream string) (*child, string, error) {
	return b.startServe(ctx, "relay", []string{"-serve", "relay", "-upstream", upstream})
}

func (b *bench) startServe(ctx context.Context, name string, args []string) (*child, string, error) {
	first := true
	c, err := b.procs.start(name, b.self, args, os.Environ(), func(line string) (string, bool) {
		if first {
			first = false
			return "http://" + line, false
		}
		return "", true
	})
	if err != nil {
		return nil, "", err
	}
	addr, err := c.wait(ctx, 10*time.Second)
	if err != nil {
		b.procs.stop(c, time.Second)
		return nil, "", err
	}
	return c, addr, nil
}

// startChatd starts chatd on the benchmark's database with upstream as its OpenAI base URL. It keeps
// the info log level, since the line that says where chatd listens is an info line, and keeps only the
// lines above info.
func (b *bench) startChatd(ctx context.Context, upstream string, extraEnv ...string) (*child, string, error) {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + os.TempDir(),
		"OPENAI_API_KEY=x", "OPENAI_BASE_URL=" + upstream, "CHATD_MODEL=openai/m", "CHATD_LOG_LEVEL=info",
		"CHATD_DRAIN_TIMEOUT=2s"}
	env = append(env, extraEnv...)
	if addr := os.Getenv("CHATD_PPROF_ADDR"); addr != "" {
		env = append(env, "CHATD_PPROF_ADDR="+addr) // to profile chatd while it is measured
	}
	// The database goes in the environment, not the command line, which any user of the machine can
	// read (ps): a PostgreSQL URL may carry a password.
	env = append(env, "CHATD_DB="+b.dbArg)
	args := []string{"serve", "--addr", "127.0.0.1:0", "--config", b.config}
	c, err := b.procs.start("chatd", b.chatd, args, env, func(line string) (string, bool) {
		if strings.Contains(line, `msg="chatd listening"`) {
			if _, rest, ok := strings.Cut(line, " url="); ok {
				url, _, _ := strings.Cut(rest, " ")
				return url, false
			}
		}
		return "", !strings.Contains(line, "level=INFO")
	})
	if err != nil {
		return nil, "", err
	}
	url, err := c.wait(ctx, 60*time.Second)
	if err == nil {
		err = healthy(ctx, url)
	}
	if err != nil {
		b.procs.stop(c, 5*time.Second)
		return nil, "", err
	}
	return c, url, nil
}

func healthy(ctx context.Context, base string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("chatd at %s: %w", base, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("chatd at %s: GET /healthz answered %s", base, resp.Status)
	}
	return nil
}

// Bodies. The mock and the relay get an OpenAI request; chatd a message, to a new session or to the
// client's continuing one.
func mockBody(_, i int) []byte {
	return fmt.Appendf(nil, `{"model":"m","stream":true,"stream_options":{"include_usage":true},`+
		`"messages":[{"role":"user","content":"hi %d"}]}`, i)
}

func chatBody(_, i int) []byte { return fmt.Appendf(nil, `{"message":"hi %d"}`, i) }

func sessionBody(sessions []string) func(client, stream int) []byte {
	return func(client, i int) []byte {
		return fmt.Appendf(nil, `{"message":"hi %d","session_id":%q}`, i, sessions[client])
	}
}

// measure warms a fresh server with one stream (so its idle RSS already holds what a first request
// initializes), lets it settle, then runs the load and records the result.
func (b *bench) measure(ctx context.Context, row runRow, t target, l load) error {
	warm := load{clients: 1, streams: 1, timeout: l.timeout, expect: l.expect}
	if w := run(ctx, target{url: t.url, pid: t.pid, body: chatBodyFor(t)}, warm); w.OK != 1 {
		return fmt.Errorf("%s: the warm-up stream failed: %s", row.Target, w.ErrorSample)
	}
	if !sleepCtx(ctx, 300*time.Millisecond) {
		return ctx.Err()
	}
	row.measured = run(ctx, t, l)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	b.rep.Runs = append(b.rep.Runs, row)
	b.logf("round %d c=%-4d %-14s %s", row.Round, row.C, row.label(), row.brief())
	return nil
}

// chatBodyFor is the warm-up body: a new chat, also for a history run, so that warming does not add a
// turn to a measured session.
func chatBodyFor(t target) func(int, int) []byte {
	if strings.Contains(t.url, "/v1/chat/stream") {
		return chatBody
	}
	return t.body
}

// rounds runs, in each round and at each c, the mock directly, the relay, chatd with new sessions and
// chatd with each history size, every server fresh; then the throughput runs. Machine noise thus hits
// every target of a round alike.
func (b *bench) rounds(ctx context.Context) error {
	for r := 1; r <= b.opt.rounds; r++ {
		if err := b.measureFsync(); err != nil {
			return err
		}
		for _, c := range b.opt.conc {
			if err := b.roundAt(ctx, r, c); err != nil {
				return err
			}
		}
		if b.opt.throughput > 0 {
			if err := b.throughputRound(ctx, r); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b *bench) load(c int) load {
	return load{clients: c, streams: max(c, b.opt.minStreams), ramp: b.opt.ramp, timeout: b.opt.timeout, expect: b.opt.tokens}
}

func (b *bench) roundAt(ctx context.Context, r, c int) error {
	mock, mockURL, err := b.startMock(ctx, b.opt.tokens)
	if err != nil {
		return err
	}
	defer b.procs.stop(mock, 5*time.Second)
	completions := "/v1/chat/completions"
	if err := b.measure(ctx, runRow{Round: r, C: c, Target: "direct"},
		target{url: mockURL + completions, pid: mock.pid(), body: mockBody}, b.load(c)); err != nil {
		return err
	}

	relay, relayURL, err := b.startRelay(ctx, mockURL)
	if err != nil {
		return err
	}
	err = b.measure(ctx, runRow{Round: r, C: c, Target: "relay"},
		target{url: relayURL + completions, pid: relay.pid(), body: mockBody}, b.load(c))
	b.procs.stop(relay, 5*time.Second)
	if err != nil {
		return err
	}

	if err := b.measureChatd(ctx, runRow{Round: r, C: c, Target: "chatd"}, mockURL, chatBody, b.load(c)); err != nil {
		return err
	}
	if b.opt.traced {
		if err := b.measureChatd(ctx, runRow{Round: r, C: c, Target: "chatd+otel"}, mockURL, chatBody, b.load(c),
			"OTEL_EXPORTER_OTLP_ENDPOINT="+mockURL); err != nil {
			return err
		}
	}
	for _, h := range b.opt.history {
		sessions := b.history[h]
		l := b.load(min(c, len(sessions)))
		row := runRow{Round: r, C: c, Target: "chatd", History: h}
		if err := b.measureChatd(ctx, row, mockURL, sessionBody(sessions), l); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) measureChatd(ctx context.Context, row runRow, mockURL string, body func(int, int) []byte, l load, env ...string) error {
	c, url, err := b.startChatd(ctx, mockURL+"/v1", env...)
	if err != nil {
		return err
	}
	err = b.measure(ctx, row, target{url: url + "/v1/chat/stream", pid: c.pid(), body: body}, l)
	b.procs.stop(c, 10*time.Second)
	if err != nil {
		return fmt.Errorf("%w; chatd's log (above info) ends with:\n%s", err, c.lines)
	}
	return nil
}

// throughputRound sends -throughput chats at once, of -throughput-tokens tokens each, through the relay
// and through chatd, and counts the chats completed per second.
func (b *bench) throughputRound(ctx context.Context, r int) error {
	mock, mockURL, err := b.startMock(ctx, b.opt.tpTokens)
	if err != nil {
		return err
	}
	defer b.procs.stop(mock, 5*time.Second)
	n := b.opt.throughput
	l := load{clients: n, streams: n, timeout: b.opt.timeout, expect: b.opt.tpTokens}
	relay, relayURL, err := b.startRelay(ctx, mockURL)
	if err != nil {
		return err
	}
	err = b.measure(ctx, runRow{Round: r, C: n, Target: "relay", Throughput: true},
		target{url: relayURL + "/v1/chat/completions", pid: relay.pid(), body: mockBody}, l)
	b.procs.stop(relay, 5*time.Second)
	if err != nil {
		return err
	}
	return b.measureChatd(ctx, runRow{Round: r, C: n, Target: "chatd", Throughput: true}, mockURL, chatBody, l)
}

// runBench runs the whole benchmark and returns its report.
func runBench(ctx context.Context, opt options, progress io.Writer) (rep *report, err error) {
	b := &bench{opt: opt, procs: &children{}, progress: progress, rep: newReport(opt)}
	defer func() {
		if b.pgName != "" {
			if err := dropDatabase(opt.postgres, b.pgName); err != nil {
				b.logf("drop the database %s: %v", b.pgName, err)
			}
		}
	}()
	defer b.procs.stopAll()
	defer func() {
		if b.work != "" && !opt.keep {
			os.RemoveAll(b.work)
		} else if b.work != "" {
			b.logf("kept %s", b.work)
		}
	}()
	if err := b.setup(ctx); err != nil {
		return nil, err
	}
	if len(opt.history) > 0 {
		if err := b.buildHistory(ctx); err != nil {
			return nil, err
		}
		for _, h := range opt.history {
			b.rep.HistorySessions = append(b.rep.HistorySessions, historySessions{Records: h, Sessions: len(b.history[h])})
		}
	}
	if err := b.rounds(ctx); err != nil {
		return b.rep, err
	}
	b.rep.finish()
	return b.rep, nil
}

// fsyncCost is the median time, in µs, of writing 4 KiB to a file in dir and fsyncing it, of n tries:
// what one durable commit costs at least on that disk.
func fsyncCost(dir string, n int) (float64, error) {
	f, err := os.CreateTemp(dir, "fsync-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	page := make([]byte, 4096)
	var took []float64
	for i := range n {
		t0 := time.Now()
		if _, err := f.WriteAt(page, int64(i)*4096); err != nil {
			return 0, err
		}
		if err := f.Sync(); err != nil {
			return 0, err
		}
		took = append(took, float64(time.Since(t0).Microseconds()))
	}
	return median(took), nil
}

// loadAverage is /proc/loadavg's first three figures.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func writeJSON(w io.Writer, rep *report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
