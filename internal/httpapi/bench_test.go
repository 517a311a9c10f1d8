package httpapi_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"chatd/internal/chat"
	"chatd/internal/httpapi"
	"chatd/internal/llm"
	"chatd/internal/llm/openai"
	"chatd/internal/metrics"
	"chatd/internal/store/sqlite"
	"chatd/internal/tracing"
)

// A text chunk as OpenAI sends it, byte for byte in shape.
const benchChunk = `data: {"id":"chatcmpl-CVz1aXyQ8k2b7Lr0TnP4mWqFhJd3E","object":"chat.completion.chunk","created":1763710000,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_b705f0c291","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n"

const benchEnd = `data: {"id":"chatcmpl-CVz1aXyQ8k2b7Lr0TnP4mWqFhJd3E","object":"chat.completion.chunk","created":1763710000,"model":"gpt-4o-mini-2024-07-18","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}` + "\n\n" +
	`data: {"id":"chatcmpl-CVz1aXyQ8k2b7Lr0TnP4mWqFhJd3E","object":"chat.completion.chunk","created":1763710000,"model":"gpt-4o-mini-2024-07-18","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}` + "\n\ndata: [DONE]\n\n"

var benchChunkBytes, benchEndBytes = []byte(benchChunk), []byte(benchEnd)

// chunkReader yields n text chunks, then the end of the stream, without holding them all in memory.
type chunkReader struct {
	n    int
	cur  []byte
	tail bool
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		switch {
		case r.n > 0:
			r.n--
			r.cur = benchChunkBytes
		case !r.tail:
			r.tail, r.cur = true, benchEndBytes
		default:
			return 0, io.EOF
		}
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// upstream answers every request with a stream of n chunks, in memory: the benchmark measures chatd,
// not the loopback.
type upstream struct{ n int }

func (u upstream) RoundTrip(req *http.Request) (*http.Response, error) {
	req.Body.Close()
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(&chunkReader{n: u.n}), Request: req}, nil
}

type oneModel struct{ p llm.Provider }

func (m oneModel) Resolve(string) (llm.Provider, string, error) { return m.p, "gpt-4o-mini", nil }

// discard is a client that reads instantly: a ResponseWriter that flushes and drops the bytes, and
// takes write deadlines as a server's connection does.
type discard struct {
	h     http.Header
	bytes int
}

func (d *discard) Header() http.Header              { return d.h }
func (d *discard) WriteHeader(int)                  {}
func (d *discard) Write(p []byte) (int, error)      { d.bytes += len(p); return len(p), nil }
func (d *discard) Flush()                           {}
func (d *discard) SetWriteDeadline(time.Time) error { return nil }

// BenchmarkStreamTextChunk measures one upstream text chunk travelling through chatd to the client:
// SSE decoding, the OpenAI adapter, the agent loop, the run's event log and the SSE encoder. b.N chunks go
// through one run; the run's fixed cost (storing the message and the answer) is spread over them. The
// durable event log is on (log=on, a SQLite file with synchronous=FULL, as chatd runs) or off (log=off):
// the difference is what writing every event to disk costs a token.
//
// The observed variants count into metrics, and trace into spans kept in memory (a run's span, a model
// call's, the request's: none per token), with the log off to keep the disk's noise out.
func BenchmarkStreamTextChunk(b *testing.B) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(b.Context())
	for _, bc := range []struct {
		name    string
		flush   time.Duration
		metrics bool
		tracing *tracing.Tracing
	}{{"log=on", 0, false, nil}, {"log=off", -1, false, nil}, {"log=off/metrics", -1, true, nil},
		{"log=off/metrics+tracing", -1, true, tracing.New(tp, false)}} {
		b.Run(bc.name, func(b *testing.B) {
			var m *metrics.Metrics
			if bc.metrics {
				m = metrics.New()
			}
			benchmarkStream(b, bc.flush, m, bc.tracing)
		})
	}
}

func benchmarkStream(b *testing.B, flush time.Duration, m *metrics.Metrics, tr *tracing.Tracing) {
	db, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "chatd.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	client, err := openai.New(openai.Options{BaseURL: "http://upstream.invalid/v1", HTTPClient: &http.Client{Transport: upstream{n: b.N}}})
	if err != nil {
		b.Fatal(err)
	}
	svc := chat.New(chat.Options{TitleModel: chat.TitleNone, Store: db, Models: oneModel{client}, DefaultModel: "openai/gpt-4o-mini",
		FlushInterval: flush, Metrics: m, Tracing: tr})
	defer svc.Close(b.Context())
	h := httpapi.New(httpapi.Options{Chat: svc, Store: db, Metrics: m, Tracing: tr})
	w := &discard{h: http.Header{}}
	req := httptest.NewRequestWithContext(b.Context(), "POST", "http://localhost/v1/chat/stream", strings.NewReader(`{"message":"hi"}`))
	req.Header.Set("Content-Type", "application/json")
	b.ReportAllocs()
	b.SetBytes(int64(len(benchChunk)))
	b.ResetTimer()
	h.ServeHTTP(w, req)
	b.StopTimer()
	if w.bytes < b.N*len(`event: text_delta`) {
		b.Fatalf("the client got %d bytes for %d chunks", w.bytes, b.N)
	}
}

// TestBenchmarkStreamsEveryChunk keeps the benchmark honest: every chunk reaches the client as a
// text_delta event.
func TestBenchmarkStreamsEveryChunk(t *testing.T) {
	db, err := sqlite.Open(t.Context(), ":memory:", sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	client, _ := openai.New(openai.Options{BaseURL: "http://upstream.invalid/v1", HTTPClient: &http.Client{Transport: upstream{n: 100}}})
	svc := chat.New(chat.Options{TitleModel: chat.TitleNone, Store: db, Models: oneModel{client}, DefaultModel: "openai/gpt-4o-mini"})
	defer svc.Close(t.Context())
	rec := httptest.NewRecorder()
	req := httptest.NewRequestWithContext(t.Context(), "POST", "http://localhost/v1/chat/stream", strings.NewReader(`{"message":"hi"}`))
	req.Header.Set("Content-Type", "application/json")
	httpapi.New(httpapi.Options{Chat: svc, Store: db}).ServeHTTP(rec, req)
	body := rec.Body.Bytes()
	if n := bytes.Count(body, []byte("event: text_delta\ndata: {\"text\":\" token\"}\n\n")); n != 100 {
		t.Fatalf("%d text_delta events, want 100", n)
	}
	if !bytes.HasSuffix(body, []byte("event: done\ndata: {\"status\":\"completed\"}\n\n")) {
		t.Fatalf("stream does not end with done: %s", body[max(0, len(body)-300):])
	}
}

// calledUpstream answers every request with a short stream, as upstream does, and first records when
// the request reached it.
type calledUpstream struct{ called chan time.Time }

func (u calledUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	u.called <- time.Now()
	return upstream{n: 1}.RoundTrip(req)
}

// BenchmarkTimeToModelCall measures a new chat's send, from the request reaching chatd's handler to the
// model request reaching the upstream (an in-memory transport): what chatd adds to the first token
// before the model is asked, its commit aside (the first message of a new session goes to the model
// while it is stored). The durable event log is on, on a SQLite file, as chatd runs.
func BenchmarkTimeToModelCall(b *testing.B) {
	db, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "chatd.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	up := calledUpstream{called: make(chan time.Time, 1)}
	client, err := openai.New(openai.Options{BaseURL: "http://upstream.invalid/v1", HTTPClient: &http.Client{Transport: up}})
	if err != nil {
		b.Fatal(err)
	}
	m := metrics.New()
	svc := chat.New(chat.Options{TitleModel: chat.TitleNone, Store: db, Models: oneModel{client}, DefaultModel: "openai/gpt-4o-mini", Metrics: m})
	defer svc.Close(b.Context())
	h := httpapi.New(httpapi.Options{Chat: svc, Store: db, Metrics: m})
	var total time.Duration
	b.ReportAllocs()
	for b.Loop() {
		w := &discard{h: http.Header{}}
		req := httptest.NewRequestWithContext(b.Context(), "POST", "http://localhost/v1/chat/stream", strings.NewReader(`{"message":"hi"}`))
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		h.ServeHTTP(w, req)
		total += (<-up.called).Sub(start)
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns-to-call/op")
}
