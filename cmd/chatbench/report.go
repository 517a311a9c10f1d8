package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// report is everything one benchmark run measured; -json prints it as it is.
type report struct {
	Command          string            `json:"command"`
	Started          time.Time         `json:"started"`
	CPUs             int               `json:"cpus"`
	LoadStart        string            `json:"load_average_start"`
	LoadEnd          string            `json:"load_average_end"`
	Rounds           int               `json:"rounds"`
	Tokens           int               `json:"tokens"`
	IntervalMS       float64           `json:"interval_ms"`
	RampMS           float64           `json:"ramp_ms"`
	MinStreams       int               `json:"min_streams"`
	ThroughputTokens int               `json:"throughput_tokens,omitempty"`
	Dir              string            `json:"dir"`
	DB               string            `json:"db,omitempty"` // "postgres" with -postgres; SQLite otherwise
	FsyncUS          float64           `json:"fsync_us"`     // the median of FsyncSamplesUS
	FsyncSamplesUS   []float64         `json:"fsync_samples_us"`
	HistorySessions  []historySessions `json:"history_sessions,omitempty"`
	Runs             []runRow          `json:"runs"`
	Summary          []summaryRow      `json:"summary"`
	Added            []addedRow        `json:"added"`
	Throughput       *throughputRow    `json:"throughput,omitempty"`
}

type historySessions struct {
	Records  int `json:"records"`
	Sessions int `json:"sessions"`
}

// runRow is one run: one target at one c in one round.
type runRow struct {
	Round      int    `json:"round"`
	C          int    `json:"c"`
	Target     string `json:"target"`            // direct, relay or chatd
	History    int    `json:"history,omitempty"` // records of each session sent to; 0: new sessions
	Throughput bool   `json:"throughput,omitempty"`
	measured
}

func (r runRow) label() string {
	if r.History > 0 {
		return fmt.Sprintf("%s h=%d", r.Target, r.History)
	}
	return r.Target
}

func (r runRow) brief() string {
	s := fmt.Sprintf("%d/%d ok  ttft p50 %s p99 %s  delay p50 %s  rss/stream %.0f KB  %.1fs",
		r.OK, r.Streams, dur(r.TTFTp50), dur(r.TTFTp99), dur(r.Delayp50), r.RSSPerKB, r.WallS)
	if r.Throughput {
		s += fmt.Sprintf("  %.1f chats/s", r.ChatsPerS)
	}
	if r.ErrorSample != "" {
		s += "  first error: " + r.ErrorSample
	}
	return s
}

// summaryRow is one target at one c over the rounds: the median of each round's figure, and the totals
// of streams, failures and stalls.
type summaryRow struct {
	C        int            `json:"c"`
	Target   string         `json:"target"`
	Clients  int            `json:"clients"`
	Streams  int            `json:"streams"`
	Failed   int            `json:"failed"`
	Errors   map[string]int `json:"errors,omitempty"`
	Stalls   int            `json:"stalls"`
	TTFTp50  float64        `json:"ttft_us_p50"`
	TTFTp99  float64        `json:"ttft_us_p99"`
	Delayp50 float64        `json:"delay_us_p50"`
	Delayp99 float64        `json:"delay_us_p99"`
	RSSPerKB float64        `json:"rss_per_stream_kb"`
}

// addedRow is what chatd adds over the mock directly at one c, against what the relay adds.
type addedRow struct {
	C             int     `json:"c"`
	Target        string  `json:"target"`
	TTFTp50       float64 `json:"ttft_us_p50_added"`
	RelayTTFTp50  float64 `json:"relay_ttft_us_p50_added"`
	TTFTp99       float64 `json:"ttft_us_p99_added"`
	RelayTTFTp99  float64 `json:"relay_ttft_us_p99_added"`
	Delayp50      float64 `json:"delay_us_p50_added"`
	RelayDelayp50 float64 `json:"relay_delay_us_p50_added"`
	RSSPerKB      float64 `json:"rss_per_stream_kb"`
	RelayRSSPerKB float64 `json:"relay_rss_per_stream_kb"`
}

type throughputRow struct {
	Clients        int     `json:"clients"`
	Tokens         int     `json:"tokens"`
	ChatdPerS      float64 `json:"chatd_chats_per_s"`
	RelayPerS      float64 `json:"relay_chats_per_s"`
	ChatdFailed    int     `json:"chatd_failed"`
	RelayFailed    int     `json:"relay_failed"`
	ChatdTTFTp50US float64 `json:"chatd_ttft_us_p50"`
}

func newReport(opt options) *report {
	rep := &report{Command: redactArgs(os.Args), Started: time.Now(), CPUs: runtime.NumCPU(),
		LoadStart: loadAverage(), Rounds: opt.rounds, Tokens: opt.tokens, IntervalMS: ms(opt.interval),
		RampMS: ms(opt.ramp), MinStreams: opt.minStreams}
	if opt.throughput > 0 {
		rep.ThroughputTokens = opt.tpTokens
	}
	return rep
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// finish notes the load average at the end and derives the figures.
func (rep *report) finish() {
	rep.LoadEnd = loadAverage()
	rep.derive()
}

// derive computes the summary, the added costs and the throughput from the runs; -report calls it
// again on a saved report, so that a saved run is read with the current arithmetic.
func (rep *report) derive() {
	type key struct {
		c     int
		label string
	}
	byKey := map[key][]runRow{}
	var order []key
	var tpChatd, tpRelay []runRow
	for _, r := range rep.Runs {
		if r.Throughput {
			if r.Target == "chatd" {
				tpChatd = append(tpChatd, r)
			} else {
				tpRelay = append(tpRelay, r)
			}
			continue
		}
		k := key{r.C, r.label()}
		if _, ok := byKey[k]; !ok {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], r)
	}
	rep.Summary, rep.Added = nil, nil
	sums := map[key]summaryRow{}
	for _, k := range order {
		sums[k] = summarizeRounds(k.c, k.label, byKey[k])
		rep.Summary = append(rep.Summary, sums[k])
	}
	for _, k := range order {
		relay, okR := sums[key{k.c, "relay"}]
		direct, okD := sums[key{k.c, "direct"}]
		if strings.HasPrefix(k.label, "chatd") && okR && okD {
			rep.Added = append(rep.Added, added(sums[k], relay, direct))
		}
	}
	if len(tpChatd) > 0 {
		rep.Throughput = &throughputRow{Clients: tpChatd[0].C, Tokens: rep.ThroughputTokens,
			ChatdPerS:      medianOf(tpChatd, func(r runRow) float64 { return r.ChatsPerS }),
			RelayPerS:      medianOf(tpRelay, func(r runRow) float64 { return r.ChatsPerS }),
			ChatdTTFTp50US: medianOf(tpChatd, func(r runRow) float64 { return r.TTFTp50 })}
		for _, r := range tpChatd {
			rep.Throughput.ChatdFailed += r.Streams - r.OK
		}
		for _, r := range tpRelay {
			rep.Throughput.RelayFailed += r.Streams - r.OK
		}
	}
}

func medianOf(rows []runRow, f func(runRow) float64) float64 {
	v := make([]float64, len(rows))
	for i, r := range rows {
		v[i] = f(r)
	}
	return median(v)
}

func summarizeRounds(c int, label string, rows []runRow) summaryRow {
	s := summaryRow{C: c, Target: label, Clients: rows[0].Clients, Errors: map[string]int{},
		TTFTp50:  medianOf(rows, func(r runRow) float64 { return r.TTFTp50 }),
		TTFTp99:  medianOf(rows, func(r runRow) float64 { return r.TTFTp99 }),
		Delayp50: medianOf(rows, func(r runRow) float64 { return r.Delayp50 }),
		Delayp99: medianOf(rows, func(r runRow) float64 { return r.Delayp99 }),
		RSSPerKB: medianOf(rows, func(r runRow) float64 { return r.RSSPerKB })}
	for _, r := range rows {
		s.Streams += r.Streams
		s.Failed += r.Streams - r.OK
		s.Stalls += r.Stalls
		for k, n := range r.Errors {
			s.Errors[k] += n
		}
	}
	if len(s.Errors) == 0 {
		s.Errors = nil
	}
	return s
}

// added is what a chatd target adds over the mock directly at one c, against what the relay adds: the
// summary's medians over the rounds, minus direct's. A difference of medians, not a median of each
// round's differences: with three rounds, one run that other work on the machine slowed (a p99 of
// 150 streams is their second-slowest) would otherwise decide the figure.
func added(sum, relay, direct summaryRow) addedRow {
	return addedRow{C: sum.C, Target: sum.Target,
		TTFTp50: sum.TTFTp50 - direct.TTFTp50, RelayTTFTp50: relay.TTFTp50 - direct.TTFTp50,
		TTFTp99: sum.TTFTp99 - direct.TTFTp99, RelayTTFTp99: relay.TTFTp99 - direct.TTFTp99,
		Delayp50: sum.Delayp50 - direct.Delayp50, RelayDelayp50: relay.Delayp50 - direct.Delayp50,
		RSSPerKB: sum.RSSPerKB, RelayRSSPerKB: relay.RSSPerKB}
}

// dur formats microseconds for a person: µs below a millisecond, ms below a second, else s.
func dur(us float64) string {
	switch a := math.Abs(us); {
	case math.IsNaN(us):
		return "-"
	case a < 1000:
		return fmt.Sprintf("%.0f µs", us)
	case a < 1e6:
		return fmt.Sprintf("%.2f ms", us/1000)
	}
	return fmt.Sprintf("%.2f s", us/1e6)
}

// pad left-aligns a label in a right-aligned table.
func pad(label string) string { return fmt.Sprintf("%-13s", label) }

func ratio(a, b float64) string {
	if b <= 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f×", a/b)
}

// printTable writes the report for a person: the conditions, one row per target and c, what chatd
// adds against what the relay adds, and issue 18's goals.
func (rep *report) printTable(w io.Writer) {
	fmt.Fprintf(w, "chatbench: chatd against a bare relay (httputil.ReverseProxy) and the mock upstream itself\n")
	fmt.Fprintf(w, "  %d rounds; each runs, at every c, the mock directly, the relay, chatd on new sessions", rep.Rounds)
	for _, h := range rep.HistorySessions {
		fmt.Fprintf(w, ", chatd on sessions of %d records (%d of them)", h.Records, h.Sessions)
	}
	fmt.Fprintf(w, "\n  mock: %d tokens %.0f ms apart; streams opened over %.0f ms; at least %d streams per run;"+
		" each server fresh, warmed with one stream\n", rep.Tokens, rep.IntervalMS, rep.RampMS, rep.MinStreams)
	fmt.Fprintf(w, "  one 4 KiB write + fsync on the disk of %s: %s (the median of %d measurements, %s to %s, each the median of 20)\n",
		filepath.Dir(rep.Dir), dur(rep.FsyncUS), len(rep.FsyncSamplesUS), dur(slices.Min(rep.FsyncSamplesUS)), dur(slices.Max(rep.FsyncSamplesUS)))
	if rep.DB == "postgres" {
		fmt.Fprintf(w, "  chatd on PostgreSQL (a database of its own on the -postgres server), not SQLite\n")
	}
	fmt.Fprintf(w, "  %d CPUs; load average %s at the start, %s at the end\n", rep.CPUs, rep.LoadStart, rep.LoadEnd)
	fmt.Fprintf(w, "  medians over the rounds; TTFT: request sent → first token; delay: token received − its stamp;\n"+
		"  stalls: gaps over 2× the stream's median gap (and 1 ms); RSS: (peak − idle) / clients\n\n")

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "c\t"+pad("target")+"\tclients\tstreams\tTTFT p50\tTTFT p99\tdelay p50\tdelay p99\tstalls\tfailed\tRSS/stream\t")
	for _, s := range rep.Summary {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t%.0f KB\t\n", s.C, pad(s.Target), s.Clients, s.Streams,
			dur(s.TTFTp50), dur(s.TTFTp99), dur(s.Delayp50), dur(s.Delayp99), s.Stalls, failed(s), s.RSSPerKB)
	}
	tw.Flush()

	fmt.Fprintf(w, "\nadded over the mock directly (the medians above minus direct's), chatd / relay\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "c\t"+pad("target")+"\tTTFT p50 added\t\tTTFT p99 added\t\tdelay p50 added\t\tRSS/stream\t\t")
	for _, a := range rep.Added {
		fmt.Fprintf(tw, "%d\t%s\t%s / %s\t%s\t%s / %s\t%s\t%s / %s\t%s\t%.0f / %.0f KB\t%s\t\n", a.C, pad(a.Target),
			dur(a.TTFTp50), dur(a.RelayTTFTp50), ratio(a.TTFTp50, a.RelayTTFTp50),
			dur(a.TTFTp99), dur(a.RelayTTFTp99), ratio(a.TTFTp99, a.RelayTTFTp99),
			dur(a.Delayp50), dur(a.RelayDelayp50), ratio(a.Delayp50, a.RelayDelayp50),
			a.RSSPerKB, a.RelayRSSPerKB, ratio(a.RSSPerKB, a.RelayRSSPerKB))
	}
	tw.Flush()
	if t := rep.Throughput; t != nil {
		fmt.Fprintf(w, "\nthroughput, %d chats at once of %d tokens: chatd %.1f chats/s (%d failed, TTFT p50 %s), relay %.1f chats/s (%d failed): %s\n",
			t.Clients, t.Tokens, t.ChatdPerS, t.ChatdFailed, dur(t.ChatdTTFTp50US), t.RelayPerS, t.RelayFailed,
			ratio(t.ChatdPerS, t.RelayPerS))
	}
	rep.printGoals(w)
}

func failed(s summaryRow) string {
	if s.Failed == 0 {
		return "0"
	}
	keys := slices.Sorted(maps.Keys(s.Errors))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s:%d", k, s.Errors[k])
	}
	return fmt.Sprintf("%d (%s)", s.Failed, strings.Join(parts, " "))
}

// relayAdded shows what the relay added; a negative difference (the relay faster than the mock
// directly, at a p99 of a few hundred samples) is noise, and the bound takes it as 0.
func relayAdded(us float64) string {
	if us < 0 {
		return "max(0, " + dur(us) + ")"
	}
	return dur(us)
}

// printGoals checks the figures against issue 18's goals, for chatd on new sessions.
func (rep *report) printGoals(w io.Writer) {
	fmt.Fprintf(w, "\nissue 18's goals (chatd on new sessions; fsync %s):\n", dur(rep.FsyncUS))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	verdict := func(v, bound float64) string {
		if math.IsNaN(v) || math.IsNaN(bound) {
			return "n/a"
		}
		if v <= bound {
			return "met"
		}
		return "missed"
	}
	for _, a := range rep.Added {
		if a.Target != "chatd" {
			continue
		}
		b50 := 1.5*max(0, a.RelayTTFTp50) + rep.FsyncUS
		b99 := 2*max(0, a.RelayTTFTp99) + rep.FsyncUS
		fmt.Fprintf(tw, "  c=%d\tTTFT p50 added\t%s\t≤ 1.5 × %s + fsync = %s\t%s\n", a.C, dur(a.TTFTp50), relayAdded(a.RelayTTFTp50), dur(b50), verdict(a.TTFTp50, b50))
		fmt.Fprintf(tw, "  c=%d\tTTFT p99 added\t%s\t≤ 2 × %s + fsync = %s\t%s\n", a.C, dur(a.TTFTp99), relayAdded(a.RelayTTFTp99), dur(b99), verdict(a.TTFTp99, b99))
		if a.C >= 50 {
			bd := 1.5 * max(0, a.RelayDelayp50)
			fmt.Fprintf(tw, "  c=%d\tdelay p50 added\t%s\t≤ 1.5 × %s = %s\t%s\n", a.C, dur(a.Delayp50), relayAdded(a.RelayDelayp50), dur(bd), verdict(a.Delayp50, bd))
		}
		if a.C >= 200 {
			br := 1.5 * a.RelayRSSPerKB
			fmt.Fprintf(tw, "  c=%d\tRSS per stream\t%.0f KB\t≤ 1.5 × %.0f KB = %.0f KB\t%s\n", a.C, a.RSSPerKB, a.RelayRSSPerKB, br, verdict(a.RSSPerKB, br))
		}
	}
	if t := rep.Throughput; t != nil {
		fmt.Fprintf(tw, "  c=%d\tthroughput\t%.1f chats/s\t≥ %.1f / 2 = %.1f chats/s\t%s\n", t.Clients, t.ChatdPerS, t.RelayPerS, t.RelayPerS/2,
			verdict(t.RelayPerS/2, t.ChatdPerS))
	}
	tw.Flush()
}
