package httpapi_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
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
// httputil.ReverseProxy (relay), and chatd on new sessions with a SQLite file (synchronous=FULL, as
// chatd runs) and its durable event log (chatd): chatd's added time is its figure minus direct's.
// ns-to-token/op is the median over every client of every op; p90-ns-to-token the 90th percentile.
func BenchmarkTimeToFirstToken(b *testing.B) {
	for _, c := range []int{1, 50} {
		for _, target := range []string{"direct", "relay", "chatd"} {
			b.Run(fmt.Sprintf("c=%d/%s", c, target), func(b *testing.B) { benchmarkTimeToFirstToken(b, target, c) })
		}
	}
}

func benchmarkTimeToFirstToken(b *testing.B, target string, c int) {
	mock := httptest.NewServer(quickUpstream{})
	b.Cleanup(mock.Close)
	addr, path, body, _ := benchTarget(b, target, mock, 1024)
	req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		path, addr, len(body), body)
	// A first round warms the servers: their connections, pools and caches.
	if _, err := firstTokens(addr, req, c); err != nil {
		b.Fatal(err)
	}
	var all []time.Duration
	for b.Loop() {
		ds, err := firstTokens(addr, req, c)
		if err != nil {
			b.Fatal(err)
		}
		all = append(all, ds...)
	}
	slices.Sort(all)
	b.ReportMetric(float64(all[len(all)/2].Nanoseconds()), "ns-to-token/op")
	b.ReportMetric(float64(all[len(all)*9/10].Nanoseconds()), "p90-ns-to-token")
}

// firstTokens opens c connections to addr, then sends req on each at once, and returns, for each, the
// time from its write to the read that held the token's text; it reads every stream to its end.
func firstTokens(addr, req string, c int) ([]time.Duration, error) {
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
			if _, err := io.WriteString(conn, req); err != nil {
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
