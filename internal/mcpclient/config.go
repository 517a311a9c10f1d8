package mcpclient

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Transports.
const (
	TransportStdio = "stdio"
	TransportHTTP  = "http" // streamable HTTP
	TransportSSE   = "sse"  // the 2024-11-05 HTTP+SSE transport
)

// maxServerName bounds a server's name, so that its tools' names keep it whole within 64 characters.
const maxServerName = 32

// maxConfigBytes bounds the servers file.
const maxConfigBytes = 1 << 20

// ServerConfig is one server of the mcpServers file.
type ServerConfig struct {
	Name string
	// stdio
	Command string
	Args    []string
	Env     map[string]string // the child's whole environment besides PATH and HOME
	Cwd     string
	// remote
	URL     string
	Headers map[string]string
	// Transport is stdio, http or sse.
	Transport string
	// Timeout bounds each call (0: the registry's default); ToolTimeouts override it per tool, by the
	// server's own tool name.
	Timeout      time.Duration
	ToolTimeouts map[string]time.Duration
	Enabled      bool

	// expanded are the values ${VAR} stood for: secrets by intent, whatever their length.
	expanded []string
}

// fileServer is a server as written in the file. The shape is the one Claude Desktop, Cursor, VS Code
// and Cline share; "type" is an alias of "transport", "disabled" the opposite of "enabled", and other
// keys those tools use (autoApprove, …) are ignored.
type fileServer struct {
	Command   string            `json:"command"`
	Args      []string          `json:"args"`
	Env       map[string]string `json:"env"`
	Cwd       string            `json:"cwd"`
	URL       string            `json:"url"`
	Headers   map[string]string `json:"headers"`
	Transport string            `json:"transport"`
	Type      string            `json:"type"`
	Timeout   duration          `json:"timeout"`
	Enabled   *bool             `json:"enabled"`
	Disabled  bool              `json:"disabled"`
	Tools     map[string]struct {
		Timeout duration `json:"timeout"`
	} `json:"tools"`
}

// duration reads a JSON number of seconds or a Go duration string ("90s", "2m"); null leaves it unset.
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil || v < 0 {
			return fmt.Errorf("timeout %q is not a duration such as \"30s\"", s)
		}
		*d = duration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil || secs < 0 || secs > 86400 {
		return fmt.Errorf("timeout %s is neither seconds (a number up to 86400) nor a duration such as \"30s\"", b)
	}
	*d = duration(secs * float64(time.Second))
	return nil
}

// LoadConfig reads an mcpServers file. getenv expands ${VAR} in env, headers and url values, so that
// secrets can stay out of the file.
func LoadConfig(path string, getenv func(string) string) ([]ServerConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("mcp config: %w", err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, maxConfigBytes+1)); err != nil {
		return nil, fmt.Errorf("mcp config %s: %w", path, err)
	}
	if buf.Len() > maxConfigBytes {
		return nil, fmt.Errorf("mcp config %s: larger than %d bytes", path, maxConfigBytes)
	}
	servers, err := ParseConfig(buf.Bytes(), getenv)
	if err != nil {
		return nil, fmt.Errorf("mcp config %s: %w", path, err)
	}
	return servers, nil
}

// ParseConfig parses the {"mcpServers":{name:{…}}} shape, sorted by name. Disabled servers are kept with
// Enabled false, so that the status endpoint lists them.
func ParseConfig(data []byte, getenv func(string) string) ([]ServerConfig, error) {
	var doc struct {
		MCPServers map[string]json.RawMessage `json:"mcpServers"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not a JSON object with mcpServers: %w", err)
	}
	if doc.MCPServers == nil {
		return nil, errors.New(`no "mcpServers" object`)
	}
	var out []ServerConfig
	prefixes := map[string]string{}
	for name, raw := range doc.MCPServers {
		var fs fileServer
		if err := json.Unmarshal(raw, &fs); err != nil {
			return nil, fmt.Errorf("server %q: %w", name, err)
		}
		sc, err := fs.server(name, getenv)
		if err != nil {
			return nil, fmt.Errorf("server %q: %w", name, err)
		}
		p := prefix(name)
		if other, ok := prefixes[p]; ok {
			return nil, fmt.Errorf("servers %q and %q both name their tools %s__…; rename one", other, name, p)
		}
		prefixes[p] = name
		out = append(out, sc)
	}
	slices.SortFunc(out, func(a, b ServerConfig) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (fs *fileServer) server(name string, getenv func(string) string) (ServerConfig, error) {
	if strings.TrimSpace(name) == "" || len(name) > maxServerName {
		return ServerConfig{}, fmt.Errorf("a server name is 1 to %d characters", maxServerName)
	}
	if p := prefix(name); strings.Contains(p, "__") || strings.HasSuffix(p, "_") {
		// Its tools' names would run into the "__" that ends the prefix: "a_" would be matched by a__*.
		return ServerConfig{}, fmt.Errorf("the name is %s in tool names, which must not hold \"__\" or end in \"_\"", p)
	}
	var expanded []string
	u := expand(fs.URL, getenv, &expanded)
	sc := ServerConfig{Name: name, Command: fs.Command, Args: fs.Args, Cwd: fs.Cwd, URL: u, expanded: expanded,
		Timeout: time.Duration(fs.Timeout), Enabled: !fs.Disabled && (fs.Enabled == nil || *fs.Enabled)}
	if fs.Transport != "" && fs.Type != "" && !strings.EqualFold(fs.Transport, fs.Type) {
		return sc, fmt.Errorf("transport %q and type %q disagree", fs.Transport, fs.Type)
	}
	sc.Transport = strings.ToLower(cmp.Or(fs.Transport, fs.Type))
	switch sc.Transport {
	case "streamable-http", "streamablehttp", "streamable_http", "http":
		sc.Transport = TransportHTTP
	case "":
		sc.Transport = TransportStdio
		if fs.URL != "" {
			sc.Transport = TransportHTTP
		}
	case TransportStdio, TransportSSE:
	default:
		return sc, fmt.Errorf("transport %q: use stdio, http or sse", sc.Transport)
	}
	switch {
	case fs.Command != "" && fs.URL != "":
		return sc, errors.New(`give either "command" (stdio) or "url" (remote), not both`)
	case sc.Transport == TransportStdio && fs.Command == "":
		return sc, errors.New(`a stdio server needs a "command" (or give a "url" for a remote one)`)
	case sc.Transport != TransportStdio && fs.Command != "":
		return sc, fmt.Errorf(`a %s server has a "url", not a "command"`, sc.Transport)
	case sc.Transport != TransportStdio:
		u, err := url.Parse(sc.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return sc, errors.New(`"url" must be an http or https URL`)
		}
	}
	if len(fs.Env) > 0 {
		sc.Env = make(map[string]string, len(fs.Env))
		for k, v := range fs.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				return sc, fmt.Errorf("env name %q is not valid", k)
			}
			sc.Env[k] = expand(v, getenv, &sc.expanded)
		}
	}
	if len(fs.Headers) > 0 {
		sc.Headers = make(map[string]string, len(fs.Headers))
		for k, v := range fs.Headers {
			v = expand(v, getenv, &sc.expanded)
			if k == "" || strings.ContainsAny(k+v, "\r\n") {
				return sc, fmt.Errorf("header %q is not valid", k)
			}
			sc.Headers[k] = v
		}
	}
	for tool, t := range fs.Tools {
		if t.Timeout > 0 {
			if sc.ToolTimeouts == nil {
				sc.ToolTimeouts = map[string]time.Duration{}
			}
			sc.ToolTimeouts[tool] = time.Duration(t.Timeout)
		}
	}
	return sc, nil
}

// expand replaces ${VAR} with getenv("VAR"); a lone $ stays as it is. Each value put in is added to
// *put.
func expand(s string, getenv func(string) string, put *[]string) string {
	if getenv == nil || !strings.Contains(s, "${") {
		return s
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			break
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			break
		}
		b.WriteString(s[:i])
		v := getenv(s[i+2 : i+j])
		b.WriteString(v)
		if v != "" && put != nil {
			*put = append(*put, v)
		}
		s = s[i+j+1:]
	}
	b.WriteString(s)
	return b.String()
}

// secrets lists the values of sc that must never reach a log, an event or a status: what ${VAR} stood
// for, and env and header values (and each word of a header value, the token of "Bearer …") long enough
// to be keys.
func (sc *ServerConfig) secrets() []string {
	var out []string
	for _, v := range sc.expanded {
		if len(v) >= 4 {
			out = append(out, v)
		}
	}
	for _, m := range []map[string]string{sc.Env, sc.Headers} {
		for _, v := range m {
			if len(v) >= 6 {
				out = append(out, v)
			}
		}
	}
	for _, v := range sc.Headers {
		for _, w := range strings.Fields(v) {
			if len(w) >= 6 && w != v {
				out = append(out, w)
			}
		}
	}
	if u, err := url.Parse(sc.URL); err == nil {
		if p, ok := u.User.Password(); ok && len(p) >= 6 {
			out = append(out, p)
		}
		for _, vs := range u.Query() {
			for _, v := range vs {
				if len(v) >= 6 {
					out = append(out, v)
				}
			}
		}
	}
	// Longest first, so that a secret containing another is redacted whole.
	slices.SortFunc(out, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return out
}

// redact replaces every secret in s.
func redact(s string, secrets []string) string {
	for _, v := range secrets {
		s = strings.ReplaceAll(s, v, "[redacted]")
	}
	return s
}

// prefix is the server's part of its tools' names.
func prefix(server string) string {
	return clean(server)
}

// clean replaces every byte outside [A-Za-z0-9_-] with '_'.
func clean(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// ToolName is the name a model sees for a server's tool: <server>__<tool>, characters outside
// [A-Za-z0-9_-] replaced by '_', at most 64 characters. A longer name keeps its start — the server's
// part whole, as names are at most 32 characters — and ends in a hash of the whole, so that two long
// names stay apart.
func ToolName(server, tool string) string {
	name := prefix(server) + "__" + clean(tool)
	if len(name) <= 64 {
		return name
	}
	return name[:55] + "_" + strconv.FormatUint(uint64(fnv32(server+"\x00"+tool)), 16)
}

// fnv32 is FNV-1a; eight hex digits at most.
func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}
