package httpapi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// quickUpstream is an OpenAI upstream that answers every request at once with one token and the
// stream's end.
type quickUpstream struct{}

func (quickUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	const head = `data: {"id":"chatcmpl-quick","object":"chat.completion.chunk","created":1763710000,"model":"m","choices":[`
	io.WriteString(w, head+`{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`+"\n\n"+
		head+`{"index":0,"delta":{"content":"`+streamMarker+`"},"finish_reason":null}]}`+"\n\n")
	http.NewResponseController(w).Flush()
	io.WriteString(w, head+`{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n"+
		head+`],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`+"\n\ndata: [DONE]\n\n")
}

// BenchmarkTimeToFirstToken measures the first token of a new chat end to end, as chatbench does but in
// one process: c clients (c=1, c=50) each send a stream request over a real loopback connection at once
// and time it from the request's write to the first read that holds the token's text. The upstream, on
// loopback too, answers at once. Targets: the upstream directly (direct), a bare
// httputil.ReverseProxy (relay), chatd on new sessions with a SQLite file (synchronous=FULL, as chatd
// runs) and its durable event log (chatd), and chatd on each client's next message to a session that
// got its first through chatd before the timing (chatd-next: its records are kept in memory, and its
// run starts as early as a new session's): chatd's added time is its figure minus direct's.
// ns-to-token/op is the median over every client of every op; p90-ns-to-token the 90th percentile.
func BenchmarkTimeToFirstToken(b *testing.B) {
	for _, c := range []int{1, 50} {
		for _, target := range []string{"direct", "relay", "chatd", "chatd-next"} {
			b.Run(fmt.Sprintf("c=%d/%s", c, target), func(b *testing.B) { benchmarkTimeToFirstToken(b, target, c) })
		}
	}
}

func benchmarkTimeToFirstToken(b *testing.B, target string, c int) {
	mock := httptest.NewServer(quickUpstream{})
	b.Cleanup(mock.Close)
	next := target == "chatd-next"
	if next {
		target = "chatd"
	}
	addr, path, body, _ := benchTarget(b, target, mock, 1024)
	// requests are the op's: one for each client, the same but for chatd-next's sessions, which each op
	// starts (untimed) with a first message.
	requests := func() ([]string, error) {
		if next {
			return nextMessages(addr, path, c)
		}
		return slices.Repeat([]string{rawRequest(addr, path, body)}, c), nil
	}
	round := func() ([]time.Duration, error) {
		reqs, err := requests()
		if err != nil {
			return nil, err
		}
		return firstTokens(addr, reqs)
	}
	// A first round warms the servers: their connections, pools and caches.
	if _, err := round(); err != nil {
		b.Fatal(err)
	}
	var all []time.Duration
	for b.Loop() {
		ds, err := round()
		if err != nil {
			b.Fatal(err)
		}
		all = append(all, ds...)
	}
	slices.Sort(all)
	b.ReportMetric(float64(all[len(all)/2].Nanoseconds()), "ns-to-token/op")
	b.ReportMetric(float64(all[len(all)*9/10].Nanoseconds()), "p90-ns-to-token")
}

// rawRequest is the HTTP/1.1 request that POSTs the JSON body to path on addr, on a connection of its
// own.
func rawRequest(addr, path, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		path, addr, len(body), body)
}

// nextMessages sends a first message to each of c new sessions through chatd at addr (POST /v1/chat,
// which answers once the run has ended), and returns, for each, the stream request (to path) of its next
// message.
func nextMessages(addr, path string, c int) ([]string, error) {
	reqs, errs := make([]string, c), make([]error, c)
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() {
			resp, err := http.Post("http://"+addr+"/v1/chat", "application/json", strings.NewReader(`{"message":"hello"}`))
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			var out struct {
				SessionID string `json:"session_id"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
				errs[i] = fmt.Errorf("a session's first message: %s, %v", resp.Status, err)
				return
			}
			reqs[i] = rawRequest(addr, path, fmt.Sprintf(`{"message":"hi","session_id":%q}`, out.SessionID))
		})
	}
	wg.Wait()
	return reqs, errors.Join(errs...)
}

// firstTokens opens a connection to addr for each request, then sends each on its own at once, and
// returns, for each, the time from its write to the read that held the token's text; it reads every
// stream to its end.
func firstTokens(addr string, reqs []string) ([]time.Duration, error) {
	c := len(reqs)
	conns := make([]net.Conn, c)
	defer func() {
		for _, conn := range conns {
			if conn != nil {
				conn.Close()
			}
		}
	}()
	for i := range conns {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		conns[i] = conn
	}
	ds, errs := make([]time.Duration, c), make([]error, c)
	var wg sync.WaitGroup
	for i, conn := range conns {
		wg.Go(func() {
			conn.SetDeadline(time.Now().Add(30 * time.Second))
			buf := make([]byte, 4096)
			start := time.Now()
			if _, err := io.WriteString(conn, reqs[i]); err != nil {
				errs[i] = err
				return
			}
			carry := 0
			for {
				k, err := conn.Read(buf[carry:])
				if err != nil {
					errs[i] = fmt.Errorf("before the first token: %w", err)
					return
				}
				data := buf[:carry+k]
				if bytes.Contains(data, []byte(streamMarker)) {
					ds[i] = time.Since(start)
					break
				}
				carry = min(len(streamMarker)-1, len(data))
				copy(buf, data[len(data)-carry:])
			}
			if _, err := io.Copy(io.Discard, conn); err != nil {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return ds, nil
}
