package upstream

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/llm"
)

// testPage is the shape of the pages the test server sends.
type testPage struct {
	IDs  []string `json:"ids"`
	Next string   `json:"next"`
}

func decodeTestPage(raw []byte) ([]string, string, error) {
	var p testPage
	err := json.Unmarshal(raw, &p)
	return p.IDs, p.Next, err
}

// pagedServer serves pages by the value of the cursor parameter, and records each request's query.
// A request without the key header is answered 401.
type pagedServer struct {
	*httptest.Server
	mu      sync.Mutex
	queries []string
}

func newPagedServer(t *testing.T, cursor string, pages map[string]string) *pagedServer {
	s := &pagedServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.queries = append(s.queries, r.URL.RawQuery)
		s.mu.Unlock()
		if r.Method != http.MethodGet || r.URL.Path != "/models" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		if r.Header.Get("X-Key") != "secret" {
			http.Error(w, "no key", http.StatusUnauthorized)
			return
		}
		page, ok := pages[r.URL.Query().Get(cursor)]
		if !ok {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, page)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *pagedServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries
}

func testEndpoint() *Endpoint {
	return NewEndpoint("p", Timeouts{}, http.Header{"X-Key": {"secret"}}, nil)
}

// TestModelsPages follows the cursor from page to page, appending it to the first page's query or
// starting one, and trims the prefix from every id.
func TestModelsPages(t *testing.T) {
	pages := map[string]string{
		"":     `{"ids":["models/a","b"],"next":"c1/+"}`,
		"c1/+": `{"ids":["models/c"],"next":"c2"}`,
		"c2":   `{"ids":["models/d"]}`,
	}
	for _, tt := range []struct {
		name, query string
		want        []string
	}{
		{"query", "?limit=1000", []string{"limit=1000", "limit=1000&after=c1%2F%2B", "limit=1000&after=c2"}},
		{"no query", "", []string{"", "after=c1%2F%2B", "after=c2"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := newPagedServer(t, "after", pages)
			got, err := testEndpoint().Models(t.Context(), ModelList{URL: srv.URL + "/models" + tt.query, Cursor: "after",
				Decode: decodeTestPage, TrimPrefix: "models/"})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"a", "b", "c", "d"}, got); diff != "" {
				t.Errorf("ids (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, srv.requests()); diff != "" {
				t.Errorf("queries (-want +got):\n%s", diff)
			}
		})
	}
}

// TestModelsOnePage: without a cursor parameter the list is one page, whatever it says of a next.
func TestModelsOnePage(t *testing.T) {
	srv := newPagedServer(t, "after", map[string]string{"": `{"ids":["models/a"],"next":"more"}`})
	got, err := testEndpoint().Models(t.Context(), ModelList{URL: srv.URL + "/models", Decode: decodeTestPage})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"models/a"}, got); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
	if n := len(srv.requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

// TestModelsLoop: a cursor handed out again ends the list instead of asking for the same pages anew.
func TestModelsLoop(t *testing.T) {
	srv := newPagedServer(t, "after", map[string]string{
		"":  `{"ids":["a"],"next":"x"}`,
		"x": `{"ids":["b"],"next":"y"}`,
		"y": `{"ids":["c"],"next":"x"}`,
	})
	got, err := testEndpoint().Models(t.Context(), ModelList{URL: srv.URL + "/models", Cursor: "after", Decode: decodeTestPage})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, got); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"", "after=x", "after=y"}, srv.requests()); diff != "" {
		t.Errorf("queries (-want +got):\n%s", diff)
	}
}

// TestModelsPageCap: a server that always has a new page is asked MaxPages times, 50 by default.
func TestModelsPageCap(t *testing.T) {
	for _, tt := range []struct{ maxPages, want int }{{0, DefaultMaxModelPages}, {3, 3}} {
		var mu sync.Mutex
		n := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			n++
			page := n
			mu.Unlock()
			fmt.Fprintf(w, `{"ids":["m%d"],"next":"p%d"}`, page, page)
		}))
		got, err := testEndpoint().Models(t.Context(), ModelList{URL: srv.URL, Cursor: "page", Decode: decodeTestPage, MaxPages: tt.maxPages})
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		if n != tt.want || len(got) != tt.want || got[len(got)-1] != fmt.Sprintf("m%d", tt.want) {
			t.Errorf("MaxPages %d: %d requests, %d ids (%v), want %d", tt.maxPages, n, len(got), got[len(got)-1], tt.want)
		}
	}
}

// TestModelsErrors: an error answer is the endpoint's *llm.Error, on any page; a page that does not
// decode is a stream error; no partial list is returned.
func TestModelsErrors(t *testing.T) {
	srv := newPagedServer(t, "after", map[string]string{
		"":    `{"ids":["a"],"next":"bad"}`,
		"bad": `{"ids":`,
	})
	list := ModelList{URL: srv.URL + "/models", Cursor: "after", Decode: decodeTestPage}

	got, err := NewEndpoint("p", Timeouts{}, nil, nil).Models(t.Context(), list)
	if e, ok := errors.AsType[*llm.Error](err); !ok || e.Kind != llm.KindAuth || e.Status != 401 || got != nil {
		t.Errorf("without the key: %v, %#v; want no ids and an auth error", got, err)
	}

	got, err = testEndpoint().Models(t.Context(), list)
	if e, ok := errors.AsType[*llm.Error](err); !ok || e.Kind != llm.KindStream || e.Provider != "p" ||
		!strings.Contains(e.Message, "decode the model list") || got != nil {
		t.Errorf("a broken page: %v, %#v; want no ids and a stream error", got, err)
	}
}
