package httpapi

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"chatd/internal/auth"
	"chatd/internal/chat"
	"chatd/internal/store"
)

// AsUserHeader is how an admin reads another user's data: a GET or HEAD with this header sees what
// that user sees. Writes are always the caller's own, but for one: a decision on a call another user's
// run waits for (POST /v1/runs/{id}/approvals), which the issue of approvals gives the run's owner or an
// admin; the decision is recorded with who made it.
const AsUserHeader = "X-Chatd-As-User"

type principalKey struct{}

// local is the caller of a server without an Authenticator: chatd in local mode.
var local = auth.Local

// authenticate attaches the caller to the request's context, or refuses the request: with 401 when
// it carries no valid credentials and auth is required, 429 when it passes its requests per minute.
// The web UI's files, /healthz and the sign-in itself need no caller.
func (s *server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !needsCaller(r) {
			next.ServeHTTP(w, r)
			return
		}
		p := local
		if s.Auth != nil {
			var err error
			if p, err = s.Auth.Authenticate(r); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		if p.Method == auth.MethodTrusted && !s.hostAllowed(r.Host) {
			// The proxy's header is believed from its address, and a page that rebinds its own name to
			// that address sends from it too: only the names chatd is served under are the proxy's.
			s.writeError(w, r, &apiError{status: http.StatusForbidden, code: "forbidden_host",
				message: "a request signed in by the trusted proxy must be for one of chatd's names; add the name the proxy forwards to allowed_hosts (CHATD_ALLOWED_HOSTS)"})
			return
		}
		if !s.allow(w, r, p) {
			return
		}
		ctx := context.WithValue(r.Context(), principalKey{}, p)
		if as := r.Header.Get(AsUserHeader); as != "" {
			if !p.Admin {
				s.writeError(w, r, errAdminOnly)
				return
			}
			if r.Method != http.MethodGet && r.Method != http.MethodHead && !isDecision(r) {
				s.writeError(w, r, &apiError{status: http.StatusBadRequest, code: "as_user_read_only",
					message: AsUserHeader + " is for reading another user's data (GET) and deciding on its runs' waiting calls; other writes are the caller's own"})
				return
			}
			ctx = context.WithValue(ctx, asUserKey{}, as)
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

type asUserKey struct{}

// isDecision reports whether r is POST /v1/runs/{id}/approvals: the one write an admin may make as
// another user.
func isDecision(r *http.Request) bool {
	id, ok := strings.CutPrefix(r.URL.Path, "/v1/runs/")
	if ok {
		id, ok = strings.CutSuffix(id, "/approvals")
	}
	return ok && r.Method == http.MethodPost && id != "" && !strings.Contains(id, "/")
}

// allow counts a request of the caller against its requests per minute; past them it answers 429.
func (s *server) allow(w http.ResponseWriter, r *http.Request, p *auth.Principal) bool {
	rpm := p.Limits.RequestsPerMinute
	if rpm <= 0 {
		return true
	}
	if wait := s.Limiter.Allow(r.Context(), p.User, p.LimitKey(auth.LimitRequests), rpm, s.now()); wait > 0 {
		s.writeError(w, r, tooMany(auth.LimitRequests, wait, "the limit of "+strconv.Itoa(rpm)+" requests a minute is reached"))
		return false
	}
	return true
}

// needsCaller reports whether a request needs an authenticated caller: every API request but the
// sign-in and sign-out themselves; the web UI's files and /healthz are public. The exceptions are
// named by method: any other method of the sign-in path — a HEAD, which the GET route serves — must
// not reach a handler without a caller, where principal would answer the local user, an admin.
func needsCaller(r *http.Request) bool {
	p := r.URL.Path
	if len(p) < 4 || p[:4] != apiRoot[:4] {
		return false
	}
	return p != authSessionPath || (r.Method != http.MethodPost && r.Method != http.MethodDelete)
}

const authSessionPath = "/v1/auth/session"

var errAdminOnly = &apiError{status: http.StatusForbidden, code: "admin_required", message: "this needs an admin's API key"}

// principal returns the caller of the request.
func principal(ctx context.Context) *auth.Principal {
	if p, ok := ctx.Value(principalKey{}).(*auth.Principal); ok {
		return p
	}
	return local
}

// user is the user whose data a request reads and writes: the caller, or for an admin's read with
// X-Chatd-As-User, that user.
func user(ctx context.Context) string {
	if as, ok := ctx.Value(asUserKey{}).(string); ok {
		return as
	}
	return principal(ctx).User
}

// account is what a send of the caller may use: its key's agents and its limits.
func (s *server) account(ctx context.Context) chat.Account {
	p := principal(ctx)
	a := chat.Account{KeyID: p.KeyID, Quota: p.Quota(s.now())}
	if len(p.Agents) > 0 {
		a.Agent = p.AllowsAgent
	}
	return a
}

func tooMany(code string, wait time.Duration, msg string) *apiError {
	secs := retrySeconds(wait)
	return &apiError{status: http.StatusTooManyRequests, code: code,
		message: msg + "; retry in " + strconv.FormatInt(secs, 10) + " s", retryAfter: secs}
}

// retrySeconds is a wait as Retry-After says it: whole seconds, at least 1.
func retrySeconds(wait time.Duration) int64 {
	return max(int64(math.Ceil(wait.Seconds())), 1)
}

// budgetRetry is the Retry-After, in seconds, of a run that one of the caller's token or spend limits
// ended (code names it): until the limit's period ends. It is 0 for a run that ended otherwise.
func (s *server) budgetRetry(ctx context.Context, code string) int64 {
	if code != store.LimitTokens && code != store.LimitSpend {
		return 0
	}
	p, now := principal(ctx), s.now()
	for _, l := range p.Quota(now) {
		if l.Name == code {
			return retrySeconds(auth.RetryAfter(l, p.Limits.SpendPeriod, now))
		}
	}
	return 0
}

// limitError is the refusal of a send that would pass one of the caller's limits.
func (s *server) limitError(ctx context.Context, e *store.LimitError) *apiError {
	wait := auth.RetryAfter(e.Limit, principal(ctx).Limits.SpendPeriod, s.now())
	return tooMany(e.Name, wait, auth.LimitMessage(e))
}

func (s *server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// authError is the answer to a refused authentication.
func authError(e *auth.Error) *apiError {
	return &apiError{status: e.Status, code: e.Code, message: e.Message}
}

// whoami is the body of the sign-in routes: who the caller is.
type whoami struct {
	User      string     `json:"user"`
	Admin     bool       `json:"admin"`
	Method    string     `json:"method"`
	KeyID     string     `json:"key_id,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

func whoamiOf(p *auth.Principal) whoami {
	return whoami{User: p.User, Admin: p.Admin, Method: p.Method, KeyID: p.KeyID, ExpiresAt: p.ExpiresAt}
}

// getAuthSession answers GET /v1/auth/session: who the caller is (401 when no one).
func (s *server) getAuthSession(w http.ResponseWriter, r *http.Request) error {
	return writeJSON(w, http.StatusOK, whoamiOf(principal(r.Context())))
}

// signIn answers POST /v1/auth/session: it exchanges an API key for the web UI's sign-in cookie,
// HttpOnly and SameSite=Strict, so that the page's scripts never hold the key or the cookie.
func (s *server) signIn(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Key string `json:"key"`
	}
	if err := s.decode(w, r, &in); err != nil {
		return err
	}
	if s.Auth == nil {
		return &apiError{status: http.StatusConflict, code: "auth_not_enabled",
			message: "this chatd runs without auth (local mode): there is nothing to sign in to"}
	}
	// A sign-in is a request of the key's: it counts against its requests per minute.
	kp, err := s.Auth.Verify(r.Context(), in.Key)
	if err != nil {
		return err
	}
	if !s.allow(w, r, kp) {
		return nil
	}
	value, p, expires, err := s.Auth.SignIn(r.Context(), in.Key)
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{Name: auth.CookieName, Value: value, Path: "/", Expires: expires,
		HttpOnly: true, Secure: secure(r), SameSite: http.SameSiteStrictMode})
	return writeJSON(w, http.StatusOK, whoamiOf(p))
}

// secure reports whether the browser reached chatd over HTTPS: directly, or through a proxy that says
// so. A client that claims it falsely only makes its own cookie HTTPS-only.
func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// signOut answers DELETE /v1/auth/session: the sign-in ends and the cookie is cleared.
func (s *server) signOut(w http.ResponseWriter, r *http.Request) error {
	if c, err := r.Cookie(auth.CookieName); err == nil && s.Auth != nil {
		if err := s.Auth.SignOut(r.Context(), c.Value); err != nil {
			return err
		}
	}
	http.SetCookie(w, &http.Cookie{Name: auth.CookieName, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: secure(r), SameSite: http.SameSiteStrictMode})
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// checkAgent refuses a caller whose key does not allow the agent.
func checkAgent(ctx context.Context, name string) error {
	if name == "" {
		name = "default"
	}
	if !principal(ctx).AllowsAgent(name) {
		return &apiError{status: http.StatusForbidden, code: "agent_not_allowed", message: "this API key may not use agent " + strconv.Quote(name)}
	}
	return nil
}
