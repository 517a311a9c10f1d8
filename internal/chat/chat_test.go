package chat

import (
	"strings"
	"sync"
	"testing"

	"chatd/internal/runevent"
)

func TestTitle(t *testing.T) {
	for in, want := range map[string]string{
		"What time is it?":                   "What time is it?",
		"  two\n lines ":                     "two",
		"many    spaces\there":               "many spaces here",
		strings.Repeat("word ", 20):          "word word word word word word word word word word word word…",
		strings.Repeat("x", 80):              strings.Repeat("x", 60) + "…",
		"ünïcödé " + strings.Repeat("é", 70): "ünïcödé " + strings.Repeat("é", 52) + "…",
	} {
		if got := title(in); got != want {
			t.Errorf("title(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRunLogReaders: readers at their own pace see every event once, in order, and learn when the run
// has ended; the writer never waits for them.
func TestRunLogReaders(t *testing.T) {
	r := newRun("run", "local", &plan{agentNm: "default", model: "m"}, nil)
	const n = 5000
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			wake, stop := r.Watch()
			defer stop()
			var next int64 = 1
			for {
				events, ended, _ := r.Events(next - 1)
				for _, ev := range events {
					if ev.Seq != next {
						t.Errorf("got seq %d, want %d", ev.Seq, next)
						return
					}
					next++
				}
				if ended && len(events) == 0 {
					if next != n+1 {
						t.Errorf("reader ended after %d events, want %d", next-1, n)
					}
					return
				}
				if len(events) == 0 {
					<-wake
				}
			}
		})
	}
	for i := range n {
		r.emit("text_delta", runevent.EncodeText(string(rune('a'+i%26))))
	}
	r.end(nil, false, Outcome{Status: "completed"})
	wg.Wait()
	if events, ended, _ := r.Events(n); len(events) != 0 || !ended {
		t.Errorf("after the end: %d events, ended %v", len(events), ended)
	}
}

// TestEndWakesWatchers: a reader waiting for more events learns at once that the run has ended.
func TestEndWakesWatchers(t *testing.T) {
	r := newRun("run", "local", &plan{agentNm: "default", model: "m"}, nil)
	wake, stop := r.Watch()
	defer stop()
	r.emit("done", []byte(`{"status":"completed"}`))
	<-wake
	r.end(nil, false, Outcome{Status: "completed"})
	select {
	case <-wake:
	default:
		t.Fatal("end did not wake the watcher")
	}
}
