package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"unicode/utf8"

	"chatd/internal/runevent"
	"chatd/internal/store"
)

// Limits on session fields.
const (
	maxTitleBytes    = 500
	maxMetadataBytes = 16 << 10
)

type sessionWrite struct {
	Title    *string         `json:"title"`
	Agent    string          `json:"agent"`
	Metadata json.RawMessage `json:"metadata"`
}

func (in *sessionWrite) validate() error {
	if in.Title != nil && (len(*in.Title) > maxTitleBytes || !utf8.ValidString(*in.Title)) {
		return &apiError{status: http.StatusBadRequest, code: "invalid_title", message: "title must be UTF-8 text of at most 500 bytes"}
	}
	if m := bytes.TrimSpace(in.Metadata); len(m) > 0 && !bytes.Equal(m, []byte("null")) {
		if m[0] != '{' {
			return &apiError{status: http.StatusBadRequest, code: "invalid_metadata", message: "metadata must be a JSON object"}
		}
		if len(m) > maxMetadataBytes {
			return &apiError{status: http.StatusBadRequest, code: "invalid_metadata", message: "metadata is larger than 16 KiB"}
		}
		in.Metadata = m
	} else {
		in.Metadata = nil
	}
	return nil
}

func (s *server) createSession(w http.ResponseWriter, r *http.Request) error {
	var in sessionWrite
	if err := s.decode(w, r, &in); err != nil {
		return err
	}
	if err := in.validate(); err != nil {
		return err
	}
	if err := checkAgent(r.Context(), in.Agent); err != nil {
		return err
	}
	sess := &store.Session{Agent: in.Agent, Metadata: in.Metadata}
	if in.Title != nil {
		sess.Title = *in.Title
	}
	if err := s.Chat.CreateSession(r.Context(), user(r.Context()), sess); err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, sessionOf(sess))
}

func (s *server) listSessions(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	page := store.Page{Cursor: q.Get("cursor")}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 200 {
			return &apiError{status: http.StatusBadRequest, code: "invalid_limit", message: "limit must be a number from 1 to 200"}
		}
		page.Limit = n
	}
	list, next, err := s.Store.Sessions(r.Context(), user(r.Context()), page)
	if errors.Is(err, store.ErrNotFound) {
		return &apiError{status: http.StatusBadRequest, code: "invalid_cursor", message: "cursor is not one this server gave out; start without it"}
	}
	if err != nil {
		return err
	}
	out := make([]sessionJSON, len(list))
	for i := range list {
		out[i] = sessionOf(&list[i])
	}
	return writeJSON(w, http.StatusOK, map[string]any{"sessions": out, "next_cursor": next})
}

func (s *server) getSession(w http.ResponseWriter, r *http.Request) error {
	sess, err := s.Store.Session(r.Context(), user(r.Context()), r.PathValue("id"))
	if err != nil {
		return sessionErr(err, r)
	}
	return writeJSON(w, http.StatusOK, sessionOf(sess))
}

func (s *server) updateSession(w http.ResponseWriter, r *http.Request) error {
	var in sessionWrite
	if err := s.decode(w, r, &in); err != nil {
		return err
	}
	if err := in.validate(); err != nil {
		return err
	}
	if in.Agent != "" {
		return &apiError{status: http.StatusBadRequest, code: "immutable_agent", message: "a session's agent cannot change"}
	}
	sess, err := s.Store.UpdateSession(r.Context(), user(r.Context()), r.PathValue("id"), store.SessionPatch{Title: in.Title, Metadata: in.Metadata})
	if err != nil {
		return sessionErr(err, r)
	}
	return writeJSON(w, http.StatusOK, sessionOf(sess))
}

func (s *server) deleteSession(w http.ResponseWriter, r *http.Request) error {
	if err := s.Chat.DeleteSession(r.Context(), user(r.Context()), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) listMessages(w http.ResponseWriter, r *http.Request) error {
	recs, err := s.Store.Records(r.Context(), user(r.Context()), r.PathValue("id"))
	if err != nil {
		return sessionErr(err, r)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"messages": runevent.Records(recs)})
}

// sessionErr names the session a not-found error is about.
func sessionErr(err error, r *http.Request) error {
	if errors.Is(err, store.ErrNotFound) {
		return &apiError{status: http.StatusNotFound, code: "session_not_found", message: "no session " + strconv.Quote(r.PathValue("id"))}
	}
	return err
}

// listTools answers GET /v1/tools?agent=NAME&context=JSON&page=…&tab=…&subtab=…: the tools the agent
// offers a request with that context, as a run would offer them without selected_tools. context is a
// request's "context" object (at most 16 KiB); page, tab and subtab replace its keys of the same name.
func (s *server) listTools(w http.ResponseWriter, r *http.Request) error {
	type toolWire struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
		Source      string          `json:"source"`
		ReadOnly    bool            `json:"read_only"`
	}
	const maxContext = 16 << 10
	q := r.URL.Query()
	var reqCtx map[string]any
	raw := q.Get("context")
	if len(raw) > maxContext {
		return &apiError{status: http.StatusBadRequest, code: "invalid_context",
			message: "the context parameter is " + byteSize(int64(len(raw))) + ", more than the limit of " + byteSize(maxContext)}
	}
	if raw != "" {
		if err := json.Unmarshal([]byte(raw), &reqCtx); err != nil || reqCtx == nil {
			return &apiError{status: http.StatusBadRequest, code: "invalid_context",
				message: `the context parameter must be a URL-encoded JSON object, such as {"page":"reports"}`}
		}
	}
	for _, key := range [...]string{"page", "tab", "subtab"} {
		if v, ok := q[key]; ok {
			if reqCtx == nil {
				reqCtx = make(map[string]any, 3)
			}
			reqCtx[key] = v[0]
		}
	}
	if err := checkAgent(r.Context(), q.Get("agent")); err != nil {
		return err
	}
	infos, err := s.Chat.Tools(q.Get("agent"), reqCtx)
	if err != nil {
		return err
	}
	out := make([]toolWire, 0, len(infos))
	for _, t := range infos {
		out = append(out, toolWire{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema, Source: t.Source, ReadOnly: t.ReadOnly})
	}
	return writeJSON(w, http.StatusOK, map[string]any{"tools": out})
}

// safeImages are the media types an attachment is served as; any other is served as a download.
var safeImages = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// attachment answers GET /v1/sessions/{id}/records/{record}/attachments/{n}: one attachment's bytes.
func (s *server) attachment(w http.ResponseWriter, r *http.Request) error {
	// Only the canonical decimal names an attachment: "+0" and "00" would make one attachment many URLs.
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 0 || strconv.Itoa(n) != r.PathValue("n") {
		n = -1 // no such attachment
	}
	a, err := s.Store.Attachment(r.Context(), user(r.Context()), r.PathValue("id"), r.PathValue("record"), n)
	if errors.Is(err, store.ErrNotFound) {
		return &apiError{status: http.StatusNotFound, code: "not_found", message: "no such attachment"}
	}
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", a.MediaType)
	if !safeImages[a.MediaType] {
		// An SVG or anything else a tool returned could script this origin: never inline.
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Disposition", "attachment")
	}
	h.Set("Content-Length", strconv.Itoa(len(a.Data)))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	// A record never changes: its attachments may be kept, by this user's browser only.
	h.Set("Cache-Control", "private, max-age=31536000, immutable")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(a.Data)
	}
	return nil
}
