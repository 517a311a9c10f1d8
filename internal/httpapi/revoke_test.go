package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"chatd/internal/auth"
	"chatd/internal/httpapi"
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
