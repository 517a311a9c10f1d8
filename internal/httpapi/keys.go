package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"chatd/internal/auth"
	"chatd/internal/store"
)

// keyJSON is an API key on the wire; the secret only in the answer that made it.
type keyJSON struct {
	ID        string       `json:"id"`
	Key       string       `json:"key,omitempty"`
	User      string       `json:"user"`
	Name      string       `json:"name"`
	Prefix    string       `json:"prefix"`
	Admin     bool         `json:"admin"`
	Agents    []string     `json:"agents"`
	Limits    store.Limits `json:"limits"`
	CreatedAt time.Time    `json:"created_at"`
	ExpiresAt *time.Time   `json:"expires_at"`
	RevokedAt *time.Time   `json:"revoked_at"`
}

func keyOf(k *store.APIKey) keyJSON {
	agents := k.Agents
	if agents == nil {
		agents = []string{}
	}
	return keyJSON{ID: k.ID, User: k.User, Name: k.Name, Prefix: k.Prefix, Admin: k.Admin, Agents: agents,
		Limits: k.Limits, CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt, RevokedAt: k.RevokedAt}
}

// createKey answers POST /v1/keys (admins): a new key, its secret shown in this answer only.
func (s *server) createKey(w http.ResponseWriter, r *http.Request) error {
	if err := s.adminOnly(r); err != nil {
		return err
	}
	var in struct {
		User      string       `json:"user"`
		Name      string       `json:"name"`
		Admin     bool         `json:"admin"`
		Agents    []string     `json:"agents"`
		Limits    store.Limits `json:"limits"`
		ExpiresIn string       `json:"expires_in"` // a duration: "720h", or days: "90d"
	}
	if err := s.decode(w, r, &in); err != nil {
		return err
	}
	spec := auth.KeySpec{User: in.User, Name: in.Name, Admin: in.Admin, Agents: in.Agents, Limits: in.Limits}
	if in.ExpiresIn != "" {
		d, err := auth.ParseExpiry(in.ExpiresIn)
		if err != nil {
			return &apiError{status: http.StatusBadRequest, code: "invalid_expires_in", message: err.Error()}
		}
		spec.ExpiresIn = d
	}
	for _, a := range in.Agents {
		if !s.Chat.HasAgent(a) {
			return &apiError{status: http.StatusBadRequest, code: "unknown_agent", message: "no agent " + strconv.Quote(a)}
		}
	}
	secret, k, err := s.newKey(r, spec)
	if err != nil {
		return err
	}
	out := keyOf(k)
	out.Key = secret
	w.Header().Set("Cache-Control", "no-store")
	return writeJSON(w, http.StatusCreated, out)
}

func (s *server) newKey(r *http.Request, spec auth.KeySpec) (string, *store.APIKey, error) {
	if s.Auth == nil {
		return "", nil, &apiError{status: http.StatusConflict, code: "auth_not_enabled",
			message: "this chatd was started without auth; create keys with chatd keys create and restart it"}
	}
	secret, k, err := s.Auth.CreateKey(r.Context(), spec)
	if errors.Is(err, auth.ErrInvalidSpec) {
		return "", nil, &apiError{status: http.StatusBadRequest, code: "invalid_key_spec", message: err.Error()}
	}
	return secret, k, err
}

// listKeys answers GET /v1/keys (admins): every key, or one user's (?user=, or X-Chatd-As-User),
// never a secret.
func (s *server) listKeys(w http.ResponseWriter, r *http.Request) error {
	if err := s.adminOnly(r); err != nil {
		return err
	}
	who := r.URL.Query().Get("user")
	if r.Header.Get(AsUserHeader) != "" {
		who = user(r.Context()) // what that user would see: their own keys
	}
	keys, err := s.Store.Keys(r.Context(), who)
	if err != nil {
		return err
	}
	out := make([]keyJSON, 0, len(keys))
	for i := range keys {
		out = append(out, keyOf(&keys[i]))
	}
	return writeJSON(w, http.StatusOK, map[string]any{"keys": out})
}

// revokedKeyJSON is the answer to a revoke: the key, and what became of the runs it started.
type revokedKeyJSON struct {
	keyJSON
	// RunsCancelled counts the key's queued, running and waiting runs cancelled or asked to cancel.
	RunsCancelled int `json:"runs_cancelled"`
	// RunsNotStopped, when set, says that some of the key's runs may go on, and why.
	RunsNotStopped string `json:"runs_not_stopped,omitempty"`
}

// revokeWait bounds the work of a revoke on the key's runs: a key may have started many.
const revokeWait = 30 * time.Second

// revokeKey answers DELETE /v1/keys/{id} (admins): the key stops working at once, with its sign-ins and
// the runs it started. The key is revoked once the answer is 200, even when some of its runs could not
// be asked to stop (runs_not_stopped): revoking it again asks them again.
func (s *server) revokeKey(w http.ResponseWriter, r *http.Request) error {
	if err := s.adminOnly(r); err != nil {
		return err
	}
	if s.Auth == nil {
		return &apiError{status: http.StatusNotFound, code: "key_not_found", message: "no key " + strconv.Quote(r.PathValue("id"))}
	}
	k, err := s.Auth.RevokeKey(r.Context(), "", r.PathValue("id"))
	if errors.Is(err, store.ErrNotFound) {
		return &apiError{status: http.StatusNotFound, code: "key_not_found", message: "no key " + strconv.Quote(r.PathValue("id"))}
	}
	if err != nil {
		return err
	}
	// What the key started stops spending with it, on every instance: its running runs are cancelled
	// (their answers so far kept) and its queued ones never start. The revoke is committed: a client
	// that goes away now must not leave them running.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), revokeWait)
	defer cancel()
	out := revokedKeyJSON{keyJSON: keyOf(k)}
	out.RunsCancelled, err = s.Chat.CancelKey(ctx, k.User, k.ID, "the API key that started the run was revoked")
	if err != nil { // logged by CancelKey, each run's failure with its run
		out.RunsNotStopped = "the key is revoked, but some of the runs it started could not be asked to stop and may go on; revoke the key again to retry"
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *server) adminOnly(r *http.Request) error {
	if !principal(r.Context()).Admin {
		return errAdminOnly
	}
	return nil
}
