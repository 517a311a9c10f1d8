package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"chatd/internal/chat"
	"chatd/internal/sse"
	"chatd/internal/store"
)

// chatRequest is the body of POST /v1/chat and /v1/chat/stream.
type chatRequest struct {
	SessionID     string           `json:"session_id"`
	Message       string           `json:"message"`
	Attachments   []attachmentWire `json:"attachments"`
	Model         string           `json:"model"`
	Agent         string           `json:"agent"`
	Temperature   *float64         `json:"temperature"`
	MaxTokens     int              `json:"max_tokens"`
	SelectedTools []string         `json:"selected_tools"`
	MaxIterations int              `json:"max_iterations"`
	Context       map[string]any   `json:"context"`
	OnActiveRun   string           `json:"on_active_run"`
}

type attachmentWire struct {
	MediaType string `json:"media_type"`
	Name      string `json:"name"`
	Data      string `json:"data"`
}

func (s *server) startRun(w http.ResponseWriter, r *http.Request) (*chat.Run, error) {
	var in chatRequest
	if err := s.decode(w, r, &in); err != nil {
		return nil, err
	}
	switch in.OnActiveRun {
	case "", "reject":
	case "interrupt", "enqueue":
		return nil, &apiError{status: http.StatusBadRequest, code: "unsupported",
			message: "on_active_run=" + in.OnActiveRun + " is not supported by this version of chatd yet; use reject"}
	default:
		return nil, &apiError{status: http.StatusBadRequest, code: "invalid_on_active_run",
			message: "on_active_run must be reject, interrupt or enqueue"}
	}
	req := chat.Request{
		SessionID: in.SessionID, Message: in.Message, Model: in.Model, Agent: in.Agent,
		Temperature: in.Temperature, MaxTokens: in.MaxTokens, SelectedTools: in.SelectedTools,
		MaxIterations: in.MaxIterations, Context: in.Context,
	}
	for i, a := range in.Attachments {
		data, err := decodeBase64(a.Data)
		if err != nil {
			return nil, &apiError{status: http.StatusBadRequest, code: "invalid_attachment",
				message: fmt.Sprintf("attachment %d: data is not base64", i)}
		}
		req.Attachments = append(req.Attachments, store.Attachment{MediaType: a.MediaType, Name: a.Name, Data: data})
	}
	return s.Chat.Start(r.Context(), user(r.Context()), req)
}

// chatStream starts a run and streams its events.
func (s *server) chatStream(w http.ResponseWriter, r *http.Request) error {
	run, err := s.startRun(w, r)
	if err != nil {
		return err
	}
	s.streamEvents(w, r, run, 0)
	return nil
}

// streamEvents writes the run's events after seq after as SSE until the run has ended and every event is
// written, or the client goes away (the run goes on). A client that stops reading is dropped after the
// write timeout; it never slows the run.
func (s *server) streamEvents(w http.ResponseWriter, r *http.Request, run *chat.Run, after int64) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	h.Set("X-Run-Id", run.ID)
	h.Set("X-Session-Id", run.SessionID)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	out := sse.NewWriter(w)
	wake, stop := run.Watch()
	defer stop()
	ping := time.NewTicker(s.PingInterval)
	defer ping.Stop()
	for {
		events, ended := run.Events(after)
		if len(events) > 0 {
			rc.SetWriteDeadline(time.Now().Add(s.WriteTimeout))
			for _, ev := range events {
				if err := out.WriteNumbered(ev.Seq, ev.Type, ev.Data); err != nil {
					s.log.Debug("stream client gone", "run", run.ID, "seq", ev.Seq, "err", err)
					return
				}
				after = ev.Seq
			}
			ping.Reset(s.PingInterval)
			continue // the run may have ended while we wrote: read again before waiting
		}
		if ended {
			return
		}
		select {
		case <-wake:
		case <-ping.C:
			rc.SetWriteDeadline(time.Now().Add(s.WriteTimeout))
			if out.Comment("ping") != nil {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}

// batchResponse is the answer of POST /v1/chat.
type batchResponse struct {
	SessionID    string                  `json:"session_id"`
	RunID        string                  `json:"run_id"`
	Status       string                  `json:"status"`
	Message      *store.Record           `json:"message"`
	ToolHistory  []chat.ToolHistoryEntry `json:"tool_history"`
	Usage        store.Usage             `json:"usage"`
	FinishReason string                  `json:"finish_reason"`
	Error        *chat.ErrorInfo         `json:"error,omitempty"`
}

// chatBatch starts a run and answers when it has ended. A failed run answers 502 (upstream) or 500 with
// the error and the run's ids, since the user's message is stored either way.
func (s *server) chatBatch(w http.ResponseWriter, r *http.Request) error {
	run, err := s.startRun(w, r)
	if err != nil {
		return err
	}
	select {
	case <-run.Done():
	case <-r.Context().Done():
		return nil // the client left; the run goes on and is stored
	}
	o := run.Outcome()
	status := http.StatusOK
	if o.Error != nil {
		status = http.StatusInternalServerError
		if strings.HasPrefix(o.Error.Code, "upstream_") {
			status = http.StatusBadGateway
		}
	}
	return writeJSON(w, status, batchResponse{
		SessionID: run.SessionID, RunID: run.ID, Status: o.Status, Message: o.Message,
		ToolHistory: o.ToolHistory, Usage: o.Usage, FinishReason: o.FinishReason, Error: o.Error,
	})
}
