package chat

import (
	"slices"
	"time"

	"chatd/internal/runevent"
	"chatd/internal/store"
)

// LiveRun returns the id of a run of the user's session that is live in this process (running or
// queued), or "": the tests wait for a run to leave memory with it.
func (s *Service) LiveRun(user, sessionID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.runs {
		if r.SessionID == sessionID && r.user == user {
			return r.ID
		}
	}
	return ""
}

// HeldText reports whether a run of the user's, started before its commit, holds a text delta its
// readers cannot see yet: the tests wait with it for the model's first token to reach the held run.
func (s *Service) HeldText(user string) bool {
	s.mu.Lock()
	var runs []*Run
	for _, r := range s.runs {
		if r.user == user {
			runs = append(runs, r)
		}
	}
	s.mu.Unlock()
	for _, r := range runs {
		r.mu.Lock()
		held := r.held && slices.ContainsFunc(r.events, func(e Event) bool { return e.Type == runevent.TypeTextDelta })
		r.mu.Unlock()
		if held {
			return true
		}
	}
	return false
}

// Kept returns the records the service keeps of the user's session created at created, nil when it
// keeps none: the tests compare them with the store's.
func (s *Service) Kept(user, sessionID string, created time.Time) []store.Record {
	return s.hist.get(user, sessionID, created)
}

// ErrAbandoned is the cause a run whose commit failed stops its model call with.
var ErrAbandoned = errAbandoned
