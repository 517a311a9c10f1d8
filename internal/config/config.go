// Package config reads chatd's configuration once — flags, then CHATD_* and provider environment
// variables, then the YAML file, then defaults, the first that sets a value winning — into a Config.
// Only cmd/chatd imports it.
package config

import (
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"chatd/internal/provider"
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
	Addr        string
	DB          string // sqlite:PATH
	Model       string // the default model, provider/model
	File        string // the YAML file read, if any
	LogLevel    slog.Level
	ToolTimeout time.Duration
	// DrainTimeout is how long SIGTERM lets running runs finish before cancelling them (default 20s).
	DrainTimeout time.Duration
	AllowedHosts []string // Host header values accepted besides loopback names (behind a reverse proxy)
	Providers    []provider.Config
	Unconfigured []provider.Unconfigured
	Agents       map[string]Agent
}

// Agent is a named profile from the config file.
type Agent struct {
	Model         string   `yaml:"model"`
	SystemPrompt  string   `yaml:"system_prompt"`
	Tools         []string `yaml:"tools"` // absent: every tool
	MaxIterations int      `yaml:"max_iterations"`
	Temperature   *float64 `yaml:"temperature"`
	MaxTokens     int      `yaml:"max_tokens"`
}

type file struct {
	Addr         string                  `yaml:"addr"`
	DB           string                  `yaml:"db"`
	Model        string                  `yaml:"model"`
	LogLevel     string                  `yaml:"log_level"`
	ToolTimeout  time.Duration           `yaml:"tool_timeout"`
	DrainTimeout time.Duration           `yaml:"drain_timeout"`
	AllowedHosts []string                `yaml:"allowed_hosts"`
	Providers    map[string]fileProvider `yaml:"providers"`
	Agents       map[string]Agent        `yaml:"agents"`
}

type fileProvider struct {
	Type      string            `yaml:"type"`
	BaseURL   string            `yaml:"base_url"`
	APIKeyEnv string            `yaml:"api_key_env"`
	Headers   map[string]string `yaml:"headers"`
	Models    []string          `yaml:"models"`
}

// Load parses the serve command's flags (args) with the environment read through getenv.
func Load(args []string, getenv func(string) string, stderr io.Writer) (*Config, error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "listen address (env CHATD_ADDR; default "+DefaultAddr+")")
	db := fs.String("db", "", "database: sqlite:PATH (env CHATD_DB; default "+DefaultDB+")")
	model := fs.String("model", "", "default model as provider/model (env CHATD_MODEL)")
	cfgFile := fs.String("config", "", "YAML configuration file (env CHATD_CONFIG)")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (env CHATD_LOG_LEVEL; default info)")
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
	if err := c.parseLevel(cmp.Or(*logLevel, getenv("CHATD_LOG_LEVEL"), f.LogLevel, "info")); err != nil {
		return nil, err
	}
	if c.ToolTimeout, err = duration("CHATD_TOOL_TIMEOUT", getenv("CHATD_TOOL_TIMEOUT"), f.ToolTimeout, 0); err != nil {
		return nil, err
	}
	if c.DrainTimeout, err = duration("CHATD_DRAIN_TIMEOUT", getenv("CHATD_DRAIN_TIMEOUT"), f.DrainTimeout, DefaultDrainTimeout); err != nil {
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
	c.Agents = f.Agents
	c.Model = cmp.Or(*model, getenv("CHATD_MODEL"), f.Model, c.defaultModel())
	return c, c.Validate()
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

// providers reads the built-in providers from their usual variables, then the file's named ones.
func (c *Config) providers(getenv func(string) string, named map[string]fileProvider) error {
	if key, base := getenv("OPENAI_API_KEY"), getenv("OPENAI_BASE_URL"); key != "" || base != "" {
		c.Providers = append(c.Providers, provider.Config{Name: "openai", Type: "openai", BaseURL: base, APIKey: key})
	} else {
		c.Unconfigured = append(c.Unconfigured, provider.Unconfigured{Name: "openai",
			Hint: "set OPENAI_API_KEY (and OPENAI_BASE_URL, including /v1, for an OpenAI-compatible server)"})
	}
	if host := getenv("OLLAMA_HOST"); host != "" {
		base, err := ollamaBaseURL(host)
		if err != nil {
			return err
		}
		c.Providers = append(c.Providers, provider.Config{Name: "ollama", Type: "openai", BaseURL: base})
	} else {
		c.Unconfigured = append(c.Unconfigured, provider.Unconfigured{Name: "ollama",
			Hint: "set OLLAMA_HOST, for example OLLAMA_HOST=127.0.0.1:11434"})
	}
	for _, name := range []string{"anthropic", "gemini"} {
		c.Unconfigured = append(c.Unconfigured, provider.Unconfigured{Name: name,
			Hint: "this version of chatd does not speak the " + name + " API yet; reach it through an OpenAI-compatible gateway configured under providers: in the config file"})
	}
	for name, p := range named {
		if strings.ContainsAny(name, "/ ") || name == "" {
			return fmt.Errorf("config: provider name %q must not contain '/' or spaces", name)
		}
		pc := provider.Config{Name: name, Type: cmp.Or(p.Type, "openai"), BaseURL: p.BaseURL, Headers: p.Headers, Models: p.Models}
		if p.APIKeyEnv != "" {
			pc.APIKey = getenv(p.APIKeyEnv)
			if pc.APIKey == "" {
				return fmt.Errorf("config: provider %q reads its key from %s, which is not set", name, p.APIKeyEnv)
			}
		}
		if p.BaseURL == "" {
			return fmt.Errorf("config: provider %q needs base_url", name)
		}
		c.Providers = append(c.Providers, pc)
	}
	return nil
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
	if _, err := c.SQLitePath(); err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return fmt.Errorf("address %q: %w (use host:port, e.g. %s)", c.Addr, err, DefaultAddr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("address %q: bad port", c.Addr)
	}
	if !isLoopback(host) {
		return fmt.Errorf("refusing to listen on %s: no API keys are configured, so chatd accepts requests without "+
			"authentication, which is only safe on loopback; listen on 127.0.0.1, ::1 or localhost "+
			"(e.g. --addr 127.0.0.1:8080) and put a reverse proxy with authentication in front to serve others", c.Addr)
	}
	for name, a := range c.Agents {
		if a.MaxIterations < 0 || a.MaxTokens < 0 {
			return fmt.Errorf("config: agent %q: limits must be positive", name)
		}
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// SQLitePath returns the SQLite file of DB ("sqlite:PATH", or a bare path).
func (c *Config) SQLitePath() (string, error) {
	switch {
	case strings.HasPrefix(c.DB, "postgres://") || strings.HasPrefix(c.DB, "postgresql://"):
		return "", errors.New("PostgreSQL is not supported by this version of chatd yet; use --db sqlite:PATH")
	case strings.HasPrefix(c.DB, "sqlite:"):
		path := strings.TrimPrefix(c.DB, "sqlite:")
		if path == "" {
			return "", errors.New("--db sqlite: needs a path, e.g. sqlite:./chatd.db")
		}
		return path, nil
	case strings.Contains(c.DB, "://"):
		return "", fmt.Errorf("database %q: use sqlite:PATH", c.DB)
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
		slog.String("addr", c.Addr), slog.String("db", c.DB), slog.String("model", c.Model),
		slog.String("config", c.File), slog.Any("providers", provs),
	)
}
