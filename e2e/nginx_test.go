package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"chatd/internal/llm/llmtest"
)

// TestThroughNginx streams a chat through nginx with its defaults (proxy buffering on) and shows every
// token reaching the client before the model sends the next one: the upstream holds each text chunk
// until the client has received the one before as its own text_delta. A proxy that buffered the stream
// would hold the first token, and the upstream would wait for it until the test gives up.
func TestThroughNginx(t *testing.T) {
	nginx := needNginx(t)
	bin := buildChatd(t)
	tokens := []string{"one ", "two ", "six ", "ten ", "end."}
	received := make(chan string, len(tokens))
	var sent atomic.Int32
	up := llmtest.NewServer(t)
	up.Respond = func(n int, req llmtest.Request) llmtest.Turn {
		return llmtest.Turn{Text: strings.Join(tokens, ""), ChunkRunes: 4, BeforeChunk: func(data string) {
			if !strings.Contains(data, `"content":"`) || strings.Contains(data, `"content":""`) {
				return // not a token
			}
			if sent.Add(1) == 1 {
				return
			}
			select {
			case <-received:
			case <-time.After(patience):
				t.Errorf("token %d: the client has not received the one before it after %v", sent.Load(), patience)
			}
		}}
	}
	up.Requests()
	chatd := startChatd(t, "chatd", bin, filepath.Join(t.TempDir(), "chatd.db"), chatdEnv(up, "5s")...)
	lb := startNginx(t, nginx, chatd)

	s := lb.openStream(t, map[string]any{"message": "count for me"})
	if got := s.header.Get("Cache-Control"); !strings.Contains(got, "no-cache") {
		t.Errorf("Cache-Control through nginx = %q, want no-cache", got)
	}
	var deltas []string
	status := ""
	for ev := range s.events {
		switch ev.Type {
		case "text_delta":
			text, _ := ev.Data["text"].(string)
			deltas = append(deltas, text)
			received <- text
		case "done":
			status, _ = ev.Data["status"].(string)
		}
	}
	if status != "completed" {
		t.Fatalf("the stream ended (%v) with done %q after deltas %q", s.err, status, deltas)
	}
	if strings.Join(deltas, "|") != strings.Join(tokens, "|") {
		t.Errorf("text deltas %q, want one per token %q", deltas, tokens)
	}
}

// needNginx returns nginx's path; without it the test skips, or fails under CI.
func needNginx(t testing.TB) string {
	path, err := exec.LookPath("nginx")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nginx"); serr == nil {
			return "/usr/sbin/nginx"
		}
		msg := "nginx is not installed (apt-get install nginx): the proxy test needs a real nginx"
		if os.Getenv("CHATD_CI") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// startNginx proxies a free port to p with nginx's defaults — proxy buffering on — and nothing but the
// paths a process without root needs. One process (master_process off), so that no worker changes user.
func startNginx(t testing.TB, bin string, p *process) *process {
	t.Helper()
	port := freePort(t)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log stderr warn;
events {}
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  server {
    listen 127.0.0.1:%[2]d;
    location / {
      proxy_pass %[3]s;
    }
  }
}
`, dir, port, p.base)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	lb := &process{name: "nginx", base: fmt.Sprintf("http://127.0.0.1:%d", port), out: &logBuffer{}, exited: make(chan struct{})}
	lb.cmd = exec.Command(bin, "-p", dir, "-c", path, "-e", "stderr")
	lb.cmd.Stdout, lb.cmd.Stderr = lb.out, lb.out
	if err := lb.cmd.Start(); err != nil {
		t.Fatalf("start nginx: %v", err)
	}
	go func() {
		lb.cmd.Wait()
		close(lb.exited)
	}()
	t.Cleanup(func() {
		lb.kill()
		if t.Failed() {
			t.Logf("nginx output:\n%s", lb.out)
		}
	})
	lb.waitHealthy(t)
	return lb
}
