// Package webui serves chatd's web chat UI: the files web/ builds (React, Vite), committed under dist/
// and embedded in the binary, so that `chatd serve` needs no Node.
//
// Hashed assets (dist/assets/) are cached for a year; index.html and the other files are revalidated
// (ETag). The UI's own routes — / and /c/<session id> — get index.html; any other path that is not a file of
// the build is a 404, so that a probe (/metrics on the wrong port, a typo) is not answered with a page. Text
// files are served gzip-compressed to clients that accept it, compressed once at start-up.
package webui

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
)

//go:embed all:dist
var dist embed.FS

// contentSecurity is the index page's policy: scripts, styles and requests only from chatd itself; images
// also from data: and blob: URLs (attachments before they are sent).
const contentSecurity = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

// file is one file ready to serve.
type file struct {
	body, gz    []byte // gz: nil when compressing does not pay
	contentType string
	etag        string
	immutable   bool
}

// Handler serves the UI. It fails when the embedded build has no index.html.
func Handler() (http.Handler, error) {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		return nil, err
	}
	return newHandler(sub)
}

// handler serves a built UI from memory.
type handler struct {
	files map[string]*file // by path without the leading slash
	index *file
}

func newHandler(fsys fs.FS) (*handler, error) {
	h := &handler{files: map[string]*file{}}
	err := fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		f := &file{body: body, contentType: contentType(name), etag: `"` + base64.RawURLEncoding.EncodeToString(sum[:12]) + `"`,
			immutable: strings.HasPrefix(name, "assets/")}
		if compressible(f.contentType) && len(body) > 512 {
			var b bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
			zw.Write(body)
			zw.Close()
			if b.Len() < len(body)*9/10 {
				f.gz = b.Bytes()
			}
		}
		h.files[name] = f
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("web UI: %w", err)
	}
	if h.index = h.files["index.html"]; h.index == nil {
		return nil, fmt.Errorf("web UI: the build has no index.html (run the build in web/)")
	}
	return h, nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
	f := h.files[name]
	if f == nil && clientRoute(name) {
		f = h.index
	}
	if f == nil {
		// Not a file of the build (an asset of an older build, a probe) nor a page of the UI.
		http.NotFound(w, r)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", f.contentType)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Vary", "Accept-Encoding")
	if f.immutable {
		hd.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		hd.Set("Cache-Control", "no-cache")
	}
	if f == h.index {
		hd.Set("Content-Security-Policy", contentSecurity)
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
	}
	body, etag := f.body, f.etag
	if f.gz != nil && acceptsGzip(r.Header.Get("Accept-Encoding")) {
		// Each encoding is a representation of its own, with its own strong validator.
		body, etag = f.gz, f.etag[:len(f.etag)-1]+`-gz"`
		hd.Set("Content-Encoding", "gzip")
	}
	if !f.immutable {
		hd.Set("ETag", etag)
		if etagMatch(r.Header.Get("If-None-Match"), etag) {
			hd.Del("Content-Encoding")
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	w.Write(body)
}

// contentType names a file's type by its extension; one the table does not know is a download.
func contentType(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js", ".mjs":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".json", ".map":
		return "application/json"
	case ".webmanifest":
		return "application/manifest+json"
	case ".txt":
		return "text/plain; charset=utf-8"
	}
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}

func compressible(contentType string) bool {
	return strings.HasPrefix(contentType, "text/") || strings.Contains(contentType, "json") ||
		strings.HasPrefix(contentType, "image/svg")
}

// acceptsGzip reports whether an Accept-Encoding value takes gzip: named without q=0, or through "*"
// when gzip is not named.
func acceptsGzip(header string) bool {
	star := false
	for part := range strings.SplitSeq(header, ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		enc = strings.TrimSpace(enc)
		q := strings.ReplaceAll(params, " ", "")
		ok := q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
		switch {
		case strings.EqualFold(enc, "gzip"):
			return ok
		case enc == "*":
			star = ok
		}
	}
	return star
}

// clientRoute reports whether name (a cleaned path without its leading slash) is one of the UI's pages:
// "" (a new chat) or "c/<session id>" (one chat; web/src/App.tsx routes the same two).
func clientRoute(name string) bool {
	if name == "" {
		return true
	}
	id, ok := strings.CutPrefix(name, "c/")
	return ok && id != "" && !strings.Contains(id, "/")
}

// etagMatch reports whether an If-None-Match value names etag.
func etagMatch(header, etag string) bool {
	for part := range strings.SplitSeq(header, ",") {
		p := strings.TrimPrefix(strings.TrimSpace(part), "W/")
		if p == etag || p == "*" {
			return true
		}
	}
	return false
}
