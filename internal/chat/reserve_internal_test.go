package chat

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"chatd/internal/runevent"
	"chatd/internal/store"
)

// gatedLog is a store whose event writes wait for a gate, or fail while it is shut: the rest of the
// Store is never called by the event log.
type gatedLog struct {
	store.Store
	open chan struct{}
	mu   sync.Mutex
	fail bool
	// reserved is the highest reservation written per run.
	reserved map[string]int64
	events   map[string]int64 // the last Seq written per run
	// wrote, when not nil, is signalled (coalesced) after each write that succeeded.
	wrote chan struct{}
}

func (g *gatedLog) AppendEvents(ctx context.Context, events []store.Event, reserved []store.Reservation) error {
	<-g.open
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fail {
		return errors.New("disk full")
	}
	for _, e := range events {
		g.events[e.RunID] = max(g.events[e.RunID], e.Seq)
	}
	for _, r := range reserved {
		g.reserved[r.RunID] = max(g.reserved[r.RunID], r.Seq)
	}
	if g.wrote != nil {
		poke(g.wrote)
	}
	return nil
}

// written returns the last Seq the store holds for the run.
func (g *gatedLog) written(runID string) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.events[runID]
}

// TestReadersSeeOnlyReservedEvents: a reader never sees an event whose Seq the store has not reserved
// for the run — so that after a crash no id a client saw can name another event — and the event log
// raises the reservation, ahead of the run, as it writes the events.
func TestReadersSeeOnlyReservedEvents(t *testing.T) {
	st := &gatedLog{open: make(chan struct{}), reserved: map[string]int64{}, events: map[string]int64{},
		wrote: make(chan struct{}, 1)}
	st.fail = true
	close(st.open) // every write fails: nothing is stored, nothing more is reserved
	l := newEventLog(st, time.Millisecond, slog.New(slog.DiscardHandler))
	defer l.close()
	r := newRun("run", "u", &plan{agentNm: "default", model: "m"}, l)
	if events, _, _ := r.Events(0); len(events) != 0 {
		t.Fatalf("a run with nothing reserved shows %d events", len(events))
	}
	r.granted(reserveAhead) // what CreateRun stored
	const n = 3 * reserveAhead
	for range n {
		r.emit(runevent.TypeTextDelta, runevent.EncodeText("x"))
	}
	if events, _, _ := r.Events(0); len(events) != reserveAhead || events[len(events)-1].Seq != reserveAhead {
		t.Fatalf("the store reserved %d and holds nothing; a reader sees %d events", reserveAhead, len(events))
	}
	if got := r.lastSeq(); got != reserveAhead {
		t.Errorf("lastSeq = %d, want the last visible, %d", got, reserveAhead)
	}

	// The store works again: the log writes the events and reserves past them; every event shows
	// (and, stored, leaves the run's memory).
	wake, stop := r.Watch()
	defer stop()
	st.mu.Lock()
	st.fail = false
	st.mu.Unlock()
	for r.lastSeq() != n {
		<-wake
	}
	// Every event shows once the first write reserved past them, which may be a batch the log took
	// while the last events were still being emitted: the next batch writes those.
	for st.written("run") != n {
		<-st.wrote
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.events["run"] != n || st.reserved["run"] < n+reserveAhead/2 {
		t.Errorf("the store holds events up to %d and a reservation of %d; want %d and at least %d",
			st.events["run"], st.reserved["run"], n, n+reserveAhead/2)
	}
}

// TestReservationKeepsAhead: a run that streams fast finds its events reserved before it reaches them:
// its readers never wait for the disk once the log has caught up. Every Seq a reader saw was reserved
// in the store before the reader saw it.
func TestReservationKeepsAhead(t *testing.T) {
	st := &gatedLog{open: make(chan struct{}), reserved: map[string]int64{}, events: map[string]int64{}}
	close(st.open)
	l := newEventLog(st, time.Millisecond, slog.New(slog.DiscardHandler))
	defer l.close()
	r := newRun("run", "u", &plan{agentNm: "default", model: "m"}, l)
	r.granted(reserveAhead)
	wake, stop := r.Watch()
	defer stop()
	const n = 20 * reserveAhead
	var seen int64
	for i := range n {
		r.emit(runevent.TypeTextDelta, runevent.EncodeText("x"))
		if i%97 != 0 {
			continue
		}
		events, _, inStore := r.Events(seen)
		if inStore { // stored meanwhile, and dropped from memory: the store reserved them
			seen = r.lastSeq()
			continue
		}
		if len(events) > 0 {
			seen = events[len(events)-1].Seq
			st.mu.Lock()
			reserved := max(st.reserved["run"], reserveAhead)
			st.mu.Unlock()
			if seen > reserved {
				t.Fatalf("a reader saw Seq %d; the store reserved %d", seen, reserved)
			}
		}
	}
	for seen < n {
		events, _, inStore := r.Events(seen)
		if inStore { // stored meanwhile, and dropped from memory: the store reserved them
			seen = r.lastSeq()
			continue
		}
		if len(events) == 0 {
			<-wake
			continue
		}
		seen = events[len(events)-1].Seq
	}
}

// TestRunWithAGap: a run recovered with a gap in its Seqs (a queued run whose new events go after its
// reservation) reads by Seq on both sides of the gap.
func TestRunWithAGap(t *testing.T) {
	r := newRun("run", "u", &plan{agentNm: "default", model: "m"}, nil)
	r.events = []Event{{Seq: 1, Type: runevent.TypeRunStart}, {Seq: 2, Type: runevent.TypeStatus}}
	r.persisted, r.next = 2, 300
	r.emit(runevent.TypeStatus, runevent.EncodeStatus("chatd restarted"))
	r.emit(runevent.TypeTextDelta, runevent.EncodeText("hi"))
	for _, tc := range []struct {
		after int64
		want  []int64
	}{{0, []int64{1, 2, 300, 301}}, {1, []int64{2, 300, 301}}, {2, []int64{300, 301}}, {150, []int64{300, 301}},
		{300, []int64{301}}, {301, nil}, {999, nil}} {
		events, _, _ := r.Events(tc.after)
		var got []int64
		for _, e := range events {
			got = append(got, e.Seq)
		}
		if len(got) != len(tc.want) || (len(got) > 0 && (got[0] != tc.want[0] || got[len(got)-1] != tc.want[len(tc.want)-1])) {
			t.Errorf("Events(%d) = %v, want %v", tc.after, got, tc.want)
		}
	}
}
