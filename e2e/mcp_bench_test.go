package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"chatd/internal/mcpclient"
	"chatd/internal/sse"
	"chatd/internal/tool"
)

// BenchmarkMCPEcho measures a call of server-everything's echo tool through chatd's MCP client (the
// Manager's tool in the registry: argument validation, timeout, progress token, result mapping) against
// a bare JSON-RPC round trip written by hand over the same transport to the same server. The difference
// of the two is what chatd adds to a call:
//
//	go test -run '^$' -bench MCPEcho -count 6 . | benchstat -
func BenchmarkMCPEcho(b *testing.B) {
	node, err := exec.LookPath("node")
	if err != nil {
		b.Skip("node is not installed")
	}
	everything, _ := filepath.Abs("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	loopback, _ := filepath.Abs("testdata/loopback.cjs")
	if _, err := os.Stat(everything); err != nil {
		b.Skip("@modelcontextprotocol/server-everything is not installed in e2e/node_modules; install the peers with: npm ci --prefix e2e")
	}
	b.Run("stdio", func(b *testing.B) {
		b.Run("chatd", func(b *testing.B) {
			benchRegistry(b, mcpclient.ServerConfig{Name: "everything", Command: node, Args: []string{everything},
				Transport: mcpclient.TransportStdio, Enabled: true})
		})
		b.Run("bare", func(b *testing.B) {
			benchBare(b, startBareStdio(b, node, everything))
		})
	})
	b.Run("http", func(b *testing.B) {
		url := fmt.Sprintf("http://127.0.0.1:%d/mcp", startEverythingHTTP(b, node, everything, loopback))
		b.Run("chatd", func(b *testing.B) {
			benchRegistry(b, mcpclient.ServerConfig{Name: "everything", URL: url, Transport: mcpclient.TransportHTTP, Enabled: true})
		})
		b.Run("bare", func(b *testing.B) {
			benchBare(b, startBareHTTP(b, url))
		})
	})
}

const echoArgs = `{"message":"hi"}`

// benchRegistry connects a Manager to sc and calls everything__echo through the registry.
func benchRegistry(b *testing.B, sc mcpclient.ServerConfig) {
	reg := tool.NewRegistry(tool.Options{})
	m := mcpclient.New([]mcpclient.ServerConfig{sc}, mcpclient.Options{Registry: reg, Getenv: os.Getenv})
	m.Start(b.Context())
	b.Cleanup(func() {
		m.Close()
		reg.Close()
	})
	if s := m.Servers()[0]; s.State != mcpclient.StateConnected {
		b.Fatalf("server %+v", s)
	}
	ctx := context.Background()
	for b.Loop() {
		out := reg.Call(ctx, "everything__echo", json.RawMessage(echoArgs))
		if !out.Success || out.Content != "Echo: hi" {
			b.Fatalf("echo: %+v", out)
		}
	}
}

// rpcClient sends one JSON-RPC request and returns its result.
type rpcClient interface {
	call(method string, params any) (json.RawMessage, error)
}

func benchBare(b *testing.B, c rpcClient) {
	params := map[string]any{"name": "echo", "arguments": json.RawMessage(echoArgs)}
	for b.Loop() {
		res, err := c.call("tools/call", params)
		if err != nil || !bytes.Contains(res, []byte("Echo: hi")) {
			b.Fatalf("echo: %s %v", res, err)
		}
	}
}

// rpcMessage is a JSON-RPC message as read back; only responses (with an id) are of interest.
type rpcMessage struct {
	ID     *int64
	Result json.RawMessage
	Error  *struct{ Message string }
}

func (m rpcMessage) outcome() (json.RawMessage, error) {
	if m.Error != nil {
		return nil, fmt.Errorf("JSON-RPC error: %s", m.Error.Message)
	}
	return m.Result, nil
}

func request(id int64, method string, params any) []byte {
	msg := map[string]any{"jsonrpc": "2.0", "method": method, "params": params}
	if id > 0 {
		msg["id"] = id
	}
	raw, _ := json.Marshal(msg)
	return raw
}

var initializeParams = map[string]any{
	"protocolVersion": "2025-11-25",
	"capabilities":    map[string]any{},
	"clientInfo":      map[string]any{"name": "bare", "version": "1"},
}

// bareStdio speaks newline-delimited JSON-RPC to a child's stdin and stdout.
type bareStdio struct {
	in  io.Writer
	out *bufio.Reader
	id  int64
}

// startBareStdio runs the server as a child and initializes it by hand.
func startBareStdio(b *testing.B, node, everything string) *bareStdio {
	cmd := exec.Command(node, everything)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	c := &bareStdio{in: in, out: bufio.NewReaderSize(out, 1<<16)}
	if _, err := c.call("initialize", initializeParams); err != nil {
		b.Fatal(err)
	}
	if _, err := in.Write(append(request(0, "notifications/initialized", map[string]any{}), '\n')); err != nil {
		b.Fatal(err)
	}
	return c
}

func (c *bareStdio) call(method string, params any) (json.RawMessage, error) {
	c.id++
	if _, err := c.in.Write(append(request(c.id, method, params), '\n')); err != nil {
		return nil, err
	}
	for {
		line, err := c.out.ReadBytes('\n')
		if err != nil {
			return nil, err
		}
		var msg rpcMessage
		if json.Unmarshal(line, &msg) == nil && msg.ID != nil && *msg.ID == c.id {
			return msg.outcome()
		}
	}
}

// bareHTTP speaks streamable HTTP: a POST per message, the answer as JSON or as an SSE stream.
type bareHTTP struct {
	url, session, version string
	client                *http.Client
	id                    int64
}

// startBareHTTP initializes a session by hand.
func startBareHTTP(b *testing.B, url string) *bareHTTP {
	c := &bareHTTP{url: url, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
	b.Cleanup(c.client.CloseIdleConnections)
	res, err := c.call("initialize", initializeParams)
	if err != nil {
		b.Fatal(err)
	}
	var init struct{ ProtocolVersion string }
	json.Unmarshal(res, &init)
	c.version = init.ProtocolVersion
	if c.session == "" || c.version == "" {
		b.Fatalf("initialize: session %q, result %s", c.session, res)
	}
	resp, err := c.post(request(0, "notifications/initialized", map[string]any{}))
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		b.Fatalf("notifications/initialized: %s", resp.Status)
	}
	return c
}

func (c *bareHTTP) post(body []byte) (*http.Response, error) {
	req, _ := http.NewRequest("POST", c.url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
		req.Header.Set("Mcp-Protocol-Version", c.version)
	}
	return c.client.Do(req)
}

func (c *bareHTTP) call(method string, params any) (json.RawMessage, error) {
	c.id++
	resp, err := c.post(request(c.id, method, params))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", method, resp.Status)
	}
	if id := resp.Header.Get("Mcp-Session-Id"); id != "" {
		c.session = id
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var msg rpcMessage
		if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
			return nil, err
		}
		return msg.outcome()
	}
	for ev, err := range sse.Scan(resp.Body) {
		if err != nil {
			return nil, err
		}
		var msg rpcMessage
		if json.Unmarshal(ev.Data, &msg) == nil && msg.ID != nil && *msg.ID == c.id {
			return msg.outcome()
		}
	}
	return nil, fmt.Errorf("%s: the stream ended without an answer", method)
}

// startEverythingHTTP runs server-everything over streamable HTTP on a free loopback port until the
// benchmark ends. (start in aimock_test.go does this for tests; it takes a *testing.T.)
func startEverythingHTTP(b *testing.B, node, everything, loopback string) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(node, everything, "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port), "NODE_OPTIONS=--require "+loopback)
	out := &logBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if conn, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			conn.Close()
			return port
		}
	}
	b.Fatalf("server-everything did not listen on %d:\n%s", port, out)
	return 0
}
