// Package httpapi serves chatd's HTTP API: routes, wire types, the caller's identity, SSE, and the one
// mapping from errors to HTTP statuses.
//
// It never imports a concrete provider or store: it talks to chat.Service, the store.Store contract and
// the tool registry.
package httpapi

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"chatd/internal/auth"
	"chatd/internal/chat"
	"chatd/internal/metrics"
	"chatd/internal/store"
	"chatd/internal/tool"
	"chatd/internal/tracing"
)

// Options configure the API. Zero values are the defaults.
type Options struct {
	Chat  *chat.Service
	Store store.Store
	Tools *tool.Registry
	// MCPServers reports the MCP servers (GET /v1/mcp/servers); nil lists none.
	MCPServers func() []MCPServer
	Logger     *slog.Logger
	// Models lists the providers' models (GET /v1/models); nil lists none.
	Models Catalog
	// DefaultModel is the model of requests that name none.
	DefaultModel string
	// PingInterval is how often an idle stream gets a ": ping" comment (at a tick with no write since
	// the one before: after one to two intervals of silence); default 15s.
	PingInterval time.Duration
	// WriteTimeout bounds one write to a client (a batch of events); a reader that cannot take it in
	// time is dropped and resumes from its last id; default 10s. The deadline is moved on once half of
	// it has passed, not at every write, so a write has between half of it and all of it.
	WriteTimeout time.Duration
	// MaxBodyBytes limits request bodies; default 1 MiB. MaxChatBodyBytes limits those of the chat
	// sends (/v1/chat, /v1/chat/stream, /v1/ui/chat), which carry attachments — and useChat's whole
	// conversation; default 32 MiB.
	MaxBodyBytes     int64
	MaxChatBodyBytes int64
	// UI serves the web chat UI at / and its client routes; nil serves a short page about the API.
	UI http.Handler
	// AllowedHosts are Host header values accepted besides localhost and loopback addresses, e.g. the
	// name a reverse proxy forwards. They matter only while no auth is required.
	AllowedHosts []string
	// Auth authenticates callers; nil: no auth, every caller is the local user, an admin.
	Auth *auth.Authenticator
	// Now is the clock of limits (default time.Now).
	Now func() time.Time
	// Limiter counts requests per minute; nil: one in this process's memory (auth.NewLimiter picks the
	// store's count when the store keeps one, for several instances on one database).
	Limiter auth.Limiter
	// Metrics counts requests and streams; with ServeMetrics, GET /metrics serves them. nil: none.
	Metrics      *metrics.Metrics
	ServeMetrics bool
	// MetricsToken, when set, is a bearer token that may read /metrics besides an admin's API key.
	MetricsToken string
	// Tracing traces every request; nil: none.
	Tracing *tracing.Tracing
	// TrustedPeers are the addresses whose trace context (traceparent) a request's span continues: the
	// proxies of auth.trusted_proxies. Any other caller's starts a new trace, linked to the caller's.
	TrustedPeers []netip.Prefix
}

// LocalUser is the identity of every caller while chatd runs without API keys.
const LocalUser = auth.LocalUser

type server struct {
	Options
	log        *slog.Logger
	readyCache readyCheck
}

// New returns the API's handler.
func New(opts Options) http.Handler {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.PingInterval <= 0 {
		opts.PingInterval = 15 * time.Second
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 10 * time.Second
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	if opts.MaxChatBodyBytes <= 0 {
		opts.MaxChatBodyBytes = 32 << 20
	}
	if opts.Limiter == nil {
		opts.Limiter = auth.NewRateLimiter()
	}
	s := &server{Options: opts, log: opts.Logger}
	// A web page the user visits must not be able to drive the API with the user's identity — the
	// local user's, a sign-in cookie's, or the one a trusted proxy adds: cross-origin writes are
	// refused (CSRF) unless the caller authenticated with an API key, which a page cannot send for the
	// user. Without auth, so are requests for another host name, which is what a DNS-rebinding page
	// sends.
	csrf := http.NewCrossOriginProtection()
	csrf.SetDenyHandler(s.handle(s.crossOrigin))
	return s.observe(s.checkHost(s.authenticate(s.unlessKey(csrf.Handler, s.routes()))))
}

// unlessKey routes requests whose caller authenticated with an API key straight to next, and the
// others — the local user, a sign-in cookie, a trusted proxy's header, the sign-in itself — through
// wrap(next). It asks how the caller authenticated, not whether an Authorization header is there: a
// proxy that vouches for its user by a header may forward an Authorization header of its own.
func (s *server) unlessKey(wrap func(http.Handler) http.Handler, next http.Handler) http.Handler {
	wrapped := wrap(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := r.Context().Value(principalKey{}).(*auth.Principal); ok && p.Method == auth.MethodBearer {
			next.ServeHTTP(w, r)
			return
		}
		wrapped.ServeHTTP(w, r)
	})
}

// apiRoot is the pattern of the catch-all that answers /v1/ paths no route serves with the method asked.
const apiRoot = "/v1/"

// route is one route of the API: a ServeMux pattern and its handler.
type route struct {
	pattern string
	handler func(http.ResponseWriter, *http.Request) error
}

// routeTable lists every route of the API; routes registers them, and the tests read them.
func (s *server) routeTable() []route {
	return []route{
		{"POST /v1/chat/stream", s.chatStream},
		{"POST /v1/chat", s.chatBatch},
		{"GET /v1/runs/{id}", s.getRun},
		{"GET /v1/runs/{id}/events", s.runEvents},
		{"GET /v1/runs/{id}/diagnostics", s.runDiagnostics},
		{"POST /v1/runs/{id}/cancel", s.cancelRun},
		{"POST /v1/runs/{id}/approvals", s.decideRun},
		{"POST /v1/sessions", s.createSession},
		{"GET /v1/sessions", s.listSessions},
		{"GET /v1/sessions/{id}", s.getSession},
		{"PATCH /v1/sessions/{id}", s.updateSession},
		{"DELETE /v1/sessions/{id}", s.deleteSession},
		{"GET /v1/sessions/{id}/messages", s.listMessages},
		{"POST /v1/sessions/{id}/actions", s.runAction},
		{"GET /v1/sessions/{id}/records/{record}/attachments/{n}", s.attachment},
		{"GET /v1/tools", s.listTools},
		{"GET /v1/mcp/servers", s.listMCPServers},
		{"POST /v1/ui/chat", s.uiChat},
		{"GET /v1/ui/chat/{id}/stream", s.uiResume},
		{"GET /v1/ui/chat/{id}", s.uiHistory},
		{"GET /v1/models", s.listModels},
		{"GET /v1/agents", s.listAgents},
		{"GET " + authSessionPath, s.getAuthSession},
		{"POST " + authSessionPath, s.signIn},
		{"DELETE " + authSessionPath, s.signOut},
		{"POST /v1/keys", s.createKey},
		{"GET /v1/keys", s.listKeys},
		{"DELETE /v1/keys/{id}", s.revokeKey},
		{"GET /v1/usage", s.usage},
		{"GET /healthz", s.health},
		{"GET /readyz", s.ready},
	}
}

func (s *server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range s.routeTable() {
		mux.Handle(rt.pattern, s.routed(rt.pattern, s.handle(rt.handler)))
	}
	if s.ServeMetrics {
		mux.Handle("GET /metrics", s.routed("GET /metrics", s.handle(s.serveMetrics)))
	}
	mux.Handle(apiRoot, s.handle(func(w http.ResponseWriter, r *http.Request) error { return s.noRoute(mux, w, r) }))
	if s.UI != nil {
		mux.Handle("/", s.UI) // it answers other methods with 405 itself
	} else {
		mux.Handle("GET /{$}", http.HandlerFunc(s.home))
	}
	return mux
}

// checkHost refuses requests whose Host is not a loopback name or address, nor an allowed host, while
// chatd requires no auth.
func (s *server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (s.Auth == nil || !s.Auth.Required()) && !s.hostAllowed(r.Host) {
			s.writeError(w, r, &apiError{status: http.StatusForbidden, code: "forbidden_host",
				message: "chatd answers only requests for localhost or a loopback address while it runs without API keys; " +
					"to reach it under another name (behind a reverse proxy), add the name to CHATD_ALLOWED_HOSTS"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *server) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil && ip.IsLoopback() {
		return true
	}
	for _, allowed := range s.AllowedHosts {
		if strings.EqualFold(allowed, host) || strings.EqualFold(allowed, hostport) {
			return true
		}
	}
	return false
}

// health is liveness: the process answers. It asks nothing of the store, so that a slow database does
// not get the process restarted.
func (s *server) health(w http.ResponseWriter, r *http.Request) error {
	return writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyTimeout bounds the store's answer to a readiness probe.
const readyTimeout = 2 * time.Second

// readyTTL is how long the store's answer to a readiness probe is kept: /readyz needs no auth, and a
// flood of it must not tie up the store's connections.
const readyTTL = time.Second

// readyCheck keeps the store's last answer to a readiness probe for readyTTL. Probes that come while
// the store is being asked wait for its answer rather than asking again.
type readyCheck struct {
	mu  sync.Mutex
	at  time.Time
	err error
}

// storeReady is the store's answer to a readiness probe, asked at most once a readyTTL.
func (s *server) storeReady(ctx context.Context) error {
	c := &s.readyCache
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := s.now(); !c.at.IsZero() && now.Sub(c.at) < readyTTL && !now.Before(c.at) {
		return c.err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyTimeout)
	defer cancel()
	c.err = s.Store.Ready(ctx)
	c.at = s.now()
	return c.err
}

// ready is readiness: 200 when the store answers and its schema is migrated and chatd takes new runs;
// 503 otherwise, with what is wrong. The store's error goes to the log, not to the (unauthenticated)
// caller.
func (s *server) ready(w http.ResponseWriter, r *http.Request) error {
	checks := map[string]string{"store": "ok", "runs": "accepting"}
	ok := true
	if s.Store != nil {
		if err := s.storeReady(r.Context()); err != nil {
			s.log.Warn("readiness: the store is not ready", "err", err)
			checks["store"], ok = "unavailable", false
		}
	}
	if s.Chat != nil && s.Chat.Draining() {
		checks["runs"], ok = "draining", false
	}
	w.Header().Set("Cache-Control", "no-store")
	if !ok {
		return writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "checks": checks})
	}
	return writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "checks": checks})
}

// crossOrigin is the refusal of a write a browser sends from a page of another origin (CSRF).
func (s *server) crossOrigin(w http.ResponseWriter, r *http.Request) error {
	return &apiError{status: http.StatusForbidden, code: "cross_origin_request",
		message: "a browser page from another origin may not call this API with the local user's or a sign-in cookie's identity; " +
			"use chatd's own web UI, send an API key (Authorization: Bearer), or use a program such as curl; " +
			"behind a reverse proxy, forward the original Host header"}
}

// probedMethods are the methods noRoute asks the mux about. CONNECT is left out: no route takes it, and
// the mux matches it on a path it does not clean.
var probedMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodOptions, http.MethodTrace}

// noRoute answers a request the catch-all got: 405 with an Allow header when a route serves the path with
// other methods, as ServeMux would without the catch-all, and 404 otherwise. The mux itself says which
// methods a route serves, so the routes are listed once, in routes.
func (s *server) noRoute(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) error {
	var allow []string
	probe := r.Clone(r.Context())
	for _, m := range probedMethods {
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != apiRoot {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		return &apiError{status: http.StatusNotFound, code: "not_found", message: "no route " + r.Method + " " + r.URL.Path}
	}
	slices.Sort(allow)
	w.Header().Set("Allow", strings.Join(allow, ", "))
	return &apiError{status: http.StatusMethodNotAllowed, code: "method_not_allowed",
		message: r.Method + " " + r.URL.Path + " is not a route; this path takes " + strings.Join(allow, ", ")}
}

const homePage = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>chatd</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem}code{background:#8882;padding:.1em .3em}</style>
</head><body><h1>chatd is running</h1>
<p>The web chat UI is not part of this build yet. The HTTP API is at <code>/v1</code>:
stream a chat with <code>POST /v1/chat/stream</code>, list sessions with <code>GET /v1/sessions</code>,
see the tools with <code>GET /v1/tools</code>. The README has a curl example.</p></body></html>
`

func (s *server) home(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.Write([]byte(homePage))
}
