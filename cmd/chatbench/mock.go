package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// mock is an OpenAI Chat Completions upstream that streams stamped tokens: every content chunk's text
// is ⟦T<unix-nanos>⟧ with the time it was written, so a client that receives the text through chatd or
// the relay computes each token's one-way delay on the same clock. Chunks go out on deadlines
// (start + ttft + k·interval), so the mock's own cost does not pile up into later tokens.
type mock struct {
	tokens   int
	interval time.Duration
	ttft     time.Duration
	seq      atomic.Uint64
}

func (m *mock) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", m.chat)
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model","created":0,"owned_by":"chatbench"}]}`+"\n")
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	// An OTLP/HTTP trace receiver that drops what it gets (chatbench -traced): an empty protobuf
	// ExportTraceServiceResponse is zero bytes.
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	})
	return mux
}

// chat answers a completion request. It reads the body but does not decode it: a continuing session's
// request holds its whole history (a megabyte at 10,000 records), and decoding it would put the mock's
// cost into chatd's time to first token. chatd and chatbench both encode with encoding/json, which
// writes "stream":true without spaces; text inside a message would have its quotes escaped.
func (m *mock) chat(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	body, err := io.ReadAll(io.LimitReader(r.Body, 256<<20))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	a := answer{
		mock:   m,
		id:     "chatcmpl-bench" + strconv.FormatUint(m.seq.Add(1), 10),
		start:  start,
		prompt: len(body) / 4,
		usage:  bytes.Contains(body, []byte(`"include_usage":true`)),
	}
	if bytes.Contains(body, []byte(`"stream":true`)) {
		a.stream(r.Context(), w)
		return
	}
	a.complete(r.Context(), w)
}

type answer struct {
	*mock
	id     string
	start  time.Time
	prompt int  // tokens, roughly
	usage  bool // stream_options.include_usage
}

// wait sleeps until the k-th chunk's deadline; false when the client went away.
func (a *answer) wait(ctx context.Context, timer *time.Timer, k int) bool {
	if d := time.Until(a.start.Add(a.ttft + time.Duration(k)*a.interval)); d > 0 {
		timer.Reset(d)
		select {
		case <-timer.C:
		case <-ctx.Done():
			return false
		}
	}
	return ctx.Err() == nil
}

func (a *answer) stream(ctx context.Context, w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	head := `data: {"id":"` + a.id + `","object":"chat.completion.chunk","created":` +
		strconv.FormatInt(a.start.Unix(), 10) + `,"model":"m","choices":[`
	tail := "}\n\n"
	if a.usage {
		tail = `,"usage":null}` + "\n\n"
	}
	send := func(b []byte) bool {
		_, err := w.Write(b)
		return err == nil && rc.Flush() == nil
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	buf := make([]byte, 0, 512)
	for k := range a.tokens {
		if !a.wait(ctx, timer, k) {
			return
		}
		buf = buf[:0]
		if k == 0 { // the role chunk goes out with the first content chunk, as the real API sends it
			buf = append(buf, head...)
			buf = append(buf, `{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`...)
			buf = append(buf, tail...)
		}
		buf = append(buf, head...)
		buf = append(buf, `{"index":0,"delta":{"content":"`...)
		buf = appendMarker(buf, time.Now())
		buf = append(buf, `"},"finish_reason":null}]`...)
		buf = append(buf, tail...)
		if !send(buf) {
			return
		}
	}
	buf = append(buf[:0], head...)
	buf = append(buf, `{"index":0,"delta":{},"finish_reason":"stop"}]`...)
	buf = append(buf, tail...)
	if a.usage {
		buf = append(buf, head...)
		buf = fmt.Appendf(buf, `],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n",
			a.prompt, a.tokens, a.prompt+a.tokens)
	}
	buf = append(buf, "data: [DONE]\n\n"...)
	send(buf)
}

// complete answers a request that did not ask for a stream, once the whole answer would have been made.
func (a *answer) complete(ctx context.Context, w http.ResponseWriter) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	if a.tokens > 0 && !a.wait(ctx, timer, a.tokens-1) {
		return
	}
	var text []byte
	now := time.Now()
	for range a.tokens {
		text = appendMarker(text, now)
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":%q,"object":"chat.completion","created":%d,"model":"m","choices":[{"index":0,`+
		`"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],`+
		`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`+"\n",
		a.id, a.start.Unix(), text, a.prompt, a.tokens, a.prompt+a.tokens)
}
