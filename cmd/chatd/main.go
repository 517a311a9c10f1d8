// Command chatd is an LLM chat backend: it runs the agent loop against LLM providers with native tool
// calling, streams every step over SSE, and stores every message, tool call and tool result.
//
// This file is wiring only: config → logger → store → providers → tools → chat → HTTP server.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"chatd/internal/agent"
	"chatd/internal/auth"
	"chatd/internal/chat"
	"chatd/internal/config"
	"chatd/internal/fetchurl"
	"chatd/internal/httpapi"
	"chatd/internal/logging"
	"chatd/internal/mcpclient"
	"chatd/internal/metrics"
	"chatd/internal/provider"
	"chatd/internal/store"
	"chatd/internal/store/postgres"
	"chatd/internal/store/sqlite"
	"chatd/internal/tool"
	"chatd/internal/tracing"
	"chatd/internal/webui"

	"go.opentelemetry.io/otel"
)

const usage = `chatd — an LLM chat backend

Usage:
  chatd serve [flags]   run the server (chatd serve -h lists the flags)
  chatd keys create|list|revoke
                        manage API keys (chatd keys help)
  chatd usage [flags]   token and cost totals (chatd usage -h)
  chatd migrate --from sqlite:PATH --to postgres://…
                        copy a SQLite database into PostgreSQL (chatd migrate -h)
  chatd version         print the version
  chatd mcp-conformance URL
                        run chatd's MCP client against a server of the MCP conformance suite

Configuration comes from flags, then CHATD_* variables, then the --config YAML file.
The database (--db, CHATD_DB) is a SQLite file (sqlite:PATH, the default; one chatd per file) or
PostgreSQL (postgres://…), which several chatd instances may share behind any load balancer.
Providers come from OPENAI_API_KEY / OPENAI_BASE_URL and OLLAMA_HOST; MCP servers from --mcp-config.
`

var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(os.Stderr, "chatd:", err)
		}
		os.Exit(2)
	}
}

var errUsage = errors.New("usage")

// helpIsSuccess makes a command asked for its help (-h) succeed.
func helpIsSuccess(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], getenv, stderr)
	case "keys":
		return helpIsSuccess(keys(ctx, args[1:], getenv, stdout, stderr))
	case "usage":
		return helpIsSuccess(usageTable(ctx, args[1:], getenv, stdout, stderr))
	case "migrate":
		return helpIsSuccess(migrate(ctx, args[1:], stdout, stderr))
	case "mcp-conformance":
		return conformance(ctx, args[1:], getenv, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "chatd", version)
		return nil
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "chatd: unknown command %q\n\n%s", args[0], usage)
	return errUsage
}

func serve(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, err := config.Load(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	log, err := logging.New(stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	raiseFileLimit(log)
	// The SDK's errors (a collector that is down) go to chatd's log, a line a minute at most, rather than
	// to the standard library's logger.
	otel.SetErrorHandler(tracing.NewErrorHandler(log, time.Minute, nil))
	traces, err := tracing.Setup(ctx, getenv, version)
	if err != nil {
		return err
	}
	if traces != nil {
		defer shutdownTracing(traces, log)
		log.Info("exporting traces with OTLP over HTTP", "message_content", traces.Capture())
	}
	meters := metrics.New()
	// Listen first: a process that cannot have its port fails before it touches the database, and the
	// database's lock names the address really listened on (--addr may say port 0). Nothing is served
	// until the recovery below is done; connections wait in the listen queue.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	defer ln.Close() // for the returns before Serve, which closes it itself
	db, err := openServeStore(ctx, cfg, log, "chatd serve on "+ln.Addr().String())
	if errors.Is(err, sqlite.ErrLocked) {
		return fmt.Errorf("%w; stop it, or start this one with another --db", err)
	}
	if err != nil {
		return err // it says "sqlite: open PATH: …" or "postgres: open URL: …", without a password
	}
	defer db.Close()
	releaseStartupMemory()
	authn, err := authenticator(ctx, cfg, db, log)
	if err != nil {
		return err
	}

	providers, err := provider.New(cfg.Providers, cfg.Unconfigured)
	if err != nil {
		return err
	}
	if len(providers.Names()) == 0 {
		log.Warn("no LLM provider is configured: chats will fail until you set OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY (each with its *_BASE_URL for a compatible server) or OLLAMA_HOST, or name providers in the config file, then restart")
	}
	checkAgentModels(cfg.Agents, providers, log)
	lim := cfg.Limits
	tools := tool.NewRegistry(tool.Options{DefaultTimeout: cfg.ToolTimeout, Logger: log,
		MaxResultBytes: lim.ToolResultBytes, MaxAttachmentBytes: lim.ToolAttachBytes})
	defer closeTools(tools, log)
	if err := tools.Register(tool.CurrentTime(nil)); err != nil {
		return err
	}
	if cfg.FetchURL.Enabled {
		if err := tools.Register(fetchurl.New(fetchOptions(cfg.FetchURL, log))); err != nil {
			return err
		}
	}
	mcps, err := startMCP(ctx, cfg.MCPConfig, cfg.MCPConnectTimeout, tools, getenv, log, traces)
	if err != nil {
		return err
	}
	defer mcps.Close()
	chats := chat.New(chat.Options{Store: db, Models: providers, Tools: tools, Agents: cfg.Agents, Scopes: cfg.ToolScopes,
		DefaultModel: cfg.Model, TitleModel: cfg.TitleModel, Logger: log, Context: chat.ContextOptions{ToolHistoryRounds: cfg.Context.ToolHistoryRounds,
			ResultMaxBytes: cfg.Context.ToolResultMaxBytes, CompactAt: cfg.Context.CompactAt, Windows: cfg.Context.Windows},
		Limits: chatLimits(lim), Prices: cfg.Prices, SweepInterval: cfg.SweepInterval, Metrics: meters, Tracing: traces,
		ApprovalTimeout: cfg.ApprovalTimeout, Quota: authn.Quota})
	meters.MCP(mcpclient.States, mcpStates(mcps))
	if pdb, ok := db.(*postgres.DB); ok {
		// Other instances' notifications: their runs' new events, cancels asked of ours, sessions freed.
		listener := pdb.Listen(cmp.Or(cfg.DBListen, cfg.DB), chats.Wake, log)
		defer listener.Close()
		log.Info("sharing the database with other chatd instances", "instance", pdb.Instance(),
			"lease_ttl", pdb.LeaseTTL(), "sweep_interval", cfg.SweepInterval)
	}
	if err := chats.Recover(ctx); err != nil {
		return err
	}
	ui, err := webui.Handler()
	if err != nil {
		return err
	}

	srv := &http.Server{
		Addr: cfg.Addr,
		Handler: httpapi.New(httpapi.Options{Chat: chats, Store: db, Tools: tools, MCPServers: mcpServers(mcps), Logger: log,
			AllowedHosts: cfg.AllowedHosts, Models: catalog(providers), DefaultModel: cfg.Model, UI: ui,
			MaxBodyBytes: lim.BodyBytes, MaxChatBodyBytes: lim.ChatBodyBytes, Auth: authn,
			// On PostgreSQL, requests per minute are counted in the database, shared by every instance.
			Limiter: auth.NewLimiter(db, log),
			Metrics: meters, ServeMetrics: cfg.MetricsAddr == "", MetricsToken: cfg.MetricsToken, Tracing: traces,
			TrustedPeers: cfg.Auth.TrustedProxies}),
		// No ReadTimeout: it would end every stream that outlives it. The API bounds the reading of each
		// request body itself.
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	scheme := "http"
	if cfg.TLSCert != "" {
		scheme = "https"
	}
	log.Info("chatd listening", "url", scheme+"://"+ln.Addr().String(), "config", cfg, "auth", authn.Describe())
	if !cfg.Loopback() && cfg.TLSCert == "" {
		log.Warn("chatd listens beyond loopback without TLS: API keys and sign-in cookies cross the network in clear text unless a TLS proxy is in front; use --tls-cert and --tls-key otherwise")
	}
	if cfg.MetricsAddr != "" {
		stop, err := serveMetrics(cfg, meters, authn, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	if cfg.PprofAddr != "" {
		stop, err := servePprof(cfg.PprofAddr, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	errc := make(chan error, 1)
	go func() {
		if cfg.TLSCert != "" {
			errc <- srv.ServeTLS(ln, cfg.TLSCert, cfg.TLSKey)
			return
		}
		errc <- srv.Serve(ln)
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	return shutdown(srv, chats, cfg.DrainTimeout, log)
}

// releaseStartupMemory drops what opening the store left for the collector. Migrating the schema leaves
// goose's SQL parser buffers (about 16 MB) in a sync.Pool, live until two collections have passed; until
// then the collector lets the heap grow to twice that before it runs, and a burst of streams soon after
// start-up grows the process's RSS by as much. Two collections now drop them, and FreeOSMemory gives
// their pages back.
func releaseStartupMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}

// servePprof serves Go's profiles (net/http/pprof) on addr, a loopback address, on a listener of
// their own, so that they are never on the API's. It returns what stops it.
func servePprof(addr string, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	runtime.SetBlockProfileRate(int(time.Millisecond)) // a wait of a millisecond or more is sampled
	runtime.SetMutexProfileFraction(100)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: serverLog(log, "pprof")}
	go srv.Serve(ln)
	log.Info("serving Go's profiles", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return func() { srv.Close() }, nil
}

// serveMetrics serves /metrics on --metrics-addr, on a listener of its own, with the same rules as on
// the API's: while chatd requires auth, the metrics token or an admin's key; without auth, only for
// loopback names and allowed hosts. When the API is served over TLS, so are the metrics, with the same
// certificate: the token and keys they take cross the network no more in clear text than the API's. It
// returns what stops it.
func serveMetrics(cfg *config.Config, meters *metrics.Metrics, authn *auth.Authenticator, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", httpapi.MetricsHandler(httpapi.Options{Metrics: meters, MetricsToken: cfg.MetricsToken, Auth: authn,
		AllowedHosts: cfg.AllowedHosts, Logger: log}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: serverLog(log, "metrics")}
	scheme := "http"
	if cfg.TLSCert != "" {
		scheme = "https"
		go srv.ServeTLS(ln, cfg.TLSCert, cfg.TLSKey)
	} else {
		go srv.Serve(ln)
	}
	log.Info("serving metrics", "url", scheme+"://"+ln.Addr().String()+"/metrics")
	return func() { srv.Close() }, nil
}

// serverLog is the ErrorLog of an http.Server: its complaints (a TLS handshake that failed, a panic in
// a handler) go to the log, not to the standard library's logger on stderr.
func serverLog(log *slog.Logger, listener string) *stdlog.Logger {
	return slog.NewLogLogger(log.With("listener", listener).Handler(), slog.LevelWarn)
}

// shutdownTracing sends the spans not yet exported, waiting at most 5 seconds.
func shutdownTracing(t *tracing.Tracing, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("tracing: the last spans were not exported", "err", err)
	}
}

// mcpStates reports the MCP servers' states to the metrics.
func mcpStates(m *mcpclient.Manager) func() []metrics.MCPServer {
	return func() []metrics.MCPServer {
		if m == nil {
			return nil
		}
		var out []metrics.MCPServer
		for _, s := range m.Servers() {
			out = append(out, metrics.MCPServer{Name: s.Name, State: s.State, Attempts: s.Attempts})
		}
		return out
	}
}

// authenticator checks that chatd may listen where it was asked to, and returns what authenticates
// its callers.
func authenticator(ctx context.Context, cfg *config.Config, db store.Accounts, log *slog.Logger) (*auth.Authenticator, error) {
	hasKeys, err := db.HasKeys(ctx)
	if err != nil {
		return nil, err
	}
	if err := cfg.CheckExposure(hasKeys); err != nil {
		return nil, err
	}
	a := cfg.Auth
	return auth.New(ctx, auth.Options{Store: db, TrustedHeader: a.TrustedHeader, TrustedProxies: a.TrustedProxies,
		Admins: a.Admins, Loopback: cfg.Loopback(), UserLimits: cfg.UserLimits.Users, DefaultLimits: cfg.UserLimits.Default,
		CacheTTL: a.CacheTTL, SessionTTL: a.SessionTTL, Logger: log})
}

// shutdown stops accepting requests, lets running runs finish for a while, then cancels the rest (each
// keeps its partial answer) and waits for them to be stored.
func shutdown(srv *http.Server, chats *chat.Service, drainTimeout time.Duration, log *slog.Logger) error {
	log.Info("shutting down: no new runs; waiting for running runs", "drain_timeout", drainTimeout)
	drain, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	if err := chats.Drain(drain); err != nil {
		log.Warn("cancelling the chats still running")
	}
	closing, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := chats.Close(closing); err != nil {
		log.Error("runs did not stop in time", "err", err)
	}
	if err := srv.Shutdown(closing); err != nil {
		srv.Close()
	}
	log.Info("stopped")
	return nil
}

// mcpServers reports the MCP servers' states in the API's shape; nil when there are none.
func mcpServers(m *mcpclient.Manager) func() []httpapi.MCPServer {
	if m == nil {
		return nil
	}
	return func() []httpapi.MCPServer {
		var out []httpapi.MCPServer
		for _, s := range m.Servers() {
			out = append(out, httpapi.MCPServer{Name: s.Name, Transport: s.Transport, State: s.State, Tools: s.Tools,
				LastError: s.LastError, LastErrorAt: s.LastErrorAt, ConnectedAt: s.ConnectedAt, Attempts: s.Attempts,
				PID: s.PID, Protocol: s.Protocol})
		}
		return out
	}
}

// startMCP starts the MCP servers of the mcpServers file at path ("": none). Servers connect in
// parallel; start-up waits for them at most the connect timeout, and a server that fails is retried in
// the background.
func startMCP(ctx context.Context, path string, connectTimeout time.Duration, tools *tool.Registry, getenv func(string) string, log *slog.Logger,
	traces *tracing.Tracing) (*mcpclient.Manager, error) {
	var servers []mcpclient.ServerConfig
	if path != "" {
		var err error
		if servers, err = mcpclient.LoadConfig(path, getenv); err != nil {
			return nil, err
		}
	}
	m := mcpclient.New(servers, mcpclient.Options{Registry: tools, Logger: log, Getenv: getenv, Version: version,
		ConnectTimeout: connectTimeout, Tracing: traces})
	if len(servers) > 0 {
		log.Info("starting MCP servers", "count", len(servers), "file", path)
		m.Start(ctx)
	}
	return m, nil
}

func fetchOptions(c config.FetchURL, log *slog.Logger) fetchurl.Options {
	opts := fetchurl.Options{MaxBytes: c.MaxBytes, Timeout: c.Timeout, Logger: log}
	for _, r := range c.Allow {
		opts.Allow = append(opts.Allow, netip.MustParsePrefix(r)) // checked by config.Validate
	}
	return opts
}

// closeTools waits a little for tool calls abandoned after a timeout: a tool that ignores its context must
// not keep the process from exiting.
func closeTools(tools *tool.Registry, log *slog.Logger) {
	done := make(chan struct{})
	go func() {
		tools.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		log.Warn("a tool call is still running after its timeout; exiting without waiting for it")
	}
}

// chatLimits are the limits the chat service enforces, from the config's limits: section.
func chatLimits(l config.Limits) chat.Limits {
	return chat.Limits{MessageBytes: l.MessageBytes, ContextBytes: l.ContextBytes, Attachments: l.Attachments, AttachmentBytes: l.AttachmentBytes,
		RunTime: l.RunTime, RunEvents: l.RunEvents, DiagnosticsBytes: l.DiagnosticsBytes, DiagnosticsRuns: l.DiagnosticsRuns, QueuedRuns: l.QueuedRuns, HistoryBytes: l.HistoryBytes,
		MarkerBytes: l.MarkerBytes,
		Model: agent.Limits{OutputBytes: l.ModelOutputBytes, RunOutputBytes: l.RunOutputBytes,
			ArgumentBytes: l.ToolArgumentBytes, TurnArgumentBytes: l.TurnArgumentBytes, IdleTime: l.IdleTime}}
}

// checkAgentModels warns at start-up about agent models and fallbacks no configured provider serves:
// requests to such an agent fail until the provider is configured.
func checkAgentModels(in map[string]chat.Agent, providers *provider.Set, log *slog.Logger) {
	for name, a := range in {
		for _, m := range append([]string{a.Model}, a.Fallbacks...) {
			if m == "" {
				continue
			}
			if _, _, err := providers.Resolve(m); err != nil {
				log.Warn("an agent names a model no configured provider serves", "agent", name, "err", err)
			}
		}
	}
}

// catalog lists the providers' models for the API, each provider asked for at most 5 seconds.
func catalog(providers *provider.Set) httpapi.Catalog {
	return func(ctx context.Context) []httpapi.ProviderModels {
		var out []httpapi.ProviderModels
		for _, l := range providers.Catalog(ctx, 5*time.Second) {
			src := "config"
			if l.Live {
				src = "live"
			}
			out = append(out, httpapi.ProviderModels{Provider: l.Provider, Type: l.Type, Models: l.Models, Source: src, Error: l.Err})
		}
		return out
	}
}
