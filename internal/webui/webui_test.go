package webui

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
)

func testHandler(t *testing.T) *handler {
	t.Helper()
	js := "console.log(" + strings.Repeat(`"chatd",`, 200) + ");"
	h, err := newHandler(fstest.MapFS{
		"index.html": {Data: []byte(`<!doctype html><div id="root"></div><script type="module" src="/assets/index-AbC123.js"></script>` +
			"<!--" + strings.Repeat(" padding", 100) + " -->")},
		"assets/index-AbC123.js":    {Data: []byte(js)},
		"assets/index-Zz9.css":      {Data: []byte("body{margin:0}")},
		"favicon.svg":               {Data: []byte(`<svg xmlns="http://www.w3.org/2000/svg"/>`)},
		"assets/font-Q1.woff2":      {Data: []byte{0, 1, 2}},
		"assets/logo-Q2.unknownext": {Data: []byte{0, 1, 2}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func get(h http.Handler, method, target string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestServe(t *testing.T) {
	h := testHandler(t)
	tests := []struct {
		target, status, ctype, cache string
		index                        bool
	}{
		{"/", "200", "text/html; charset=utf-8", "no-cache", true},
		{"/index.html", "200", "text/html; charset=utf-8", "no-cache", true},
		{"/c/0b7f8d2e-chat", "200", "text/html; charset=utf-8", "no-cache", true}, // a client route
		{"/c/0b7f8d2e-chat/", "200", "text/html; charset=utf-8", "no-cache", true},
		{"/settings", "404", "", "", false}, // not a page of the UI
		{"/metrics", "404", "", "", false},
		{"/c/", "404", "", "", false},
		{"/c/a/b", "404", "", "", false},
		{"/favicon.ico", "404", "", "", false},
		{"/assets/index-AbC123.js", "200", "text/javascript; charset=utf-8", "public, max-age=31536000, immutable", false},
		{"/assets/index-Zz9.css", "200", "text/css; charset=utf-8", "public, max-age=31536000, immutable", false},
		{"/favicon.svg", "200", "image/svg+xml", "no-cache", false},
		{"/assets/font-Q1.woff2", "200", "font/woff2", "public, max-age=31536000, immutable", false},
		{"/assets/logo-Q2.unknownext", "200", "application/octet-stream", "public, max-age=31536000, immutable", false},
		{"/assets/index-old.js", "404", "", "", false}, // a stale asset is not the index page
		{"/robots.txt", "404", "", "", false},
		{"/../../etc/passwd", "404", "", "", false},                      // cleaned: /etc/passwd, no page
		{"/../c/x", "200", "text/html; charset=utf-8", "no-cache", true}, // cleaned: a client route
		{"/../../etc/hosts.txt", "404", "", "", false},
		{"/c/my.chat", "200", "text/html; charset=utf-8", "no-cache", true}, // a chat id with a dot
		{"/assets/chunk-x", "404", "", "", false},
		{"/assets/../index.html", "200", "text/html; charset=utf-8", "no-cache", true},
	}
	for _, tc := range tests {
		w := get(h, "GET", tc.target)
		if strconv.Itoa(w.Code) != tc.status {
			t.Errorf("GET %s: %d, want %s", tc.target, w.Code, tc.status)
			continue
		}
		if w.Code != 200 {
			continue
		}
		hd := w.Header()
		if hd.Get("Content-Type") != tc.ctype || hd.Get("Cache-Control") != tc.cache || hd.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: headers %v", tc.target, hd)
		}
		isIndex := strings.Contains(w.Body.String(), `<div id="root">`)
		if isIndex != tc.index || (hd.Get("Content-Security-Policy") != "") != tc.index {
			t.Errorf("GET %s: index page %v (CSP %q), want %v", tc.target, isIndex, hd.Get("Content-Security-Policy"), tc.index)
		}
	}
}

func TestGzipAndRevalidation(t *testing.T) {
	h := testHandler(t)
	plain := get(h, "GET", "/assets/index-AbC123.js")
	w := get(h, "GET", "/assets/index-AbC123.js", "Accept-Encoding", "br, gzip;q=0.8")
	if w.Header().Get("Content-Encoding") != "gzip" || w.Body.Len() >= plain.Body.Len() {
		t.Fatalf("gzip: encoding %q, %d bytes vs %d plain", w.Header().Get("Content-Encoding"), w.Body.Len(), plain.Body.Len())
	}
	zr, err := gzip.NewReader(w.Body)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(zr)
	if !bytes.Equal(got, plain.Body.Bytes()) {
		t.Error("the gzip body does not decompress to the file")
	}
	for _, ae := range []string{"gzip;q=0", "*;q=0, gzip;q=0", "br", ""} {
		if w := get(h, "GET", "/assets/index-AbC123.js", "Accept-Encoding", ae); w.Header().Get("Content-Encoding") != "" {
			t.Errorf("gzip sent for Accept-Encoding %q", ae)
		}
	}
	for _, ae := range []string{"*", "*;q=0, gzip", "deflate, GZIP;q=0.5"} {
		if w := get(h, "GET", "/assets/index-AbC123.js", "Accept-Encoding", ae); w.Header().Get("Content-Encoding") != "gzip" {
			t.Errorf("no gzip for Accept-Encoding %q", ae)
		}
	}
	plainIdx, gzIdx := get(h, "GET", "/"), get(h, "GET", "/", "Accept-Encoding", "gzip")
	if a, b := plainIdx.Header().Get("ETag"), gzIdx.Header().Get("ETag"); a == b || gzIdx.Header().Get("Content-Encoding") != "gzip" {
		t.Errorf("the plain and gzip index pages share the ETag %q (gzip ETag %q, encoding %q)", a, b, gzIdx.Header().Get("Content-Encoding"))
	}
	if w := get(h, "GET", "/", "Accept-Encoding", "gzip", "If-None-Match", gzIdx.Header().Get("ETag")); w.Code != http.StatusNotModified {
		t.Errorf("revalidating the gzip index page: %d, want 304", w.Code)
	}
	if w.Header().Get("Vary") != "Accept-Encoding" {
		t.Errorf("Vary = %q", w.Header().Get("Vary"))
	}

	idx := get(h, "GET", "/")
	etag := idx.Header().Get("ETag")
	if etag == "" {
		t.Fatal("index.html has no ETag")
	}
	if w := get(h, "GET", "/c/x", "If-None-Match", etag); w.Code != http.StatusNotModified || w.Body.Len() != 0 {
		t.Errorf("revalidation: %d with %d bytes, want 304", w.Code, w.Body.Len())
	}
	if w := get(h, "GET", "/", "If-None-Match", `"other"`); w.Code != http.StatusOK {
		t.Errorf("a stale ETag: %d, want 200", w.Code)
	}
	if w := get(h, "HEAD", "/"); w.Code != 200 || w.Body.Len() != 0 || w.Header().Get("Content-Length") == "" {
		t.Errorf("HEAD: %d, %d bytes, length %q", w.Code, w.Body.Len(), w.Header().Get("Content-Length"))
	}
	if w := get(h, "POST", "/"); w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", w.Code)
	}
}

// TestEmbeddedBuild: the committed build is embedded, and every asset its index page loads is served.
func TestEmbeddedBuild(t *testing.T) {
	hh, err := Handler()
	if err != nil {
		t.Fatal(err)
	}
	idx := get(hh, "GET", "/")
	if idx.Code != 200 {
		t.Fatalf("GET /: %d", idx.Code)
	}
	page := idx.Body.String()
	n := 0
	for _, attr := range []string{`src="`, `href="`} {
		for rest := page; ; {
			i := strings.Index(rest, attr)
			if i < 0 {
				break
			}
			rest = rest[i+len(attr):]
			ref := rest[:strings.IndexByte(rest, '"')]
			if !strings.HasPrefix(ref, "/") {
				continue
			}
			n++
			if w := get(hh, "GET", ref); w.Code != 200 || strings.Contains(w.Body.String(), `<div id="root">`) {
				t.Errorf("the index page loads %s, which answers %d", ref, w.Code)
			}
		}
	}
	if n == 0 {
		t.Errorf("the index page loads nothing:\n%s", page)
	}
}
