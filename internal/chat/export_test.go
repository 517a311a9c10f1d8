package chat

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
