package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"

	"chatd/internal/chat"
)

// actionRequest is the body of POST /v1/sessions/{id}/actions: a suggested action as complete sent it
// (label, action, handler, data), with the request context its tool is offered in.
type actionRequest struct {
	Label   string          `json:"label"`
	Action  string          `json:"action"`
	Handler string          `json:"handler"`
	Data    json.RawMessage `json:"data"`
	Context map[string]any  `json:"context"`
	// SelectedTools narrows the tools the action may run, as a chat send's do; nil: every tool.
	SelectedTools []string `json:"selected_tools"`
	OnActiveRun   string   `json:"on_active_run"`
}

// runAction answers POST /v1/sessions/{id}/actions: it runs a suggested action whose handler is the
// server — one the session's last answer suggested, naming a tool the session's agent offers (see
// chat's planAction) — as a run of the session, and streams the run's events as POST /v1/chat/stream
// does.
func (s *server) runAction(w http.ResponseWriter, r *http.Request) error {
	key := r.Header.Get("Idempotency-Key")
	if len(key) > maxKeyLen || !printable(key) {
		return &apiError{status: http.StatusBadRequest, code: "invalid_idempotency_key",
			message: fmt.Sprintf("Idempotency-Key must be at most %d printable ASCII characters", maxKeyLen)}
	}
	var in actionRequest
	if err := s.decode(w, r, &in); err != nil {
		return err
	}
	switch {
	case in.Handler != "server":
		return &apiError{status: http.StatusBadRequest, code: "not_server_action",
			message: fmt.Sprintf("handler is %q: only an action whose handler is \"server\" runs here; the client handles the others", in.Handler)}
	case in.Action == "":
		return &apiError{status: http.StatusBadRequest, code: "missing_action", message: "the action names no tool: send {\"action\": \"tool name\", \"handler\": \"server\", \"data\": {…}}"}
	}
	switch in.OnActiveRun {
	case "", chat.OnActiveReject, chat.OnActiveInterrupt, chat.OnActiveEnqueue:
	default:
		return &apiError{status: http.StatusBadRequest, code: "invalid_on_active_run",
			message: "on_active_run must be reject, interrupt or enqueue"}
	}
	req := chat.Request{SessionID: r.PathValue("id"), Context: in.Context, SelectedTools: in.SelectedTools,
		Action: &chat.Action{Label: in.Label, Action: in.Action, Data: in.Data}}
	st, err := s.Chat.Start(r.Context(), user(r.Context()), req, chat.StartOptions{OnActiveRun: in.OnActiveRun,
		IdempotencyKey: key, Account: s.account(r.Context())})
	if err != nil {
		return err
	}
	w.Header().Set("X-Run-Id", st.RunID)
	w.Header().Set("X-Session-Id", st.SessionID)
	if st.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	return s.streamEvents(w, r, st.RunID, 0)
}
