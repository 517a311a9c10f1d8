// Package mcpclient runs chatd's MCP servers as supervised dependencies, with the official Go SDK: it
// starts or dials each server from the operator's mcpServers file, initializes it, lists its tools (all
// pages, again on notifications/tools/list_changed) into the tool registry as <server>__<tool>, and
// reconnects with backoff after a failed start, a transport error, a crashed child or an HTTP 404
// session expiry. Calls carry a progress token and are cancelled with their context; a server that is
// down or hung gives a failed tool result within the call's timeout, never a stuck run. A server's
// elicitation (form mode) during a call goes to the tool.Asker of the call's context (elicit.go).
//
// It imports the tool package and the SDK; nothing else of chatd.
package mcpclient

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"chatd/internal/tool"
	"chatd/internal/tracing"
)

// Server states.
const (
	StateConnecting = "connecting" // the first attempt, or a reconnect, is under way
	StateConnected  = "connected"
	StateFailed     = "failed"   // the last attempt failed; the next one waits for its backoff
	StateDisabled   = "disabled" // "enabled": false in the file
	StateClosed     = "closed"   // chatd is shutting down
)

// States are every state a server can be in, in the order above.
var States = []string{StateConnecting, StateConnected, StateFailed, StateDisabled, StateClosed}

// Options configure a Manager.
type Options struct {
	Registry *tool.Registry // where the servers' tools go; required
	Logger   *slog.Logger   // nil discards
	// Getenv gives a stdio child its PATH and HOME (nil: no PATH or HOME).
	Getenv func(string) string
	// ConnectTimeout bounds one attempt to start or dial, initialize and list tools (default 20s).
	ConnectTimeout time.Duration
	// StartupWait is how long Start waits for the servers' first attempts (default ConnectTimeout);
	// servers still connecting then carry on in the background.
	StartupWait time.Duration
	// MinBackoff and MaxBackoff bound the wait between failed attempts (defaults 1s and 60s).
	MinBackoff, MaxBackoff time.Duration
	// KeepAlive pings a connected server this often and reconnects when it stops answering (default
	// 30s; negative: off).
	KeepAlive time.Duration
	// MaxTools caps the tools read from one server (default 512).
	MaxTools int
	// Version is chatd's version, sent in clientInfo.
	Version string
	// Tracing traces tool calls (tools/call spans, the trace context sent in _meta); nil: none.
	Tracing *tracing.Tracing
	// Now is the clock that ends the window in which an abandoned call still counts as in flight
	// (elicit.go); nil: time.Now.
	Now func() time.Time
	// AfterFunc, with Now, is that clock's timer: it calls f once d has passed, unless stopped first;
	// nil: time.AfterFunc.
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
}

// Manager supervises the configured servers.
type Manager struct {
	opts    Options
	log     *slog.Logger
	servers []*server
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// Status is one server's state for GET /v1/mcp/servers. It holds no secret: errors are redacted.
type Status struct {
	Name        string
	Transport   string
	State       string
	Tools       int
	LastError   string
	LastErrorAt *time.Time
	ConnectedAt *time.Time
	// Attempts counts the connection attempts since start-up.
	Attempts int
	// PID is a stdio server's process id while it runs.
	PID int
	// Protocol is the protocol version the server agreed on.
	Protocol string
}

// New prepares a Manager for servers; Start connects them.
func New(servers []ServerConfig, opts Options) *Manager {
	opts.Logger = cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	opts.ConnectTimeout = cmp.Or(opts.ConnectTimeout, 20*time.Second)
	opts.StartupWait = cmp.Or(opts.StartupWait, opts.ConnectTimeout)
	opts.MinBackoff = cmp.Or(opts.MinBackoff, time.Second)
	opts.MaxBackoff = max(cmp.Or(opts.MaxBackoff, time.Minute), opts.MinBackoff)
	opts.KeepAlive = cmp.Or(opts.KeepAlive, 30*time.Second)
	opts.MaxTools = cmp.Or(opts.MaxTools, 512)
	opts.Version = cmp.Or(opts.Version, "dev")
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.AfterFunc == nil {
		opts.AfterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	m := &Manager{opts: opts, log: opts.Logger}
	for _, sc := range servers {
		m.servers = append(m.servers, newServer(m, sc))
	}
	return m
}

// Start connects every enabled server in parallel and waits until each has finished its first attempt
// or StartupWait has passed, whichever is first. A server that fails does not fail Start: it is reported
// failed and retried with backoff until Close.
func (m *Manager) Start(ctx context.Context) {
	// The servers live until Close; ctx only bounds the wait (a Ctrl-C during start-up ends it).
	life, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m.cancel = cancel
	deadline := time.NewTimer(m.opts.StartupWait)
	defer deadline.Stop()
	for _, s := range m.servers {
		if !s.cfg.Enabled {
			continue
		}
		m.wg.Go(func() { s.supervise(life) })
	}
	for _, s := range m.servers {
		if !s.cfg.Enabled {
			continue
		}
		select {
		case <-s.first:
		case <-deadline.C:
			m.log.Warn("MCP servers still connecting after the start-up wait; chatd starts without them",
				"wait", m.opts.StartupWait)
			return
		case <-ctx.Done():
			return
		}
	}
}

// Servers reports each server's state, in name order.
func (m *Manager) Servers() []Status {
	out := make([]Status, 0, len(m.servers))
	for _, s := range m.servers {
		out = append(out, s.status())
	}
	return out
}

// Close disconnects every server (a stdio child gets its stdin closed, then SIGTERM, then SIGKILL) and
// waits for the supervisors. The servers' tools stay registered and fail when called.
func (m *Manager) Close() {
	if m.cancel != nil {
		m.cancel()
	}
	m.wg.Wait()
	for _, s := range m.servers {
		s.forgetAll()
	}
}

// client builds the SDK client of one server, its notifications bound to s.
func (m *Manager) client(s *server) *mcp.Client {
	keepAlive := m.opts.KeepAlive
	if keepAlive < 0 {
		keepAlive = 0
	}
	return mcp.NewClient(&mcp.Implementation{Name: "chatd", Version: m.opts.Version}, &mcp.ClientOptions{
		// No roots or sampling. Elicitation in form mode only: a call's question goes to the person
		// whose run made the call (elicit.go); chatd cannot send a person to a URL.
		Capabilities:                &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}}},
		ElicitationHandler:          s.elicit,
		ToolListChangedHandler:      func(context.Context, *mcp.ToolListChangedRequest) { s.poke(s.relist) },
		ProgressNotificationHandler: s.progressed,
		KeepAlive:                   keepAlive,
		KeepAliveFailureThreshold:   2,
	})
}
