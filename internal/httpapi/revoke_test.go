package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"chatd/internal/auth"
	"chatd/internal/chat"
	"chatd/internal/httpapi"
	"chatd/internal/llm/llmtest"
	"chatd/internal/store"
	"chatd/internal/store/sqlite"
	"chatd/internal/tool"
)

// TestSendRacingRevoke: a send authenticated before its key is revoked, whose body comes in after the
// revoke (a slow client), does not run to its end: its run, stored after the revoke stopped the key's
// runs, reads its key again and ends cancelled.
func TestSendRacingRevoke(t *testing.T) {
	e := newKeyedEnv(t, httpapi.Options{}, auth.Options{})
	admin, _ := e.key(t, auth.KeySpec{User: "root", Admin: true})
	alice, aliceID := e.key(t, auth.KeySpec{User: "alice"})

	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/v1/chat", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+alice)
	// The body goes out only once the server asks for it (100 Continue), which it does once the handler
	// reads it: past authentication. The first write returning says the key was accepted.
	req.Header.Set("Expect", "100-continue")
	tr := e.srv.Client().Transport.(*http.Transport).Clone()
	tr.ExpectContinueTimeout = patience
	defer tr.CloseIdleConnections()
	type answer struct {
		resp *http.Response
		body []byte
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := tr.RoundTrip(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		answered <- answer{resp: resp, body: body, err: err}
	}()
	if _, err := io.WriteString(pw, `{"message":"hel`); err != nil {
		t.Fatal(err)
	}
	if resp, raw := e.call(t, "DELETE", "/v1/keys/"+aliceID, "", e.bearer(admin)); resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke: %d %s", resp.StatusCode, raw)
	}
	io.WriteString(pw, `lo"}`)
	pw.Close()
	a := <-answered
	if a.err != nil {
		t.Fatal(a.err)
	}
	var got struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(a.body, &got); err != nil {
		t.Fatalf("the send's answer: %d %s: %v", a.resp.StatusCode, a.body, err)
	}
	if got.Status != "cancelled" {
		t.Fatalf("the send racing the revoke: %d %s; want its run cancelled", a.resp.StatusCode, a.body)
	}
}

// awaitingFails is a store whose AwaitingRuns fails once fail is set: a revoke cannot list what its key
// left waiting for approval.
type awaitingFails struct {
	store.Store
	fail atomic.Bool
}

func (s *awaitingFails) AwaitingRuns(ctx context.Context, keyID string) ([]store.Run, error) {
	if s.fail.Load() {
		return nil, errors.New("the database went away")
	}
	return s.Store.AwaitingRuns(ctx, keyID)
}

// TestRevokeSaysRunsNotStopped: a revoke whose key's runs could not all be asked to stop still revokes
// the key (200), and says so (runs_not_stopped); revoked again once the store answers, it does not.
func TestRevokeSaysRunsNotStopped(t *testing.T) {
	e := &keyedEnv{upstream: llmtest.NewServer(t), clock: &stepClock{now: fixedNow()}}
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "chatd.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := &awaitingFails{Store: db}
	var tools *tool.Registry
	e.chat, tools = newChat(t, st, e.upstream, fixedNow, chat.Options{})
	if e.auth, err = auth.New(t.Context(), auth.Options{Store: db, Now: e.clock.Now, Loopback: true}); err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(httpapi.New(httpapi.Options{Chat: e.chat, Store: db, Tools: tools, Auth: e.auth}))
	t.Cleanup(func() {
		e.srv.Close()
		closeChat(t, e.chat, tools)
		db.Close()
	})
	admin, _ := e.key(t, auth.KeySpec{User: "root", Admin: true})
	_, aliceID := e.key(t, auth.KeySpec{User: "alice"})

	var got struct {
		RevokedAt      *time.Time `json:"revoked_at"`
		RunsCancelled  *int       `json:"runs_cancelled"`
		RunsNotStopped string     `json:"runs_not_stopped"`
	}
	st.fail.Store(true)
	resp, raw := e.call(t, "DELETE", "/v1/keys/"+aliceID, "", e.bearer(admin))
	if err := json.Unmarshal(raw, &got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke, the store failing: %d %s (%v)", resp.StatusCode, raw, err)
	}
	if got.RevokedAt == nil || got.RunsNotStopped == "" || !strings.Contains(got.RunsNotStopped, "revoke the key again") {
		t.Errorf("revoke, the store failing: %s; want the key revoked, and runs_not_stopped saying to revoke again", raw)
	}
	st.fail.Store(false)
	got.RunsNotStopped = ""
	resp, raw = e.call(t, "DELETE", "/v1/keys/"+aliceID, "", e.bearer(admin))
	if err := json.Unmarshal(raw, &got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke again: %d %s (%v)", resp.StatusCode, raw, err)
	}
	if got.RunsNotStopped != "" || got.RunsCancelled == nil || *got.RunsCancelled != 0 {
		t.Errorf("revoke again: %s; want runs_cancelled 0, no runs_not_stopped", raw)
	}
}
