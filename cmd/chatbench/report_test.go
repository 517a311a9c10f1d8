package main

import (
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDerive(t *testing.T) {
	row := func(round int, target string, history int, ttft50, ttft99, delay50, rss float64) runRow {
		return runRow{Round: round, C: 50, Target: target, History: history, measured: measured{Clients: 50,
			Streams: 50, OK: 50, TTFTp50: ttft50, TTFTp99: ttft99, Delayp50: delay50, RSSPerKB: rss}}
	}
	rep := &report{Runs: []runRow{
		row(1, "direct", 0, 400, 900, 40, 30), row(1, "relay", 0, 700, 2000, 90, 70), row(1, "chatd", 0, 3000, 9000, 200, 140),
		row(2, "direct", 0, 300, 50000, 50, 30), row(2, "relay", 0, 800, 1500, 100, 72), row(2, "chatd", 0, 2000, 8000, 150, 150),
		row(3, "direct", 0, 500, 1000, 60, 32), row(3, "relay", 0, 900, 3000, 110, 68), row(3, "chatd", 0, 4000, 7000, 100, 130),
		row(1, "chatd", 1000, 9000, 20000, 300, 1500), row(2, "chatd", 1000, 11000, 30000, 250, 1600),
	}}
	rep.Runs[1].OK, rep.Runs[1].Errors = 49, map[string]int{"eof": 1}
	rep.derive()

	if got := len(rep.Summary); got != 4 {
		t.Fatalf("%d summary rows, want 4 (direct, relay, chatd, chatd h=1000)", got)
	}
	relay := rep.Summary[1]
	want := summaryRow{C: 50, Target: "relay", Clients: 50, Streams: 150, Failed: 1, Errors: map[string]int{"eof": 1},
		TTFTp50: 800, TTFTp99: 2000, Delayp50: 100, RSSPerKB: 70}
	if diff := cmp.Diff(want, relay); diff != "" {
		t.Errorf("relay summary (-want +got):\n%s", diff)
	}
	// Medians over the rounds minus direct's: the 50 ms p99 of round 2's direct run does not decide it.
	wantAdded := []addedRow{
		{C: 50, Target: "chatd", TTFTp50: 3000 - 400, RelayTTFTp50: 800 - 400, TTFTp99: 8000 - 1000, RelayTTFTp99: 2000 - 1000,
			Delayp50: 150 - 50, RelayDelayp50: 100 - 50, RSSPerKB: 140, RelayRSSPerKB: 70},
		{C: 50, Target: "chatd h=1000", TTFTp50: 10000 - 400, RelayTTFTp50: 800 - 400, TTFTp99: 25000 - 1000, RelayTTFTp99: 2000 - 1000,
			Delayp50: 275 - 50, RelayDelayp50: 100 - 50, RSSPerKB: 1550, RelayRSSPerKB: 70},
	}
	if diff := cmp.Diff(wantAdded, rep.Added); diff != "" {
		t.Errorf("added (-want +got):\n%s", diff)
	}
}

func TestRedactArgs(t *testing.T) {
	for _, tc := range []struct{ args, want []string }{
		{[]string{"chatbench", "-postgres", "postgres://u:s3cret@h/db", "-c", "1"}, []string{"chatbench", "-postgres", "postgres://u:xxxxx@h/db", "-c", "1"}},
		{[]string{"chatbench", "--postgres=postgres://u:s3cret@h/db"}, []string{"chatbench", "--postgres=postgres://u:xxxxx@h/db"}},
		{[]string{"chatbench", "-postgres=postgres://u@h/db"}, []string{"chatbench", "-postgres=postgres://u@h/db"}},
		{[]string{"chatbench", "-postgres", "postgres://u@h/db?password=s3cret&sslmode=disable"}, []string{"chatbench", "-postgres", "postgres://u@h/db?password=xxxxx&sslmode=disable"}},
		{[]string{"chatbench", "-postgres=postgresql://u@h/db?sslmode=disable&password=s3cret"}, []string{"chatbench", "-postgres=postgresql://u@h/db?password=xxxxx&sslmode=disable"}},
	} {
		got := redactArgs(tc.args)
		if want := strings.Join(tc.want, " "); got != want || strings.Contains(got, "s3cret") {
			t.Errorf("redactArgs(%q) = %q, want %q", tc.args, got, want)
		}
	}
}

// TestCreateDatabaseURL: chatd's URL names the run's database, whatever parameter the admin URL had.
func TestCreateDatabaseURL(t *testing.T) {
	u, err := url.Parse("postgres://postgres@127.0.0.1:5432/postgres?dbname=postgres&database=postgres&sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	got := runDatabaseURL(u, "chatbench_1")
	if want := "postgres://postgres@127.0.0.1:5432/chatbench_1?sslmode=disable"; got != want {
		t.Errorf("runDatabaseURL = %s, want %s", got, want)
	}
}
