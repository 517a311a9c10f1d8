package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"chatd/internal/chat"
	"chatd/internal/sse"
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
	st, err := s.Chat.Start(ctx, user(ctx), req, chat.StartOptions{})
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("X-Run-Id", st.RunID)
	h.Set("X-Session-Id", st.SessionID)
	return s.uiStream(w, r, st.RunID)
}

// uiResume answers GET /v1/ui/chat/{id}/stream: the session's active run from its first event, or 204.
func (s *server) uiResume(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := checkChatID(id); err != nil {
		return err
	}
	ctx := r.Context()
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

// uiStream writes the run's events from its start as UI message chunks until the run has ended.
func (s *server) uiStream(w http.ResponseWriter, r *http.Request, runID string) error {
	w.Header().Set("X-Vercel-Ai-Ui-Message-Stream", "v1")
	c := uiConverter{messageID: uiMessagePrefix + runID}
	return s.follow(w, r, runID, 0, func(out *sse.Writer, batch []chat.Event) error {
		c.buf = c.buf[:0]
		for _, ev := range batch {
			c.event(ev)
		}
		if len(c.buf) == 0 {
			return nil
		}
		return out.WriteEncoded(c.buf)
	})
}

// uiConverter turns run events into UI message chunks. A run is one assistant message; each model call
// is a step; text and reasoning parts are opened on their first delta and closed when something else
// comes.
type uiConverter struct {
	buf       []byte
	messageID string
	step      bool
	called    bool   // the open step's model call has ended; its tools may still report
	text      string // the open text part's id, or ""
	reasoning string // the open reasoning part's id, or ""
	parts     int
	// calls maps a streamed call's index in its step to its id; inputs lists the calls whose input
	// has started.
	calls    map[int]string
	inputs   map[string]bool
	finished bool // the finish chunk is written
	ended    bool // [DONE] is written
}

func (c *uiConverter) chunk(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	c.raw(b)
}

func (c *uiConverter) raw(b []byte) {
	c.buf = append(c.buf, "data: "...)
	c.buf = append(c.buf, b...)
	c.buf = append(c.buf, "\n\n"...)
}

// startStep opens a step for a model call's output. After a model call has ended (usage) its step stays
// open for the results of its tool calls; the next call's first output finishes it and opens another.
func (c *uiConverter) startStep() {
	if c.called {
		c.finishStep()
	}
	if !c.step {
		c.step = true
		c.raw([]byte(`{"type":"start-step"}`))
	}
}

// inStep makes sure a step is open, without ending one whose model call is over (tool results).
func (c *uiConverter) inStep() {
	if !c.step {
		c.step = true
		c.raw([]byte(`{"type":"start-step"}`))
	}
}

func (c *uiConverter) closeText() {
	if c.text != "" {
		c.chunk(map[string]string{"type": "text-end", "id": c.text})
		c.text = ""
	}
	if c.reasoning != "" {
		c.chunk(map[string]string{"type": "reasoning-end", "id": c.reasoning})
		c.reasoning = ""
	}
}

func (c *uiConverter) finishStep() {
	c.closeText()
	if c.step {
		c.raw([]byte(`{"type":"finish-step"}`))
		c.step = false
	}
	c.called, c.calls = false, nil
}

func (c *uiConverter) nextID(prefix string) string {
	c.parts++
	return prefix + strconv.Itoa(c.parts)
}

// delta writes a text or reasoning delta. data is {"text":"…"}: its string is copied as it is, already
// JSON, with no decoding on the per-token path.
func (c *uiConverter) delta(kind string, open *string, data []byte) {
	str, ok := textValue(data)
	if !ok {
		return
	}
	c.startStep()
	if *open == "" {
		c.closeText() // the other kind's part, if one is open
		*open = c.nextID(kind[:1])
		c.chunk(map[string]string{"type": kind + "-start", "id": *open})
	}
	c.buf = append(c.buf, `data: {"type":"`...)
	c.buf = append(c.buf, kind...)
	c.buf = append(c.buf, `-delta","id":"`...)
	c.buf = append(c.buf, *open...)
	c.buf = append(c.buf, `","delta":`...)
	c.buf = append(c.buf, str...)
	c.buf = append(c.buf, "}\n\n"...)
}

// textValue returns the JSON string of {"text":<string>}.
func textValue(data []byte) ([]byte, bool) {
	const prefix = `{"text":`
	if !bytes.HasPrefix(data, []byte(prefix)) || len(data) < len(prefix)+3 || data[len(data)-1] != '}' {
		return nil, false
	}
	return data[len(prefix) : len(data)-1], true
}

func (c *uiConverter) event(ev chat.Event) {
	if c.ended {
		return
	}
	switch ev.Type {
	case chat.EventRunStart:
		var d struct {
			RunID     string `json:"run_id"`
			SessionID string `json:"session_id"`
			Model     string `json:"model"`
			Agent     string `json:"agent"`
		}
		_ = json.Unmarshal(ev.Data, &d)
		c.chunk(map[string]any{"type": "start", "messageId": c.messageID,
			"messageMetadata": map[string]string{"run_id": d.RunID, "session_id": d.SessionID, "model": d.Model, "agent": d.Agent}})
	case chat.EventTextDelta:
		c.delta("text", &c.text, ev.Data)
	case chat.EventReasoningDelta:
		c.delta("reasoning", &c.reasoning, ev.Data)
	case chat.EventToolCallDelta:
		var d struct {
			Index int    `json:"index"`
			ID    string `json:"id"`
			Name  string `json:"name"`
			Args  string `json:"arguments_delta"`
		}
		if json.Unmarshal(ev.Data, &d) != nil {
			return
		}
		c.startStep()
		c.closeText()
		if c.calls == nil {
			c.calls = map[int]string{}
		}
		if d.ID != "" {
			c.calls[d.Index] = d.ID
		}
		id := c.calls[d.Index]
		if id == "" {
			return // the id comes later (or only with tool_start): the input shows then
		}
		if c.inputs == nil {
			c.inputs = map[string]bool{}
		}
		if !c.inputs[id] {
			if d.Name == "" {
				return
			}
			c.inputs[id] = true
			c.chunk(map[string]any{"type": "tool-input-start", "toolCallId": id, "toolName": d.Name})
		}
		if d.Args != "" {
			c.chunk(map[string]any{"type": "tool-input-delta", "toolCallId": id, "inputTextDelta": d.Args})
		}
	case chat.EventToolStart:
		var d struct {
			ID   string          `json:"tool_call_id"`
			Name string          `json:"name"`
			Args json.RawMessage `json:"arguments"`
		}
		if json.Unmarshal(ev.Data, &d) != nil {
			return
		}
		c.closeText()
		c.inStep()
		c.chunk(map[string]any{"type": "tool-input-available", "toolCallId": d.ID, "toolName": d.Name, "input": d.Args})
	case chat.EventToolProgress:
		var d struct {
			ID string `json:"tool_call_id"`
		}
		if json.Unmarshal(ev.Data, &d) != nil {
			return
		}
		c.chunk(map[string]any{"type": "data-tool-progress", "id": d.ID, "data": json.RawMessage(ev.Data), "transient": true})
	case chat.EventToolComplete:
		var d struct {
			ID         string          `json:"tool_call_id"`
			Success    bool            `json:"success"`
			Content    string          `json:"content"`
			DurationMS int64           `json:"duration_ms"`
			Payload    json.RawMessage `json:"payload"`
		}
		if json.Unmarshal(ev.Data, &d) != nil {
			return
		}
		c.inStep()
		if !d.Success {
			c.chunk(map[string]any{"type": "tool-output-error", "toolCallId": d.ID, "errorText": d.Content})
			return
		}
		out := map[string]any{"content": d.Content, "duration_ms": d.DurationMS}
		if len(d.Payload) > 0 {
			out["payload"] = d.Payload
		}
		c.chunk(map[string]any{"type": "tool-output-available", "toolCallId": d.ID, "output": out})
	case chat.EventUsage:
		c.closeText()
		c.called = c.step
		// One model call's usage, under a key of its own: the metadata chunks merge, and usage is the
		// run's total, sent with finish.
		c.chunk(map[string]any{"type": "message-metadata", "messageMetadata": map[string]json.RawMessage{"step_usage": ev.Data}})
	case chat.EventComplete:
		var d struct {
			FinishReason     string            `json:"finish_reason"`
			Usage            json.RawMessage   `json:"usage"`
			SuggestedValues  []json.RawMessage `json:"suggested_values"`
			SuggestedActions []json.RawMessage `json:"suggested_actions"`
			Payloads         []json.RawMessage `json:"payloads"`
		}
		if json.Unmarshal(ev.Data, &d) != nil {
			return
		}
		c.finishStep()
		if len(d.SuggestedValues) > 0 || len(d.SuggestedActions) > 0 {
			c.chunk(map[string]any{"type": "data-suggestions", "data": map[string]any{"values": d.SuggestedValues, "actions": d.SuggestedActions}})
		}
		for i, p := range d.Payloads {
			c.chunk(map[string]any{"type": "data-payload", "id": "payload-" + strconv.Itoa(i+1), "data": p})
		}
		c.finish(uiFinishReason(d.FinishReason), d.Usage)
	case chat.EventError:
		var d struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(ev.Data, &d)
		c.finishStep()
		c.chunk(map[string]string{"type": "error", "errorText": d.Message})
	case chat.EventCancelled:
		c.finishStep()
		c.raw([]byte(`{"type":"abort"}`))
	case chat.EventDone:
		c.finishStep()
		var d struct {
			Status string `json:"status"`
		}
		_ = json.Unmarshal(ev.Data, &d)
		if d.Status != "cancelled" { // a cancelled run ends with abort
			c.finish("error", nil) // unless complete has said finish
		}
		c.buf = append(c.buf, "data: [DONE]\n\n"...)
		c.ended = true
	}
}

// finish writes the finish chunk, once.
func (c *uiConverter) finish(reason string, usage json.RawMessage) {
	if c.finished {
		return
	}
	c.finished = true
	m := map[string]any{"type": "finish", "finishReason": reason}
	if len(usage) > 0 {
		m["messageMetadata"] = map[string]json.RawMessage{"usage": usage}
	}
	c.chunk(m)
}

// uiFinishReason maps chatd's finish reasons to the AI SDK's.
func uiFinishReason(r string) string {
	switch r {
	case "stop", "length", "content-filter", "tool-calls", "error", "other":
		return r
	case "tool_calls":
		return "tool-calls"
	case "content_filter":
		return "content-filter"
	case "max_tokens":
		return "length"
	}
	return "stop"
}
