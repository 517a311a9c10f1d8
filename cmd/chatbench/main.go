// Command chatbench measures what chatd adds to a streamed chat, against a bare relay, in one run.
//
// It starts chatd on a fresh SQLite file (synchronous=FULL, as chatd always runs), a mock OpenAI
// upstream that stamps every token with its send time, and a bare relay (httputil.ReverseProxy
// flushing every write); then, in interleaved rounds, drives the mock directly, the relay and chatd
// with N concurrent SSE clients at each -c, on new sessions and on continuing sessions of -history
// records. It prints time to first token, per-token delay, stalls, errors and RSS per stream, what chatd
// adds over the mock against what the relay adds, and issue 18's goals. See docs/bench.md.
//
// The mock and the relay are this program run again with the hidden "-serve mock" or "-serve relay",
// each in a process of its own, so that every RSS figure is one server's own. chatbench imports nothing
// of chatd: it measures the binary from the outside, as a client would.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-serve" {
		os.Exit(serveMain(os.Args[2:]))
	}
	os.Exit(benchMain(os.Args[1:]))
}

func benchMain(args []string) int {
	opt, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chatbench:", err)
		return 2
	}
	if opt.reprint != "" {
		return reprint(opt.reprint)
	}
	raiseFileLimit(os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rep, err := runBench(ctx, opt, os.Stderr)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "chatbench: interrupted; every process it started is stopped")
			return 130
		}
		fmt.Fprintln(os.Stderr, "chatbench:", err)
		return 1
	}
	table := io.Writer(os.Stdout)
	if opt.json {
		table = os.Stderr // the JSON alone on stdout, for a pipe or a file
		if err := writeJSON(os.Stdout, rep); err != nil {
			fmt.Fprintln(os.Stderr, "chatbench:", err)
			return 1
		}
	}
	rep.printTable(table)
	return 0
}

func parseFlags(args []string) (options, error) {
	var opt options
	fs := flag.NewFlagSet("chatbench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: go run ./cmd/chatbench [flags]     (or script/bench [flags])

Starts chatd on a fresh SQLite file (or a PostgreSQL database, -postgres), a mock OpenAI upstream and a bare relay, and measures all three
with concurrent SSE clients in interleaved rounds. The table goes to stdout; progress to stderr.

`)
		fs.PrintDefaults()
	}
	conc := fs.String("c", "1,50,200", "concurrent clients, a comma-separated list")
	history := fs.String("history", "10,1000,10000", "records of each continuing session, a comma-separated list (\"\" for none)")
	fs.StringVar(&opt.chatd, "chatd", "", "the chatd binary (default: go build ./cmd/chatd of this repository)")
	fs.IntVar(&opt.rounds, "rounds", 3, "rounds; each runs every target at every c")
	fs.IntVar(&opt.tokens, "tokens", 32, "tokens (content chunks) the mock streams per answer")
	fs.DurationVar(&opt.interval, "interval", 20*time.Millisecond, "time between the mock's tokens")
	fs.DurationVar(&opt.ramp, "ramp", 300*time.Millisecond, "the c clients start spread over this (keep it below tokens × interval, so they overlap)")
	fs.IntVar(&opt.minStreams, "min-streams", 10, "streams per run at least, the clients taking turns (so c=1 has more than one sample)")
	fs.IntVar(&opt.historyRows, "history-rows", 200000, "records per history size at most: sessions of h records number min(max c, this/h), and a run uses as many clients")
	fs.IntVar(&opt.throughput, "throughput", 0, "also send this many chats at once through chatd and the relay, and count chats completed per second (0: no)")
	fs.IntVar(&opt.tpTokens, "throughput-tokens", 20, "tokens per answer in the throughput runs")
	fs.DurationVar(&opt.timeout, "timeout", 2*time.Minute, "per stream, from request to the end of its body")
	fs.StringVar(&opt.dir, "dir", os.TempDir(), "where the temporary folder (chatd's database) goes: the disk measured")
	fs.StringVar(&opt.postgres, "postgres", "", "run chatd on PostgreSQL: a postgres:// URL of a server where chatbench may create (and at the end drop) a database of its own; new sessions only (-history \"\")")
	fs.BoolVar(&opt.keep, "keep", false, "keep the temporary folder (the SQLite database; a -postgres database is dropped all the same)")
	fs.BoolVar(&opt.json, "json", false, "print the results as JSON on stdout (the table then goes to stderr)")
	fs.StringVar(&opt.reprint, "report", "", "run nothing: print the table of a report saved with -json in this file")
	fs.BoolVar(&opt.traced, "traced", false, "also measure chatd on new sessions with tracing on (target chatd+otel: OTLP/HTTP to the mock, which drops the spans)")
	if err := fs.Parse(args); err != nil {
		return opt, err
	}
	if fs.NArg() > 0 {
		return opt, fmt.Errorf("unexpected argument %q; see chatbench -h", fs.Arg(0))
	}
	var err error
	if opt.conc, err = intList(*conc); err != nil || len(opt.conc) == 0 {
		return opt, fmt.Errorf("-c %q: want positive numbers such as 1,50,200", *conc)
	}
	if opt.history, err = intList(*history); err != nil {
		return opt, fmt.Errorf("-history %q: want positive numbers such as 10,1000,10000", *history)
	}
	if opt.postgres != "" && len(opt.history) > 0 {
		return opt, errors.New("-postgres measures new sessions only: add -history ''")
	}
	if opt.rounds < 1 || opt.tokens < 1 || opt.interval <= 0 || opt.ramp < 0 || opt.minStreams < 0 ||
		opt.historyRows < 1 || opt.throughput < 0 || opt.tpTokens < 1 || opt.timeout <= 0 {
		return opt, errors.New("-rounds, -tokens, -interval, -history-rows, -throughput-tokens and -timeout must be positive; -ramp, -min-streams and -throughput not negative")
	}
	return opt, nil
}

// reprint prints the table of a report that -json saved.
func reprint(file string) int {
	b, err := os.ReadFile(file)
	if err == nil {
		var rep report
		if err = json.Unmarshal(b, &rep); err == nil {
			rep.derive()
			rep.printTable(os.Stdout)
			return 0
		}
	}
	fmt.Fprintf(os.Stderr, "chatbench: -report: %v\n", err)
	return 1
}

func intList(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// raiseFileLimit lifts the soft limit on open files to the hard one: at c=200 chatbench holds 200 client
// connections, and at -throughput 1000 a thousand. The servers it starts inherit the limit.
func raiseFileLimit(w io.Writer) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Fprintln(w, "chatbench: read the open-file limit:", err)
		return
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			fmt.Fprintln(w, "chatbench: raise the open-file limit:", err)
		}
	}
}
