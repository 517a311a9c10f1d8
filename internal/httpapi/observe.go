package httpapi

import (
	"cmp"
	"context"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"chatd/internal/auth"
	"chatd/internal/metrics"
	"chatd/internal/tracing"

	"go.opentelemetry.io/otel/trace"
)

// statusWriter remembers the status of a response, for the request's metrics and span, and which route
// served it (set by the route's own handler, inside the mux).
type statusWriter struct {
	http.ResponseWriter
	status int
	route  *metrics.Route
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's flusher and deadlines.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// observe counts every request under the route that served it, and traces it when tracing is on: the
// span continues the caller's traceparent when the caller is a trusted peer, and starts a new trace
// linked to it otherwise. A request refused before its route (auth, a bad host) counts
// under "/v1/" or "/", as do unknown paths.
func (s *server) observe(next http.Handler) http.Handler {
	if s.Metrics == nil && s.Tracing == nil {
		return next
	}
	api, other := s.Metrics.Route(apiRoot), s.Metrics.Route("/")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		span := noSpan
		if s.Tracing != nil && !probe(r.URL.Path) {
			var ctx context.Context
			ctx, span = s.Tracing.HTTP(r, s.trustedPeer(r))
			r = r.WithContext(ctx)
		}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		route := sw.route
		if route == nil {
			route = other
			if strings.HasPrefix(r.URL.Path, apiRoot) {
				route = api
			}
		}
		route.Observe(status, time.Since(t0))
		tracing.EndHTTP(span, status)
	})
}

// trustedPeer reports whether r comes from a trusted peer (TrustedPeers), whose trace context a
// request's span continues.
func (s *server) trustedPeer(r *http.Request) bool {
	if len(s.TrustedPeers) == 0 {
		return false
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	addr := ap.Addr().Unmap()
	return slices.ContainsFunc(s.TrustedPeers, func(p netip.Prefix) bool { return p.Contains(addr) })
}

// noSpan is the span of a request that is not traced: it records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// probe reports the paths of probes and scrapes, which are counted but not traced: every few seconds
// each, they would bury the traces of chats.
func probe(path string) bool {
	return path == "/healthz" || path == "/readyz" || path == "/metrics"
}

// routed marks a request as served by the route of pattern: its metrics and its span's name.
func (s *server) routed(pattern string, h http.Handler) http.Handler {
	if s.Metrics == nil && s.Tracing == nil {
		return h
	}
	m := s.Metrics.Route(pattern)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sw, ok := w.(*statusWriter); ok {
			sw.route = m
		}
		tracing.Route(r.Context(), pattern)
		h.ServeHTTP(w, r)
	})
}

// MetricsHandler serves GET /metrics alone, for a listener of its own (--metrics-addr), with the
// same rules as on the API's listener: the same callers, and without auth only for loopback names and
// AllowedHosts (a DNS-rebinding page is refused). Its requests are counted under "GET /metrics" too.
func MetricsHandler(opts Options) http.Handler {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &server{Options: opts, log: opts.Logger}
	route := opts.Metrics.Route("GET /metrics")
	h := s.checkHost(s.handle(s.serveMetrics))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		route.Observe(cmp.Or(sw.status, http.StatusOK), time.Since(t0))
	})
}

// serveMetrics serves /metrics. While chatd requires auth, the caller must send the metrics token
// (metrics_token) or an admin's API key as a bearer token; in local mode anyone on loopback may read.
func (s *server) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	if s.Metrics == nil {
		return &apiError{status: http.StatusNotFound, code: "not_found", message: "metrics are not served here"}
	}
	if err := s.metricsCaller(r); err != nil {
		return err
	}
	s.Metrics.Handler().ServeHTTP(w, r)
	return nil
}

// metricsCaller checks who may read the metrics: the holder of the metrics token; while chatd requires
// auth, an admin; without auth and without a token, anyone (chatd then listens on loopback only). A
// configured token is required even without auth: it is what lets --metrics-addr listen beyond loopback.
func (s *server) metricsCaller(r *http.Request) error {
	if s.MetricsToken != "" {
		if token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok &&
			subtle.ConstantTimeCompare([]byte(token), []byte(s.MetricsToken)) == 1 {
			return nil
		}
	}
	if s.Auth != nil && s.Auth.Required() {
		p, err := s.Auth.Authenticate(r)
		if err != nil {
			return err
		}
		if p.Method == auth.MethodTrusted && !s.hostAllowed(r.Host) {
			// As in authenticate: the proxy's header is believed from its address, which a page that
			// rebinds its own name to that address sends from too.
			return &apiError{status: http.StatusForbidden, code: "forbidden_host",
				message: "a request signed in by the trusted proxy must be for one of chatd's names; add the name the proxy forwards to allowed_hosts (CHATD_ALLOWED_HOSTS)"}
		}
		if !p.Admin {
			return &apiError{status: http.StatusForbidden, code: "admin_required",
				message: "the metrics need an admin's API key or the metrics token (metrics_token)"}
		}
		return nil
	}
	if s.MetricsToken != "" {
		return &apiError{status: http.StatusUnauthorized, code: "invalid_key",
			message: "the metrics need the metrics token (metrics_token) as a bearer token"}
	}
	return nil
}
