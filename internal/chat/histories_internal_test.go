package chat

import (
	"strings"
	"testing"
	"time"

	"chatd/internal/store"
)

// TestHistoriesBounded: the kept records stay within their bound, the sessions used longest ago
// forgotten first, and a session too large for a quarter of it is not kept at all.
func TestHistoriesBounded(t *testing.T) {
	at := time.Unix(1, 0)
	recs := func(n int) []store.Record {
		return []store.Record{{Seq: 1, Content: strings.Repeat("x", n-recordOverhead)}}
	}
	h := newHistories(4000)
	h.put("u", "a", at, recs(1000))
	h.put("u", "b", at, recs(1000))
	h.put("u", "c", at, recs(1000))
	h.get("u", "a", at) // a is used: b is now the oldest
	h.put("u", "d", at, recs(1000))
	h.put("u", "e", at, recs(1000))
	if h.size > h.max {
		t.Errorf("size %d over %d", h.size, h.max)
	}
	for s, kept := range map[string]bool{"a": true, "b": false, "c": true, "d": true, "e": true} {
		if got := h.get("u", s, at) != nil; got != kept {
			t.Errorf("session %s kept: %v, want %v", s, got, kept)
		}
	}
	h.put("u", "big", at, recs(1001))
	if h.get("u", "big", at) != nil {
		t.Error("a session over a quarter of the bound was kept")
	}
	if h.get("v", "a", at) != nil {
		t.Error("another user got the session's records")
	}
	got := h.get("u", "a", at)
	if cap(got) != len(got) {
		t.Error("the kept records are handed out with room to append into")
	}
	h.forget("u", "a")
	if h.get("u", "a", at) != nil || h.size != 3000 {
		t.Errorf("forgotten session still kept (size %d)", h.size)
	}
}
