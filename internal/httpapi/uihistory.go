package httpapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"chatd/internal/runevent"
	"chatd/internal/store"
)

// uiHistoryMessage is a UIMessage of GET /v1/ui/chat/{id}: a session's stored conversation as AI SDK
// UIMessages, the initial messages of a useChat that resumes the session. A run is one assistant message
// (uiMessagePrefix + run id), as it streams. The records of the session's active run, its user message aside, are
// left out: its answer comes by the resume stream, which replays the run from its start.
type uiHistoryMessage struct {
	ID       string           `json:"id"`
	Role     string           `json:"role"`
	Metadata *uiMessageMeta   `json:"metadata,omitempty"`
	Parts    []map[string]any `json:"parts"`
}

type uiMessageMeta struct {
	RunID     string          `json:"run_id,omitempty"`
	SessionID string          `json:"session_id"`
	Model     string          `json:"model,omitempty"`
	Usage     *runevent.Usage `json:"usage,omitempty"`
	// Action marks a server action's run, as the stream's start does: it cannot be regenerated.
	Action bool `json:"action,omitempty"`
}

// uiHistory answers GET /v1/ui/chat/{id}.
func (s *server) uiHistory(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := checkChatID(id); err != nil {
		return err
	}
	ctx := r.Context()
	u := user(ctx)
	// The records and the running run are read from one snapshot: a run that starts or ends meanwhile
	// is seen with its records or not at all, so no question is shown without its answer and no answer
	// cut short that no stream completes.
	tr, err := s.Store.Transcript(ctx, u, id)
	if err != nil {
		return sessionErr(err, r)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"id": tr.Session.ID, "title": tr.Session.Title,
		"active_run_id": tr.RunningRunID, "messages": uiMessages(id, store.Current(tr.Records), tr.RunningRunID)})
}

// uiMessages converts a conversation's current records: a user record is a user message; the
// assistant and tool records of one run, one assistant message.
func uiMessages(sessionID string, recs []store.Record, active string) []uiHistoryMessage {
	out := []uiHistoryMessage{}
	var cur *uiHistoryMessage
	// where each call's tool part is, by assistant record id and call id
	type callKey struct{ parent, call string }
	calls := map[callKey]map[string]any{}
	// A record's data parts go after its own parts, as the stream sends them when the record is stored
	// (uiConverter.record): its payloads, and an answer's suggestions, which replace in place the ones
	// an earlier answer of the run sent (the AI SDK updates a data part sent again under its id).
	dataParts := func(rec *store.Record) {
		if cur == nil {
			return
		}
		if rec.Role == store.RoleAssistant {
			vs, as := runevent.Suggestions(rec)
			at := slices.IndexFunc(cur.Parts, func(p map[string]any) bool { return p["type"] == "data-suggestions" })
			switch p := suggestionsPart(vs, as, at >= 0); {
			case p == nil:
			case at >= 0:
				cur.Parts[at] = p
			default:
				cur.Parts = append(cur.Parts, p)
			}
		}
		for _, p := range runevent.PayloadsOf(rec) {
			cur.Parts = append(cur.Parts, payloadPart(p))
		}
	}
	for i := range recs {
		rec := &recs[i]
		switch {
		case rec.Role == store.RoleUser:
			cur = nil
			m := uiHistoryMessage{ID: rec.ID, Role: "user", Parts: []map[string]any{}}
			if rec.Content != "" {
				m.Parts = append(m.Parts, map[string]any{"type": "text", "text": rec.Content})
			}
			m.Parts = append(m.Parts, fileParts(sessionID, rec)...)
			out = append(out, m)
		case rec.Role == store.RoleSystem, active != "" && rec.RunID == active:
			// Summaries and notes are not shown; the active run's answer comes by its stream.
		case rec.Role == store.RoleAssistant:
			if cur == nil || cur.Metadata.RunID != rec.RunID || rec.RunID == "" {
				out = append(out, uiHistoryMessage{ID: uiMessagePrefix + messageKey(rec), Role: "assistant",
					Metadata: &uiMessageMeta{RunID: rec.RunID, SessionID: sessionID}, Parts: []map[string]any{}})
				cur = &out[len(out)-1]
			}
			cur.Metadata.Model = rec.Model
			if store.IsAction(rec) {
				cur.Metadata.Action = true
			}
			if rec.Usage != nil {
				if cur.Metadata.Usage == nil {
					cur.Metadata.Usage = &runevent.Usage{}
				}
				cur.Metadata.Usage.Add(runevent.UsageOf(*rec.Usage))
			}
			cur.Parts = append(cur.Parts, map[string]any{"type": "step-start"})
			if rec.Reasoning != "" {
				cur.Parts = append(cur.Parts, map[string]any{"type": "reasoning", "text": rec.Reasoning, "state": "done"})
			}
			if rec.Content != "" {
				cur.Parts = append(cur.Parts, map[string]any{"type": "text", "text": rec.Content, "state": "done"})
			}
			for _, c := range rec.ToolCalls {
				p := map[string]any{"type": "tool-" + c.Name, "toolCallId": c.ID, "state": "input-available",
					"input": c.Arguments}
				cur.Parts = append(cur.Parts, p)
				calls[callKey{rec.ID, c.ID}] = p
			}
			dataParts(rec)
		case rec.Role == store.RoleTool:
			p := calls[callKey{rec.ParentID, rec.ToolCallID}]
			if p == nil || cur == nil {
				dataParts(rec) // as the stream sends them
				continue
			}
			if rec.Success != nil && *rec.Success {
				out := map[string]any{"content": rec.Content}
				if rec.DurationMS != nil {
					out["duration_ms"] = *rec.DurationMS
				}
				if rec.Payload != nil {
					out["payload"] = json.RawMessage(rec.Payload)
				}
				p["state"], p["output"] = "output-available", out
			} else {
				p["state"], p["errorText"] = "output-error", rec.Content
			}
			cur.Parts = append(cur.Parts, fileParts(sessionID, rec)...)
			dataParts(rec)
		}
	}
	return out
}

// messageKey is what names a run's message: the run, or for a record of no run the record itself.
func messageKey(rec *store.Record) string {
	if rec.RunID != "" {
		return rec.RunID
	}
	return rec.ID
}

// fileParts are a record's attachments as file parts that link to GET
// /v1/sessions/{id}/records/{record}/attachments/{n}, so that the history stays small and useChat does not
// post images back.
func fileParts(sessionID string, rec *store.Record) []map[string]any {
	var parts []map[string]any
	for i, a := range rec.Attachments {
		p := map[string]any{"type": "file", "mediaType": a.MediaType,
			"url": "/v1/sessions/" + url.PathEscape(sessionID) + "/records/" + url.PathEscape(rec.ID) + "/attachments/" + strconv.Itoa(i)}
		if a.Name != "" {
			p["filename"] = a.Name
		}
		parts = append(parts, p)
	}
	return parts
}
