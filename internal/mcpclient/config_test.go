package mcpclient

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// fakeEnv is a getenv over m.
func fakeEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseConfig(t *testing.T) {
	const file = `{"mcpServers":{
		"files": {"command": "npx", "args": ["-y", "@mcp/fs", "/tmp"], "cwd": "/srv",
			"env": {"API_KEY": "${KEY}", "PLAIN": "a$b", "BOTH": "${KEY}-${MISSING}-${"}},
		"web": {"url": "https://mcp.example.com/mcp?k=${KEY}", "headers": {"Authorization": "Bearer ${TOKEN}"},
			"timeout": 90},
		"legacy": {"type": "sse", "url": "http://127.0.0.1:9000/sse", "timeout": "90s",
			"tools": {"slow": {"timeout": "1s"}, "plain": {}, "half": {"timeout": 0.5}}},
		"typed": {"type": "streamable-http", "url": "http://h/mcp"},
		"named": {"transport": "HTTP", "type": "http", "url": "http://h/mcp"},
		"stdio": {"transport": "stdio", "command": "srv", "autoApprove": ["x"], "alwaysAllow": [], "timeout": null,
			"tools": {"t": {"timeout": null}}},
		"off": {"command": "x", "disabled": true},
		"off2": {"command": "x", "enabled": false},
		"on": {"command": "x", "enabled": true, "disabled": false}
	}}`
	env := fakeEnv(map[string]string{"KEY": "k-123456", "TOKEN": "t-abcdef"})
	got, err := ParseConfig([]byte(file), env)
	if err != nil {
		t.Fatal(err)
	}
	want := []ServerConfig{
		{Name: "files", Command: "npx", Args: []string{"-y", "@mcp/fs", "/tmp"}, Cwd: "/srv", Transport: TransportStdio,
			Env: map[string]string{"API_KEY": "k-123456", "PLAIN": "a$b", "BOTH": "k-123456--${"}, Enabled: true},
		{Name: "legacy", URL: "http://127.0.0.1:9000/sse", Transport: TransportSSE, Timeout: 90 * time.Second,
			ToolTimeouts: map[string]time.Duration{"slow": time.Second, "half": 500 * time.Millisecond}, Enabled: true},
		{Name: "named", URL: "http://h/mcp", Transport: TransportHTTP, Enabled: true},
		{Name: "off", Command: "x", Transport: TransportStdio},
		{Name: "off2", Command: "x", Transport: TransportStdio},
		{Name: "on", Command: "x", Transport: TransportStdio, Enabled: true},
		{Name: "stdio", Command: "srv", Transport: TransportStdio, Enabled: true},
		{Name: "typed", URL: "http://h/mcp", Transport: TransportHTTP, Enabled: true},
		{Name: "web", URL: "https://mcp.example.com/mcp?k=k-123456", Transport: TransportHTTP, Timeout: 90 * time.Second,
			Headers: map[string]string{"Authorization": "Bearer t-abcdef"}, Enabled: true},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(ServerConfig{})); diff != "" {
		t.Errorf("ParseConfig (-want +got):\n%s", diff)
	}
}

func TestParseConfigNoGetenv(t *testing.T) {
	got, err := ParseConfig([]byte(`{"mcpServers":{"a":{"command":"x","env":{"K":"${KEY}"}}}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Env["K"] != "${KEY}" {
		t.Errorf("without getenv, ${KEY} became %q", got[0].Env["K"])
	}
}

func TestParseConfigErrors(t *testing.T) {
	env := fakeEnv(map[string]string{"NL": "x\r\nInjected: 1"})
	for _, tc := range []struct {
		name, file, want string
	}{
		{"not JSON", `mcpServers: {}`, "not a JSON object with mcpServers"},
		{"array", `[]`, "not a JSON object with mcpServers"},
		{"missing mcpServers", `{"servers":{}}`, `no "mcpServers" object`},
		{"null mcpServers", `{"mcpServers":null}`, `no "mcpServers" object`},
		{"server not an object", `{"mcpServers":{"a":"npx"}}`, `server "a"`},
		{"neither command nor url", `{"mcpServers":{"a":{}}}`, `server "a": a stdio server needs a "command"`},
		{"both command and url", `{"mcpServers":{"a":{"command":"x","url":"http://h/mcp"}}}`, `server "a": give either "command" (stdio) or "url" (remote), not both`},
		{"both, typed stdio", `{"mcpServers":{"a":{"type":"stdio","command":"x","url":"http://h/mcp"}}}`, `not both`},
		{"http with a command", `{"mcpServers":{"a":{"type":"http","command":"x"}}}`, `has a "url", not a "command"`},
		{"bad transport", `{"mcpServers":{"a":{"type":"websocket","url":"ws://h"}}}`, `transport "websocket": use stdio, http or sse`},
		{"transport and type disagree", `{"mcpServers":{"a":{"transport":"sse","type":"http","url":"http://h"}}}`, `transport "sse" and type "http" disagree`},
		{"bad url scheme", `{"mcpServers":{"a":{"url":"ftp://h/mcp"}}}`, `"url" must be an http or https URL`},
		{"url without host", `{"mcpServers":{"a":{"url":"http:///mcp"}}}`, `"url" must be an http or https URL`},
		{"sse without url", `{"mcpServers":{"a":{"type":"sse"}}}`, `"url" must be an http or https URL`},
		{"bad env name", `{"mcpServers":{"a":{"command":"x","env":{"A=B":"1"}}}}`, `env name "A=B" is not valid`},
		{"empty env name", `{"mcpServers":{"a":{"command":"x","env":{"":"1"}}}}`, `env name "" is not valid`},
		{"header with newline", `{"mcpServers":{"a":{"url":"http://h","headers":{"X-Key":"a\nb"}}}}`, `header "X-Key" is not valid`},
		{"header with newline from env", `{"mcpServers":{"a":{"url":"http://h","headers":{"X-Key":"${NL}"}}}}`, `header "X-Key" is not valid`},
		{"colliding prefixes", `{"mcpServers":{"a.b":{"command":"x"},"a_b":{"command":"y"}}}`, `both name their tools a_b__…; rename one`},
		{"empty name", `{"mcpServers":{" ":{"command":"x"}}}`, "a server name is 1 to 32 characters"},
		{"long name", `{"mcpServers":{"` + strings.Repeat("n", 65) + `":{"command":"x"}}}`, "a server name is 1 to 32 characters"},
		{"name ending in _", `{"mcpServers":{"a_":{"command":"x"}}}`, `the name is a_ in tool names, which must not hold "__" or end in "_"`},
		{"name holding __", `{"mcpServers":{"a__b":{"command":"x"}}}`, `must not hold "__"`},
		{"name cleaned into __", `{"mcpServers":{"a.:b":{"command":"x"}}}`, `the name is a__b in tool names`},
		{"bad timeout string", `{"mcpServers":{"a":{"command":"x","timeout":"soon"}}}`, `timeout "soon" is not a duration such as "30s"`},
		{"negative timeout", `{"mcpServers":{"a":{"command":"x","timeout":-1}}}`, "timeout -1 is neither seconds"},
		{"bad tool timeout", `{"mcpServers":{"a":{"command":"x","tools":{"t":{"timeout":"-1s"}}}}}`, `timeout "-1s" is not a duration`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseConfig([]byte(tc.file), env)
			if err == nil {
				t.Fatalf("ParseConfig = %+v, want an error", got)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(good, []byte(`{"mcpServers":{"a":{"command":"x","env":{"K":"${K}"}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := LoadConfig(good, fakeEnv(map[string]string{"K": "v"}))
	if err != nil || len(got) != 1 || got[0].Env["K"] != "v" {
		t.Errorf("LoadConfig = %+v, %v", got, err)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"mcpServers":{"a":{}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(bad, nil); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("LoadConfig of a bad file: %v, want an error naming the file", err)
	}
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, make([]byte, maxConfigBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(big, nil); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("LoadConfig of a big file: %v", err)
	}
	if _, err := LoadConfig(filepath.Join(dir, "none.json"), nil); err == nil {
		t.Error("LoadConfig of a missing file: no error")
	}
}

var validToolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func TestToolName(t *testing.T) {
	for _, tc := range []struct{ server, tool, want string }{
		{"srv", "x", "srv__x"},
		{"srv.x", "my tool", "srv_x__my_tool"},
		{"gh-1", "list_issues", "gh-1__list_issues"},
		{"ünï", "a/b:c", "__n____a_b_c"}, // a byte at a time: ü is two
		{strings.Repeat("s", 30), strings.Repeat("t", 32), strings.Repeat("s", 30) + "__" + strings.Repeat("t", 32)}, // 64: kept
	} {
		if got := ToolName(tc.server, tc.tool); got != tc.want {
			t.Errorf("ToolName(%q, %q) = %q, want %q", tc.server, tc.tool, got, tc.want)
		}
	}

	long := strings.Repeat("x", 60)
	a, b := ToolName("srv", long+"_alpha"), ToolName("srv", long+"_beta")
	for _, name := range []string{a, b} {
		if !validToolName.MatchString(name) {
			t.Errorf("ToolName gave %q (%d bytes), not a valid tool name", name, len(name))
		}
	}
	if a == b {
		t.Errorf("two long names both became %q", a)
	}
	if again := ToolName("srv", long+"_alpha"); again != a {
		t.Errorf("ToolName is not deterministic: %q, then %q", a, again)
	}
	if !strings.HasPrefix(a, "srv__xxx") {
		t.Errorf("a long name %q lost its start", a)
	}
	// The hash covers the names as given, not their cleaned forms.
	if ToolName("srv", long+"_a.b") == ToolName("srv", long+"_a_b") {
		t.Error(`long tools "….b" and "…_b" got one name`)
	}
}

func TestSecretsAndRedact(t *testing.T) {
	sc := ServerConfig{
		URL:     "https://user:pa55word@h/mcp?token=tok-123456&short=abc",
		Env:     map[string]string{"KEY": "key-1234567890", "N": "12345"},
		Headers: map[string]string{"Authorization": "Bearer key-1234567890-longer"},
	}
	secrets := sc.secrets()
	msg := "Post https://user:pa55word@h/mcp?token=tok-123456&short=abc: header Bearer key-1234567890-longer, env key-1234567890, 12345"
	got := redact(msg, secrets)
	want := "Post https://user:[redacted]@h/mcp?token=[redacted]&short=abc: header [redacted], env [redacted], 12345"
	if got != want {
		t.Errorf("redact:\n got %s\nwant %s", got, want)
	}

	// What ${VAR} stood for is a secret at any length from 4 bytes, in a URL path too; and the token of
	// a "Bearer …" header is redacted on its own.
	env := fakeEnv(map[string]string{"PATHTOKEN": "p4th", "TOKEN": "tok-9876543"})
	servers, err := ParseConfig([]byte(`{"mcpServers":{"a":{"url":"http://h/${PATHTOKEN}/mcp","headers":{"Authorization":"Bearer ${TOKEN}"}}}}`), env)
	if err != nil {
		t.Fatal(err)
	}
	got = redact(`Post "http://h/p4th/mcp": 401, token tok-9876543 refused`, servers[0].secrets())
	if want := `Post "http://h/[redacted]/mcp": 401, token [redacted] refused`; got != want {
		t.Errorf("redact:\n got %s\nwant %s", got, want)
	}
}
