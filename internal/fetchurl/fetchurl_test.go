package fetchurl

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"chatd/internal/tool"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// allowLoopback lets the tests reach their httptest servers on 127.0.0.1.
var allowLoopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}

// call runs tl with args encoded as JSON.
func call(t *testing.T, tl tool.Tool, args map[string]any) (tool.Result, error) {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	return tl.Call(t.Context(), raw)
}

// serve starts a server answering every request with contentType and body.
func serve(t *testing.T, status int, contentType, body string) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		} else {
			w.Header()["Content-Type"] = nil // no sniffing by the server
		}
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(s.Close)
	return s
}

// fetch calls fetch_url on url with the loopback allowed.
func fetch(t *testing.T, opts Options, args map[string]any) tool.Result {
	t.Helper()
	opts.Allow = allowLoopback
	res, err := call(t, New(opts), args)
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	return res
}

func payload(t *testing.T, res tool.Result) report {
	t.Helper()
	var r report
	if err := json.Unmarshal(res.Payload, &r); err != nil {
		t.Fatalf("payload %s: %v", res.Payload, err)
	}
	return r
}

func TestInfo(t *testing.T) {
	r := tool.NewRegistry(tool.Options{})
	defer r.Close()
	if err := r.Register(New(Options{MaxBytes: 5000})); err != nil {
		t.Fatalf("Register: %v", err)
	}
	info, _ := r.Info("fetch_url")
	if info.Source != "builtin" || !info.ReadOnly || info.Timeout != defaultTimeout+5*time.Second {
		t.Errorf("Info = %+v", info)
	}
	if !strings.Contains(string(info.InputSchema), "default and maximum 5000") {
		t.Errorf("schema does not state the maximum: %s", info.InputSchema)
	}
	out := r.Call(t.Context(), "fetch_url", json.RawMessage(`{}`))
	if out.Success || !strings.Contains(out.Content, "url") {
		t.Errorf("a call without url = %+v, want a failure naming url", out)
	}
	out = r.Call(t.Context(), "fetch_url", json.RawMessage(`{"url":"http://127.1/"}`))
	want := "refused: 127.1 is 127.0.0.1, an internal address (loopback)" + tail
	if out.Success || out.Content != want {
		t.Errorf("Call through the registry = %+v, want the refusal %q", out, want)
	}
}

func TestFetchHTML(t *testing.T) {
	s := serve(t, http.StatusOK, "text/html; charset=utf-8", `<!doctype html>
<html><head><title>Caf&eacute; &amp; Co</title><meta name="description" content="metadata">
<style>body { color: red }</style><script>var secret = 1;</script></head>
<body><h1>Menu</h1><p>Coffee &lt;hot&gt; &mdash; <a href="/coffee">details</a></p>
<noscript>enable JS</noscript><script>alert("x")</script><template><p>later</p></template>
<svg><title>icon</title><text>drawn</text></svg><ul><li>one</li><li>two</li></ul></body></html>`)
	res := fetch(t, Options{}, map[string]any{"url": s.URL})
	want := "URL: " + s.URL + " | Status: 200 OK | Content-Type: text/html\n\n" +
		"Café & Co\n\n# Menu\n\nCoffee <hot> — details (" + s.URL + "/coffee)\n\n- one\n- two"
	if diff := cmp.Diff(want, res.Content); diff != "" || res.IsError {
		t.Errorf("IsError %v, content (-want +got):\n%s", res.IsError, diff)
	}
	got := payload(t, res)
	if got.URL != s.URL || got.Status != 200 || got.ContentType != "text/html" || got.Truncated || got.Bytes == 0 {
		t.Errorf("payload = %+v", got)
	}
}

func TestFetchJSON(t *testing.T) {
	body := `{"name": "chatd", "tags": ["a", "b"], "text": "d\u00e9j\u00e0 vu"}`
	s := serve(t, http.StatusOK, "application/json", body)
	res := fetch(t, Options{}, map[string]any{"url": s.URL + "/api?q=1"})
	want := "URL: " + s.URL + "/api?q=1 | Status: 200 OK | Content-Type: application/json\n\n" + body
	if diff := cmp.Diff(want, res.Content); diff != "" || res.IsError {
		t.Errorf("IsError %v, content (-want +got):\n%s", res.IsError, diff)
	}
	wantPayload := report{URL: s.URL + "/api?q=1", Status: 200, ContentType: "application/json", Bytes: len(body)}
	if diff := cmp.Diff(wantPayload, payload(t, res)); diff != "" {
		t.Errorf("payload (-want +got):\n%s", diff)
	}
}

func TestFetchText(t *testing.T) {
	tests := []struct {
		name        string
		contentType string
		body        string
		wantType    string
		want        string
	}{
		{"plain", "text/plain", "a  b\n\tc\n", "text/plain", "a  b\n\tc\n"},
		{"xml", "application/atom+xml", "<feed><title>x</title></feed>", "application/atom+xml", "<feed><title>x</title></feed>"},
		{"invalid UTF-8", "text/plain; charset=utf-8", "ok \xff\xfe end", "text/plain", "ok \uFFFD end"},
		{"Latin-1", "text/plain; charset=ISO-8859-1", "caf\xe9", "text/plain", "café"},
		{"HTML in windows-1252 by meta", "text/html", `<meta charset="windows-1252"><p>caf` + "\xe9 \x80", "text/html", "café €"},
		{"sniffed", "", "just some text", "text/plain", "just some text"},
		{"byte order mark", "text/plain", "\ufeffhello", "text/plain", "hello"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := serve(t, http.StatusOK, tt.contentType, tt.body)
			res := fetch(t, Options{}, map[string]any{"url": s.URL})
			want := "URL: " + s.URL + " | Status: 200 OK | Content-Type: " + tt.wantType + "\n\n" + tt.want
			if diff := cmp.Diff(want, res.Content); diff != "" || res.IsError {
				t.Errorf("IsError %v, content (-want +got):\n%s", res.IsError, diff)
			}
		})
	}
}

func TestFetchTruncated(t *testing.T) {
	body := strings.Repeat("0123456789", 100)
	s := serve(t, http.StatusOK, "text/plain", body)
	tests := []struct {
		name     string
		maxBytes int64 // Options
		asked    any   // the max_bytes argument; nil for none
		want     int
	}{
		{"options", 100, nil, 100},
		{"asked less", 100, 25, 25},
		{"asked more than allowed", 100, 5000, 100},
		{"whole body", 1000, nil, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := map[string]any{"url": s.URL}
			if tt.asked != nil {
				args["max_bytes"] = tt.asked
			}
			res := fetch(t, Options{MaxBytes: tt.maxBytes}, args)
			header := "URL: " + s.URL + " | Status: 200 OK | Content-Type: text/plain\n\n"
			want := header + body
			wantPayload := report{URL: s.URL, Status: 200, ContentType: "text/plain", Bytes: len(body)}
			if tt.want >= 0 {
				want = fmt.Sprintf("%s%s\n\n[Cut: only the first %d bytes of the body were read.]", header, body[:tt.want], tt.want)
				wantPayload.Bytes, wantPayload.Truncated = tt.want, true
			}
			if diff := cmp.Diff(want, res.Content); diff != "" {
				t.Errorf("content (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantPayload, payload(t, res)); diff != "" {
				t.Errorf("payload (-want +got):\n%s", diff)
			}
		})
	}
}

// stall holds a request until the client leaves, or for 5s: a fetch whose
// timeout does not fire then gets an answer and fails the test, not hangs.
func stall(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(5 * time.Second):
	}
}

func TestFetchTimeout(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"no headers", func(_ http.ResponseWriter, r *http.Request) {
			stall(r)
		}},
		{"a body that never ends", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, "start")
			w.(http.Flusher).Flush()
			stall(r)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := httptest.NewServer(tt.handler)
			defer s.Close()
			_, err := call(t, New(Options{Timeout: 200 * time.Millisecond, Allow: allowLoopback}), map[string]any{"url": s.URL})
			want := "fetch_url: " + s.URL + " did not answer in full within 200ms; try again later, or another page"
			if err == nil || err.Error() != want {
				t.Errorf("Call = %v, want %s", err, want)
			}
		})
	}
}

func TestFetchErrorStatus(t *testing.T) {
	s := serve(t, http.StatusNotFound, "text/html", `<title>Not here</title><h1>404</h1><p>`+strings.Repeat("gone ", 1000)+`</p>`)
	res := fetch(t, Options{}, map[string]any{"url": s.URL + "/missing"})
	if !res.IsError {
		t.Error("IsError = false for a 404")
	}
	prefix := "URL: " + s.URL + "/missing | Status: 404 Not Found | Content-Type: text/html\n\n" +
		"The server answered 404 Not Found. The body begins:\n\nNot here\n\n# 404\n\ngone gone"
	if !strings.HasPrefix(res.Content, prefix) || !strings.HasSuffix(res.Content, "…") || len(res.Content) > len(prefix)+errorTextLimit {
		t.Errorf("content = %q, want %q… cut at about %d bytes", res.Content, prefix, errorTextLimit)
	}
	if got := payload(t, res); got.Status != 404 {
		t.Errorf("payload status = %d, want 404", got.Status)
	}
}

func TestFetchBinaryRefused(t *testing.T) {
	for _, ct := range []string{"image/png", "application/pdf", "application/octet-stream", "video/mp4", "application/zip"} {
		t.Run(ct, func(t *testing.T) {
			s := serve(t, http.StatusOK, ct, "\x89PNG\r\n\x1a\n binary")
			res := fetch(t, Options{}, map[string]any{"url": s.URL})
			want := "URL: " + s.URL + " | Status: 200 OK | Content-Type: " + ct + "\n\n" +
				"refused: the body is " + ct + ", which fetch_url cannot read; it reads HTML, text, JSON and XML only."
			if diff := cmp.Diff(want, res.Content); diff != "" || !res.IsError {
				t.Errorf("IsError %v, content (-want +got):\n%s", res.IsError, diff)
			}
			if got := payload(t, res); got.Bytes != 0 {
				t.Errorf("read %d bytes of a binary body", got.Bytes)
			}
		})
	}
	t.Run("sniffed", func(t *testing.T) {
		s := serve(t, http.StatusOK, "", "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
		res := fetch(t, Options{}, map[string]any{"url": s.URL})
		if !res.IsError || !strings.Contains(res.Content, "refused: the body is image/png") {
			t.Errorf("IsError %v, content %q, want the refusal of image/png", res.IsError, res.Content)
		}
	})
}

func TestBadURLRefused(t *testing.T) {
	tests := []struct {
		url  string
		want string
	}{
		{"file:///etc/passwd", "refused: file: URLs are not fetched; fetch_url reads only http:// and https:// URLs"},
		{"gopher://example.com/", "refused: gopher: URLs are not fetched; fetch_url reads only http:// and https:// URLs"},
		{"ftp://example.com/file", "refused: ftp: URLs are not fetched; fetch_url reads only http:// and https:// URLs"},
		{"javascript:alert(1)", "refused: javascript: URLs are not fetched; fetch_url reads only http:// and https:// URLs"},
		{"example.com/page", `refused: "example.com/page" has no scheme; give an absolute URL starting with http:// or https://`},
		{"http://user:secret@example.com/", "refused: the URL holds a user name or password (user@host); fetch_url does not send credentials"},
		{"http://@example.com/", "refused: the URL holds a user name or password (user@host); fetch_url does not send credentials"},
		{"http:///path", `refused: "http:///path" has no host`},
		{"http:example.com", `refused: "http:example.com" has no host`},
		{"http://1.2.3.256/", "refused: 1.2.3.256 is not a valid IPv4 address or host name"},
		{"http://0x08080808/", "refused: 0x08080808 is an IPv4 address in a non-standard notation; write it as 8.8.8.8"},
		{"http://exa mple.com/", `fetch_url: parse "http://exa mple.com/": invalid character " " in host name; give an absolute URL such as https://example.com/page`},
	}
	f := New(Options{})
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			_, err := call(t, f, map[string]any{"url": tt.url})
			if err == nil || err.Error() != tt.want {
				t.Errorf("Call(%s):\n got %v\nwant %s", tt.url, err, tt.want)
			}
		})
	}
}

func TestRedirects(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hop/{n}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("n") == "0" {
			fmt.Fprint(w, "arrived")
			return
		}
		var n int
		fmt.Sscan(r.PathValue("n"), &n)
		http.Redirect(w, r, fmt.Sprintf("/hop/%d", n-1), http.StatusFound)
	})
	mux.HandleFunc("GET /to-file", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
	})
	s := httptest.NewServer(mux)
	defer s.Close()

	res := fetch(t, Options{MaxRedirects: 3}, map[string]any{"url": s.URL + "/hop/3"})
	want := "URL: " + s.URL + "/hop/0 | Status: 200 OK | Content-Type: text/plain\n\narrived"
	if res.Content != want {
		t.Errorf("3 redirects: content %q, want %q", res.Content, want)
	}

	f := New(Options{MaxRedirects: 3, Allow: allowLoopback})
	_, err := call(t, f, map[string]any{"url": s.URL + "/hop/4"})
	wantErr := "fetch_url: get " + s.URL + "/hop/4: redirect to " + s.URL + "/hop/0: refused: more than 3 redirects"
	if err == nil || err.Error() != wantErr {
		t.Errorf("4 redirects:\n got %v\nwant %s", err, wantErr)
	}

	_, err = call(t, f, map[string]any{"url": s.URL + "/to-file"})
	wantErr = "fetch_url: get " + s.URL + "/to-file: redirect to file:///etc/passwd: refused: file: URLs are not fetched; fetch_url reads only http:// and https:// URLs"
	if err == nil || err.Error() != wantErr {
		t.Errorf("redirect to file:\n got %v\nwant %s", err, wantErr)
	}
}

func TestNoSuchHost(t *testing.T) {
	f := New(Options{Resolver: fakeDNS(nil)})
	_, err := call(t, f, map[string]any{"url": "https://nowhere.example/"})
	want := "fetch_url: no such host nowhere.example; check the URL"
	if err == nil || err.Error() != want {
		t.Errorf("Call = %v, want %s", err, want)
	}
}
