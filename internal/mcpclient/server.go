package mcpclient

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"chatd/internal/tool"
)

// server is one configured server and its supervisor's state.
type server struct {
	m       *Manager
	cfg     ServerConfig
	source  string   // the tools' Source: "mcp:<name>"
	secrets []string // redacted from every error kept or logged
	client  *mcp.Client
	first   chan struct{} // closed when the first attempt has ended
	relist  chan struct{} // tools/list_changed arrived
	broken  chan breakage
	check   chan struct{} // a call failed oddly: ping the server
	tokens  atomic.Uint64
	calls   sync.Map // progress token → *inFlight

	mu          sync.Mutex
	state       string
	sess        *mcp.ClientSession
	ready       chan struct{} // closed when a session is up, or when the manager closes
	down        chan struct{} // closed when the attempt under way, or the session, fails
	tools       int
	pid         int
	attempts    int
	lastErr     string
	lastErrAt   time.Time
	connectedAt time.Time
	stderr      *tail
}

func newServer(m *Manager, sc ServerConfig) *server {
	s := &server{m: m, cfg: sc, source: "mcp:" + sc.Name, secrets: sc.secrets(),
		first: make(chan struct{}), relist: make(chan struct{}, 1), broken: make(chan breakage, 1), check: make(chan struct{}, 1),
		state: StateConnecting, ready: make(chan struct{}), down: make(chan struct{})}
	if !sc.Enabled {
		s.state = StateDisabled
	}
	s.client = m.client(s)
	return s
}

// poke signals ch without blocking; one pending signal is enough.
func (s *server) poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// supervise connects, serves and reconnects until ctx ends.
func (s *server) supervise(ctx context.Context) {
	log := s.m.log.With("mcp_server", s.cfg.Name)
	backoff := s.m.opts.MinBackoff
	firstDone := sync.OnceFunc(func() { close(s.first) })
	defer firstDone()
	defer s.closed()
	for ctx.Err() == nil {
		sess, cmd, end, err := s.connect(ctx)
		firstDone()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.failed(err)
			log.Warn("MCP server unavailable; retrying", "err", s.redact(err.Error()), "retry_in", backoff.Round(time.Millisecond))
			if !sleep(ctx, jitter(backoff)) {
				return
			}
			backoff = min(2*backoff, s.m.opts.MaxBackoff)
			continue
		}
		log.Info("MCP server connected", "tools", s.status().Tools, "protocol", sess.InitializeResult().ProtocolVersion)
		began := time.Now()
		reason := s.serve(ctx, sess)
		// New calls must not go to a session being closed, which takes a while (a stdio child gets its
		// stdin closed, then SIGTERM, then SIGKILL): detach it first, close it in the background.
		s.detach(sess, reason)
		s.m.wg.Go(func() { s.shut(sess, cmd, end) })
		if ctx.Err() != nil {
			return
		}
		log.Warn("MCP server connection lost; reconnecting", "err", s.redact(reason.Error()))
		if time.Since(began) > stableFor {
			// It was up a while: reconnect at once, calls waiting.
			backoff = s.m.opts.MinBackoff
			continue
		}
		// A server that keeps dropping its connection is retried ever more slowly.
		s.failed(reason)
		if !sleep(ctx, jitter(backoff)) {
			return
		}
		backoff = min(2*backoff, s.m.opts.MaxBackoff)
	}
}

// stableFor is how long a connection must have lasted for its loss to be retried at once.
const stableFor = 10 * time.Second

// closeGrace bounds the orderly close of a session (a stdio child: stdin closed, SIGTERM, SIGKILL).
// A child that stopped reading its stdin can block the SDK's close behind a write: then its process
// group is killed and the connection's context ended, which unblocks it.
const closeGrace = 8 * time.Second

// shut closes a detached session and releases what it held.
func (s *server) shut(sess *mcp.ClientSession, cmd *exec.Cmd, end context.CancelFunc) {
	done := make(chan struct{})
	go func() {
		_ = sess.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(closeGrace):
		s.m.log.Warn("MCP server session did not close in time; killing it", "mcp_server", s.cfg.Name)
		killGroup(cmd)
		end()
		select {
		case <-done:
		case <-time.After(closeGrace):
			s.m.log.Error("MCP server session still not closed; leaving it", "mcp_server", s.cfg.Name)
		}
	}
	end()
	killGroup(cmd)
}

// serve keeps sess until it ends, a call finds it broken, or ctx ends; it says why it returned.
func (s *server) serve(ctx context.Context, sess *mcp.ClientSession) error {
	ended := make(chan error, 1)
	go func() { ended <- sess.Wait() }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-ended:
			return cmp.Or(err, errClosedByServer)
		case b := <-s.broken:
			if b.sess == sess {
				return b.err
			}
		case <-s.check:
			// A call failed in a way that may or may not mean the connection is gone: ask the server.
			if err := s.ping(ctx, sess); err != nil {
				return err
			}
		case <-s.relist:
			if err := s.list(ctx, sess); err != nil {
				s.note(err)
			}
		}
	}
}

// pingTimeout bounds the ping that checks a connection after a failed call.
const pingTimeout = 5 * time.Second

// ping checks that sess is alive: an error means it is not. A server that answers — even with an error,
// or with a 429 or 5xx its transport reports as a rejection — is alive. The ping runs in its own
// goroutine, bounded by a timer, as a stdio write to a child that stopped reading ignores its context.
func (s *server) ping(ctx context.Context, sess *mcp.ClientSession) error {
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- sess.Ping(pctx, nil) }()
	var err error
	select {
	case err = <-res:
	case <-time.After(pingTimeout + time.Second):
		return fmt.Errorf("no answer to a ping within %s after a failed call", pingTimeout)
	}
	var rpc *jsonrpc.Error
	var netErr net.Error
	switch {
	case err == nil, ctx.Err() != nil:
		return nil
	case errors.As(err, &netErr):
		// The request did not reach the server (a refused connection): fall through, it is gone.
	case errors.As(err, &rpc) && (answered(rpc) || rpc.Code == codeRejected):
		return nil
	}
	return fmt.Errorf("no answer to a ping after a failed call: %w", err)
}

// errClosedByServer is why a session ended without an error of its own.
var errClosedByServer = errors.New("the server closed the connection")

// connect makes one attempt: start or dial, initialize, list the tools. end releases what the
// connection holds once its session is closed.
func (s *server) connect(ctx context.Context) (*mcp.ClientSession, *exec.Cmd, context.CancelFunc, error) {
	s.mu.Lock()
	s.attempts++
	if s.state != StateConnected {
		s.state = StateConnecting
	}
	select {
	case <-s.down: // the last attempt's: a new one for this attempt
		s.down = make(chan struct{})
	default: // still open: calls waiting on it are woken if this attempt fails
	}
	s.mu.Unlock()
	// The SSE transport keeps its event stream on the context it connects with, so the connection gets
	// one that lasts until Close; only the handshake is bounded by the attempt's timeout.
	life, end := context.WithCancel(ctx)
	ctx, cancel := context.WithTimeout(ctx, s.m.opts.ConnectTimeout)
	defer cancel()
	bounded := context.AfterFunc(ctx, end)
	sess, cmd, err := s.handshake(ctx, life)
	if !bounded() && err == nil { // the time ran out as it succeeded
		_ = sess.Close()
		killGroup(cmd)
		err = fmt.Errorf("no answer to initialize within %s", s.m.opts.ConnectTimeout)
	}
	if err != nil {
		end()
		return nil, nil, nil, err
	}
	s.mu.Lock()
	s.state, s.sess, s.connectedAt = StateConnected, sess, time.Now()
	if cmd != nil && cmd.Process != nil {
		s.pid = cmd.Process.Pid
	}
	close(s.ready)
	s.mu.Unlock()
	return sess, cmd, end, nil
}

// handshake starts or dials the server on a connection that lasts as long as life, initializes it and
// lists its tools.
func (s *server) handshake(ctx, life context.Context) (*mcp.ClientSession, *exec.Cmd, error) {
	t, cmd, err := s.transport()
	if err != nil {
		return nil, nil, err
	}
	sess, err := s.client.Connect(ctx, lastingTransport{t, life}, nil)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer to initialize within %s", s.m.opts.ConnectTimeout)
		}
		killGroup(cmd) // the SDK stopped the child; this stops what it started
		return nil, nil, s.withStderr(fmt.Errorf("connect: %w", err))
	}
	if err := s.list(ctx, sess); err != nil {
		_ = sess.Close()
		killGroup(cmd)
		return nil, nil, err
	}
	return sess, cmd, nil
}

// lastingTransport connects its transport with life instead of the handshake's context.
type lastingTransport struct {
	mcp.Transport
	life context.Context
}

func (t lastingTransport) Connect(context.Context) (mcp.Connection, error) {
	return t.Transport.Connect(t.life)
}

// transport builds the SDK transport of the server's kind.
func (s *server) transport() (mcp.Transport, *exec.Cmd, error) {
	switch s.cfg.Transport {
	case TransportHTTP:
		return &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: s.httpClient(), MaxRetries: 3}, nil, nil
	case TransportSSE:
		return &mcp.SSEClientTransport{Endpoint: s.cfg.URL, HTTPClient: s.httpClient()}, nil, nil
	}
	cmd := exec.Command(s.cfg.Command, s.cfg.Args...)
	cmd.Dir = s.cfg.Cwd
	cmd.Env = s.env()
	s.mu.Lock()
	s.stderr = &tail{max: 2048}
	cmd.Stderr = s.stderr
	s.mu.Unlock()
	// A grandchild holding stderr open must not keep Wait (and Close) waiting; and the child gets a
	// process group of its own, so that what it starts (npx → node) is stopped with it.
	cmd.WaitDelay = 2 * time.Second
	cmd.SysProcAttr = ownGroup()
	return &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, cmd, nil
}

// env is a stdio child's whole environment: PATH and HOME, then what the file names for it.
func (s *server) env() []string {
	env := make([]string, 0, len(s.cfg.Env)+2)
	if get := s.m.opts.Getenv; get != nil {
		for _, k := range []string{"PATH", "HOME"} {
			if _, named := s.cfg.Env[k]; !named && get(k) != "" {
				env = append(env, k+"="+get(k))
			}
		}
	}
	for k, v := range s.cfg.Env {
		env = append(env, k+"="+v)
	}
	return env
}

func (s *server) httpClient() *http.Client {
	var base http.RoundTripper = statusTransport{http.DefaultTransport}
	if len(s.cfg.Headers) == 0 {
		return &http.Client{Transport: base}
	}
	h := make(http.Header, len(s.cfg.Headers))
	for k, v := range s.cfg.Headers {
		h.Set(k, v)
	}
	u, _ := url.Parse(s.cfg.URL) // checked by ParseConfig
	return &http.Client{Transport: headerTransport{base: base, header: h, host: u.Host, scheme: u.Scheme}}
}

// httpStatus is the HTTP status of the last reply to a call's requests, for its error to say what is
// known of a call the transport did not deliver.
type httpStatus struct{ code atomic.Int32 }

type httpStatusKey struct{}

// withHTTPStatus returns a context whose requests record their reply's status in st.
func withHTTPStatus(ctx context.Context, st *httpStatus) context.Context {
	return context.WithValue(ctx, httpStatusKey{}, st)
}

// wrap returns err with the status recorded, if any.
func (st *httpStatus) wrap(err error) error {
	if code := int(st.code.Load()); code != 0 {
		return &statusError{code: code, err: err}
	}
	return err
}

// statusError is a call's error with the HTTP status of its last reply.
type statusError struct {
	code int
	err  error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// httpStatusOf returns the HTTP status of err's reply; 0 when unknown.
func httpStatusOf(err error) int {
	if e, ok := errors.AsType[*statusError](err); ok {
		return e.code
	}
	return 0
}

// statusTransport records the status of each reply in the request's httpStatus, if it has one.
type statusTransport struct{ base http.RoundTripper }

func (t statusTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if st, ok := r.Context().Value(httpStatusKey{}).(*httpStatus); ok && resp != nil && resp.StatusCode >= 300 {
		st.code.Store(int32(resp.StatusCode))
	}
	return resp, err
}

// headerTransport adds the configured headers to the requests for the configured host — not to a host
// a redirect points at, which must not get the server's credentials.
type headerTransport struct {
	base   http.RoundTripper
	header http.Header
	host   string
	scheme string // https to http on one host must not carry them either
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host != t.host || r.URL.Scheme != t.scheme {
		return t.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	for k, v := range t.header {
		r.Header[k] = v
	}
	return t.base.RoundTrip(r)
}

// list reads every page of the server's tools into the registry.
func (s *server) list(ctx context.Context, sess *mcp.ClientSession) error {
	ctx, cancel := context.WithTimeout(ctx, s.m.opts.ConnectTimeout)
	defer cancel()
	var tools []tool.Tool
	names := map[string]string{}
	for t, err := range sess.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("tools/list: %w", err)
		}
		if len(tools) == s.m.opts.MaxTools {
			s.m.log.Warn("MCP server lists more tools than chatd takes; the rest are left out",
				"mcp_server", s.cfg.Name, "max_tools", s.m.opts.MaxTools)
			break
		}
		mt, err := s.newTool(t)
		if err != nil {
			s.m.log.Warn("MCP tool left out", "mcp_server", s.cfg.Name, "tool", t.Name, "err", err)
			continue
		}
		if other, dup := names[mt.info.Name]; dup {
			s.m.log.Warn("MCP tools with one exposed name; the second is left out", "mcp_server", s.cfg.Name,
				"tool", t.Name, "other", other, "name", mt.info.Name)
			continue
		}
		names[mt.info.Name] = t.Name
		tools = append(tools, mt)
	}
	err := s.m.opts.Registry.Replace(s.source, tools)
	if err != nil {
		s.m.log.Warn("MCP tools left out", "mcp_server", s.cfg.Name, "err", err)
	}
	n := 0
	for _, info := range s.m.opts.Registry.List() {
		if info.Source == s.source {
			n++
		}
	}
	s.mu.Lock()
	s.tools = n
	s.mu.Unlock()
	return nil
}

// session returns the connected session, or waits for the attempt under way until ctx ends. A server
// whose last attempt failed is down until its backoff has passed: the call fails at once, unless it is
// a retry, which waits for the reconnect.
func (s *server) session(ctx context.Context, retry bool) (*mcp.ClientSession, error) {
	for {
		s.mu.Lock()
		sess, ready, down, state, last := s.sess, s.ready, s.down, s.state, s.lastErr
		s.mu.Unlock()
		if sess != nil {
			return sess, nil
		}
		if state == StateClosed || state == StateDisabled {
			return nil, fmt.Errorf("MCP server %s is %s", s.cfg.Name, state)
		}
		if state == StateFailed && !retry {
			return nil, fmt.Errorf("MCP server %s is unavailable (%s): %s", s.cfg.Name, state, last)
		}
		if state == StateFailed {
			down = nil // a retry waits for the reconnect
		}
		select {
		case <-ready:
		case <-down:
		case <-ctx.Done():
			s.mu.Lock()
			state, last = s.state, s.lastErr
			s.mu.Unlock()
			if last == "" {
				return nil, fmt.Errorf("MCP server %s is not connected yet", s.cfg.Name)
			}
			return nil, fmt.Errorf("MCP server %s is unavailable (%s): %s", s.cfg.Name, state, last)
		}
	}
}

// lost marks sess broken (a call failed on it), so that the supervisor reconnects; a session already
// replaced is left alone.
func (s *server) lost(sess *mcp.ClientSession, err error) {
	s.mu.Lock()
	current := s.sess == sess
	if current {
		s.sess, s.state, s.ready, s.pid = nil, StateConnecting, make(chan struct{}), 0
		s.lastErr, s.lastErrAt = s.redact(err.Error()), time.Now()
	}
	s.mu.Unlock()
	if !current {
		return
	}
	for { // a stale breakage waiting in the channel gives way to this one
		select {
		case s.broken <- breakage{sess, err}:
			return
		default:
		}
		select {
		case <-s.broken:
		default:
		}
	}
}

// detach takes sess out of use: calls from now on wait for the next session.
func (s *server) detach(sess *mcp.ClientSession, reason error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pid = 0
	if s.sess == sess {
		s.sess, s.ready = nil, make(chan struct{})
		s.lastErr, s.lastErrAt = s.redact(reason.Error()), time.Now()
	}
	if s.state == StateConnected {
		s.state = StateConnecting
	}
}

// breakage is a session a call found broken, and how.
type breakage struct {
	sess *mcp.ClientSession
	err  error
}

// failed records an attempt or a connection that failed.
func (s *server) failed(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess != nil {
		s.sess, s.ready = nil, make(chan struct{})
	}
	s.state, s.pid = StateFailed, 0
	s.lastErr, s.lastErrAt = s.redact(err.Error()), time.Now()
	select {
	case <-s.down:
	default:
		close(s.down) // wake waiting calls: they fail at once
	}
}

// note records an error that did not end the connection.
func (s *server) note(err error) {
	s.mu.Lock()
	s.lastErr, s.lastErrAt = s.redact(err.Error()), time.Now()
	s.mu.Unlock()
}

func (s *server) closed() {
	s.mu.Lock()
	s.state, s.sess, s.pid = StateClosed, nil, 0
	select {
	case <-s.ready:
	default:
		close(s.ready) // wake waiting calls: they fail at once
	}
	s.mu.Unlock()
}

func (s *server) status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{Name: s.cfg.Name, Transport: s.cfg.Transport, State: s.state, Tools: s.tools,
		LastError: s.lastErr, Attempts: s.attempts, PID: s.pid}
	if !s.lastErrAt.IsZero() {
		t := s.lastErrAt.UTC()
		st.LastErrorAt = &t
	}
	if s.sess != nil {
		t := s.connectedAt.UTC()
		st.ConnectedAt = &t
		if r := s.sess.InitializeResult(); r != nil {
			st.Protocol = r.ProtocolVersion
		}
	}
	return st
}

func (s *server) redact(msg string) string {
	return redact(msg, s.secrets)
}

// withStderr adds what a stdio child last wrote to its stderr, which usually says why it failed.
func (s *server) withStderr(err error) error {
	s.mu.Lock()
	t := s.stderr
	s.mu.Unlock()
	if t == nil {
		return err
	}
	if msg := strings.TrimSpace(t.String()); msg != "" {
		return fmt.Errorf("%w; stderr: %s", err, msg)
	}
	return err
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.ToValidUTF8(string(t.buf), "")
}

// sleep waits d or until ctx ends; it reports whether the wait was whole.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// jitter spreads d by ±20%, so that servers failing together do not retry together.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.4-0.2)*float64(d))
}
