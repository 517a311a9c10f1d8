package upstream

import (
	"cmp"
	"context"
	"net/url"
	"strings"

	"chatd/internal/llm"
)

// DefaultMaxModelPages bounds the pages of a model list asked for: the APIs answer in one page of
// hundreds, the bound guards against a server that always says there is more.
const DefaultMaxModelPages = 50

// maxModelPage bounds one page of a model list; a whole list is a few hundred kilobytes.
const maxModelPage = 8 << 20

// ModelList says how an API lists its models. The endpoint's headers authenticate the requests.
type ModelList struct {
	URL string // the first page's
	// Cursor is the query parameter that asks for the page after a cursor ("after_id", "pageToken");
	// "" for an API that answers in one page.
	Cursor string
	// Decode reads one page: the ids it lists, in order, and the cursor of the next page ("" on the
	// last). It filters out what is not a model to chat with.
	Decode func(page []byte) (ids []string, next string, err error)
	// TrimPrefix is removed from each id (Gemini's "models/": the id is what requests name).
	TrimPrefix string
	// MaxPages bounds the pages asked for; 0 is DefaultMaxModelPages.
	MaxPages int
}

// Models returns the ids of every page of the list l describes. A cursor seen before ends the list: a
// server that hands it out again is looping, not listing more. A page that does not decode is an
// *llm.Error of kind stream.
func (e *Endpoint) Models(ctx context.Context, l ModelList) ([]string, error) {
	var ids []string
	seen := map[string]bool{}
	u := l.URL
	for range cmp.Or(l.MaxPages, DefaultMaxModelPages) {
		raw, err := e.Get(ctx, u, maxModelPage)
		if err != nil {
			return nil, err
		}
		page, next, err := l.Decode(raw)
		if err != nil {
			return nil, &llm.Error{Provider: e.Provider, Kind: llm.KindStream, Message: "cannot decode the model list", Err: err}
		}
		for _, id := range page {
			ids = append(ids, strings.TrimPrefix(id, l.TrimPrefix))
		}
		if l.Cursor == "" || next == "" || seen[next] {
			break
		}
		seen[next] = true
		u = pageURL(l.URL, l.Cursor, next)
	}
	return ids, nil
}

// pageURL adds the cursor parameter to the first page's URL.
func pageURL(first, param, cursor string) string {
	sep := "?"
	if strings.Contains(first, "?") {
		sep = "&"
	}
	return first + sep + param + "=" + url.QueryEscape(cursor)
}
