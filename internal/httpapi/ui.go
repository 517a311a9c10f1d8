package httpapi

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"chatd/internal/chat"
	"chatd/internal/store"
)

// The Vercel AI SDK's UI message stream protocol (v1), so that useChat works against chatd unchanged:
// POST /v1/ui/chat takes what DefaultChatTransport posts and answers with the run's events as UI
// message chunks, one `data: {json}` frame each, ending with `data: [DONE]`; GET /v1/ui/chat/{id}/stream
// resumes the session's active run (204 when there is none). chatd's stored history is the source of
// truth: only the newest user message is taken from the posted messages.

// uiMessagePrefix starts the id of a run's assistant message: "msg_" + the run id, streamed or stored.
const uiMessagePrefix = "msg_"

// uiChatRequest is the body DefaultChatTransport posts, with chatd's own fields beside it.
type uiChatRequest struct {
	ID            string         `json:"id"`
	Messages      []uiMessage    `json:"messages"`
	Trigger       string         `json:"trigger"`
	MessageID     string         `json:"messageId"`
	Model         string         `json:"model"`
	Agent         string         `json:"agent"`
	SelectedTools []string       `json:"selected_tools"`
	Context       map[string]any `json:"context"`
	MaxIterations int            `json:"max_iterations"`
	Temperature   *float64       `json:"temperature"`
	MaxTokens     int            `json:"max_tokens"`
}

type uiMessage struct {
	ID    string   `json:"id"`
	Role  string   `json:"role"`
	Parts []uiPart `json:"parts"`
}

type uiPart struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	MediaType string `json:"mediaType"`
	URL       string `json:"url"`
	Filename  string `json:"filename"`
	// A tool part's call, state and approval: addToolApprovalResponse sends the message back with the
	// part "approval-responded".
	ToolCallID string      `json:"toolCallId"`
	State      string      `json:"state"`
	Approval   *uiApproval `json:"approval"`
	// Input is the call's input as the client holds it: edited before an approval, it is what the call
	// runs with. Output is, for an ask_user part the client answered (addToolOutput), the answers.
	Input  json.RawMessage `json:"input"`
	Output json.RawMessage `json:"output"`
}

// uiApproval is a tool part's approval as useChat keeps it.
type uiApproval struct {
	ID       string `json:"id"`
	Approved *bool  `json:"approved"`
	Reason   string `json:"reason"`
}

// uiChat starts a run from the newest user message and streams it as UI message chunks.
func (s *server) uiChat(w http.ResponseWriter, r *http.Request) error {
	var in uiChatRequest
	// useChat posts the whole conversation, images included.
	if err := s.decodeLimit(w, r, &in, s.MaxChatBodyBytes); err != nil {
		return err
	}
	regenerate := false
	switch in.Trigger {
	case "", "submit-message":
	case "regenerate-message":
		regenerate = true
	default:
		return &apiError{status: http.StatusBadRequest, code: "invalid_trigger",
			message: "trigger must be submit-message or regenerate-message"}
	}
	if err := checkChatID(in.ID); err != nil {
		return err
	}
	if runID, decided := approvalResponses(&in); len(decided) > 0 {
		return s.uiApprove(w, r, in.ID, runID, decided)
	}
	var req chat.Request
	var err error
	if regenerate {
		// The last answer of chatd's history is replaced — if it is the one the client shows.
		req = chat.Request{SessionID: in.ID, Regenerate: true}
		if run, ok := strings.CutPrefix(in.MessageID, uiMessagePrefix); ok {
			req.ReplacesRun = run
		}
		in.fields(&req)
	} else if req, err = uiRequest(&in); err != nil {
		return err
	}
	ctx := r.Context()
	st, err := s.Chat.Start(ctx, user(ctx), req, chat.StartOptions{Account: s.account(ctx)})
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("X-Run-Id", st.RunID)
	h.Set("X-Session-Id", st.SessionID)
	return s.uiStream(w, r, st.RunID)
}

// uiResume answers GET /v1/ui/chat/{id}/stream: the session's running run from its first event, or 204.
// With ?run=ID it streams that run of the session whether it still runs or has ended since: a client
// that read the history (GET /v1/ui/chat/{id}, whose active_run_id names the run and leaves out its
// answer) and then resumes gets the answer even when the run ended in between.
func (s *server) uiResume(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := checkChatID(id); err != nil {
		return err
	}
	ctx := r.Context()
	if runID := r.URL.Query().Get("run"); runID != "" {
		run, err := s.Chat.RunInfo(ctx, user(ctx), runID)
		if err != nil {
			return err
		}
		if run.SessionID != id {
			return &apiError{status: http.StatusNotFound, code: "run_not_found", message: "no run " + strconv.Quote(runID) + " in this chat"}
		}
		w.Header().Set("X-Run-Id", run.ID)
		return s.uiStream(w, r, run.ID)
	}
	run, err := s.Store.ActiveRun(ctx, user(ctx), id)
	if errors.Is(err, store.ErrNotFound) {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	if err != nil {
		return err
	}
	w.Header().Set("X-Run-Id", run.ID)
	return s.uiStream(w, r, run.ID)
}

// checkChatID bounds a client-made chat id.
func checkChatID(id string) error {
	if id == "" || id == "." || id == ".." || len(id) > 128 || !printable(id) || strings.ContainsAny(id, "/ ") {
		return &apiError{status: http.StatusBadRequest, code: "invalid_chat_id",
			message: "id must be the chat's id: 1 to 128 printable characters without spaces or '/', and not . or .."}
	}
	return nil
}

// fields copies chatd's own body fields into req.
func (in *uiChatRequest) fields(req *chat.Request) {
	req.Model, req.Agent, req.SelectedTools, req.Context = in.Model, in.Agent, in.SelectedTools, in.Context
	req.MaxIterations, req.Temperature, req.MaxTokens = in.MaxIterations, in.Temperature, in.MaxTokens
}

// uiRequest takes the newest user message of the posted conversation: its text parts joined, its file
// parts (data: URLs) as attachments.
func uiRequest(in *uiChatRequest) (chat.Request, error) {
	// useChat makes chat ids on the client: an id chatd has not seen starts a session under it.
	req := chat.Request{SessionID: in.ID, CreateSession: true}
	in.fields(&req)
	var last *uiMessage
	for i := len(in.Messages) - 1; i >= 0; i-- {
		if in.Messages[i].Role == "user" {
			last = &in.Messages[i]
			break
		}
	}
	if last == nil {
		return req, &apiError{status: http.StatusBadRequest, code: "missing_message", message: "messages holds no user message"}
	}
	var text []string
	for i, p := range last.Parts {
		switch p.Type {
		case "text":
			text = append(text, p.Text)
		case "file":
			a, err := dataURL(p)
			if err != nil {
				return req, &apiError{status: http.StatusBadRequest, code: "invalid_attachment",
					message: fmt.Sprintf("part %d: %v", i, err)}
			}
			req.Attachments = append(req.Attachments, a)
		}
	}
	req.Message = strings.Join(text, "\n")
	return req, nil
}

// dataURL decodes a file part whose url is a base64 data: URL.
func dataURL(p uiPart) (store.Attachment, error) {
	rest, ok := strings.CutPrefix(p.URL, "data:")
	meta, data, ok2 := strings.Cut(rest, ",")
	if !ok || !ok2 || !strings.HasSuffix(meta, ";base64") {
		return store.Attachment{}, errors.New("a file must come as a base64 data: URL")
	}
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return store.Attachment{}, errors.New("the data: URL is not valid base64")
	}
	mt := p.MediaType
	if mt == "" {
		mt = strings.TrimSuffix(meta, ";base64")
	}
	return store.Attachment{MediaType: mt, Name: p.Filename, Data: b}, nil
}

// approvalResponses finds, in a post that answers approval requests (useChat's addToolApprovalResponse,
// then its automatic send), the run they are for and each decision: the last message is the run's
// assistant message, with tool parts "approval-responded".
func approvalResponses(in *uiChatRequest) (string, []chat.Decision) {
	if len(in.Messages) == 0 || in.Trigger == "regenerate-message" {
		return "", nil
	}
	last := &in.Messages[len(in.Messages)-1]
	if last.Role != "assistant" {
		return "", nil
	}
	runID, ok := strings.CutPrefix(cmp.Or(in.MessageID, last.ID), uiMessagePrefix)
	if !ok {
		return "", nil
	}
	var out []chat.Decision
	for _, p := range last.Parts {
		if p.Type == "tool-"+chat.AskUserTool && p.State == "output-available" {
			var answered struct {
				Answers []string `json:"answers"`
			}
			if json.Unmarshal(p.Output, &answered) == nil && answered.Answers != nil {
				out = append(out, chat.Decision{ToolCallID: p.ToolCallID, Decision: chat.DecisionAnswer, Answers: answered.Answers})
			}
			continue
		}
		if p.State != "approval-responded" || p.Approval == nil || p.Approval.Approved == nil {
			continue
		}
		d := chat.Decision{ToolCallID: cmp.Or(p.Approval.ID, p.ToolCallID), Decision: chat.DecisionDeny, Reason: p.Approval.Reason}
		if *p.Approval.Approved {
			d.Decision, d.Reason, d.Arguments = chat.DecisionApprove, "", p.Input
		}
		out = append(out, d)
	}
	return runID, out
}

// sameJSON reports whether two JSON texts hold the same value.
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// uiApprove records the decisions a useChat client sent for a run of the session that waits, and
// streams the rest of the run's message: what it does once resumed. A decision the run no longer
// waits for (a retried post, another tab) is skipped.
func (s *server) uiApprove(w http.ResponseWriter, r *http.Request, sessionID, runID string, decided []chat.Decision) error {
	ctx := r.Context()
	run, err := s.Chat.RunInfo(ctx, user(ctx), runID)
	if err != nil {
		return err
	}
	if run.SessionID != sessionID {
		return &apiError{status: http.StatusNotFound, code: "run_not_found", message: "no run " + strconv.Quote(runID) + " in this chat"}
	}
	after := run.LastEventSeq // the pause: awaiting_approval is the log's last event
	if aw := chat.AwaitingOf(run); aw != nil {
		for _, d := range decided {
			i := slices.IndexFunc(aw.Calls, func(c chat.AwaitingCall) bool { return c.ToolCallID == d.ToolCallID })
			if i < 0 || aw.Calls[i].Decision != "" {
				continue
			}
			if len(d.Arguments) > 0 && sameJSON(d.Arguments, aw.Calls[i].Arguments) {
				d.Arguments = nil // the input as the model sent it: not an edit
			}
			if _, err := s.Chat.Decide(ctx, user(ctx), runID, d); err != nil {
				var e *chat.Error
				if errors.As(err, &e) && (e.Code == "already_decided" || e.Code == "not_awaiting_approval") {
					continue
				}
				return err
			}
		}
	}
	h := w.Header()
	h.Set("X-Run-Id", runID)
	h.Set("X-Session-Id", sessionID)
	return s.uiStreamFrom(w, r, runID, after)
}
