package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"chatd/internal/httpapi"
	"chatd/internal/llm/llmtest"
	"chatd/internal/store"
	"chatd/internal/webui"
)

// TestReady: /readyz answers 200 while the store answers and runs are taken, and 503 naming the check
// that failed once the service drains; /healthz stays 200 throughout.
func TestReady(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	checks := func(path string, wantStatus int) map[string]any {
		t.Helper()
		resp, raw := e.do(t, "GET", path, "")
		if resp.StatusCode != wantStatus {
			t.Fatalf("GET %s: %d %s, want %d", path, resp.StatusCode, raw, wantStatus)
		}
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatalf("GET %s: %v in %s", path, err, raw)
		}
		return body
	}
	if got := checks("/readyz", 200); got["status"] != "ok" {
		t.Errorf("ready: %v", got)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // Drain stops accepting runs, then waits for none
	e.chat.Drain(ctx)
	got := checks("/readyz", 503)
	if c, _ := got["checks"].(map[string]any); c["runs"] != "draining" || c["store"] != "ok" {
		t.Errorf("draining: %v", got)
	}
	checks("/healthz", 200)
}

// downStore is a store whose database does not answer.
type downStore struct{ store.Store }

func (downStore) Ready(context.Context) error { return errors.New("connection refused") }

// TestReadyStoreDown: a store that does not answer makes /readyz 503 without the store's error, which
// goes to the log only.
func TestReadyStoreDown(t *testing.T) {
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Store: downStore{}}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 503 || body.Checks["store"] != "unavailable" || body.Checks["runs"] != "accepting" {
		t.Errorf("store down: %d %+v", resp.StatusCode, body)
	}
}

// TestUnknownPaths: with the real web UI, its pages and files are served, an unknown path under /v1 is
// the API's JSON 404, and any other unknown path a plain 404 — not the UI's page.
func TestUnknownPaths(t *testing.T) {
	ui, err := webui.Handler()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, httpapi.Options{UI: ui})
	for path, want := range map[string]struct {
		status int
		has    string
	}{
		"/":                {200, `<div id="root">`},
		"/c/0199abc":       {200, `<div id="root">`},
		"/favicon.svg":     {200, "<svg"},
		"/healthz":         {200, `"ok"`},
		"/readyz":          {200, `"ok"`},
		"/v1/nothing":      {404, `"not_found"`},
		"/nothing":         {404, "404 page not found"},
		"/wp-login.php":    {404, "404 page not found"},
		"/c/a/b":           {404, "404 page not found"},
		"/assets/gone.js":  {404, "404 page not found"},
		"/.well-known/foo": {404, "404 page not found"},
	} {
		resp, raw := e.do(t, "GET", path, "")
		if resp.StatusCode != want.status || !strings.Contains(string(raw), want.has) {
			t.Errorf("GET %s: %d %.80q, want %d with %q", path, resp.StatusCode, raw, want.status, want.has)
		}
	}
}

// TestStreamHeaders: every SSE response tells proxies not to buffer it (X-Accel-Buffering: no, which
// nginx reads) and caches not to keep it (Cache-Control: no-cache).
func TestStreamHeaders(t *testing.T) {
	e := newEnv(t, httpapi.Options{}, llmtest.Turn{Text: "one"}, llmtest.Turn{Text: "two"})
	check := func(name string, resp *http.Response) {
		t.Helper()
		h := resp.Header
		if resp.StatusCode != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") ||
			h.Get("X-Accel-Buffering") != "no" || !strings.Contains(h.Get("Cache-Control"), "no-cache") {
			t.Errorf("%s: %d %v", name, resp.StatusCode, h)
		}
	}
	resp, _ := e.do(t, "POST", "/v1/chat/stream", `{"message":"hi"}`)
	check("POST /v1/chat/stream", resp)
	run := resp.Header.Get("X-Run-Id")
	resp, _ = e.do(t, "GET", "/v1/runs/"+run+"/events", "")
	check("GET /v1/runs/{id}/events", resp)
	resp, _ = e.do(t, "POST", "/v1/ui/chat", `{"id":"ui-1","messages":[{"id":"m1","role":"user","parts":[{"type":"text","text":"hi"}]}]}`)
	check("POST /v1/ui/chat", resp)
	resp, _ = e.do(t, "GET", "/v1/ui/chat/ui-1/stream?run="+resp.Header.Get("X-Run-Id"), "")
	check("GET /v1/ui/chat/{id}/stream", resp)
}

// countedReady is a store that counts the readiness checks it answers.
type countedReady struct {
	store.Store
	n atomic.Int64
}

func (c *countedReady) Ready(context.Context) error {
	c.n.Add(1)
	return nil
}

// TestReadyCached: a flood of /readyz asks the store once a second, not once a probe: the probe needs
// no auth, and must not tie up the store's connections.
func TestReadyCached(t *testing.T) {
	db := &countedReady{}
	clock := &stepClock{now: time.Date(2026, 11, 26, 7, 0, 0, 0, time.UTC)}
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Store: db, Now: clock.Now}))
	defer srv.Close()
	probe := func() { // on the probes' goroutines: Error, not Fatal
		resp, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			t.Error(err)
			return
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET /readyz: %d", resp.StatusCode)
		}
	}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(probe)
	}
	wg.Wait()
	if n := db.n.Load(); n != 1 {
		t.Errorf("50 probes within a second asked the store %d times, want 1", n)
	}
	clock.Advance(time.Second)
	probe()
	if n := db.n.Load(); n != 2 {
		t.Errorf("a probe a second later: the store was asked %d times in all, want 2", n)
	}
}
