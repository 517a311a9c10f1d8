package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// serveMain runs one of the servers chatbench measures, in a process of its own so that its RSS is its
// own: chatbench re-executes itself with "-serve mock" or "-serve relay". It prints the address it
// listens on as its first line, and serves until SIGTERM or SIGINT.
func serveMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "chatbench: -serve needs mock or relay")
		return 2
	}
	fs := flag.NewFlagSet("chatbench -serve "+args[0], flag.ContinueOnError)
	tokens := fs.Int("tokens", 32, "content chunks per answer")
	interval := fs.Duration("interval", 20*time.Millisecond, "time between chunks")
	ttft := fs.Duration("ttft", 0, "time before the first chunk")
	upstream := fs.String("upstream", "", "the relay's upstream base URL")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	var h http.Handler
	switch args[0] {
	case "mock":
		h = (&mock{tokens: *tokens, interval: *interval, ttft: *ttft}).routes()
	case "relay":
		u, err := url.Parse(*upstream)
		if err != nil || u.Host == "" {
			fmt.Fprintf(os.Stderr, "chatbench: -serve relay: -upstream %q is not a URL such as http://127.0.0.1:8081\n", *upstream)
			return 2
		}
		h = relay(u)
	default:
		fmt.Fprintf(os.Stderr, "chatbench: -serve %q: want mock or relay\n", args[0])
		return 2
	}
	if err := listenAndServe(h); err != nil {
		fmt.Fprintf(os.Stderr, "chatbench: -serve %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// relay is the baseline chatd is held to: httputil.ReverseProxy, flushing every write, and nothing else.
// It reads the small request body before proxying: Go's HTTP/1 server closes an unread request body
// once the response has started, and the transport then drops the upstream connection mid-stream
// (golang/go#40747).
func relay(upstream *url.URL) http.Handler {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost, tr.MaxConnsPerHost = 0, 4096, 0
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(upstream) },
		FlushInterval: -1,
		Transport:     tr,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		rp.ServeHTTP(w, r)
	})
}

func listenAndServe(h http.Handler) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	context.AfterFunc(ctx, func() { srv.Close() })
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
