package httpapi

import (
	"net/http"

	"chatd/internal/chat"
	"strconv"
	"strings"
)

// getRun answers a run's status and summary.
func (s *server) getRun(w http.ResponseWriter, r *http.Request) error {
	run, err := s.Chat.RunInfo(r.Context(), user(r.Context()), r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, runOf(run, s.Chat.LiveAwaiting(user(r.Context()), run.ID)))
}

// runEvents replays a run's events after Last-Event-ID (or ?after=N), then follows it live until done.
func (s *server) runEvents(w http.ResponseWriter, r *http.Request) error {
	after, err := lastEventID(r)
	if err != nil {
		return err
	}
	return s.streamEvents(w, r, r.PathValue("id"), after)
}

// lastEventID reads where a reader resumes: the Last-Event-ID header an EventSource sends when it
// reconnects, else the after parameter; 0 replays from the start.
func lastEventID(r *http.Request) (int64, error) {
	v, name := r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	if v == "" {
		v, name = r.URL.Query().Get("after"), "after"
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, &apiError{status: http.StatusBadRequest, code: "invalid_event_id",
			message: name + " must be the sequence number of an event (a non-negative integer)"}
	}
	return n, nil
}

// cancelRun stops a run: 202 while it stops, 200 when it had already ended (nothing done).
func (s *server) cancelRun(w http.ResponseWriter, r *http.Request) error {
	res, err := s.Chat.Cancel(r.Context(), user(r.Context()), r.PathValue("id"), "")
	if err != nil {
		return err
	}
	status := http.StatusAccepted
	if res.AlreadyEnded {
		status = http.StatusOK
	}
	return writeJSON(w, status, cancelOf(res))
}

// decideRun records a person's decision on a call the run waits for: 200 with the run's status —
// running once nothing it waits for is undecided (it resumed here), else still awaiting_approval.
func (s *server) decideRun(w http.ResponseWriter, r *http.Request) error {
	var in approvalRequestJSON
	if err := s.decode(w, r, &in); err != nil {
		return err
	}
	ctx := r.Context()
	d := chat.Decision{ToolCallID: in.ToolCallID, Decision: in.Decision, Arguments: in.Arguments, Reason: in.Reason, Answers: in.Answers,
		Content: in.Content}
	if caller := principal(ctx).User; caller != user(ctx) {
		d.DecidedBy = caller // an admin, deciding for the run's owner (X-Chatd-As-User)
	}
	res, err := s.Chat.Decide(ctx, user(ctx), r.PathValue("id"), d)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, approvalOf(res))
}

// runDiagnostics answers GET /v1/runs/{id}/diagnostics?call=N: model call N of the run (default: the
// latest), with the run's calls listed.
func (s *server) runDiagnostics(w http.ResponseWriter, r *http.Request) error {
	call := 0
	if v := r.URL.Query().Get("call"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return &apiError{status: http.StatusBadRequest, code: "invalid_call",
				message: "call is the number of one of the run's model calls: 1, 2, 3 …"}
		}
		call = n
	}
	d, err := s.Chat.Diagnostics(r.Context(), user(r.Context()), r.PathValue("id"), call)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, diagnosticsOf(d))
}
