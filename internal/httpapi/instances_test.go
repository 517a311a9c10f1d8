package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"chatd/internal/auth"
	"chatd/internal/chat"
	"chatd/internal/httpapi"
	"chatd/internal/llm/llmtest"
	"chatd/internal/store"
	"chatd/internal/store/postgres"
	"chatd/internal/store/postgres/pgtest"
)

// TestRequestsPerMinuteAcrossInstances: two chatd on one PostgreSQL database, wired as cmd/chatd wires
// them (auth.NewLimiter on the store), share a caller's requests per minute. Under a limit of 1 a
// minute — so that no run of the test, however slow, sees the next one come due — exactly one of many
// requests sent to both at once passes; the others get the answer of one instance alone: 429
// requests_per_minute with a Retry-After within the minute.
func TestRequestsPerMinuteAcrossInstances(t *testing.T) {
	dsn := pgtest.NewSchema(t)
	upstream := llmtest.NewServer(t)
	var srvs []*httptest.Server
	var a *auth.Authenticator
	for i := range 2 {
		db, err := postgres.Open(t.Context(), dsn, postgres.Options{MaxConns: 4, Instance: fmt.Sprint("instance-", i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		if a, err = auth.New(t.Context(), auth.Options{Store: db, DefaultLimits: store.Limits{RequestsPerMinute: 1}}); err != nil {
			t.Fatal(err)
		}
		c, tools := newChat(t, db, upstream, nil, chat.Options{})
		srv := httptest.NewServer(httpapi.New(httpapi.Options{Chat: c, Store: db, Tools: tools, Auth: a,
			Limiter: auth.NewLimiter(db, nil)}))
		srvs = append(srvs, srv)
		t.Cleanup(func() {
			srv.Close()
			closeChat(t, c, tools)
		})
	}
	key, _, err := a.CreateKey(t.Context(), auth.KeySpec{User: "alice"})
	if err != nil {
		t.Fatal(err)
	}

	const requests = 20
	answers := make([]limAnswer, requests)
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(t.Context(), "GET", srvs[i%2].URL+"/v1/sessions", nil)
			if err != nil {
				t.Error(err)
				return
			}
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			if answers[i], err = readAnswer(resp); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	passed := 0
	for i, a := range answers {
		if a.status == http.StatusOK {
			passed++
			continue
		}
		checkRefused(t, fmt.Sprintf("request %d", i), a, auth.LimitRequests, "")
		if n, _ := strconv.Atoi(a.retryAfter); n > 60 {
			t.Errorf("request %d: Retry-After %d, want at most the minute", i, n)
		}
	}
	if passed != 1 {
		t.Fatalf("%d of %d requests to two instances passed a limit of 1 a minute, want 1", passed, requests)
	}
}

// TestDiagnosticsAcrossInstances: a run's diagnostics, stored with it in PostgreSQL, are read on
// another instance than the one that ran it: each call's request the bytes the upstream received.
func TestDiagnosticsAcrossInstances(t *testing.T) {
	dsn := pgtest.NewSchema(t)
	upstream := llmtest.NewServer(t, twoClocks, answer)
	var srvs []*httptest.Server
	for i := range 2 {
		db, err := postgres.Open(t.Context(), dsn, postgres.Options{MaxConns: 4, Instance: fmt.Sprint("instance-", i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		c, tools := newChat(t, db, upstream, fixedNow, chat.Options{})
		srv := httptest.NewServer(httpapi.New(httpapi.Options{Chat: c, Store: db, Tools: tools}))
		srvs = append(srvs, srv)
		t.Cleanup(func() {
			srv.Close()
			closeChat(t, c, tools)
		})
	}
	resp, err := http.Post(srvs[0].URL+"/v1/chat", "application/json", strings.NewReader(`{"message":"What time is it in Paris and Tokyo?"}`))
	if err != nil {
		t.Fatal(err)
	}
	var run struct {
		RunID  string `json:"run_id"`
		Status string
	}
	err = json.NewDecoder(resp.Body).Decode(&run)
	resp.Body.Close()
	if err != nil || run.Status != "completed" {
		t.Fatalf("the run: %+v, %v", run, err)
	}
	sent := upstream.Requests()
	if len(sent) != 2 {
		t.Fatalf("%d upstream requests", len(sent))
	}
	for n := 1; n <= 2; n++ {
		resp, err := http.Get(fmt.Sprintf("%s/v1/runs/%s/diagnostics?call=%d", srvs[1].URL, run.RunID, n))
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Call    int
			Request json.RawMessage
			Calls   []json.RawMessage
		}
		err = json.NewDecoder(resp.Body).Decode(&d)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("call %d on the other instance: %d %v", n, resp.StatusCode, err)
		}
		if d.Call != n || len(d.Calls) != 2 || string(d.Request) != string(sent[n-1].Raw) {
			t.Errorf("call %d on the other instance: call %d of %d, request %s\nwant %s", n, d.Call, len(d.Calls), d.Request, sent[n-1].Raw)
		}
	}
}
