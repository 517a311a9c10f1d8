package httpapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"

	"chatd/internal/chat"
	"chatd/internal/runevent"
	"chatd/internal/sse"
	"chatd/internal/store"
)

// uiStream writes the run's events from its start as UI message chunks until the run has ended. An
// event that does not decode ends the stream: the log holds only what chat encoded, so it is a bug.
func (s *server) uiStream(w http.ResponseWriter, r *http.Request, runID string) error {
	return s.uiStreamFrom(w, r, runID, 0)
}

// uiStreamFrom writes the run's events after Seq after as UI message chunks: from 0, the whole run;
// from a pause for approval, what the run did once resumed, as the rest of the same assistant message
// (a start chunk with its id, then the chunks).
func (s *server) uiStreamFrom(w http.ResponseWriter, r *http.Request, runID string, after int64) error {
	w.Header().Set("X-Vercel-Ai-Ui-Message-Stream", "v1")
	// A continuation is inside the step that paused (its model call over): the decided calls' outputs
	// land on their parts there, and the next model call opens a step of its own.
	c := uiConverter{messageID: uiMessagePrefix + runID, continues: after > 0, step: after > 0, called: after > 0}
	return s.follow(w, r, runID, after, func(out *sse.Writer, batch []chat.Event) error {
		c.buf = c.buf[:0]
		if c.continues {
			c.continues = false
			c.chunk(map[string]any{"type": "start", "messageId": c.messageID})
		}
		for _, ev := range batch {
			if err := c.event(ev); err != nil {
				s.log.Error("ui stream: convert event", "run", runID, "seq", ev.Seq, "type", ev.Type, "err", err)
				return err
			}
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
	// suggested says a data-suggestions part is written: a later answer without suggestions empties it.
	suggested bool
	// continues: the stream goes on with a message streamed before (after a pause for approval); its
	// first batch begins with a start chunk naming it.
	continues bool
	// elicitations are the questions from MCP servers shown, by call id, for their decision to repeat.
	elicitations map[string]map[string]any
}

// event converts one run event: one method per event type, each given the event's decoded data.
// status events have no UI chunk.
func (c *uiConverter) event(ev chat.Event) error {
	if c.ended {
		return nil
	}
	switch ev.Type {
	case runevent.TypeRunStart:
		return on(ev.Data, c.runStart)
	case runevent.TypeTextDelta:
		return c.delta("text", &c.text, ev.Data)
	case runevent.TypeReasoningDelta:
		return c.delta("reasoning", &c.reasoning, ev.Data)
	case runevent.TypeToolCallDelta:
		return on(ev.Data, c.toolCallDelta)
	case runevent.TypeToolStart:
		return on(ev.Data, c.toolStart)
	case runevent.TypeToolProgress:
		return on(ev.Data, func(d runevent.ToolProgress) { c.toolProgress(d, ev.Data) })
	case runevent.TypeToolComplete:
		return on(ev.Data, c.toolComplete)
	case runevent.TypeUsage:
		return on(ev.Data, func(runevent.UsageEvent) { c.usage(ev.Data) })
	case runevent.TypeComplete:
		return on(ev.Data, c.complete)
	case runevent.TypeError:
		return on(ev.Data, c.error)
	case runevent.TypeCancelled:
		return on(ev.Data, c.cancelled)
	case runevent.TypeDone:
		return on(ev.Data, c.done)
	case runevent.TypeRecord:
		return on(ev.Data, c.record)
	case runevent.TypeApprovalRequired:
		return on(ev.Data, c.approvalRequired)
	case runevent.TypeAwaitingApproval:
		return on(ev.Data, c.awaitingApproval)
	case runevent.TypeApprovalDecided:
		return on(ev.Data, c.approvalDecided)
	case runevent.TypeStatus:
		return nil
	}
	return fmt.Errorf("unknown event type %q", ev.Type)
}

// on decodes data as T and hands it to f.
func on[T runevent.Data](data []byte, f func(T)) error {
	d, err := runevent.Decode[T](data)
	if err != nil {
		return err
	}
	f(d)
	return nil
}

func (c *uiConverter) runStart(d runevent.RunStart) {
	meta := map[string]any{"run_id": d.RunID, "session_id": d.SessionID, "model": d.Model, "agent": d.Agent}
	if d.Action {
		meta["action"] = true
	}
	c.chunk(map[string]any{"type": "start", "messageId": c.messageID, "messageMetadata": meta})
}

// delta writes a text or reasoning delta. Its string is copied as it is, already JSON, with no decoding
// on the per-token path.
func (c *uiConverter) delta(kind string, open *string, data []byte) error {
	str, err := runevent.RawText(data)
	if err != nil {
		return err
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
	return nil
}

func (c *uiConverter) toolCallDelta(d runevent.ToolCallDelta) {
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
	if d.ArgumentsDelta != "" {
		c.chunk(map[string]any{"type": "tool-input-delta", "toolCallId": id, "inputTextDelta": d.ArgumentsDelta})
	}
}

func (c *uiConverter) toolStart(d runevent.ToolStart) {
	c.closeText()
	c.inStep()
	c.chunk(map[string]any{"type": "tool-input-available", "toolCallId": d.ToolCallID, "toolName": d.Name, "input": d.Arguments})
}

// approvalRequired shows a call that waits: its input (it never started, so no tool_start gave it), then
// the AI SDK's approval request, whose approvalId is the call's id. A question (ask_user) has no
// approval request: the UI answers its input's questions (POST /v1/runs/{id}/approvals).
func (c *uiConverter) approvalRequired(d runevent.ApprovalRequired) {
	if d.Source == chat.SourceMCP {
		c.elicitation(d)
		return
	}
	c.closeText()
	c.inStep()
	c.chunk(map[string]any{"type": "tool-input-available", "toolCallId": d.ToolCallID, "toolName": d.Name, "input": d.Arguments})
	if d.Kind == "question" {
		return
	}
	c.chunk(map[string]any{"type": "tool-approval-request", "approvalId": d.ToolCallID, "toolCallId": d.ToolCallID, "reason": d.Reason})
}

// awaitingApproval ends the message for now: useChat is ready for addToolApprovalResponse, whose
// request (POST /v1/ui/chat) resumes the run and streams the rest of this message.
func (c *uiConverter) awaitingApproval(runevent.AwaitingApproval) {
	c.finishStep()
	c.finish("tool-calls", nil)
	c.buf = append(c.buf, "data: [DONE]\n\n"...)
	c.ended = true
}

// approvalDecided replays a decision: what the client sent, for a stream read again from the start.
func (c *uiConverter) approvalDecided(d runevent.ApprovalDecided) {
	if d.Source == chat.SourceMCP {
		c.elicitationDecided(d)
		return
	}
	if d.Decision == "answer" {
		return // the answers are the call's output
	}
	m := map[string]any{"type": "tool-approval-response", "approvalId": d.ToolCallID, "approved": d.Decision == "approve"}
	if d.Reason != "" {
		m["reason"] = d.Reason
	}
	c.chunk(m)
}

// elicitation shows a question from an MCP server, which a running call waits on, as a data part
// "data-elicitation" whose id is the call's: {tool_call_id, name, message, fields, expires_at,
// state: "waiting"}. The client answers it with POST /v1/runs/{id}/approvals; its decision comes as the
// same part again (useChat replaces a data part of the same id), state "decided", with decision and
// content.
func (c *uiConverter) elicitation(d runevent.ApprovalRequired) {
	c.closeText()
	data := map[string]any{"tool_call_id": d.ToolCallID, "name": d.Name, "message": d.Message, "fields": d.Fields, "state": "waiting"}
	if d.ExpiresAt != nil {
		data["expires_at"] = d.ExpiresAt
	}
	if c.elicitations == nil {
		c.elicitations = map[string]map[string]any{}
	}
	c.elicitations[d.ToolCallID] = data
	c.chunk(map[string]any{"type": "data-elicitation", "id": d.ToolCallID, "data": data})
}

// elicitationDecided shows the decision on a question from an MCP server.
func (c *uiConverter) elicitationDecided(d runevent.ApprovalDecided) {
	data := map[string]any{"tool_call_id": d.ToolCallID}
	for k, v := range c.elicitations[d.ToolCallID] {
		data[k] = v
	}
	delete(c.elicitations, d.ToolCallID)
	data["state"], data["decision"] = "decided", d.Decision
	if len(d.Content) > 0 {
		data["content"] = d.Content
	}
	if d.Reason != "" {
		data["reason"] = d.Reason
	}
	c.chunk(map[string]any{"type": "data-elicitation", "id": d.ToolCallID, "data": data})
}

// closeElicitations shows the questions from MCP servers still waiting at the end of the run as
// decided, cancel: nobody can answer them any more. (chatd decides every question before its call's
// tool_complete; the log of a run a crash interrupted, which recovery ends with done, may lack the
// decision.)
func (c *uiConverter) closeElicitations() {
	for _, id := range slices.Sorted(maps.Keys(c.elicitations)) {
		c.elicitationDecided(runevent.ApprovalDecided{ToolCallID: id, Decision: chat.DecisionCancel, Source: chat.SourceMCP,
			Reason: "The run ended before anyone answered."})
	}
}

// toolProgress passes the event's data on as it is, in a transient data part.
func (c *uiConverter) toolProgress(d runevent.ToolProgress, data json.RawMessage) {
	c.chunk(map[string]any{"type": "data-tool-progress", "id": d.ToolCallID, "data": data, "transient": true})
}

func (c *uiConverter) toolComplete(d runevent.ToolComplete) {
	c.inStep()
	if !d.Success {
		c.chunk(map[string]any{"type": "tool-output-error", "toolCallId": d.ToolCallID, "errorText": d.Content})
		return
	}
	out := map[string]any{"content": d.Content, "duration_ms": d.DurationMS}
	if len(d.Payload) > 0 {
		out["payload"] = d.Payload
	}
	c.chunk(map[string]any{"type": "tool-output-available", "toolCallId": d.ToolCallID, "output": out})
}

// usage is one model call's usage, under a key of its own: the metadata chunks merge, and usage is the
// run's total, sent with finish.
func (c *uiConverter) usage(data json.RawMessage) {
	c.closeText()
	c.called = c.step
	c.chunk(map[string]any{"type": "message-metadata", "messageMetadata": map[string]json.RawMessage{"step_usage": data}})
}

// record writes the data parts of a stored record as it is stored: an answer's suggestions and its
// marker payloads, a tool's payload. A run that fails or is cancelled streams what its stored records
// carry, as its history shows them after a reload (uiMessages follows the same rules).
func (c *uiConverter) record(d runevent.RecordEvent) {
	r := d.Message
	if r == nil || (r.Role != store.RoleAssistant && r.Role != store.RoleTool) {
		return
	}
	if r.Role == store.RoleAssistant {
		if p := suggestionsPart(r.SuggestedValues, r.SuggestedActions, c.suggested); p != nil {
			c.chunk(p)
			c.suggested = true
		}
	}
	for _, p := range r.PayloadList() {
		c.chunk(payloadPart(p))
	}
}

func (c *uiConverter) complete(d runevent.Complete) {
	c.finishStep()
	c.finish(uiFinishReason(d.FinishReason), &d.Usage)
}

func (c *uiConverter) error(d runevent.Error) {
	c.finishStep()
	c.chunk(map[string]string{"type": "error", "errorText": d.Message})
}

func (c *uiConverter) cancelled(runevent.Cancelled) {
	c.finishStep()
	c.raw([]byte(`{"type":"abort"}`))
}

func (c *uiConverter) done(d runevent.Done) {
	c.closeElicitations()
	c.finishStep()
	if d.Status != "cancelled" { // a cancelled run ends with abort
		c.finish("error", nil) // unless complete has said finish
	}
	c.buf = append(c.buf, "data: [DONE]\n\n"...)
	c.ended = true
}

// chunk writes one chunk. Chunks are maps of strings, numbers and JSON: they always encode.
func (c *uiConverter) chunk(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic("httpapi: encode UI chunk: " + err.Error())
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
	c.inStep()
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

// finish writes the finish chunk, once.
func (c *uiConverter) finish(reason string, usage *runevent.Usage) {
	if c.finished {
		return
	}
	c.finished = true
	m := map[string]any{"type": "finish", "finishReason": reason}
	if usage != nil {
		m["messageMetadata"] = map[string]*runevent.Usage{"usage": usage}
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

// suggestionsPart is the data-suggestions part of an answer's suggested values and actions (as a chunk
// and as a part of a stored message: the same shape), or nil when it has none — unless replace is set:
// the message has a suggestions part from an earlier answer of its run, which this one (under the same
// id) replaces, as the last answer's suggestions are the run's.
func suggestionsPart(values []runevent.SuggestedValue, actions []runevent.SuggestedAction, replace bool) map[string]any {
	if len(values) == 0 && len(actions) == 0 && !replace {
		return nil
	}
	if values == nil {
		values = []runevent.SuggestedValue{}
	}
	if actions == nil {
		actions = []runevent.SuggestedAction{}
	}
	return map[string]any{"type": "data-suggestions", "id": "suggestions", "data": map[string]any{"values": values, "actions": actions}}
}

// payloadPart is the data-payload part of one payload, under the payload's id.
func payloadPart(p runevent.Payload) map[string]any {
	return map[string]any{"type": "data-payload", "id": p.ID, "data": p}
}
