package e2e

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestObservability runs the real binary with its logs in JSON, its traces sent to a small OTLP/HTTP
// receiver, and /metrics on its port: after a run with two tool calls, the receiver has the run's span
// tree, the model's requests carried the trace, /metrics and /readyz answer, an unknown path is a 404,
// and the log has the run's end with its ids.
func TestObservability(t *testing.T) {
	bin := buildChatd(t)
	spans := make(chan string, 1000)
	otlp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					spans <- s.GetName()
				}
			}
		}
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	defer otlp.Close()
	up := newModel(t)
	env := append(chatdEnv(up, "5s"), "CHATD_LOG_FORMAT=json", "OTEL_EXPORTER_OTLP_ENDPOINT="+otlp.URL,
		"OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_SERVICE_NAME=chatd-e2e")
	p := startChatd(t, "chatd", bin, filepath.Join(t.TempDir(), "chatd.db"), env...)

	s := p.openStream(t, map[string]any{"message": "What time is it in Paris and Tokyo?"})
	evs, err := s.until(isEvent("done"), patience)
	if err != nil {
		t.Fatal(err)
	}
	if evs[len(evs)-1].Data["status"] != "completed" {
		t.Fatalf("the run ended %v", evs[len(evs)-1])
	}

	want := map[string]int{"POST /v1/chat/stream": 1, "invoke_agent default": 1, "chat llmtest-1": 2, "execute_tool current_time": 2}
	got := map[string]int{}
	deadline := time.After(patience)
	for !covers(got, want) {
		select {
		case name := <-spans:
			got[name]++
		case <-deadline:
			t.Fatalf("spans received: %v; want at least %v", got, want)
		}
	}
	reqs := up.Requests()
	if len(reqs) == 0 || !strings.HasPrefix(reqs[0].Header.Get("traceparent"), "00-") {
		t.Errorf("the model request's traceparent: %q", reqs[0].Header.Get("traceparent"))
	}

	for path, status := range map[string]int{"/readyz": 200, "/healthz": 200, "/metrics": 200, "/no/such/page": 404, "/v1/nothing": 404} {
		resp, err := http.Get(p.base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != status {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, status)
		}
		if path == "/metrics" && !strings.Contains(string(body), `chatd_runs_ended_total{agent="default",model="openai/llmtest-1",status="completed"} 1`) {
			t.Errorf("/metrics has no completed run:\n%.2000s", body)
		}
	}

	var ended map[string]any
	for line := range strings.Lines(p.out.String()) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "run ended" {
			ended = rec
		}
	}
	if ended == nil || ended["status"] != "completed" || ended["run_id"] == nil || ended["session_id"] == nil ||
		ended["trace_id"] == nil || ended["tool_calls"] != 2.0 {
		t.Errorf("the run's end in the log: %v", ended)
	}
}

// covers reports whether got has at least the counts of want.
func covers(got, want map[string]int) bool {
	for k, n := range want {
		if got[k] < n {
			return false
		}
	}
	return true
}

// TestMetricsAddr: with --metrics-addr, /metrics is served there, with the scrape token, and not on the
// API's port.
func TestMetricsAddr(t *testing.T) {
	bin := buildChatd(t)
	up := newModel(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	const token = "e2e-scrape-token-0123456789"
	p := startChatd(t, "chatd", bin, filepath.Join(t.TempDir(), "chatd.db"),
		append(chatdEnv(up, "5s"), "CHATD_METRICS_ADDR="+addr, "CHATD_METRICS_TOKEN="+token)...)
	get := func(url, authz string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "GET", url, nil)
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get(p.base+"/metrics", "Bearer "+token); got != 404 {
		t.Errorf("GET /metrics on the API's port: %d, want 404", got)
	}
	if got := get("http://"+addr+"/metrics", "Bearer "+token); got != 200 {
		t.Errorf("GET /metrics on --metrics-addr with the token: %d, want 200", got)
	}
	for _, authz := range []string{"", "Bearer not-the-token-000000"} {
		if got := get("http://"+addr+"/metrics", authz); got != 401 {
			t.Errorf("GET /metrics on --metrics-addr with authorization %q: %d, want 401", authz, got)
		}
	}
	// Without API keys, as on the API's port, only loopback names: a DNS-rebinding page is refused.
	req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://"+addr+"/metrics", nil)
	req.Host = "rebound.example.com"
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("GET /metrics on --metrics-addr for another host name: %d, want 403", resp.StatusCode)
	}
}

// TestMetricsAddrTLS: when the API is served over TLS, so are the metrics on --metrics-addr, with the
// same certificate: the scrape token never crosses the network in clear text.
func TestMetricsAddrTLS(t *testing.T) {
	bin := buildChatd(t)
	up := newModel(t)
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	const token = "e2e-scrape-token-0123456789"
	p := &process{name: "chatd", out: &logBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(dir, "chatd.db"),
		"--tls-cert", certFile, "--tls-key", keyFile)
	p.cmd.Env = append(append(os.Environ(), chatdEnv(up, "5s")...), "CHATD_METRICS_ADDR="+addr, "CHATD_METRICS_TOKEN="+token)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("chatd output:\n%s", p.out)
		}
	})
	if !poll(func() bool { return strings.Contains(p.out.String(), "url=https://"+addr+"/metrics") }) {
		t.Fatalf("no https metrics line in the log:\n%s", p.out)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ := http.NewRequestWithContext(t.Context(), "GET", "https://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET /metrics over TLS: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /metrics over TLS with the token: %d, want 200", resp.StatusCode)
	}
	req, _ = http.NewRequestWithContext(t.Context(), "GET", "http://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("GET /metrics in clear text: 200, want a refusal")
		}
	}
}
