package chat

import (
	"fmt"
	"testing"
)

// TestInSession follows the live runs of each session through admit, a takeover of a run's id, and
// retire: busyHere answers from them, and nothing is left once every run is retired.
func TestInSession(t *testing.T) {
	s := &Service{runs: map[string]*Run{}, inSession: map[string][]*Run{}}
	var runs []*Run
	for i := range 6 {
		r := &Run{ID: fmt.Sprintf("run-%d", i), SessionID: fmt.Sprintf("s-%d", i%2), user: "alice"}
		if err := s.admit(r); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	if !s.busyHere("alice", "s-0") || !s.busyHere("alice", "s-1") {
		t.Fatal("a session with live runs is not busy")
	}
	if s.busyHere("bob", "s-0") || s.busyHere("alice", "s-2") {
		t.Fatal("another user's session, or one without runs, is busy")
	}
	// The same run id admitted again under a new Run (a takeover): the old one is no longer counted.
	again := &Run{ID: "run-0", SessionID: "s-0", user: "alice"}
	if err := s.admit(again); err != nil {
		t.Fatal(err)
	}
	if n := len(s.inSession["s-0"]); n != 3 {
		t.Fatalf("session s-0 has %d live runs after the takeover, want 3", n)
	}
	s.mu.Lock()
	s.track(again) // the same run again: counted once
	s.mu.Unlock()
	if n := len(s.inSession["s-0"]); n != 3 {
		t.Fatalf("session s-0 has %d live runs after tracking a run twice, want 3", n)
	}
	s.retire(runs[0]) // no longer the live run of its id: nothing changes
	if n := len(s.inSession["s-0"]); n != 3 {
		t.Fatalf("session s-0 has %d live runs after retiring a replaced run, want 3", n)
	}
	for _, r := range append(runs[1:], again) {
		s.retire(r)
	}
	if len(s.runs) != 0 || len(s.inSession) != 0 {
		t.Fatalf("left after every run retired: %d runs, %d sessions", len(s.runs), len(s.inSession))
	}
	if s.busyHere("alice", "s-0") {
		t.Fatal("a session is busy after its runs were retired")
	}
}

// BenchmarkBusyHere asks whether a session is busy with 9,000 runs live in other sessions (a send to a
// continuing session asks it before it starts early).
func BenchmarkBusyHere(b *testing.B) {
	s := &Service{runs: map[string]*Run{}, inSession: map[string][]*Run{}}
	for i := range 9000 {
		if err := s.admit(&Run{ID: fmt.Sprintf("run-%d", i), SessionID: fmt.Sprintf("s-%d", i), user: "alice"}); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if s.busyHere("alice", "idle") {
			b.Fatal("busy")
		}
	}
}
