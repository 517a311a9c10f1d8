// Package config reads chatd's configuration once — flags, then CHATD_* and provider environment
// variables, then the YAML file, then defaults, the first that sets a value winning — into a Config.
// Only cmd/chatd imports it.
//
// Its Config holds the option types of what it configures (provider.Config, tool.Scopes, chat.Agent),
// so it imports those packages; it never imports a store driver, MCP or the HTTP API (deps_test.go).
package config

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"chatd/internal/chat"
	"chatd/internal/llm"
	"chatd/internal/llm/upstream"
	"chatd/internal/provider"
	"chatd/internal/store"
	"chatd/internal/tool"
)

// Defaults.
const (
	DefaultAddr = "127.0.0.1:8080"
	// DefaultDrainTimeout is how long SIGTERM lets running runs finish before cancelling them.
	DefaultDrainTimeout = 20 * time.Second
	DefaultDB           = "sqlite:./chatd.db"
)

// Config is chatd's configuration. It never holds a secret in a field that is logged: API keys live in
// Providers and are left out of LogValue.
type Config struct {
	Addr string
	DB   string // sqlite:PATH, or a postgres:// URL (which may hold a password: see LogValue)
	// DBListen is the PostgreSQL database URL the LISTEN connection uses ("": DB). Instances wake each
	// other with notifications, and a pooler in transaction mode (PgBouncer) breaks LISTEN: point this
	// one at the server itself (--db-listen, CHATD_DB_LISTEN or db_listen).
	DBListen string
	// LeaseTTL is how long the lease of a run on PostgreSQL lasts unless its instance renews it, and
	// SweepInterval how often each instance looks for runs whose lease ended: a dead instance's runs
	// are recovered within their sum (defaults 20s and 10s).
	LeaseTTL      time.Duration
	SweepInterval time.Duration
	Model         string // the default model, provider/model
	// TitleModel titles a session after its first answer (CHATD_TITLE_MODEL or title_model):
	// provider/model, "none" to keep the title cut from the first message, or "" for the session's own
	// model.
	TitleModel string
	File       string // the YAML file read, if any
	LogLevel   slog.Level
	// LogFormat is "text" (slog's key=value lines, the default) or "json" (one JSON object a line).
	LogFormat   string
	ToolTimeout time.Duration
	// DrainTimeout is how long SIGTERM lets running runs finish before cancelling them (default 20s).
	DrainTimeout time.Duration
	// ApprovalTimeout is how long a run waits for a person's decision before its undecided calls are
	// denied (CHATD_APPROVAL_TIMEOUT, approval_timeout; default 24h).
	ApprovalTimeout time.Duration
	AllowedHosts    []string // Host header values accepted besides loopback names (behind a reverse proxy)
	Providers       []provider.Config
	Unconfigured    []provider.Unconfigured
	Agents          map[string]chat.Agent // the agents: section, by name
	Context         Context
	// MCPConfig is the path of the MCP servers file in the common {"mcpServers":{…}} shape
	// (--mcp-config, CHATD_MCP_CONFIG or mcp_config); "" runs no MCP server.
	MCPConfig string
	// MCPConnectTimeout bounds one attempt to start or reach an MCP server, and so how long start-up
	// waits for the servers (CHATD_MCP_CONNECT_TIMEOUT or mcp_connect_timeout; default 20s).
	MCPConnectTimeout time.Duration
	// FetchURL configures the built-in fetch_url tool, off unless enabled.
	FetchURL FetchURL
	// ToolScopes bind tools to the request context's page, tab and subtab, for agents without their own.
	ToolScopes *tool.Scopes
	// Limits are the hard limits on requests and runs (limits: in the file); zero values are the
	// defaults of the packages that enforce them.
	Limits Limits
	// Auth says who may call chatd besides the holders of API keys (auth: in the file).
	Auth Auth
	// UserLimits are what each user may use (user_limits: in the file); API keys override them.
	UserLimits UserLimits
	// Prices are the models' prices by provider/model (prices: in the file), for costs and budgets.
	Prices map[string]chat.Price
	// TLSCert and TLSKey, both set, make chatd serve HTTPS (--tls-cert, --tls-key).
	TLSCert, TLSKey string
	// PprofAddr, when set, is a loopback address where Go's profiles are served (--pprof-addr).
	PprofAddr string
	// MetricsAddr, when set, serves /metrics on a listener of its own instead of the API's
	// (--metrics-addr, CHATD_METRICS_ADDR or metrics_addr).
	MetricsAddr string
	// MetricsToken, when set, is a bearer token that may read /metrics besides an admin's API key
	// (--metrics-token, CHATD_METRICS_TOKEN or metrics_token). Never logged.
	MetricsToken string
}

// Auth is the auth: section.
type Auth struct {
	// TrustedHeader names the header a trusted proxy puts the signed-in user in (X-Forwarded-Email);
	// it is read only from requests whose address is in TrustedProxies.
	TrustedHeader  string
	TrustedProxies []netip.Prefix
	// Admins are the users of the trusted header who are admins.
	Admins []string
	// CacheTTL is how long a verified key is trusted before the store is asked again (default 10s);
	// SessionTTL how long a web UI sign-in lasts (default 7 days).
	CacheTTL, SessionTTL time.Duration
}

// UserLimits are the limits of users: Default for everyone, Users by name (each field it sets
// replacing the default's).
type UserLimits struct {
	Default store.Limits
	Users   map[string]store.Limits
}

type fileAuth struct {
	TrustedHeader  string        `yaml:"trusted_header"`
	TrustedProxies []string      `yaml:"trusted_proxies"`
	Admins         []string      `yaml:"admins"`
	CacheTTL       time.Duration `yaml:"cache_ttl"`
	SessionTTL     time.Duration `yaml:"session_ttl"`
}

type fileLimits struct {
	ConcurrentRuns    int     `yaml:"concurrent_runs"`
	RequestsPerMinute int     `yaml:"requests_per_minute"`
	TokensPerDay      int64   `yaml:"tokens_per_day"`
	SpendUSD          float64 `yaml:"spend_usd"`
	SpendPeriod       string  `yaml:"spend_period"`
}

func (l fileLimits) limits() store.Limits {
	return store.Limits{ConcurrentRuns: l.ConcurrentRuns, RequestsPerMinute: l.RequestsPerMinute,
		TokensPerDay: l.TokensPerDay, SpendUSD: l.SpendUSD, SpendPeriod: l.SpendPeriod}
}

type fileUserLimits struct {
	Default fileLimits            `yaml:"default"`
	Users   map[string]fileLimits `yaml:"users"`
}

type filePrice struct {
	Input      float64 `yaml:"input"`
	Output     float64 `yaml:"output"`
	CacheRead  float64 `yaml:"cache_read"`
	CacheWrite float64 `yaml:"cache_write"`
}

// accounts reads the auth:, user_limits: and prices: sections.
func (c *Config) accounts(f *file) error {
	a := f.Auth
	c.Auth = Auth{TrustedHeader: http.CanonicalHeaderKey(strings.TrimSpace(a.TrustedHeader)), Admins: a.Admins,
		CacheTTL: a.CacheTTL, SessionTTL: a.SessionTTL}
	for _, p := range a.TrustedProxies {
		prefix, err := netip.ParsePrefix(p)
		if err != nil {
			addr, aerr := netip.ParseAddr(p)
			if aerr != nil {
				return fmt.Errorf("config: auth: trusted_proxies: %q is not an address or a range such as 10.0.0.0/8", p)
			}
			prefix = netip.PrefixFrom(addr, addr.BitLen())
		}
		c.Auth.TrustedProxies = append(c.Auth.TrustedProxies, prefix.Masked())
	}
	if (c.Auth.TrustedHeader == "") != (len(c.Auth.TrustedProxies) == 0) {
		return errors.New("config: auth: trusted_header and trusted_proxies go together: the header is believed only from those addresses")
	}
	if a.CacheTTL < 0 || a.SessionTTL < 0 {
		return errors.New("config: auth: cache_ttl and session_ttl must be positive")
	}
	c.UserLimits = UserLimits{Default: f.UserLimits.Default.limits()}
	if err := checkLimits("default", c.UserLimits.Default); err != nil {
		return err
	}
	for name, l := range f.UserLimits.Users {
		if c.UserLimits.Users == nil {
			c.UserLimits.Users = map[string]store.Limits{}
		}
		c.UserLimits.Users[name] = l.limits()
		if err := checkLimits(name, l.limits()); err != nil {
			return err
		}
	}
	for model, p := range f.Prices {
		if !(p.Input >= 0 && p.Output >= 0 && p.CacheRead >= 0 && p.CacheWrite >= 0) ||
			max(p.Input, p.Output, p.CacheRead, p.CacheWrite) > 1e6 { // NaN and infinities too
			return fmt.Errorf("config: prices: %s: prices are US dollars per million tokens, from 0 to 1000000", model)
		}
		if c.Prices == nil {
			c.Prices = map[string]chat.Price{}
		}
		c.Prices[model] = chat.Price{Input: p.Input, Output: p.Output, CacheRead: p.CacheRead, CacheWrite: p.CacheWrite}
	}
	return nil
}

func checkLimits(who string, l store.Limits) error {
	if err := l.Check(); err != nil {
		return fmt.Errorf("config: user_limits: %s: %w", who, err)
	}
	return nil
}

// Loopback reports whether chatd listens on loopback addresses only.
func (c *Config) Loopback() bool {
	host, _, err := net.SplitHostPort(c.Addr)
	return err == nil && isLoopback(host)
}

// CheckExposure refuses to serve beyond loopback without auth: with no API key (hasKeys) and no
// trusted proxy, every caller would be the local user.
func (c *Config) CheckExposure(hasKeys bool) error {
	if c.MetricsAddr != "" && !hasKeys && c.MetricsToken == "" {
		if host, _, err := net.SplitHostPort(c.MetricsAddr); err != nil || !isLoopback(host) {
			return fmt.Errorf("refusing to serve metrics on %s: beyond loopback they need a scrape token (metrics_token, "+
				"CHATD_METRICS_TOKEN) or API keys; or serve them on 127.0.0.1", c.MetricsAddr)
		}
	}
	if c.Loopback() || hasKeys || c.Auth.TrustedHeader != "" {
		return nil
	}
	return fmt.Errorf("refusing to listen on %s: chatd has no API keys, so it would accept requests without "+
		"authentication, which is only safe on loopback; create a key first (chatd keys create --user NAME --admin), "+
		"configure auth.trusted_header behind a signing-in proxy, or listen on 127.0.0.1", c.Addr)
}

// Limits are the hard, server-side limits of the limits: section. Each zero value means the default
// the README's table gives.
type Limits struct {
	BodyBytes         int64         `yaml:"body_bytes"`          // a request body (1 MiB)
	ChatBodyBytes     int64         `yaml:"chat_body_bytes"`     // a chat send's body, with its attachments (32 MiB)
	MessageBytes      int           `yaml:"message_bytes"`       // a message's text (256 KiB)
	ContextBytes      int           `yaml:"context_bytes"`       // a request's context, as JSON (64 KiB)
	Attachments       int           `yaml:"attachments"`         // attachments of one message (8)
	AttachmentBytes   int           `yaml:"attachment_bytes"`    // one attachment, decoded (10 MiB)
	ToolArgumentBytes int           `yaml:"tool_argument_bytes"` // one tool call's arguments (256 KiB)
	TurnArgumentBytes int           `yaml:"turn_argument_bytes"` // the arguments of one answer's calls (1 MiB)
	ToolResultBytes   int           `yaml:"tool_result_bytes"`   // a tool result's text, and its payload, stored (1 MiB)
	ToolAttachBytes   int           `yaml:"tool_attachment_bytes"`
	ModelOutputBytes  int           `yaml:"model_output_bytes"` // what one model call streams (4 MiB)
	RunOutputBytes    int           `yaml:"run_output_bytes"`   // what a run's model calls stream (16 MiB)
	RunTime           time.Duration `yaml:"run_time"`           // a run's wall time (15m)
	IdleTime          time.Duration `yaml:"idle_time"`          // between two events of a model stream (5m)
	RunEvents         int           `yaml:"run_events"`         // events of one run (500000)
	DiagnosticsBytes  int           `yaml:"diagnostics_bytes"`  // what one run stores for its diagnostics (8 MiB; negative: none)
	DiagnosticsRuns   int           `yaml:"diagnostics_runs"`   // a session's latest runs whose calls keep their requests (10)
	QueuedRuns        int           `yaml:"queued_runs"`        // runs queued behind a session's running one (32)
	HistoryBytes      int           `yaml:"history_bytes"`      // records kept in memory between runs (256 MiB; negative: none)
	MarkerBytes       int           `yaml:"marker_bytes"`       // one marked block of an answer (256 KiB)
}

// check refuses negative limits.
func (l *Limits) check() error {
	for name, v := range map[string]int64{"body_bytes": l.BodyBytes, "chat_body_bytes": l.ChatBodyBytes,
		"message_bytes": int64(l.MessageBytes), "context_bytes": int64(l.ContextBytes), "attachments": int64(l.Attachments), "attachment_bytes": int64(l.AttachmentBytes),
		"tool_argument_bytes": int64(l.ToolArgumentBytes), "turn_argument_bytes": int64(l.TurnArgumentBytes),
		"tool_result_bytes": int64(l.ToolResultBytes), "tool_attachment_bytes": int64(l.ToolAttachBytes),
		"model_output_bytes": int64(l.ModelOutputBytes), "run_output_bytes": int64(l.RunOutputBytes),
		"run_time": int64(l.RunTime), "idle_time": int64(l.IdleTime), "run_events": int64(l.RunEvents),
		"diagnostics_runs": int64(l.DiagnosticsRuns), "queued_runs": int64(l.QueuedRuns), "marker_bytes": int64(l.MarkerBytes)} {
		if v < 0 {
			return fmt.Errorf("config: limits: %s must be positive (leave it out for the default)", name)
		}
	}
	return nil
}

// FetchURL configures the built-in fetch_url tool.
type FetchURL struct {
	Enabled  bool          `yaml:"enabled"`
	MaxBytes int64         `yaml:"max_bytes"` // of the response body read; 0: the tool's default
	Timeout  time.Duration `yaml:"timeout"`   // of the whole fetch, redirects included; 0: the tool's default
	// Allow lists address ranges (CIDR) the SSRF guard lets through, such as an intranet the operator
	// wants reachable; internal addresses are refused otherwise.
	Allow []string `yaml:"allow"`
}

// Context is what every model call is sent: the defaults of the agents' context settings.
type Context struct {
	// ToolHistoryRounds: the latest tool rounds sent in full (CHATD_TOOL_HISTORY_ROUNDS; default 10;
	// negative: all).
	ToolHistoryRounds int
	// ToolResultMaxBytes caps a tool result as the model sees it (CHATD_TOOL_RESULT_MAX_BYTES; 32 KiB).
	ToolResultMaxBytes int
	// CompactAt is the share of a model's context window at which older turns are summarized
	// (CHATD_COMPACT_AT; default 0.8).
	CompactAt float64
	// Windows are context windows in tokens by "provider/model", "model" or a "prefix*" pattern.
	Windows map[string]int
}

// fileAgent is a named profile as the config file writes it; agent converts it.
type fileAgent struct {
	Description string `yaml:"description"`
	Model       string `yaml:"model"`
	// Fallbacks are provider/model names tried in order when the model fails before any output.
	Fallbacks     []string `yaml:"fallbacks"`
	SystemPrompt  string   `yaml:"system_prompt"`
	Tools         []string `yaml:"tools"` // absent: every tool
	MaxIterations int      `yaml:"max_iterations"`
	Temperature   *float64 `yaml:"temperature"`
	MaxTokens     int      `yaml:"max_tokens"`
	// Reasoning asks reasoning models to think: effort (low, medium, high) and/or budget_tokens.
	Reasoning *fileReasoning `yaml:"reasoning"`
	// The system prompt's sections after the identity (system_prompt) and the tools.
	Instructions string `yaml:"instructions"`
	Guidelines   string `yaml:"guidelines"`
	// Context settings; absent: the top-level ones.
	ToolHistoryRounds int     `yaml:"tool_history_rounds"`
	ContextWindow     int     `yaml:"context_window"`
	CompactAt         float64 `yaml:"compact_at"`
	// ToolScopes bind tools to the request context's page, tab and subtab; absent: the top-level ones.
	ToolScopes *tool.Scopes `yaml:"tool_scopes"`
	// Payloads are the structured blocks the agent's answers may carry after a marker; Suggestions
	// tells the model about SUGGESTED_VALUES and SUGGESTED_ACTIONS.
	Payloads    []filePayload `yaml:"payloads"`
	Suggestions bool          `yaml:"suggestions"`
	// TitleModel titles the agent's sessions; absent: the top-level title_model.
	TitleModel string `yaml:"title_model"`
	// Approvals are the agent's approval rules, first match wins (tool.ApprovalRule).
	Approvals []fileApprovalRule `yaml:"approvals"`
	// AskUser offers the model the built-in ask_user tool.
	AskUser bool `yaml:"ask_user"`
}

// fileApprovalRule is an approval rule as the config file writes it, its allow_if a JSON Schema in YAML.
type fileApprovalRule struct {
	Tools    []string       `yaml:"tools"`
	Decision string         `yaml:"decision"`
	AllowIf  map[string]any `yaml:"allow_if"`
	Reason   string         `yaml:"reason"`
}

func (r fileApprovalRule) rule() tool.ApprovalRule {
	out := tool.ApprovalRule{Tools: r.Tools, Decision: tool.Decision(r.Decision), Reason: r.Reason}
	if r.AllowIf != nil {
		out.AllowIf, _ = json.Marshal(r.AllowIf) // YAML maps have string keys: Marshal cannot fail
	}
	return out
}

// filePayload is a payload type as the config file writes it.
type filePayload struct {
	Name         string         `yaml:"name"`
	Marker       string         `yaml:"marker"`
	Schema       map[string]any `yaml:"schema"` // a JSON Schema, written in YAML
	Instructions string         `yaml:"instructions"`
	Scope        *struct {
		Page   string `yaml:"page"`
		Tab    string `yaml:"tab"`
		Subtab string `yaml:"subtab"`
	} `yaml:"scope"` // absent: everywhere
}

func (p filePayload) payloadType() chat.PayloadType {
	out := chat.PayloadType{Name: p.Name, Marker: p.Marker, Instructions: p.Instructions}
	if p.Schema != nil {
		out.Schema, _ = json.Marshal(p.Schema) // YAML maps have string keys: Marshal cannot fail
	}
	if p.Scope != nil {
		out.Page, out.Tab, out.Subtab = p.Scope.Page, p.Scope.Tab, p.Scope.Subtab
	}
	return out
}

// fileReasoning is an agent's thinking setting.
type fileReasoning struct {
	Effort       string `yaml:"effort"`
	BudgetTokens int    `yaml:"budget_tokens"`
}

// agent is the one place the file's agent becomes chat's: TestAgentConversion fails when a field of
// either is left out.
func (a fileAgent) agent() chat.Agent {
	out := chat.Agent{Description: a.Description, Model: a.Model, Fallbacks: a.Fallbacks, SystemPrompt: a.SystemPrompt, Tools: a.Tools,
		Scopes: a.ToolScopes, MaxIterations: a.MaxIterations, Temperature: a.Temperature, MaxTokens: a.MaxTokens,
		Instructions: a.Instructions, Guidelines: a.Guidelines, ToolHistoryRounds: a.ToolHistoryRounds,
		ContextWindow: a.ContextWindow, CompactAt: a.CompactAt, Suggestions: a.Suggestions, TitleModel: a.TitleModel, AskUser: a.AskUser}
	for _, p := range a.Payloads {
		out.Payloads = append(out.Payloads, p.payloadType())
	}
	for _, r := range a.Approvals {
		out.Approvals = append(out.Approvals, r.rule())
	}
	if r := a.Reasoning; r != nil {
		out.Reasoning = &llm.Reasoning{Effort: r.Effort, BudgetTokens: r.BudgetTokens}
	}
	return out
}

// agents converts the file's agents; none stays nil.
func agents(in map[string]fileAgent) map[string]chat.Agent {
	if in == nil {
		return nil
	}
	out := make(map[string]chat.Agent, len(in))
	for name, a := range in {
		out[name] = a.agent()
	}
	return out
}

type file struct {
	Addr            string                  `yaml:"addr"`
	DB              string                  `yaml:"db"`
	DBListen        string                  `yaml:"db_listen"`
	LeaseTTL        time.Duration           `yaml:"lease_ttl"`
	SweepEvery      time.Duration           `yaml:"sweep_interval"`
	Model           string                  `yaml:"model"`
	TitleModel      string                  `yaml:"title_model"`
	LogLevel        string                  `yaml:"log_level"`
	LogFormat       string                  `yaml:"log_format"`
	MetricsAddr     string                  `yaml:"metrics_addr"`
	MetricsToken    string                  `yaml:"metrics_token"`
	ToolTimeout     time.Duration           `yaml:"tool_timeout"`
	DrainTimeout    time.Duration           `yaml:"drain_timeout"`
	ApprovalTimeout time.Duration           `yaml:"approval_timeout"`
	AllowedHosts    []string                `yaml:"allowed_hosts"`
	Providers       map[string]fileProvider `yaml:"providers"`
	Agents          map[string]fileAgent    `yaml:"agents"`

	ToolHistoryRounds  *int           `yaml:"tool_history_rounds"`
	ToolResultMaxBytes int            `yaml:"tool_result_max_bytes"`
	CompactAt          float64        `yaml:"compact_at"`
	ContextWindows     map[string]int `yaml:"context_windows"`

	MCPConfig         string        `yaml:"mcp_config"`
	MCPConnectTimeout time.Duration `yaml:"mcp_connect_timeout"`
	FetchURL          FetchURL      `yaml:"fetch_url"`
	ToolScopes        *tool.Scopes  `yaml:"tool_scopes"`
	Limits            Limits        `yaml:"limits"`

	Auth       fileAuth             `yaml:"auth"`
	UserLimits fileUserLimits       `yaml:"user_limits"`
	Prices     map[string]filePrice `yaml:"prices"`
}

type fileProvider struct {
	Type             string            `yaml:"type"`
	BaseURL          string            `yaml:"base_url"`
	APIKeyEnv        string            `yaml:"api_key_env"`
	Headers          map[string]string `yaml:"headers"`
	Models           []string          `yaml:"models"`
	ConnectTimeout   time.Duration     `yaml:"connect_timeout"`
	FirstByteTimeout time.Duration     `yaml:"first_byte_timeout"`
	IdleTimeout      time.Duration     `yaml:"idle_timeout"`
}

// Load parses the serve command's flags (args) with the environment read through getenv.
func Load(args []string, getenv func(string) string, stderr io.Writer) (*Config, error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "listen address (env CHATD_ADDR; default "+DefaultAddr+")")
	db := fs.String("db", "", "database: sqlite:PATH, or postgres://USER:PASSWORD@HOST/DB (env CHATD_DB; default "+DefaultDB+
		"); several chatd may share one PostgreSQL database")
	dbListen := fs.String("db-listen", "", "PostgreSQL URL for the LISTEN connection, when --db goes through a pooler in transaction mode (env CHATD_DB_LISTEN; default --db)")
	leaseTTL := fs.Duration("lease-ttl", 0, "PostgreSQL: how long a run's lease lasts unless renewed (env CHATD_LEASE_TTL; default 20s)")
	sweep := fs.Duration("sweep-interval", 0, "PostgreSQL: how often to look for runs of dead instances (env CHATD_SWEEP_INTERVAL; default 10s)")
	model := fs.String("model", "", "default model as provider/model (env CHATD_MODEL)")
	cfgFile := fs.String("config", "", "YAML configuration file (env CHATD_CONFIG)")
	mcpConfig := fs.String("mcp-config", "", "MCP servers JSON file, {\"mcpServers\":{…}} (env CHATD_MCP_CONFIG)")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (env CHATD_LOG_LEVEL; default info)")
	logFormat := fs.String("log-format", "", "text or json (env CHATD_LOG_FORMAT; default text)")
	metricsAddr := fs.String("metrics-addr", "", "serve /metrics on this address instead of --addr (env CHATD_METRICS_ADDR)")
	metricsToken := fs.String("metrics-token", "", "a bearer token that may read /metrics, besides an admin's API key (env CHATD_METRICS_TOKEN)")
	tlsCert := fs.String("tls-cert", "", "serve HTTPS with this certificate (PEM; env CHATD_TLS_CERT), with --tls-key")
	tlsKey := fs.String("tls-key", "", "the private key of --tls-cert (PEM; env CHATD_TLS_KEY)")
	pprofAddr := fs.String("pprof-addr", "", "serve Go's profiles (/debug/pprof/) on this loopback address (env CHATD_PPROF_ADDR); off by default")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	c := &Config{File: cmp.Or(*cfgFile, getenv("CHATD_CONFIG"))}
	var f file
	var err error
	if c.File != "" {
		if err := readFile(c.File, &f); err != nil {
			return nil, err
		}
	}
	c.Addr = cmp.Or(*addr, getenv("CHATD_ADDR"), f.Addr, DefaultAddr)
	c.DB = cmp.Or(*db, getenv("CHATD_DB"), f.DB, DefaultDB)
	c.DBListen = cmp.Or(*dbListen, getenv("CHATD_DB_LISTEN"), f.DBListen)
	if c.LeaseTTL, err = duration("CHATD_LEASE_TTL", getenv("CHATD_LEASE_TTL"), cmp.Or(*leaseTTL, f.LeaseTTL), 20*time.Second); err != nil {
		return nil, err
	}
	if *leaseTTL != 0 && getenv("CHATD_LEASE_TTL") != "" {
		c.LeaseTTL = *leaseTTL // the flag wins
	}
	if c.SweepInterval, err = duration("CHATD_SWEEP_INTERVAL", getenv("CHATD_SWEEP_INTERVAL"), cmp.Or(*sweep, f.SweepEvery), 10*time.Second); err != nil {
		return nil, err
	}
	if *sweep != 0 && getenv("CHATD_SWEEP_INTERVAL") != "" {
		c.SweepInterval = *sweep
	}
	if err := c.parseLevel(cmp.Or(*logLevel, getenv("CHATD_LOG_LEVEL"), f.LogLevel, "info")); err != nil {
		return nil, err
	}
	switch c.LogFormat = cmp.Or(*logFormat, getenv("CHATD_LOG_FORMAT"), f.LogFormat, "text"); c.LogFormat {
	case "text", "json":
	default:
		return nil, fmt.Errorf("log format %q: use text or json", c.LogFormat)
	}
	c.MetricsAddr = cmp.Or(*metricsAddr, getenv("CHATD_METRICS_ADDR"), f.MetricsAddr)
	c.MetricsToken = cmp.Or(*metricsToken, getenv("CHATD_METRICS_TOKEN"), f.MetricsToken)
	if c.MetricsToken != "" && len(c.MetricsToken) < 16 {
		return nil, errors.New("metrics_token: use at least 16 characters (a random one: openssl rand -hex 24)")
	}
	if c.ToolTimeout, err = duration("CHATD_TOOL_TIMEOUT", getenv("CHATD_TOOL_TIMEOUT"), f.ToolTimeout, 0); err != nil {
		return nil, err
	}
	if c.MCPConnectTimeout, err = duration("CHATD_MCP_CONNECT_TIMEOUT", getenv("CHATD_MCP_CONNECT_TIMEOUT"), f.MCPConnectTimeout, 20*time.Second); err != nil {
		return nil, err
	}
	if c.DrainTimeout, err = duration("CHATD_DRAIN_TIMEOUT", getenv("CHATD_DRAIN_TIMEOUT"), f.DrainTimeout, DefaultDrainTimeout); err != nil {
		return nil, err
	}
	if c.ApprovalTimeout, err = duration("CHATD_APPROVAL_TIMEOUT", getenv("CHATD_APPROVAL_TIMEOUT"), f.ApprovalTimeout, chat.DefaultApprovalTimeout); err != nil {
		return nil, err
	}
	if err := c.providers(getenv, f.Providers); err != nil {
		return nil, err
	}
	c.AllowedHosts = f.AllowedHosts
	if env := getenv("CHATD_ALLOWED_HOSTS"); env != "" {
		c.AllowedHosts = nil
		for _, h := range strings.Split(env, ",") {
			if h = strings.TrimSpace(h); h != "" {
				c.AllowedHosts = append(c.AllowedHosts, h)
			}
		}
	}
	c.Agents = agents(f.Agents)
	c.MCPConfig = cmp.Or(*mcpConfig, getenv("CHATD_MCP_CONFIG"), f.MCPConfig)
	if c.MCPConfig != "" && f.MCPConfig == c.MCPConfig && c.File != "" && !filepath.IsAbs(c.MCPConfig) {
		c.MCPConfig = filepath.Join(filepath.Dir(c.File), c.MCPConfig) // relative to the file naming it
	}
	c.FetchURL, c.ToolScopes, c.Limits = f.FetchURL, f.ToolScopes, f.Limits
	if err := c.context(getenv, &f); err != nil {
		return nil, err
	}
	c.Model = cmp.Or(*model, getenv("CHATD_MODEL"), f.Model, c.defaultModel())
	c.TitleModel = cmp.Or(getenv("CHATD_TITLE_MODEL"), f.TitleModel)
	if err := c.accounts(&f); err != nil {
		return nil, err
	}
	c.TLSCert, c.TLSKey = cmp.Or(*tlsCert, getenv("CHATD_TLS_CERT")), cmp.Or(*tlsKey, getenv("CHATD_TLS_KEY"))
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	c.PprofAddr = cmp.Or(*pprofAddr, getenv("CHATD_PPROF_ADDR"))
	if c.PprofAddr != "" {
		host, _, err := net.SplitHostPort(c.PprofAddr)
		if err != nil || !isLoopback(host) {
			return nil, fmt.Errorf("--pprof-addr %q: profiles are served on a loopback address only, such as 127.0.0.1:6060", c.PprofAddr)
		}
	}
	return c, c.Validate()
}

var errRounds = errors.New("tool_history_rounds is how many of the latest tool rounds the model sees in full: at least 1, or -1 for all")

// context reads the context settings: the environment wins over the file.
func (c *Config) context(getenv func(string) string, f *file) error {
	cx := &c.Context
	if f.ToolHistoryRounds != nil {
		cx.ToolHistoryRounds = *f.ToolHistoryRounds
		if cx.ToolHistoryRounds == 0 {
			return errRounds
		}
	}
	cx.ToolResultMaxBytes, cx.CompactAt, cx.Windows = f.ToolResultMaxBytes, f.CompactAt, f.ContextWindows
	if v := getenv("CHATD_TOOL_HISTORY_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n == 0 {
			return fmt.Errorf("CHATD_TOOL_HISTORY_ROUNDS=%q: %w", v, errRounds)
		}
		cx.ToolHistoryRounds = n
	}
	if v := getenv("CHATD_TOOL_RESULT_MAX_BYTES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("CHATD_TOOL_RESULT_MAX_BYTES=%q is not a positive number of bytes", v)
		}
		cx.ToolResultMaxBytes = n
	}
	if v := getenv("CHATD_COMPACT_AT"); v != "" {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("CHATD_COMPACT_AT=%q is not a number such as 0.8", v)
		}
		cx.CompactAt = x
	}
	return nil
}

func readFile(path string, f *file) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(f); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

func (c *Config) parseLevel(s string) error {
	if err := c.LogLevel.UnmarshalText([]byte(s)); err != nil {
		return fmt.Errorf("log level %q: use debug, info, warn or error", s)
	}
	return nil
}

// duration reads a duration setting: the environment variable name (value env) wins over the file's
// value; zero from both means def.
func duration(name, env string, fromFile, def time.Duration) (time.Duration, error) {
	d := fromFile
	if env != "" {
		var err error
		if d, err = time.ParseDuration(env); err != nil {
			return 0, fmt.Errorf("%s=%q is not a duration such as 30s", name, env)
		}
	}
	if d < 0 {
		return 0, fmt.Errorf("%s must be positive", name)
	}
	return cmp.Or(d, def), nil
}

// builtin is a provider read from its usual environment variables.
type builtin struct {
	name, typ, keyVar, baseVar, hint string
}

var builtins = []builtin{
	{"openai", provider.TypeOpenAI, "OPENAI_API_KEY", "OPENAI_BASE_URL",
		"set OPENAI_API_KEY (and OPENAI_BASE_URL, including /v1, for an OpenAI-compatible server)"},
	{"anthropic", provider.TypeAnthropic, "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
		"set ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL, the host root, for a compatible server)"},
	{"gemini", provider.TypeGemini, "GEMINI_API_KEY", "GEMINI_BASE_URL",
		"set GEMINI_API_KEY (and GEMINI_BASE_URL, the host root, for a compatible server)"},
}

// providers reads the built-in providers from their usual variables, then the file's named ones.
func (c *Config) providers(getenv func(string) string, named map[string]fileProvider) error {
	for _, b := range builtins {
		if _, inFile := named[b.name]; inFile {
			continue // the file's definition wins
		}
		if key, base := getenv(b.keyVar), getenv(b.baseVar); key != "" || base != "" {
			c.Providers = append(c.Providers, provider.Config{Name: b.name, Type: b.typ, BaseURL: base, APIKey: key})
		} else {
			c.Unconfigured = append(c.Unconfigured, provider.Unconfigured{Name: b.name, Hint: b.hint})
		}
	}
	if _, inFile := named["ollama"]; !inFile {
		if host := getenv("OLLAMA_HOST"); host != "" {
			base, err := ollamaBaseURL(host)
			if err != nil {
				return err
			}
			c.Providers = append(c.Providers, provider.Config{Name: "ollama", Type: provider.TypeOpenAI, BaseURL: base})
		} else {
			c.Unconfigured = append(c.Unconfigured, provider.Unconfigured{Name: "ollama",
				Hint: "set OLLAMA_HOST, for example OLLAMA_HOST=127.0.0.1:11434"})
		}
	}
	names := make([]string, 0, len(named))
	for name := range named {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		pc, err := namedProvider(name, named[name], getenv)
		if err != nil {
			return err
		}
		c.Providers = append(c.Providers, pc)
	}
	return nil
}

func namedProvider(name string, p fileProvider, getenv func(string) string) (provider.Config, error) {
	if strings.ContainsAny(name, "/ ") || name == "" {
		return provider.Config{}, fmt.Errorf("config: provider name %q must not contain '/' or spaces", name)
	}
	typ := cmp.Or(strings.ToLower(p.Type), provider.TypeOpenAI)
	if !slices.Contains(provider.Types, typ) {
		return provider.Config{}, fmt.Errorf("config: provider %q: type %q is not supported; use one of %s",
			name, p.Type, strings.Join(provider.Types, ", "))
	}
	pc := provider.Config{Name: name, Type: typ, BaseURL: p.BaseURL, Headers: p.Headers, Models: p.Models,
		Timeouts: upstream.Timeouts{Connect: p.ConnectTimeout, FirstByte: p.FirstByteTimeout, Idle: p.IdleTimeout}}
	if p.ConnectTimeout < 0 || p.FirstByteTimeout < 0 || p.IdleTimeout < 0 {
		return pc, fmt.Errorf("config: provider %q: timeouts must be positive", name)
	}
	if p.APIKeyEnv != "" {
		pc.APIKey = getenv(p.APIKeyEnv)
		if pc.APIKey == "" {
			return pc, fmt.Errorf("config: provider %q reads its key from %s, which is not set", name, p.APIKeyEnv)
		}
	}
	return pc, nil
}

// ollamaBaseURL turns OLLAMA_HOST into the URL of Ollama's OpenAI-compatible API, the way Ollama reads it:
// "host", "host:port" and ":port" are http with port 11434 by default; an explicit http:// or https://
// defaults to 80 or 443; "0.0.0.0" (the server's "every interface") is reached on loopback.
func ollamaBaseURL(host string) (string, error) {
	defaultPort := "11434"
	switch {
	case strings.HasPrefix(host, "http://"):
		defaultPort = "80"
	case strings.HasPrefix(host, "https://"):
		defaultPort = "443"
	case strings.Contains(host, "://"):
		return "", fmt.Errorf("OLLAMA_HOST=%q: use host:port or an http(s) URL", host)
	default:
		host = "http://" + host
	}
	u, err := url.Parse(host)
	if err != nil || u.Hostname() == "" && u.Port() == "" {
		return "", fmt.Errorf("OLLAMA_HOST=%q is not a host or URL", host)
	}
	h, port := u.Hostname(), u.Port()
	if h == "" || h == "0.0.0.0" || h == "::" {
		h = "127.0.0.1"
	}
	if port == "" {
		port = defaultPort
	}
	return u.Scheme + "://" + net.JoinHostPort(h, port) + strings.TrimRight(u.Path, "/") + "/v1", nil
}

func (c *Config) defaultModel() string {
	for _, p := range c.Providers {
		switch {
		case p.Name == "openai":
			return "openai/gpt-4o-mini"
		case p.Name == "anthropic" && p.Type == provider.TypeAnthropic:
			return "anthropic/claude-sonnet-4-5"
		case p.Name == "gemini" && p.Type == provider.TypeGemini:
			return "gemini/gemini-2.5-flash"
		case p.Name == "ollama":
			return "ollama/llama3.2"
		case len(p.Models) > 0:
			return p.Name + "/" + p.Models[0]
		}
	}
	return ""
}

// Validate checks the values that do not depend on anything else.
func (c *Config) Validate() error {
	if c.Postgres() {
		if _, err := url.Parse(c.DB); err != nil {
			return fmt.Errorf("database %s: %w", redactDB(c.DB), errors.Unwrap(err))
		}
	} else if _, err := c.SQLitePath(); err != nil {
		return err
	}
	if c.DBListen != "" && !c.Postgres() {
		return errors.New("db_listen is for PostgreSQL: --db names a SQLite file")
	}
	if c.LeaseTTL < 0 || c.SweepInterval < 0 {
		return errors.New("lease_ttl and sweep_interval are positive durations")
	}
	// Whether chatd may listen on the host depends on its keys: CheckExposure, once the store is open.
	_, port, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return fmt.Errorf("address %q: %w (use host:port, e.g. %s)", c.Addr, err, DefaultAddr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("address %q: bad port", c.Addr)
	}
	cx := c.Context
	if cx.ToolResultMaxBytes < 0 {
		return errors.New("config: tool_result_max_bytes must be positive")
	}
	if !(cx.CompactAt >= 0 && cx.CompactAt <= 1) { // NaN too
		return errors.New("config: compact_at is a share of the context window, between 0 and 1 (for example 0.8)")
	}
	for k, n := range cx.Windows {
		if n <= 0 {
			return fmt.Errorf("config: context_windows: %q must be a positive number of tokens", k)
		}
	}
	if fu := c.FetchURL; fu.MaxBytes < 0 || fu.Timeout < 0 {
		return errors.New("config: fetch_url: max_bytes and timeout must be positive")
	}
	for _, r := range c.FetchURL.Allow {
		if _, err := netip.ParsePrefix(r); err != nil {
			return fmt.Errorf("config: fetch_url: allow: %q is not an address range such as 10.0.0.0/8", r)
		}
	}
	if err := c.ToolScopes.Check(); err != nil {
		return fmt.Errorf("config: tool_scopes: %w", err)
	}
	if err := c.Limits.check(); err != nil {
		return err
	}
	if err := checkTitleModel(c.TitleModel); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	for name, a := range c.Agents {
		if err := checkTitleModel(a.TitleModel); err != nil {
			return fmt.Errorf("config: agent %q: %w", name, err)
		}
		for _, p := range a.Tools {
			if err := tool.CheckPattern(p); err != nil {
				return fmt.Errorf("config: agent %q: tools: %w", name, err)
			}
		}
		if err := a.Scopes.Check(); err != nil {
			return fmt.Errorf("config: agent %q: tool_scopes: %w", name, err)
		}
		if err := chat.CheckPayloadTypes(a.Payloads); err != nil {
			return fmt.Errorf("config: agent %q: payloads: %w", name, err)
		}
		if _, err := tool.NewApprovals(a.Approvals); err != nil {
			return fmt.Errorf("config: agent %q: %w", name, err)
		}
		if a.MaxIterations < 0 || a.MaxTokens < 0 || a.ContextWindow < 0 {
			return fmt.Errorf("config: agent %q: limits must be positive", name)
		}
		if !(a.CompactAt >= 0 && a.CompactAt <= 1) {
			return fmt.Errorf("config: agent %q: compact_at is between 0 and 1", name)
		}
		if r := a.Reasoning; r != nil {
			if r.BudgetTokens < 0 || !slices.Contains([]string{"", "minimal", "low", "medium", "high"}, r.Effort) {
				return fmt.Errorf("config: agent %q: reasoning: effort is low, medium or high, budget_tokens positive", name)
			}
		}
	}
	return nil
}

// checkTitleModel checks a title_model: provider/model, none, or empty.
func checkTitleModel(m string) error {
	if m == "" || m == "none" || strings.Contains(strings.Trim(m, "/"), "/") {
		return nil
	}
	return fmt.Errorf("title_model %q: name a model as provider/model, or none to keep the title cut from the first message", m)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Postgres reports whether DB names a PostgreSQL database: a postgres:// or postgresql:// URL.
func (c *Config) Postgres() bool {
	return strings.HasPrefix(c.DB, "postgres://") || strings.HasPrefix(c.DB, "postgresql://")
}

// SQLitePath returns the SQLite file of DB ("sqlite:PATH", or a bare path).
func (c *Config) SQLitePath() (string, error) {
	switch {
	case c.Postgres():
		return "", errors.New("the database is PostgreSQL, not a SQLite file")
	case strings.HasPrefix(c.DB, "sqlite:"):
		path := strings.TrimPrefix(c.DB, "sqlite:")
		if path == "" {
			return "", errors.New("--db sqlite: needs a path, e.g. sqlite:./chatd.db")
		}
		return path, nil
	case strings.Contains(c.DB, "://"):
		return "", fmt.Errorf("database %q: use sqlite:PATH or postgres://…", redactDB(c.DB))
	}
	return c.DB, nil
}

// LogValue describes the configuration for the log, without secrets.
func (c *Config) LogValue() slog.Value {
	var provs []string
	for _, p := range c.Providers {
		provs = append(provs, p.Name)
	}
	return slog.GroupValue(
		slog.String("addr", c.Addr), slog.String("db", redactDB(c.DB)), slog.String("db_listen", redactDB(c.DBListen)),
		slog.String("model", c.Model),
		slog.String("config", c.File), slog.Any("providers", provs),
	)
}

// redactDB returns a database URL without its password (in the user part or a password= parameter), for
// logs and errors.
func redactDB(db string) string {
	if !strings.Contains(db, "://") {
		return db
	}
	u, err := url.Parse(db)
	if err != nil {
		return db[:strings.Index(db, "://")+3] + "…" // not a URL we can read: show none of it
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}
