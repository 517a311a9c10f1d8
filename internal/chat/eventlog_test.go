package chat

import (
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"chatd/internal/metrics"
	"chatd/internal/runevent"
	"chatd/internal/store"
	"chatd/internal/store/sqlite"
)

// BenchmarkEventLog measures the events per second the event log writes to a SQLite file (WAL,
// synchronous=FULL): b.N text deltas emitted by 16 concurrent runs, timed until the last is stored.
func BenchmarkEventLog(b *testing.B) {
	db, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "chatd.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	const runs = 16
	var rs []*Run
	for range runs {
		sess := &store.Session{Agent: "default"}
		if err := db.CreateSession(b.Context(), "u", sess); err != nil {
			b.Fatal(err)
		}
		r := &store.Run{SessionID: sess.ID}
		if err := db.CreateRun(b.Context(), "u", r, nil); err != nil {
			b.Fatal(err)
		}
		rs = append(rs, newRun(r.ID, "u", &plan{agentNm: "default", model: "m", session: sess}, nil))
	}
	l := newEventLog(db, DefaultFlushInterval, slog.New(slog.DiscardHandler))
	defer l.close()
	for _, r := range rs {
		r.log = l
	}
	data := runevent.EncodeText(" token")
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	done := make(chan struct{})
	per := b.N/runs + 1
	for _, r := range rs {
		go func() {
			for range per {
				r.emit(runevent.TypeTextDelta, data)
			}
			done <- struct{}{}
		}()
	}
	for range rs {
		<-done
	}
	for _, r := range rs {
		r.mu.Lock()
		n := r.next - 1
		r.mu.Unlock()
		waitPersisted(b, r, n)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(per*runs)/elapsed.Seconds(), "events/s")
	if n, err := db.Run(b.Context(), "u", rs[0].ID); err != nil || n.LastEventSeq != int64(per) {
		b.Fatalf("stored %v events of run 0, want %d (%v)", n, per, err)
	}
}

// TestEventLogWritesEveryEventOnce: events emitted while batches are written are all stored, once, in
// order.
func TestEventLogWritesEveryEventOnce(t *testing.T) {
	db, sess, sr := storedRun(t, 0)
	l := newEventLog(db, time.Millisecond, slog.New(slog.DiscardHandler))
	m := metrics.New()
	l.metrics = m
	r := newRun(sr.ID, "u", &plan{agentNm: "default", model: "m", session: sess}, l)
	const n = 3000
	for i := range n {
		r.emit(runevent.TypeTextDelta, runevent.EncodeText(strconv.Itoa(i)))
		if i%500 == 499 {
			waitPersisted(t, r, int64(i+1)) // batches are written mid-stream, between emits
		}
	}
	l.close()
	events, err := db.Events(t.Context(), "u", sr.ID, 0, 2*n)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != n {
		t.Fatalf("stored %d events, want %d", len(events), n)
	}
	for i, e := range events {
		if e.Seq != int64(i+1) || string(e.Data) != string(runevent.EncodeText(strconv.Itoa(i))) {
			t.Fatalf("event %d: seq %d data %s", i, e.Seq, e.Data)
		}
	}
	// The metrics saw every batch: their sizes add up to the events, and each write was timed.
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	hist := map[string]*dto.Histogram{}
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "chatd_eventlog_") {
			hist[f.GetName()] = f.GetMetric()[0].GetHistogram()
		}
	}
	sizes, writes := hist["chatd_eventlog_batch_events"], hist["chatd_eventlog_write_duration_seconds"]
	if sizes.GetSampleSum() != n || sizes.GetSampleCount() < 6 || writes.GetSampleCount() != sizes.GetSampleCount() {
		t.Errorf("event-log metrics: %d batches of %v events, %d writes timed; want %d events in at least 6 batches, each timed",
			sizes.GetSampleCount(), sizes.GetSampleSum(), writes.GetSampleCount(), n)
	}
}

// TestFollowerReadsDroppedEventsFromStore: once stored, a run's events leave its memory, and a reader
// that starts before the events the run keeps — from the start, or from a Last-Event-ID in the middle —
// reads the dropped ones from the store, then the kept ones from the run, every event once and in order.
func TestFollowerReadsDroppedEventsFromStore(t *testing.T) {
	db, sess, sr := storedRun(t, 10000)
	// The log writes when hurried only: what is emitted after the hurry stays in memory.
	l := newEventLog(db, time.Hour, slog.New(slog.DiscardHandler))
	defer l.close()
	r := newRun(sr.ID, "u", &plan{agentNm: "default", model: "m", session: sess}, l)
	r.granted(sr.ReservedSeq)
	const stored, kept = 1500, 3 // more than a page of the store
	for i := range stored {
		r.emit(runevent.TypeTextDelta, runevent.EncodeText(strconv.Itoa(i)))
	}
	l.hurry()
	waitPersisted(t, r, stored)
	r.mu.Lock()
	left, trimmed := len(r.events), r.trimmed
	r.mu.Unlock()
	if left != 0 || trimmed != stored {
		t.Fatalf("after the log stored every event, the run keeps %d (dropped up to %d); want 0 (dropped up to %d)", left, trimmed, stored)
	}
	for i := stored; i < stored+kept; i++ {
		r.emit(runevent.TypeTextDelta, runevent.EncodeText(strconv.Itoa(i)))
	}
	svc := &Service{opts: Options{Store: db}}
	for _, after := range []int64{0, 700, stored - 1, stored, stored + 1} {
		f := &Follower{s: svc, user: "u", id: r.ID, run: r, after: after}
		want := after + 1
		for {
			events, end, err := f.Read(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if end {
				t.Fatalf("after %d: the log ended at %d", after, want)
			}
			if len(events) == 0 {
				break
			}
			for _, e := range events {
				if e.Seq != want || string(e.Data) != string(runevent.EncodeText(strconv.Itoa(int(want-1)))) {
					t.Fatalf("after %d: event seq %d data %s, want seq %d", after, e.Seq, e.Data, want)
				}
				want++
			}
		}
		if want != stored+kept+1 {
			t.Errorf("after %d: read up to %d, want %d", after, want-1, stored+kept)
		}
	}
	if got := r.lastSeq(); got != stored+kept {
		t.Errorf("lastSeq %d, want %d", got, stored+kept)
	}
	if _, _, inStore := r.Events(stored); inStore {
		t.Error("the events emitted after the last batch left memory before they were stored")
	}
}

// TestStoredEventsStayForReadersBehind: a stored event leaves the run's memory only once every reader
// following the run was given it.
func TestStoredEventsStayForReadersBehind(t *testing.T) {
	db, sess, sr := storedRun(t, 1000)
	l := newEventLog(db, time.Hour, slog.New(slog.DiscardHandler)) // it writes when hurried
	defer l.close()
	r := newRun(sr.ID, "u", &plan{agentNm: "default", model: "m", session: sess}, l)
	r.granted(sr.ReservedSeq)
	c, stop := r.watch(0)
	defer stop()
	emitStored := func(n int) {
		t.Helper()
		for range n {
			r.emit(runevent.TypeTextDelta, runevent.EncodeText("x"))
		}
		r.mu.Lock()
		last := r.next - 1
		r.mu.Unlock()
		l.hurry()
		waitPersisted(t, r, last)
	}
	kept := func() (int, int64) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.events), r.trimmed
	}
	emitStored(10)
	if n, trimmed := kept(); n != 10 || trimmed != 0 {
		t.Fatalf("stored, and not read yet: the run keeps %d events (dropped up to %d); want all 10", n, trimmed)
	}
	if events, _, _ := r.eventsFor(c, 4); len(events) != 6 {
		t.Fatalf("the reader got %d events after 4, want 6", len(events))
	}
	emitStored(1)
	if n, trimmed := kept(); n != 1 || trimmed != 10 {
		t.Fatalf("the reader had 10 and 11 is stored: the run keeps %d events (dropped up to %d); want 1 (up to 10)", n, trimmed)
	}
}

// BenchmarkEmitToReader measures the latency an event takes from the run to a reader following it — the
// per-token latency of a stream — with the durable event log on and off. Each op is one round trip:
// emit, the reader wakes and reads it, and answers. Events are paced at one per 50µs (20,000 tokens a
// second, hundreds of concurrent streams' worth), and the metric latency-ns/token excludes the pacing;
// ns/op includes it.
func BenchmarkEmitToReader(b *testing.B) {
	for _, on := range []bool{true, false} {
		name := "log=off"
		if on {
			name = "log=on"
		}
		b.Run(name, func(b *testing.B) {
			db, sess, sr := storedRun(b, reserveAhead)
			var l *eventLog
			if on {
				l = newEventLog(db, DefaultFlushInterval, slog.New(slog.DiscardHandler))
				defer l.close()
			}
			r := newRun(sr.ID, "u", &plan{agentNm: "default", model: "m", session: sess}, l)
			r.granted(reserveAhead) // as Service.begin does
			wake, stop := r.Watch()
			defer stop()
			ack := make(chan struct{})
			go func() {
				var after int64
				for after < int64(b.N) {
					<-wake
					events, _, _ := r.Events(after)
					if len(events) > 0 {
						after = events[len(events)-1].Seq
						ack <- struct{}{}
					}
				}
			}()
			data := runevent.EncodeText(" token")
			b.ReportAllocs()
			b.ResetTimer()
			var total time.Duration
			for range b.N {
				start := time.Now()
				r.emit(runevent.TypeTextDelta, data)
				<-ack
				total += time.Since(start)
				for time.Since(start) < 50*time.Microsecond {
				}
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "latency-ns/token")
		})
	}
}

// waitPersisted waits until the event log has written the run's first n events: it does so on its own
// goroutine, at its interval.
func waitPersisted(tb testing.TB, r *Run, n int64) {
	tb.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute) // a safety net
	for {
		r.mu.Lock()
		done := r.persisted >= n
		r.mu.Unlock()
		if done {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			tb.Fatalf("the event log did not write %d events within a minute", n)
		}
	}
}

// storedRun opens a SQLite file closed with tb, and stores a session of user "u" with a run in it
// holding reserved event numbers.
func storedRun(tb testing.TB, reserved int64) (*sqlite.DB, *store.Session, *store.Run) {
	tb.Helper()
	db, err := sqlite.Open(tb.Context(), filepath.Join(tb.TempDir(), "chatd.db"), sqlite.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	sess := &store.Session{Agent: "default"}
	if err := db.CreateSession(tb.Context(), "u", sess); err != nil {
		tb.Fatal(err)
	}
	sr := &store.Run{SessionID: sess.ID, ReservedSeq: reserved}
	if err := db.CreateRun(tb.Context(), "u", sr, nil); err != nil {
		tb.Fatal(err)
	}
	return db, sess, sr
}
