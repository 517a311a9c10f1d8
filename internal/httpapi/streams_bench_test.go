package httpapi_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"testing"
	"time"

	"chatd/internal/chat"
	"chatd/internal/httpapi"
	"chatd/internal/llm/openai"
	llmupstream "chatd/internal/llm/upstream"
	"chatd/internal/metrics"
	"chatd/internal/store/sqlite"
)

// streamMarker is the text of every token the held upstream sends; clients count it in what they read.
const streamMarker = "tok#"

// heldUpstream is an OpenAI upstream on a real loopback listener that streams tokens chunks at once,
// then holds the stream open until release is closed, then ends it: what a server holds per stream is
// measured while every stream is open and has carried its tokens.
type heldUpstream struct {
	tokens  int
	mu      sync.Mutex
	release chan struct{}
}

func (u *heldUpstream) hold() {
	u.mu.Lock()
	u.release = make(chan struct{})
	u.mu.Unlock()
}

func (u *heldUpstream) let() {
	u.mu.Lock()
	close(u.release)
	u.mu.Unlock()
}

func (u *heldUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	u.mu.Lock()
	release := u.release
	u.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	const head = `data: {"id":"chatcmpl-held","object":"chat.completion.chunk","created":1763710000,"model":"m","choices":[`
	io.WriteString(w, head+`{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`+"\n\n")
	for range u.tokens {
		io.WriteString(w, head+`{"index":0,"delta":{"content":"`+streamMarker+`"},"finish_reason":null}]}`+"\n\n")
		rc.Flush()
	}
	select {
	case <-release:
	case <-r.Context().Done():
		return
	}
	io.WriteString(w, head+`{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n"+
		head+`],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`+"\n\ndata: [DONE]\n\n")
}

// BenchmarkOpenStreams reports what a server holds per open stream: n clients (-streams, default 200) each
// open a stream over a real loopback connection, the held upstream sends each 32 tokens (-tokens) and holds it
// open, and once every client has read its tokens the heap (heap-B: its spans in use, as RSS sees it;
// live-B: its live objects alone, a steadier figure) and the goroutine stacks, after a GC, are compared
// with before; alloc-B is all a stream allocated from its request to its end, garbage included, which is
// what a short run of many streams at once adds to a server's RSS before the collector runs. Targets: the clients straight to the upstream (direct), through a bare
// httputil.ReverseProxy (relay) and through chatd on new sessions with its durable event log (chatd).
// The clients and the upstream are in this process too: what a server adds is its figure minus
// direct's, the way chatbench reads RSS. Each op opens and ends n streams; the figures are per stream.
//
// OPENSTREAMS_PROFILE=PREFIX writes, while the streams are open, PREFIX.TARGET.goroutine and
// PREFIX.TARGET.heap, the heap profile sampling every allocation.
func BenchmarkOpenStreams(b *testing.B) {
	if os.Getenv("OPENSTREAMS_PROFILE") != "" {
		runtime.MemProfileRate = 1
	}
	for _, target := range []string{"direct", "relay", "chatd"} {
		b.Run(target, func(b *testing.B) { benchmarkOpenStreams(b, target, *openStreams) })
	}
}

var (
	openStreams = flag.Int("streams", 200, "BenchmarkOpenStreams: streams held open at once")
	openTokens  = flag.Int("tokens", 32, "BenchmarkOpenStreams: tokens each stream carries before it is held")
)

func benchmarkOpenStreams(b *testing.B, target string, n int) {
	up := &heldUpstream{tokens: *openTokens}
	mock := httptest.NewServer(up)
	b.Cleanup(mock.Close)
	addr, path, body, transports := benchTarget(b, target, mock, 4096)
	req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		path, addr, len(body), body)
	// Each round ends with no connection left idle, so that the next dials every one of its streams' and
	// counts what they hold; and with every goroutine of the round gone.
	var base int
	open := func(n int) (func(), error) {
		end, err := openHeld(up, addr, req, n)
		if err != nil {
			return nil, err
		}
		return func() {
			end()
			for _, tr := range transports {
				tr.CloseIdleConnections()
			}
			settle(b, base)
		}, nil
	}
	// A first round warms the server: its pools and caches are not per stream.
	base = runtime.NumGoroutine() + 100
	end, err := open(min(n, 20))
	if err != nil {
		b.Fatal(err)
	}
	end()
	base = runtime.NumGoroutine()
	var heap, live, stack, alloc, goroutines float64
	for b.Loop() {
		before := memNow()
		end, err := open(n)
		if err != nil {
			b.Fatal(err)
		}
		after := memNow()
		if prefix := os.Getenv("OPENSTREAMS_PROFILE"); prefix != "" {
			writeProfiles(b, prefix+"."+target)
		}
		end()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap += float64(after.heap-before.heap) / float64(n)
		live += float64(after.live-before.live) / float64(n)
		alloc += float64(int64(ms.TotalAlloc)-before.total) / float64(n)
		stack += float64(after.stack-before.stack) / float64(n)
		goroutines += float64(after.goroutines-before.goroutines) / float64(n)
	}
	ops := float64(b.N)
	b.ReportMetric(heap/ops, "heap-B/stream")
	b.ReportMetric(live/ops, "live-B/stream")
	b.ReportMetric(alloc/ops, "alloc-B/stream")
	b.ReportMetric(stack/ops, "stack-B/stream")
	b.ReportMetric((heap+stack)/ops, "B/stream")
	b.ReportMetric(goroutines/ops, "goroutines/stream")
}

// benchTarget starts what a stream benchmark measures in front of the mock upstream: "direct" (nothing:
// the mock itself), "relay" (a bare httputil.ReverseProxy flushing every frame, keeping idle
// connections) or "chatd" (on a SQLite file, with the HTTP client its providers get). It returns where
// to send a stream's request and its body, and the transports whose idle connections a round may close.
// Everything it starts is closed when the benchmark ends, before the mock.
func benchTarget(b *testing.B, target string, mock *httptest.Server, idle int) (addr, path, body string, transports []*http.Transport) {
	addr, path, body = mock.Listener.Addr().String(), "/v1/chat/completions", `{"model":"m","stream":true}`
	switch target {
	case "relay":
		u, _ := url.Parse(mock.URL)
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = idle, idle
		rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u) }, FlushInterval: -1, Transport: tr}
		srv := httptest.NewServer(rp)
		b.Cleanup(srv.Close)
		return srv.Listener.Addr().String(), path, body, []*http.Transport{tr}
	case "chatd":
		db, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "chatd.db"), sqlite.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		hc := llmupstream.NewHTTPClient(llmupstream.Timeouts{}) // the client chatd's providers get
		client, err := openai.New(openai.Options{BaseURL: mock.URL + "/v1", HTTPClient: hc})
		if err != nil {
			b.Fatal(err)
		}
		m := metrics.New()
		svc := chat.New(chat.Options{TitleModel: chat.TitleNone, Store: db, Models: oneModel{client}, DefaultModel: "openai/gpt-4o-mini", Metrics: m})
		b.Cleanup(func() { svc.Close(context.Background()) })
		srv := httptest.NewServer(httpapi.New(httpapi.Options{Chat: svc, Store: db, Metrics: m}))
		b.Cleanup(srv.Close)
		return srv.Listener.Addr().String(), "/v1/chat/stream", `{"message":"hi"}`, []*http.Transport{hc.Transport.(*http.Transport)}
	}
	return addr, path, body, nil
}

type memSample struct {
	heap, live, stack, total int64
	goroutines               int
}

// writeProfiles writes the goroutine profile (text) and the heap profile to prefix.goroutine and prefix.heap.
func writeProfiles(b *testing.B, prefix string) {
	for _, p := range []struct {
		name  string
		debug int
	}{{"goroutine", 1}, {"heap", 0}} {
		f, err := os.Create(prefix + "." + p.name)
		if err != nil {
			b.Fatal(err)
		}
		err = pprof.Lookup(p.name).WriteTo(f, p.debug)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// settle waits until no more than n goroutines run: those of the streams just ended are gone.
func settle(b *testing.B, n int) {
	for start := time.Now(); runtime.NumGoroutine() > n; time.Sleep(time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			b.Fatalf("%d goroutines still run, want at most %d", runtime.NumGoroutine(), n)
		}
	}
}

// memNow is the heap's spans in use (what RSS sees, with their free slots), the bytes of its live
// objects, and the stacks, after a full collection; a second one lets finalizers' frees
// and the sweeper settle.
func memNow() memSample {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return memSample{heap: int64(ms.HeapInuse), live: int64(ms.HeapAlloc), total: int64(ms.TotalAlloc), stack: int64(ms.StackInuse), goroutines: runtime.NumGoroutine()}
}

// openHeld opens n streams with req on addr, with up holding them, and returns once every client has
// read its tokens; end lets the streams finish and reads each to its end.
func openHeld(up *heldUpstream, addr, req string, n int) (end func(), err error) {
	up.hold()
	conns := make([]net.Conn, 0, n)
	end = func() {
		up.let()
		for _, c := range conns {
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			io.Copy(io.Discard, c)
			c.Close()
		}
	}
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			end()
			return nil, err
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, req); err != nil {
			end()
			return nil, err
		}
	}
	buf := make([]byte, 4096)
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if err := readTokens(c, buf, up.tokens); err != nil {
			end()
			return nil, fmt.Errorf("stream %d: %w", i, err)
		}
	}
	return end, nil
}

// readTokens reads from c until it has seen the marker want times.
func readTokens(c net.Conn, buf []byte, want int) error {
	seen, carry := 0, 0
	for seen < want {
		k, err := c.Read(buf[carry:])
		if err != nil {
			return fmt.Errorf("after %d tokens: %w", seen, err)
		}
		data := buf[:carry+k]
		seen += bytes.Count(data, []byte(streamMarker))
		// Keep the tail that may start a marker the next read completes (no suffix of the marker is a
		// prefix of it, so a counted one is never counted again).
		carry = min(len(streamMarker)-1, len(data))
		copy(buf, data[len(data)-carry:])
	}
	return nil
}
