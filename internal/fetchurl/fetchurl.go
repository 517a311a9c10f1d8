// Package fetchurl owns fetch_url, the built-in tool that reads a web page
// for the model: one HTTP GET, its body cut to a size limit and turned into
// text (HTML reduced to what a reader sees).
//
// The model chooses the URL, so every fetch passes an SSRF guard: the URL is
// checked before the request, and each address is checked when the
// connection is made — for the first request and for every redirect — so
// that loopback, private, link-local and other internal addresses are
// refused unless the operator allows their range.
//
// It imports the standard library, golang.org/x/net/html and
// chatd/internal/tool; no other chatd package.
package fetchurl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/html/charset"

	"chatd/internal/tool"
)

const (
	defaultMaxBytes     = 1 << 20
	defaultTimeout      = 15 * time.Second
	defaultMaxRedirects = 5
	// errorTextLimit bounds the body text quoted from an error answer.
	errorTextLimit = 2000
	userAgent      = "chatd-fetch_url/1.0"
)

// errTimedOut is the cause of a fetch's context when its own timeout fires.
var errTimedOut = errors.New("fetch timed out")

// Options configures fetch_url. The zero value is ready to use.
type Options struct {
	MaxBytes     int64          // response body bytes read; 0: 1 MiB
	Timeout      time.Duration  // of the whole fetch, redirects included; 0: 15s
	MaxRedirects int            // redirects followed; 0 or less: 5
	Allow        []netip.Prefix // ranges let through although internal, such as the operator's intranet
	// Resolver looks up host names instead of net.DefaultResolver; for tests.
	Resolver Resolver
	Logger   *slog.Logger // nil discards
}

func (o Options) withDefaults() Options {
	if o.MaxBytes <= 0 {
		o.MaxBytes = defaultMaxBytes
	}
	if o.Timeout <= 0 {
		o.Timeout = defaultTimeout
	}
	if o.MaxRedirects <= 0 {
		o.MaxRedirects = defaultMaxRedirects
	}
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Allow = slices.Clone(o.Allow)
	return o
}

// New returns the fetch_url tool.
func New(opts Options) tool.Tool {
	opts = opts.withDefaults()
	f := &fetcher{opts: opts, guard: newGuard(opts.Allow, opts.Resolver), log: opts.Logger}
	f.client = &http.Client{
		Transport: &http.Transport{
			Proxy:       nil, // a proxy would connect for us, past the guard
			DialContext: f.guard.dialContext,
			// Every request dials anew, so every connection passes the guard.
			DisableKeepAlives:      true,
			MaxResponseHeaderBytes: 64 << 10,
		},
		CheckRedirect: f.checkRedirect,
	}
	return f
}

type fetcher struct {
	opts   Options
	guard  *guard
	client *http.Client
	log    *slog.Logger
}

var _ tool.Tool = (*fetcher)(nil)

func (f *fetcher) Info() tool.Info {
	return tool.Info{
		Name: "fetch_url",
		Description: fmt.Sprintf("Fetch a web page or text file with an HTTP GET and return its text. "+
			"HTML comes back as readable text (title first, links as \"text (url)\"); plain text, JSON and XML as they are. "+
			"Reads at most %d bytes of the body and says when it was cut. "+
			"Only public http:// and https:// addresses are reachable; images, PDFs and other binary files are refused.",
			f.opts.MaxBytes),
		InputSchema: json.RawMessage(fmt.Sprintf(`{
	"type": "object",
	"properties": {
		"url": {
			"type": "string",
			"description": "the absolute http:// or https:// URL to fetch"
		},
		"max_bytes": {
			"type": "integer",
			"minimum": 1,
			"description": "read at most this many bytes of the body; default and maximum %d"
		}
	},
	"required": ["url"],
	"additionalProperties": false
}`, f.opts.MaxBytes)),
		ReadOnly: true,
		// A little longer than the fetch, so the fetch's own message wins.
		Timeout: f.opts.Timeout + 5*time.Second,
		Source:  "builtin",
	}
}

// input is the model's arguments.
type input struct {
	URL      string `json:"url"`
	MaxBytes int64  `json:"max_bytes"`
}

func (f *fetcher) Call(ctx context.Context, args json.RawMessage) (tool.Result, error) {
	var in input
	if err := json.Unmarshal(args, &in); err != nil {
		return tool.Result{}, fmt.Errorf("fetch_url: decode arguments: %w", err)
	}
	u, err := url.Parse(strings.TrimSpace(in.URL))
	if err != nil {
		return tool.Result{}, fmt.Errorf("fetch_url: %w; give an absolute URL such as https://example.com/page", err)
	}
	if err := f.guard.checkURL(u); err != nil {
		f.log.Warn("fetch_url refused", "url", u.Redacted(), "reason", err)
		return tool.Result{}, err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, f.opts.Timeout, errTimedOut)
	defer cancel()
	start := time.Now()
	p, err := f.fetch(ctx, u, f.limit(in.MaxBytes))
	if err != nil {
		err = f.explain(ctx, u, err)
		f.logFailure(u, err)
		return tool.Result{}, err
	}
	f.log.Debug("fetch_url", "url", u.Redacted(), "final_url", p.url.Redacted(), "status", p.status,
		"bytes", len(p.body), "truncated", p.truncated, "duration", time.Since(start))
	return p.result(), nil
}

// limit is the body size to read: what the model asked for, within the maximum.
func (f *fetcher) limit(asked int64) int64 {
	if asked <= 0 || asked > f.opts.MaxBytes {
		return f.opts.MaxBytes
	}
	return asked
}

// checkRedirect is asked before each redirect is followed: the new request
// dials anew, through the guard, but its URL is checked here first.
func (f *fetcher) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > f.opts.MaxRedirects {
		return &redirectError{to: req.URL, err: refusef("refused: more than %d redirects", f.opts.MaxRedirects)}
	}
	if err := f.guard.checkURL(req.URL); err != nil {
		return &redirectError{to: req.URL, err: err}
	}
	return nil
}

// redirectError is a redirect that checkRedirect refused.
type redirectError struct {
	to  *url.URL
	err error
}

func (e *redirectError) Error() string {
	return "redirect to " + e.to.Redacted() + ": " + e.err.Error()
}

func (e *redirectError) Unwrap() error { return e.err }

// page is what a fetch brought back.
type page struct {
	url         *url.URL // after redirects
	status      string   // "200 OK"
	code        int
	contentType string // as sent, or sniffed when the server sent none
	body        []byte // at most the limit
	truncated   bool
}

// fetch gets u and reads at most limit bytes of its body. A binary body is
// not read at all.
func (f *fetcher) fetch(ctx context.Context, u *url.URL, limit int64) (*page, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,application/json,text/plain;q=0.9,*/*;q=0.5")
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := &page{url: resp.Request.URL, status: resp.Status, code: resp.StatusCode, contentType: resp.Header.Get("Content-Type")}
	if p.contentType != "" && kindOf(p.contentType) == binary {
		return p, nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if int64(len(body)) > limit {
		body, p.truncated = body[:limit], true
	}
	p.body = body
	if p.contentType == "" {
		p.contentType = http.DetectContentType(body)
	}
	return p, nil
}

// explain turns a failed fetch into a message the model can act on.
func (f *fetcher) explain(ctx context.Context, u *url.URL, err error) error {
	if errors.Is(context.Cause(ctx), errTimedOut) {
		return fmt.Errorf("fetch_url: %s did not answer in full within %s; try again later, or another page", u.Redacted(), f.opts.Timeout)
	}
	if ctx.Err() != nil {
		return ctx.Err() // the call was cancelled; the registry says so
	}
	if dnsErr, ok := errors.AsType[*net.DNSError](err); ok && dnsErr.IsNotFound {
		return fmt.Errorf("fetch_url: no such host %s; check the URL", dnsErr.Name)
	}
	where := u.Redacted()
	if uerr, ok := errors.AsType[*url.Error](err); ok {
		// The failed request's URL, unless a redirect was refused: that
		// error names its target itself.
		if _, ok := errors.AsType[*redirectError](err); !ok && uerr.URL != where {
			where += " (redirected to " + uerr.URL + ")"
		}
		err = uerr.Err
	}
	return fmt.Errorf("fetch_url: get %s: %w", where, err)
}

func (f *fetcher) logFailure(u *url.URL, err error) {
	if _, ok := errors.AsType[*refusal](err); ok {
		f.log.Warn("fetch_url refused", "url", u.Redacted(), "reason", err)
		return
	}
	f.log.Info("fetch_url failed", "url", u.Redacted(), "err", err)
}

// report is the payload of a fetch, for the UI; its field order is the JSON's.
type report struct {
	URL         string `json:"url"`
	Status      int    `json:"status"`
	ContentType string `json:"content_type"`
	Bytes       int    `json:"bytes"`
	Truncated   bool   `json:"truncated"`
}

// result is the page as the model reads it: a header line, then the text.
func (p *page) result() tool.Result {
	media := mediaType(p.contentType)
	header := fmt.Sprintf("URL: %s | Status: %s | Content-Type: %s", p.url.Redacted(), p.status, media)
	payload, _ := json.Marshal(report{URL: p.url.Redacted(), Status: p.code, ContentType: media,
		Bytes: len(p.body), Truncated: p.truncated})
	res := tool.Result{Payload: payload, IsError: p.code/100 != 2}
	switch {
	case res.IsError && kindOf(media) == binary:
		res.Content = fmt.Sprintf("%s\n\nThe server answered %s with a %s body.", header, p.status, media)
	case res.IsError:
		res.Content = fmt.Sprintf("%s\n\nThe server answered %s. The body begins:\n\n%s", header, p.status, clip(p.text(), errorTextLimit))
	case kindOf(media) == binary:
		res.IsError = true
		res.Content = fmt.Sprintf("%s\n\nrefused: the body is %s, which fetch_url cannot read; it reads HTML, text, JSON and XML only.", header, media)
	default:
		res.Content = header + "\n\n" + p.text()
		if p.truncated {
			res.Content += fmt.Sprintf("\n\n[Cut: only the first %d bytes of the body were read.]", len(p.body))
		}
	}
	return res
}

// text is the body as UTF-8 text, HTML reduced to what a reader sees.
func (p *page) text() string {
	if kindOf(p.contentType) == htmlText {
		return extractText(decode(p.body, p.contentType, true), p.url)
	}
	return decode(p.body, p.contentType, false)
}

// decode converts body to UTF-8 from the charset its content type names
// or, for HTML, its byte order mark or <meta> tag. Bytes that are not valid
// in that charset become U+FFFD.
func decode(body []byte, contentType string, isHTML bool) string {
	label := ""
	if _, params, err := mime.ParseMediaType(contentType); err == nil {
		label = strings.ToLower(params["charset"])
	}
	if isHTML {
		_, label, _ = charset.DetermineEncoding(body, contentType)
	}
	if label != "" && label != "utf-8" {
		if r, err := charset.NewReaderLabel(label, bytes.NewReader(body)); err == nil {
			if out, err := io.ReadAll(r); err == nil {
				body = out
			}
		}
	}
	return strings.TrimPrefix(strings.ToValidUTF8(string(body), "\uFFFD"), "\uFEFF")
}

// kind is how fetch_url treats a content type.
type kind int

const (
	binary kind = iota
	plainText
	htmlText
)

// textApplications are the application/ types that are text.
var textApplications = map[string]bool{
	"application/json":         true,
	"application/xml":          true,
	"application/javascript":   true,
	"application/x-javascript": true,
	"application/ecmascript":   true,
	"application/yaml":         true,
	"application/x-yaml":       true,
	"application/toml":         true,
	"application/x-ndjson":     true,
	"application/sql":          true,
	"application/graphql":      true,
}

func kindOf(contentType string) kind {
	media := mediaType(contentType)
	switch {
	case media == "text/html" || media == "application/xhtml+xml":
		return htmlText
	case strings.HasPrefix(media, "text/"):
		return plainText
	case !strings.HasPrefix(media, "application/"):
		return binary // image/, audio/, video/, font/, …
	case textApplications[media],
		strings.HasSuffix(media, "+json"), strings.HasSuffix(media, "+xml"), strings.HasSuffix(media, "+yaml"):
		return plainText
	}
	return binary
}

// mediaType is the lower-case type/subtype of a Content-Type header.
func mediaType(contentType string) string {
	if media, _, err := mime.ParseMediaType(contentType); err == nil {
		return media
	}
	media, _, _ := strings.Cut(contentType, ";")
	return strings.ToLower(strings.TrimSpace(media))
}

// clip cuts s to at most n bytes, at a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
