package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"chatd/internal/auth"
	"chatd/internal/chat"
	"chatd/internal/httpapi"
	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
	"chatd/internal/store/sqlite"
	"chatd/internal/tool"
)

// keyedEnv is chatd wired as cmd/chatd wires it when it has API keys: SQLite, the scripted upstream, an
// Authenticator on the same store whose clock the test moves, and the agents "default" and "support".
type keyedEnv struct {
	srv      *httptest.Server
	upstream *llmtest.Server
	db       *sqlite.DB
	chat     *chat.Service
	auth     *auth.Authenticator
	clock    *stepClock
}

// newKeyedEnv starts chatd with an Authenticator made from authOpts (Store and Now are set here;
// Loopback is true, as chatd listening on 127.0.0.1). Every model call is answered "ok" unless
// respond says otherwise.
func newKeyedEnv(t *testing.T, api httpapi.Options, authOpts auth.Options) *keyedEnv {
	t.Helper()
	return newKeyedEnvWith(t, api, authOpts, chat.Options{Agents: map[string]chat.Agent{"support": {}}})
}

// newKeyedEnvWith is newKeyedEnv with the chat service's options (its agents) given.
func newKeyedEnvWith(t *testing.T, api httpapi.Options, authOpts auth.Options, chatOpts chat.Options) *keyedEnv {
	t.Helper()
	e := &keyedEnv{upstream: llmtest.NewServer(t), clock: &stepClock{now: time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)}}
	e.upstream.Respond = func(int, llmtest.Request) llmtest.Turn { return llmtest.Turn{Text: "ok"} }
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "chatd.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.db = db
	var tools *tool.Registry
	e.chat, tools = newChat(t, db, e.upstream, fixedNow, chatOpts)
	authOpts.Store, authOpts.Now, authOpts.Loopback = db, e.clock.Now, true
	if e.auth, err = auth.New(t.Context(), authOpts); err != nil {
		t.Fatal(err)
	}
	api.Chat, api.Store, api.Tools, api.Auth = e.chat, db, tools, e.auth
	e.srv = httptest.NewServer(httpapi.New(api))
	t.Cleanup(func() {
		e.srv.Close()
		closeChat(t, e.chat, tools)
		db.Close()
	})
	return e
}

// key makes a key and returns its secret and id.
func (e *keyedEnv) key(t *testing.T, spec auth.KeySpec) (secret, id string) {
	t.Helper()
	secret, k, err := e.auth.CreateKey(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return secret, k.ID
}

// bearer is the header of a request sent with key, and more header lines as name, value pairs.
func (e *keyedEnv) bearer(key string, more ...string) map[string]string {
	h := map[string]string{"Authorization": "Bearer " + key}
	for i := 0; i+1 < len(more); i += 2 {
		h[more[i]] = more[i+1]
	}
	return h
}

// call makes a request with the header given (and Content-Type application/json for a body, unless
// the header names one) and reads the whole answer: a stream must end for it to return.
func (e *keyedEnv) call(t *testing.T, method, path, body string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, raw
}

// wantError checks that an answer is chatd's JSON error with this status and code.
func (e *keyedEnv) wantError(t *testing.T, what string, resp *http.Response, raw []byte, status int, code string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Errorf("%s: %d %s; want %d %s", what, resp.StatusCode, raw, status, code)
		return
	}
	if got := jsonError(t, resp, raw); got.Code != code {
		t.Errorf("%s: code %q (%s); want %q", what, got.Code, got.Message, code)
	}
}

// want401 checks a refused authentication: 401, the code, and a WWW-Authenticate challenge.
func (e *keyedEnv) want401(t *testing.T, what string, resp *http.Response, raw []byte, code string) {
	t.Helper()
	e.wantError(t, what, resp, raw, http.StatusUnauthorized, code)
	if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer ") {
		t.Errorf("%s: WWW-Authenticate %q, want a Bearer challenge", what, got)
	}
}

// whoamiOf decodes the answer of the sign-in routes.
func (e *keyedEnv) who(t *testing.T, raw []byte) (who struct {
	User, Method string
	Admin        bool
	KeyID        string `json:"key_id"`
}) {
	t.Helper()
	if err := json.Unmarshal(raw, &who); err != nil {
		t.Fatalf("who am I: %v: %s", err, raw)
	}
	return who
}

// TestAuthRefusals: each way a request can fail to authenticate answers 401 with its own code and a
// WWW-Authenticate challenge.
func TestAuthRefusals(t *testing.T) {
	e := newKeyedEnv(t, httpapi.Options{}, auth.Options{})
	admin, _ := e.key(t, auth.KeySpec{User: "root", Admin: true})
	alice, _ := e.key(t, auth.KeySpec{User: "alice"})
	revoked, revokedID := e.key(t, auth.KeySpec{User: "alice", Name: "old laptop"})
	expiring, _ := e.key(t, auth.KeySpec{User: "alice", ExpiresIn: time.Hour})

	// Every key works first, so that a refusal below is not a cache's first look.
	for _, k := range []string{alice, revoked, expiring} {
		if resp, raw := e.call(t, "GET", "/v1/sessions", "", e.bearer(k)); resp.StatusCode != http.StatusOK {
			t.Fatalf("a valid key: %d %s", resp.StatusCode, raw)
		}
	}
	unknown := auth.KeyPrefix + strings.Repeat("A", 43)
	tests := []struct {
		name   string
		method string
		header map[string]string
		code   string
	}{
		{"no credentials", "GET", nil, "auth_required"},
		{"no credentials, a write", "POST", nil, "auth_required"},
		{"not Bearer", "GET", map[string]string{"Authorization": "Basic YWxpY2U6cHc="}, "invalid_authorization"},
		{"Bearer without a key", "GET", map[string]string{"Authorization": "Bearer "}, "invalid_authorization"},
		{"a key without Bearer", "GET", map[string]string{"Authorization": alice}, "invalid_authorization"},
		{"unknown key", "GET", e.bearer(unknown), "invalid_key"},
		{"malformed key", "GET", e.bearer("chd_short"), "invalid_key"},
		{"another service's key", "POST", e.bearer("sk-" + strings.Repeat("x", 44)), "invalid_key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := ""
			if tt.method == "POST" {
				body = `{"title":"x"}`
			}
			resp, raw := e.call(t, tt.method, "/v1/sessions", body, tt.header)
			e.want401(t, tt.name, resp, raw, tt.code)
		})
	}

	// Revoked by an admin: refused at once, though the key was verified and cached a moment ago.
	resp, raw := e.call(t, "DELETE", "/v1/keys/"+revokedID, "", e.bearer(admin))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"revoked_at":"`) {
		t.Fatalf("revoke: %d %s", resp.StatusCode, raw)
	}
	resp, raw = e.call(t, "GET", "/v1/sessions", "", e.bearer(revoked))
	e.want401(t, "revoked key", resp, raw, "key_revoked")

	// Expired: the key's hour passes on the Authenticator's clock.
	e.clock.Advance(time.Hour)
	resp, raw = e.call(t, "GET", "/v1/sessions", "", e.bearer(expiring))
	e.want401(t, "expired key", resp, raw, "key_expired")

	// The others still work: a refusal is the key's, not the user's.
	if resp, raw := e.call(t, "GET", "/v1/sessions", "", e.bearer(alice)); resp.StatusCode != http.StatusOK {
		t.Errorf("alice's other key: %d %s", resp.StatusCode, raw)
	}
	// No refusal stored a thing.
	if _, raw := e.call(t, "GET", "/v1/sessions", "", e.bearer(alice)); !strings.Contains(string(raw), `"sessions":[]`) {
		t.Errorf("sessions after refused requests: %s", raw)
	}
}

// TestAuthAgentNotAllowed: a key limited to some agents may not send to, make sessions of, or list the
// tools of another.
func TestAuthAgentNotAllowed(t *testing.T) {
	e := newKeyedEnv(t, httpapi.Options{}, auth.Options{})
	support, _ := e.key(t, auth.KeySpec{User: "helpdesk", Agents: []string{"support"}})
	h := e.bearer(support)
	for _, tt := range []struct{ name, method, path, body string }{
		{"send, agent named", "POST", "/v1/chat", `{"message":"hi","agent":"default"}`},
		{"send, default agent", "POST", "/v1/chat", `{"message":"hi"}`},
		{"stream", "POST", "/v1/chat/stream", `{"message":"hi"}`},
		{"UI send", "POST", "/v1/ui/chat", `{"id":"c1","messages":[{"id":"m1","role":"user","parts":[{"type":"text","text":"hi"}]}]}`},
		{"new session", "POST", "/v1/sessions", `{"agent":"default"}`},
		{"tools", "GET", "/v1/tools?agent=default", ``},
	} {
		resp, raw := e.call(t, tt.method, tt.path, tt.body, h)
		e.wantError(t, tt.name, resp, raw, http.StatusForbidden, "agent_not_allowed")
	}
	if _, raw := e.call(t, "GET", "/v1/sessions", "", h); !strings.Contains(string(raw), `"sessions":[]`) {
		t.Errorf("sessions after refused sends: %s", raw)
	}
	if n := len(e.upstream.Requests()); n != 0 {
		t.Errorf("the refused sends made %d model calls", n)
	}
	resp, raw := e.call(t, "POST", "/v1/chat", `{"message":"hi","agent":"support"}`, h)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"status":"completed"`) {
		t.Errorf("a send to its own agent: %d %s", resp.StatusCode, raw)
	}
}

// TestAuthTrustedHeader: a trusted proxy's identity header names the caller — only when the request
// comes from a trusted proxy's address.
func TestAuthTrustedHeader(t *testing.T) {
	const header = "X-Forwarded-Email"
	t.Run("from a trusted proxy", func(t *testing.T) {
		e := newKeyedEnv(t, httpapi.Options{}, auth.Options{TrustedHeader: header,
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Admins: []string{"ops@example.com"}})
		resp, raw := e.call(t, "GET", "/v1/auth/session", "", map[string]string{header: "carol@example.com"})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, raw)
		}
		if who := e.who(t, raw); who.User != "carol@example.com" || who.Method != "trusted_header" || who.Admin {
			t.Errorf("who: %s", raw)
		}
		if _, raw := e.call(t, "GET", "/v1/auth/session", "", map[string]string{header: "ops@example.com"}); !e.who(t, raw).Admin {
			t.Errorf("a listed admin: %s", raw)
		}
		// What the proxy's user makes is theirs.
		resp, raw = e.call(t, "POST", "/v1/sessions", `{"title":"carol's"}`, map[string]string{header: "carol@example.com"})
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("create: %d %s", resp.StatusCode, raw)
		}
		if _, raw := e.call(t, "GET", "/v1/sessions", "", map[string]string{header: "dave@example.com"}); !strings.Contains(string(raw), `"sessions":[]`) {
			t.Errorf("another user of the proxy sees %s", raw)
		}
		resp, raw = e.call(t, "GET", "/v1/sessions", "", nil)
		e.want401(t, "no header", resp, raw, "auth_required")
	})
	t.Run("from elsewhere", func(t *testing.T) {
		e := newKeyedEnv(t, httpapi.Options{}, auth.Options{TrustedHeader: header,
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
		for _, path := range []string{"/v1/auth/session", "/v1/sessions"} {
			resp, raw := e.call(t, "GET", path, "", map[string]string{header: "carol@example.com"})
			e.want401(t, "header from 127.0.0.1 "+path, resp, raw, "auth_required")
		}
	})
}

// signIn exchanges a key for the sign-in cookie.
func (e *keyedEnv) signIn(t *testing.T, key string) *http.Cookie {
	t.Helper()
	resp, raw := e.call(t, "POST", "/v1/auth/session", `{"key":"`+key+`"}`, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("sign in: %d %s", resp.StatusCode, raw)
	}
	for _, c := range resp.Cookies() {
		if c.Name == auth.CookieName {
			return c
		}
	}
	t.Fatalf("sign in set no %s cookie: %v", auth.CookieName, resp.Header.Values("Set-Cookie"))
	return nil
}

func (e *keyedEnv) withCookie(c *http.Cookie, more ...string) map[string]string {
	h := map[string]string{"Cookie": c.Name + "=" + c.Value}
	for i := 0; i+1 < len(more); i += 2 {
		h[more[i]] = more[i+1]
	}
	return h
}

// TestAuthSignInCookie: the web UI's sign-in: a key is exchanged for an HttpOnly, SameSite=Strict
// cookie that works as the key does, until it is signed out, its key revoked, or its time is up.
func TestAuthSignInCookie(t *testing.T) {
	e := newKeyedEnv(t, httpapi.Options{}, auth.Options{SessionTTL: 24 * time.Hour})
	admin, _ := e.key(t, auth.KeySpec{User: "root", Admin: true})
	alice, aliceID := e.key(t, auth.KeySpec{User: "alice"})

	resp, raw := e.call(t, "POST", "/v1/auth/session", `{"key":"`+alice+`"}`, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("sign in: %d %s", resp.StatusCode, raw)
	}
	if who := e.who(t, raw); who.User != "alice" || who.Method != "cookie" || who.KeyID != aliceID {
		t.Errorf("sign in answered %s", raw)
	}
	if strings.Contains(string(raw), alice) {
		t.Errorf("the sign-in answer holds the key: %s", raw)
	}
	cookies := resp.Cookies()
	if len(cookies) != 1 {
		t.Fatalf("Set-Cookie: %v", resp.Header.Values("Set-Cookie"))
	}
	c := cookies[0]
	if c.Name != auth.CookieName || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Value == "" || c.Value == alice {
		t.Errorf("cookie %q: want %s, HttpOnly, SameSite=Strict, Path=/, not the key", resp.Header.Get("Set-Cookie"), auth.CookieName)
	}

	resp, raw = e.call(t, "GET", "/v1/auth/session", "", e.withCookie(c))
	if who := e.who(t, raw); resp.StatusCode != http.StatusOK || who.User != "alice" || who.Method != "cookie" {
		t.Errorf("who with the cookie: %d %s", resp.StatusCode, raw)
	}
	if resp, raw := e.call(t, "POST", "/v1/sessions", `{"title":"from the UI"}`, e.withCookie(c)); resp.StatusCode != http.StatusCreated {
		t.Errorf("create with the cookie: %d %s", resp.StatusCode, raw)
	}
	if _, raw := e.call(t, "GET", "/v1/sessions", "", e.bearer(alice)); !strings.Contains(string(raw), `"title":"from the UI"`) {
		t.Errorf("the cookie's session is not alice's: %s", raw)
	}
	resp, raw = e.call(t, "GET", "/v1/auth/session", "", nil)
	e.want401(t, "who without credentials", resp, raw, "auth_required")

	// A bad key gets no cookie.
	resp, raw = e.call(t, "POST", "/v1/auth/session", `{"key":"chd_nope"}`, nil)
	e.want401(t, "sign in with a bad key", resp, raw, "invalid_key")
	if len(resp.Cookies()) != 0 {
		t.Errorf("a refused sign-in set %v", resp.Header.Values("Set-Cookie"))
	}
	resp, raw = e.call(t, "GET", "/v1/sessions", "", map[string]string{"Cookie": auth.CookieName + "=chs_forged"})
	e.want401(t, "a forged cookie", resp, raw, "invalid_session")

	// Signing out ends the sign-in and clears the cookie; another sign-in of the same key lives on.
	other := e.signIn(t, alice)
	resp, raw = e.call(t, "DELETE", "/v1/auth/session", "", e.withCookie(c))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("sign out: %d %s", resp.StatusCode, raw)
	}
	cleared := resp.Cookies()
	if len(cleared) != 1 || cleared[0].Name != auth.CookieName || cleared[0].Value != "" || cleared[0].MaxAge >= 0 {
		t.Errorf("sign out's Set-Cookie %v does not clear the cookie", resp.Header.Values("Set-Cookie"))
	}
	resp, raw = e.call(t, "GET", "/v1/sessions", "", e.withCookie(c))
	e.want401(t, "a signed-out cookie", resp, raw, "invalid_session")
	if resp, raw := e.call(t, "GET", "/v1/sessions", "", e.withCookie(other)); resp.StatusCode != http.StatusOK {
		t.Errorf("another sign-in after a sign-out: %d %s", resp.StatusCode, raw)
	}

	// A sign-in lasts its SessionTTL.
	e.clock.Advance(24 * time.Hour)
	resp, raw = e.call(t, "GET", "/v1/sessions", "", e.withCookie(other))
	e.want401(t, "an expired sign-in", resp, raw, "session_expired")
	if resp, raw := e.call(t, "GET", "/v1/sessions", "", e.bearer(alice)); resp.StatusCode != http.StatusOK {
		t.Errorf("the key after its sign-in expired: %d %s", resp.StatusCode, raw)
	}

	// Revoking the key ends its sign-ins at once.
	third := e.signIn(t, alice)
	if resp, raw := e.call(t, "GET", "/v1/sessions", "", e.withCookie(third)); resp.StatusCode != http.StatusOK {
		t.Fatalf("a new sign-in: %d %s", resp.StatusCode, raw)
	}
	if resp, raw := e.call(t, "DELETE", "/v1/keys/"+aliceID, "", e.bearer(admin)); resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke: %d %s", resp.StatusCode, raw)
	}
	resp, raw = e.call(t, "GET", "/v1/sessions", "", e.withCookie(third))
	e.want401(t, "the sign-in of a revoked key", resp, raw, "invalid_session")
}

// TestAuthCrossOrigin: a browser page of another site cannot use the sign-in cookie (CSRF), nor sign
// in; a request that carries a key can come from anywhere, since no page can send the user's key.
func TestAuthCrossOrigin(t *testing.T) {
	e := newKeyedEnv(t, httpapi.Options{}, auth.Options{})
	alice, _ := e.key(t, auth.KeySpec{User: "alice"})
	c := e.signIn(t, alice)
	crossSite := []struct {
		name   string
		header []string
	}{
		{"Sec-Fetch-Site", []string{"Sec-Fetch-Site", "cross-site"}},
		{"Origin", []string{"Origin", "http://attacker.example"}},
		{"both", []string{"Sec-Fetch-Site", "cross-site", "Origin", "http://attacker.example"}},
	}
	for _, cs := range crossSite {
		t.Run(cs.name, func(t *testing.T) {
			for _, path := range []string{"/v1/chat", "/v1/sessions"} {
				resp, raw := e.call(t, "POST", path, `{"message":"hi","title":"x"}`, e.withCookie(c, cs.header...))
				e.wantError(t, "cookie "+path, resp, raw, http.StatusForbidden, "cross_origin_request")
			}
			resp, raw := e.call(t, "POST", "/v1/auth/session", `{"key":"`+alice+`"}`, map[string]string{cs.header[0]: cs.header[1]})
			e.wantError(t, "sign in", resp, raw, http.StatusForbidden, "cross_origin_request")
			if len(resp.Cookies()) != 0 {
				t.Errorf("a refused sign-in set %v", resp.Header.Values("Set-Cookie"))
			}
		})
	}
	if _, raw := e.call(t, "GET", "/v1/sessions", "", e.bearer(alice)); !strings.Contains(string(raw), `"sessions":[]`) {
		t.Errorf("sessions after refused cross-site requests: %s", raw)
	}
	if n := len(e.upstream.Requests()); n != 0 {
		t.Errorf("refused sends made %d model calls", n)
	}
	// A key goes anywhere; the cookie from the page's own origin too.
	resp, raw := e.call(t, "POST", "/v1/chat", `{"message":"hi"}`, e.bearer(alice, "Sec-Fetch-Site", "cross-site", "Origin", "http://attacker.example"))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"status":"completed"`) {
		t.Errorf("a cross-site send with a key: %d %s", resp.StatusCode, raw)
	}
	resp, raw = e.call(t, "POST", "/v1/sessions", `{"title":"same origin"}`, e.withCookie(c, "Sec-Fetch-Site", "same-origin"))
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("a same-origin write with the cookie: %d %s", resp.StatusCode, raw)
	}
}

// TestAuthPublicRoutes: the UI's files and /healthz need no caller; the API does.
func TestAuthPublicRoutes(t *testing.T) {
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, "<!doctype html><title>chatd</title>")
	})
	e := newKeyedEnv(t, httpapi.Options{UI: ui}, auth.Options{})
	e.key(t, auth.KeySpec{User: "alice"})
	for _, path := range []string{"/", "/chat/some-session", "/healthz", "/readyz"} {
		if resp, raw := e.call(t, "GET", path, "", nil); resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s without a key: %d %s", path, resp.StatusCode, raw)
		}
	}
	resp, raw := e.call(t, "GET", "/v1/models", "", nil)
	e.want401(t, "GET /v1/models without a key", resp, raw, "auth_required")
}

// TestAuthKeysAPI: only admins make, list and revoke keys; a key's secret is in the answer that made
// it and nowhere else.
func TestAuthKeysAPI(t *testing.T) {
	e := newKeyedEnv(t, httpapi.Options{}, auth.Options{})
	admin, adminID := e.key(t, auth.KeySpec{User: "root", Admin: true})
	alice, aliceID := e.key(t, auth.KeySpec{User: "alice"})

	for _, tt := range []struct{ method, path, body string }{
		{"POST", "/v1/keys", `{"user":"mallory","admin":true}`},
		{"GET", "/v1/keys", ``},
		{"GET", "/v1/keys?user=alice", ``},
		{"DELETE", "/v1/keys/" + adminID, ``},
		{"DELETE", "/v1/keys/" + aliceID, ``},
	} {
		resp, raw := e.call(t, tt.method, tt.path, tt.body, e.bearer(alice))
		e.wantError(t, "alice: "+tt.method+" "+tt.path, resp, raw, http.StatusForbidden, "admin_required")
	}
	if resp, raw := e.call(t, "GET", "/v1/sessions", "", e.bearer(admin)); resp.StatusCode != http.StatusOK {
		t.Errorf("the admin's key after alice tried to revoke it: %d %s", resp.StatusCode, raw)
	}

	resp, raw := e.call(t, "POST", "/v1/keys", `{"user":"dave","name":"laptop","agents":["support"]}`, e.bearer(admin))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, raw)
	}
	var made struct {
		ID, Key, User, Name string
		Agents              []string
	}
	if err := json.Unmarshal(raw, &made); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(made.Key, auth.KeyPrefix) || made.User != "dave" || made.Name != "laptop" || !slices.Equal(made.Agents, []string{"support"}) {
		t.Errorf("create answered %s", raw)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("the answer holding a secret has Cache-Control %q", cc)
	}
	resp, raw = e.call(t, "GET", "/v1/auth/session", "", e.bearer(made.Key))
	if who := e.who(t, raw); resp.StatusCode != http.StatusOK || who.User != "dave" || who.KeyID != made.ID {
		t.Errorf("the new key: %d %s", resp.StatusCode, raw)
	}

	for _, path := range []string{"/v1/keys", "/v1/keys?user=dave"} {
		resp, raw := e.call(t, "GET", path, "", e.bearer(admin))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("list: %d %s", resp.StatusCode, raw)
		}
		for _, secret := range []string{made.Key, admin, alice} {
			if strings.Contains(string(raw), secret) || strings.Contains(string(raw), secret[len(auth.KeyPrefix)+6:]) {
				t.Errorf("GET %s shows a secret: %s", path, raw)
			}
		}
		var list struct {
			Keys []map[string]any
		}
		if err := json.Unmarshal(raw, &list); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, k := range list.Keys {
			ids = append(ids, k["id"].(string))
			if _, ok := k["key"]; ok {
				t.Errorf("GET %s: a key has a \"key\" field: %v", path, k)
			}
		}
		slices.Sort(ids)
		want := []string{made.ID}
		if path == "/v1/keys" {
			want = []string{made.ID, adminID, aliceID}
		}
		slices.Sort(want)
		if !slices.Equal(ids, want) {
			t.Errorf("GET %s lists %v, want %v", path, ids, want)
		}
	}

	resp, raw = e.call(t, "POST", "/v1/keys", `{"user":"dave","agents":["nobody"]}`, e.bearer(admin))
	e.wantError(t, "a key for an unknown agent", resp, raw, http.StatusBadRequest, "unknown_agent")
	resp, raw = e.call(t, "DELETE", "/v1/keys/no-such-key", "", e.bearer(admin))
	e.wantError(t, "revoke a missing key", resp, raw, http.StatusNotFound, "key_not_found")
	resp, raw = e.call(t, "DELETE", "/v1/keys/"+made.ID, "", e.bearer(admin))
	if resp.StatusCode != http.StatusOK || strings.Contains(string(raw), made.Key) {
		t.Errorf("revoke: %d %s", resp.StatusCode, raw)
	}
	resp, raw = e.call(t, "GET", "/v1/auth/session", "", e.bearer(made.Key))
	e.want401(t, "the revoked new key", resp, raw, "key_revoked")
}

// TestAuthUsage: a user's GET /v1/usage totals their own model calls only, whatever they ask; an
// admin sees everyone's, or one user's.
func TestAuthUsage(t *testing.T) {
	e := newKeyedEnv(t, httpapi.Options{}, auth.Options{})
	e.upstream.Respond = func(_ int, req llmtest.Request) llmtest.Turn {
		msgs := req.Messages()
		// Each user's calls count tokens of their own, so that the totals tell them apart.
		if strings.Contains(fmt.Sprint(msgs[len(msgs)-1]["content"]), "bob") {
			return llmtest.Turn{Text: "hi bob", Usage: &llm.Usage{InputTokens: 200, OutputTokens: 20}}
		}
		return llmtest.Turn{Text: "hi alice", Usage: &llm.Usage{InputTokens: 100, OutputTokens: 10}}
	}
	admin, _ := e.key(t, auth.KeySpec{User: "root", Admin: true})
	alice, aliceKey := e.key(t, auth.KeySpec{User: "alice"})
	bob, _ := e.key(t, auth.KeySpec{User: "bob"})
	for _, send := range []struct{ key, msg string }{{alice, "alice here"}, {bob, "bob here"}, {bob, "bob again"}} {
		if resp, raw := e.call(t, "POST", "/v1/chat", `{"message":"`+send.msg+`"}`, e.bearer(send.key)); resp.StatusCode != http.StatusOK {
			t.Fatalf("send: %d %s", resp.StatusCode, raw)
		}
	}
	type total struct {
		Group        string
		Calls        int64
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	}
	usage := func(key, query string) []total {
		t.Helper()
		resp, raw := e.call(t, "GET", "/v1/usage?"+query, "", e.bearer(key))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("usage?%s: %d %s", query, resp.StatusCode, raw)
		}
		var got struct{ Usage []total }
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		return got.Usage
	}
	aliceTotal := total{Group: "alice", Calls: 1, InputTokens: 100, OutputTokens: 10}
	bobTotal := total{Group: "bob", Calls: 2, InputTokens: 400, OutputTokens: 40}
	for _, tt := range []struct {
		name, key, query string
		want             []total
	}{
		{"alice", alice, "group_by=user", []total{aliceTotal}},
		{"alice asks for bob's", alice, "group_by=user&user=bob", []total{aliceTotal}},
		{"alice asks for everyone's", alice, "group_by=user&user=", []total{aliceTotal}},
		{"alice by key", alice, "group_by=key", []total{{Group: aliceKey, Calls: 1, InputTokens: 100, OutputTokens: 10}}},
		{"bob", bob, "group_by=user", []total{bobTotal}},
		{"admin", admin, "group_by=user", []total{aliceTotal, bobTotal}},
		{"admin asks for bob's", admin, "group_by=user&user=bob", []total{bobTotal}},
	} {
		if got := usage(tt.key, tt.query); !slices.Equal(got, tt.want) {
			t.Errorf("%s: usage?%s = %+v, want %+v", tt.name, tt.query, got, tt.want)
		}
	}
	// By model, alice's one call is all she sees.
	if got := usage(alice, ""); len(got) != 1 || got[0].Calls != 1 || got[0].InputTokens != 100 {
		t.Errorf("alice's usage by model: %+v", got)
	}
}

// TestAuthHostCheck: while chatd requires keys it answers any Host name — the key, not the name, says
// who may call it; without auth a name that is not loopback's is refused (DNS rebinding).
func TestAuthHostCheck(t *testing.T) {
	e := newKeyedEnv(t, httpapi.Options{}, auth.Options{})
	// Keys are not required yet: chatd is still in local mode.
	resp, raw := e.call(t, "GET", "/v1/sessions", "", map[string]string{"Host": "chat.example.com"})
	e.wantError(t, "local mode, another name", resp, raw, http.StatusForbidden, "forbidden_host")

	alice, _ := e.key(t, auth.KeySpec{User: "alice"})
	resp, raw = e.call(t, "GET", "/v1/sessions", "", e.bearer(alice, "Host", "chat.example.com"))
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a key, another name: %d %s", resp.StatusCode, raw)
	}
	resp, raw = e.call(t, "POST", "/v1/chat", `{"message":"hi"}`, e.bearer(alice, "Host", "chat.example.com:443"))
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a send with a key, another name: %d %s", resp.StatusCode, raw)
	}
	resp, raw = e.call(t, "GET", "/v1/sessions", "", map[string]string{"Host": "chat.example.com"})
	e.want401(t, "no key, another name", resp, raw, "auth_required")

	local := newEnv(t, httpapi.Options{})
	resp, raw = local.send(t, "GET", "/v1/sessions", nil, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("local mode, loopback: %d %s", resp.StatusCode, raw)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "GET", local.srv.URL+"/v1/sessions", nil)
	req.Host = "chat.example.com"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	e.wantError(t, "no auth, another name", resp, raw, http.StatusForbidden, "forbidden_host")
}

// TestAuthEveryRouteNeedsACaller: every route of the API, by every method it takes (HEAD too, for a
// GET), refuses a request without credentials — but the sign-in, the sign-out and /healthz. A HEAD
// of /v1/auth/session once went through unauthenticated and was served as the local user, an admin.
func TestAuthEveryRouteNeedsACaller(t *testing.T) {
	e := newKeyedEnv(t, httpapi.Options{}, auth.Options{})
	e.key(t, auth.KeySpec{User: "alice"})
	public := []string{"GET /healthz", "GET /readyz", "POST /v1/auth/session", "DELETE /v1/auth/session"}
	wildcard := strings.NewReplacer("{id}", "x", "{record}", "y", "{n}", "0")
	for _, pattern := range httpapi.RoutePatterns() {
		method, path, _ := strings.Cut(pattern, " ")
		methods := []string{method}
		if method == "GET" {
			methods = append(methods, "HEAD")
		}
		for _, m := range methods {
			body := ""
			if m == "POST" || m == "PATCH" {
				body = `{}`
			}
			resp, raw := e.call(t, m, wildcard.Replace(path), body, nil)
			what := m + " " + path
			switch {
			case slices.Contains(public, pattern):
				// The sign-in refuses a bad key itself; it must not ask for a caller first.
				if strings.Contains(string(raw), `"auth_required"`) {
					t.Errorf("%s needs no caller, but answered %d %s", what, resp.StatusCode, raw)
				}
			case m == "HEAD":
				if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
					t.Errorf("%s without credentials: %d, want 401 with a challenge", what, resp.StatusCode)
				}
			default:
				e.want401(t, what+" without credentials", resp, raw, "auth_required")
			}
		}
	}
}

// TestAuthTrustedHeaderCrossOrigin: the identity a trusted proxy vouches for is ambient, as a cookie
// is: the proxy adds it to whatever the browser sends, a page of another site's included. Such a write
// is refused as a cookie's is — also when the proxy forwards an Authorization header of its own (an
// OIDC token, as oauth2-proxy does with --pass-authorization-header): that header is not an API key.
// It once exempted the request from the cross-origin check, which looked only for the header.
func TestAuthTrustedHeaderCrossOrigin(t *testing.T) {
	const header = "X-Forwarded-Email"
	e := newKeyedEnv(t, httpapi.Options{}, auth.Options{TrustedHeader: header,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	alice, _ := e.key(t, auth.KeySpec{User: "alice"})
	proxied := func(more ...string) map[string]string {
		h := map[string]string{header: "carol@example.com"}
		for i := 0; i+1 < len(more); i += 2 {
			h[more[i]] = more[i+1]
		}
		return h
	}
	const oidc = "Bearer eyJhbGciOiJSUzI1NiJ9.eyJlbWFpbCI6ImNhcm9sQGV4YW1wbGUuY29tIn0.c2ln"
	for _, tt := range []struct {
		name   string
		header map[string]string
	}{
		{"proxy header", proxied("Sec-Fetch-Site", "cross-site")},
		{"proxy header and the proxy's token", proxied("Authorization", oidc, "Sec-Fetch-Site", "cross-site")},
		{"proxy header and the proxy's token, old browser", proxied("Authorization", oidc, "Origin", "http://attacker.example")},
	} {
		resp, raw := e.call(t, "POST", "/v1/sessions", `{"title":"cross-site"}`, tt.header)
		e.wantError(t, tt.name, resp, raw, http.StatusForbidden, "cross_origin_request")
	}
	if _, raw := e.call(t, "GET", "/v1/sessions", "", proxied()); !strings.Contains(string(raw), `"sessions":[]`) {
		t.Errorf("carol's sessions after refused cross-site writes: %s", raw)
	}
	// From the proxy's own site, and with an API key from anywhere, writes go through.
	if resp, raw := e.call(t, "POST", "/v1/sessions", `{"title":"same site"}`, proxied("Authorization", oidc, "Sec-Fetch-Site", "same-origin")); resp.StatusCode != http.StatusCreated {
		t.Errorf("a same-origin write through the proxy: %d %s", resp.StatusCode, raw)
	}
	if resp, raw := e.call(t, "POST", "/v1/sessions", `{"title":"key"}`, e.bearer(alice, "Sec-Fetch-Site", "cross-site")); resp.StatusCode != http.StatusCreated {
		t.Errorf("a cross-site write with a key: %d %s", resp.StatusCode, raw)
	}
}
