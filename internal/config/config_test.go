package config

import (
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/chat"
	"chatd/internal/llm/upstream"
	"chatd/internal/provider"
	"chatd/internal/store"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestDefaults(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != DefaultAddr || c.DB != DefaultDB || c.Model != "" || len(c.Providers) != 0 {
		t.Errorf("defaults = %+v", c)
	}
	if p, _ := c.SQLitePath(); p != "./chatd.db" {
		t.Errorf("sqlite path = %q", p)
	}
}

func TestPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "chatd.yaml")
	os.WriteFile(file, []byte("addr: 127.0.0.1:3000\ndb: sqlite:file.db\nmodel: openai/from-file\n"), 0o600)
	e := env(map[string]string{"CHATD_CONFIG": file, "CHATD_DB": "sqlite:env.db", "OPENAI_API_KEY": "sk-x"})
	c, err := Load([]string{"--model", "openai/from-flag"}, e, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{c.Addr, c.DB, c.Model}
	if diff := cmp.Diff([]string{"127.0.0.1:3000", "sqlite:env.db", "openai/from-flag"}, got); diff != "" {
		t.Errorf("flag > env > file (-want +got):\n%s", diff)
	}
}

func TestProvidersFromEnvironment(t *testing.T) {
	c, err := Load(nil, env(map[string]string{
		"OPENAI_API_KEY": "sk-x", "OPENAI_BASE_URL": "http://127.0.0.1:4010/v1", "OLLAMA_HOST": "0.0.0.0",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []provider.Config{
		{Name: "openai", Type: "openai", BaseURL: "http://127.0.0.1:4010/v1", APIKey: "sk-x"},
		{Name: "ollama", Type: "openai", BaseURL: "http://127.0.0.1:11434/v1"},
	}
	if diff := cmp.Diff(want, c.Providers); diff != "" {
		t.Errorf("providers (-want +got):\n%s", diff)
	}
	if c.Model != "openai/gpt-4o-mini" {
		t.Errorf("default model = %q", c.Model)
	}
	if strings.Contains(c.LogValue().String(), "sk-x") {
		t.Error("the key is in the log value")
	}
}

func TestEveryProviderType(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	os.WriteFile(file, []byte(`
providers:
  claude-proxy:
    type: anthropic
    base_url: http://127.0.0.1:4010
    api_key_env: PROXY_KEY
    headers: {anthropic-beta: interleaved-thinking-2025-05-14}
    idle_timeout: 90s
  reasoner:
    type: openai-responses
  gemini:
    type: gemini
    base_url: http://127.0.0.1:4011
    models: [gemini-2.5-pro]
agents:
  careful:
    model: reasoner/o4-mini
    fallbacks: [anthropic/claude-sonnet-4-5, gemini/gemini-2.5-pro]
    reasoning: {effort: high}
`), 0o600)
	c, err := Load([]string{"--config", file}, env(map[string]string{
		"PROXY_KEY": "k1", "ANTHROPIC_API_KEY": "k2", "GEMINI_API_KEY": "ignored: the file defines gemini",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []provider.Config{
		{Name: "anthropic", Type: "anthropic", APIKey: "k2"},
		{Name: "claude-proxy", Type: "anthropic", BaseURL: "http://127.0.0.1:4010", APIKey: "k1",
			Headers: map[string]string{"anthropic-beta": "interleaved-thinking-2025-05-14"}, Timeouts: upstream.Timeouts{Idle: 90 * time.Second}},
		{Name: "gemini", Type: "gemini", BaseURL: "http://127.0.0.1:4011", Models: []string{"gemini-2.5-pro"}},
		{Name: "reasoner", Type: "openai-responses"},
	}
	if diff := cmp.Diff(want, c.Providers); diff != "" {
		t.Errorf("providers (-want +got):\n%s", diff)
	}
	a := c.Agents["careful"]
	if a.Reasoning == nil || a.Reasoning.Effort != "high" || len(a.Fallbacks) != 2 {
		t.Errorf("agent = %+v", a)
	}
	if c.Model != "anthropic/claude-sonnet-4-5" {
		t.Errorf("default model = %q", c.Model)
	}
	if _, err := provider.New(c.Providers, c.Unconfigured); err != nil {
		t.Errorf("provider.New: %v", err)
	}
}

func TestOllamaHost(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:11434":            "http://127.0.0.1:11434/v1",
		"localhost":                  "http://localhost:11434/v1",
		"http://gpu-box:8080":        "http://gpu-box:8080/v1",
		"http://gpu-box":             "http://gpu-box:80/v1",
		"https://ollama.example.com": "https://ollama.example.com:443/v1",
		":11435":                     "http://127.0.0.1:11435/v1",
		"[::1]:11434":                "http://[::1]:11434/v1",
	} {
		got, err := ollamaBaseURL(in)
		if err != nil || got != want {
			t.Errorf("ollamaBaseURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestRefusesToListenBeyondLoopback: without API keys and a trusted proxy, only loopback addresses may be
// listened on; a key, or a trusted header, lets chatd listen anywhere.
func TestRefusesToListenBeyondLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "192.168.1.5:8080", "example.com:80", "[::]:8080"} {
		c, err := Load([]string{"--addr", addr}, env(nil), io.Discard)
		if err != nil {
			t.Fatalf("--addr %s: %v", addr, err)
		}
		if err := c.CheckExposure(false); err == nil || !strings.Contains(err.Error(), "only safe on loopback") {
			t.Errorf("--addr %s without keys: %v", addr, err)
		}
		if err := c.CheckExposure(true); err != nil {
			t.Errorf("--addr %s with keys: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:8080", "[::1]:8080", "127.0.0.2:80"} {
		c, err := Load([]string{"--addr", addr}, env(nil), io.Discard)
		if err != nil {
			t.Fatalf("--addr %s: %v", addr, err)
		}
		if err := c.CheckExposure(false); err != nil {
			t.Errorf("--addr %s: %v", addr, err)
		}
	}
	path := filepath.Join(t.TempDir(), "chatd.yaml")
	if err := os.WriteFile(path, []byte("auth:\n  trusted_header: x-forwarded-email\n  trusted_proxies: [10.0.0.0/8, 192.168.1.1]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load([]string{"--addr", "0.0.0.0:8080", "--config", path}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CheckExposure(false); err != nil {
		t.Errorf("with a trusted proxy: %v", err)
	}
	want := Auth{TrustedHeader: "X-Forwarded-Email", TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.1/32")}}
	if diff := cmp.Diff(want, c.Auth, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("auth (-want +got):\n%s", diff)
	}
}

// TestPostgres: a postgres:// URL selects PostgreSQL, and its password never reaches the log or an error.
func TestPostgres(t *testing.T) {
	for _, db := range []string{"postgres://chatd:s3cret@db.internal/chatd?sslmode=require",
		"postgresql://chatd@db.internal/chatd?password=s3cret"} {
		c, err := Load([]string{"--db", db}, env(nil), io.Discard)
		if err != nil {
			t.Fatalf("Load(--db %s): %v", db, err)
		}
		if !c.Postgres() || c.DB != db {
			t.Errorf("--db %s: Postgres() = %v, DB %q", db, c.Postgres(), c.DB)
		}
		if _, err := c.SQLitePath(); err == nil {
			t.Errorf("SQLitePath of %s: no error", db)
		}
		if s := c.LogValue().String(); strings.Contains(s, "s3cret") || !strings.Contains(s, "db.internal") {
			t.Errorf("LogValue = %s; want the database without its password", s)
		}
	}
	_, err := Load([]string{"--db", "postgres://u:s3cret@[::1"}, env(nil), io.Discard)
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Load of a bad URL: %v; want an error without the password", err)
	}
	if c, err := Load(nil, env(map[string]string{"CHATD_DB": "postgres://h/db"}), io.Discard); err != nil || !c.Postgres() {
		t.Errorf("CHATD_DB=postgres://h/db: %+v, %v", c, err)
	}
}

func TestBadValues(t *testing.T) {
	tests := []struct {
		args     []string
		env      map[string]string
		contains string
	}{
		{[]string{"--addr", "nonsense"}, nil, "host:port"},
		{[]string{"--db", "postgres://u:pw@[::1"}, nil, "missing ']'"},
		{[]string{"--db", "mysql://x"}, nil, "sqlite:PATH"},
		{[]string{"--db", "sqlite:"}, nil, "needs a path"},
		{[]string{"--log-level", "loud"}, nil, "log level"},
		{nil, map[string]string{"CHATD_TOOL_TIMEOUT": "soon"}, "CHATD_TOOL_TIMEOUT"},
		{[]string{"extra"}, nil, "unexpected argument"},
		{[]string{"--config", "/nonexistent/chatd.yaml"}, nil, "read config"},
	}
	for _, tt := range tests {
		_, err := Load(tt.args, env(tt.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.contains) {
			t.Errorf("%v %v: error %v, want one containing %q", tt.args, tt.env, err, tt.contains)
		}
	}
}

func TestFile(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "c.yaml")
		os.WriteFile(p, []byte(body), 0o600)
		return p
	}
	good := write(`
tool_timeout: 5s
providers:
  router:
    base_url: https://openrouter.ai/api/v1
    api_key_env: ROUTER_KEY
    headers: {X-Title: chatd}
    models: [a/b]
agents:
  support:
    system_prompt: Be brief.
    tools: [current_time]
    max_iterations: 3
    temperature: 0.2
`)
	c, err := Load([]string{"--config", good}, env(map[string]string{"ROUTER_KEY": "k"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	temp := 0.2
	if diff := cmp.Diff(map[string]chat.Agent{"support": {SystemPrompt: "Be brief.", Tools: []string{"current_time"}, MaxIterations: 3, Temperature: &temp}}, c.Agents); diff != "" {
		t.Errorf("agents (-want +got):\n%s", diff)
	}
	if c.ToolTimeout != 5*time.Second || c.Model != "router/a/b" || c.Providers[0].APIKey != "k" || c.Providers[0].Headers["X-Title"] != "chatd" {
		t.Errorf("config = %+v", c)
	}
	for body, contains := range map[string]string{
		"adress: x\n": "field adress not found",
		"providers:\n  p:\n    base_url: http://x/v1\n    api_key_env: MISSING\n": "MISSING, which is not set",
		"providers:\n  p:\n    type: bedrock\n":                                   "type \"bedrock\" is not supported",
		"providers:\n  p:\n    idle_timeout: -1s\n":                               "timeouts must be positive",
		"agents:\n  x:\n    reasoning: {effort: huge}\n":                          "reasoning",
		"providers:\n  a/b:\n    base_url: http://x/v1\n":                         "must not contain '/'",
		"agents:\n  x:\n    max_iterations: -1\n":                                 "limits must be positive",
	} {
		_, err := Load([]string{"--config", write(body)}, env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), contains) {
			t.Errorf("%q: error %v, want one containing %q", body, err, contains)
		}
	}
}

// TestContextSettings: what the model is sent, from the file and the environment (which wins), per
// agent, and the values refused.
func TestContextSettings(t *testing.T) {
	file := filepath.Join(t.TempDir(), "chatd.yaml")
	os.WriteFile(file, []byte(`tool_history_rounds: 4
tool_result_max_bytes: 1000
compact_at: 0.7
context_windows: {"ollama/*": 8192, gpt-4o: 64000}
agents:
  a: {system_prompt: Hi., instructions: Be kind., guidelines: Be brief., tool_history_rounds: -1, context_window: 9000, compact_at: 0.5}
`), 0o600)
	c, err := Load([]string{"--config", file}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := Context{ToolHistoryRounds: 4, ToolResultMaxBytes: 1000, CompactAt: 0.7, Windows: map[string]int{"ollama/*": 8192, "gpt-4o": 64000}}
	if diff := cmp.Diff(want, c.Context); diff != "" {
		t.Errorf("context (-want +got):\n%s", diff)
	}
	if a := c.Agents["a"]; a.Instructions != "Be kind." || a.Guidelines != "Be brief." || a.ToolHistoryRounds != -1 || a.ContextWindow != 9000 || a.CompactAt != 0.5 {
		t.Errorf("agent: %+v", a)
	}
	c, err = Load([]string{"--config", file}, env(map[string]string{"CHATD_TOOL_HISTORY_ROUNDS": "2",
		"CHATD_TOOL_RESULT_MAX_BYTES": "500", "CHATD_COMPACT_AT": "0.9"}), io.Discard)
	if err != nil || c.Context.ToolHistoryRounds != 2 || c.Context.ToolResultMaxBytes != 500 || c.Context.CompactAt != 0.9 {
		t.Errorf("the environment does not win: %+v %v", c.Context, err)
	}
	for _, bad := range []map[string]string{
		{"CHATD_TOOL_HISTORY_ROUNDS": "0"}, {"CHATD_TOOL_HISTORY_ROUNDS": "ten"},
		{"CHATD_TOOL_RESULT_MAX_BYTES": "-1"}, {"CHATD_COMPACT_AT": "1.5"}, {"CHATD_COMPACT_AT": "NaN"},
	} {
		if _, err := Load(nil, env(bad), io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// TestLimits: the limits: section is read as given, each zero left for its default; a negative or
// unknown one is refused.
func TestLimits(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	os.WriteFile(p, []byte(`
limits:
  body_bytes: 2048
  chat_body_bytes: 4096
  tool_argument_bytes: 1000
  run_time: 2m
  idle_time: 30s
  run_events: 5000
`), 0o600)
	c, err := Load([]string{"--config", p}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := Limits{BodyBytes: 2048, ChatBodyBytes: 4096, ToolArgumentBytes: 1000, RunTime: 2 * time.Minute,
		IdleTime: 30 * time.Second, RunEvents: 5000}
	if diff := cmp.Diff(want, c.Limits); diff != "" {
		t.Errorf("limits (-want +got):\n%s", diff)
	}
	for body, contains := range map[string]string{
		"limits:\n  run_time: -1s\n":      "run_time must be positive",
		"limits:\n  message_bytes: -5\n":  "message_bytes must be positive",
		"limits:\n  output_bytes: 10\n":   "field output_bytes not found",
		"limits:\n  run_events: many\n":   "cannot unmarshal",
		"limits:\n  idle_time: forever\n": "time.Duration",
	} {
		os.WriteFile(p, []byte(body), 0o600)
		_, err := Load([]string{"--config", p}, env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), contains) {
			t.Errorf("%q: error %v, want one containing %q", body, err, contains)
		}
	}
}

// TestAccounts: user_limits and prices are read into the types their users take, and bad values refused.
func TestAccounts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "chatd.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`
user_limits:
  default: {concurrent_runs: 5, requests_per_minute: 60, tokens_per_day: 1000, spend_usd: 2.5, spend_period: week}
  users:
    alice: {concurrent_runs: 9}
prices:
  openai/gpt-4o-mini: {input: 0.15, output: 0.6, cache_read: 0.075}
`)
	c, err := Load([]string{"--config", path}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := UserLimits{
		Default: store.Limits{ConcurrentRuns: 5, RequestsPerMinute: 60, TokensPerDay: 1000, SpendUSD: 2.5, SpendPeriod: "week"},
		Users:   map[string]store.Limits{"alice": {ConcurrentRuns: 9}},
	}
	if diff := cmp.Diff(want, c.UserLimits); diff != "" {
		t.Errorf("user limits (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]chat.Price{"openai/gpt-4o-mini": {Input: 0.15, Output: 0.6, CacheRead: 0.075}}, c.Prices); diff != "" {
		t.Errorf("prices (-want +got):\n%s", diff)
	}
	for _, bad := range []string{
		"user_limits: {default: {concurrent_runs: -1}}",
		"user_limits: {default: {spend_period: year}}",
		"prices: {m: {input: -1}}",
		"auth: {trusted_header: X-Forwarded-Email}",
		"auth: {trusted_proxies: [10.0.0.0/8]}",
		"auth: {trusted_header: X-User, trusted_proxies: [not-an-address]}",
	} {
		write(bad)
		if _, err := Load([]string{"--config", path}, env(nil), io.Discard); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	if _, err := Load([]string{"--tls-cert", "c.pem"}, env(nil), io.Discard); err == nil {
		t.Error("--tls-cert without --tls-key: accepted")
	}
}

// TestPriceRanges: prices and spend budgets out of range (negative, huge, not numbers) are refused.
func TestPriceRanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "chatd.yaml")
	for _, bad := range []string{
		"prices: {m: {output: 2000000}}",
		"prices: {m: {cache_read: .nan}}",
		"prices: {m: {input: .inf}}",
		"user_limits: {default: {spend_usd: 1e300}}",
		"user_limits: {default: {spend_usd: 1e-12}}",
		"user_limits: {users: {alice: {spend_usd: .nan}}}",
	} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load([]string{"--config", path}, env(nil), io.Discard); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

// TestPprofAddr: profiles are served on a loopback address only.
func TestPprofAddr(t *testing.T) {
	c, err := Load([]string{"--pprof-addr", "127.0.0.1:6060"}, env(nil), io.Discard)
	if err != nil || c.PprofAddr != "127.0.0.1:6060" {
		t.Fatalf("loopback: %v %+v", err, c)
	}
	for _, bad := range []string{"0.0.0.0:6060", ":6060", "10.0.0.1:6060", "6060"} {
		if _, err := Load([]string{"--pprof-addr", bad}, env(nil), io.Discard); err == nil {
			t.Errorf("--pprof-addr %s: accepted", bad)
		}
	}
}

// TestObservability: log_format, metrics_addr and metrics_token from flags, environment and file, with
// the flag winning; a bad format, a short token and metrics beyond loopback without a token are refused.
func TestObservability(t *testing.T) {
	file := filepath.Join(t.TempDir(), "chatd.yaml")
	os.WriteFile(file, []byte("log_format: json\nmetrics_addr: 127.0.0.1:9100\nmetrics_token: from-the-file-0123456789\n"), 0o600)
	c, err := Load(nil, env(map[string]string{"CHATD_CONFIG": file}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.LogFormat != "json" || c.MetricsAddr != "127.0.0.1:9100" || c.MetricsToken != "from-the-file-0123456789" {
		t.Errorf("from the file: %q %q %q", c.LogFormat, c.MetricsAddr, c.MetricsToken)
	}
	c, err = Load([]string{"--log-format", "text", "--metrics-token", "from-the-flag-0123456789"},
		env(map[string]string{"CHATD_CONFIG": file, "CHATD_LOG_FORMAT": "json", "CHATD_METRICS_ADDR": "127.0.0.1:9200"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.LogFormat != "text" || c.MetricsAddr != "127.0.0.1:9200" || c.MetricsToken != "from-the-flag-0123456789" {
		t.Errorf("flag > env > file: %q %q %q", c.LogFormat, c.MetricsAddr, c.MetricsToken)
	}
	if strings.Contains(fmtValue(c), "from-the-flag") {
		t.Error("the metrics token is in the config's log value")
	}
	for _, args := range [][]string{{"--log-format", "xml"}, {"--metrics-token", "short"}} {
		if _, err := Load(args, env(nil), io.Discard); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	c, err = Load([]string{"--metrics-addr", "0.0.0.0:9100"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CheckExposure(false); err == nil || !strings.Contains(err.Error(), "metrics") {
		t.Errorf("metrics beyond loopback without a token or keys: %v", err)
	}
	if err := c.CheckExposure(true); err != nil {
		t.Errorf("metrics beyond loopback with keys: %v", err)
	}
	c.MetricsToken = "a-token-of-enough-length"
	if err := c.CheckExposure(false); err != nil {
		t.Errorf("metrics beyond loopback with a token: %v", err)
	}
}

func fmtValue(c *Config) string { return c.LogValue().String() }
