package openai

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"chatd/internal/llm"
)

// TestStreamsReuseConnections: streams that ran at once leave their connections to the next ones, so a
// burst of chats does not dial (or, over TLS, shake hands) again for each beyond the first two.
func TestStreamsReuseConnections(t *testing.T) {
	const streams = 8
	var dialed atomic.Int32
	var arrived sync.WaitGroup
	arrived.Add(streams)
	var round atomic.Pointer[sync.WaitGroup]
	round.Store(&arrived)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wg := round.Load()
		wg.Done()
		wg.Wait() // every stream of the round is open at once
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n" +
			"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialed.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c, err := New(Options{BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	req := &llm.Request{Model: "m", Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "hi")}}
	for r := range 2 {
		if r > 0 {
			next := &sync.WaitGroup{}
			next.Add(streams)
			round.Store(next)
		}
		var done sync.WaitGroup
		for range streams {
			done.Go(func() {
				text := ""
				for ev, err := range c.Stream(t.Context(), req) {
					if err != nil {
						t.Error(err)
						return
					}
					if ev.Kind == llm.EventText {
						text += ev.Text
					}
				}
				if text != "hi" {
					t.Errorf("streamed %q", text)
				}
			})
		}
		done.Wait()
	}
	if n := dialed.Load(); n != streams {
		t.Errorf("%d connections for two rounds of %d streams at once, want %d", n, streams, streams)
	}
}
