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

// TestHistoriesCountSpareRoom: an array kept with room beyond its records counts that room, and is
// handed out clipped.
func TestHistoriesCountSpareRoom(t *testing.T) {
	at := time.Unix(1, 0)
	h := newHistories(1 << 20)
	recs := make([]store.Record, 1, 11)
	recs[0] = store.Record{Seq: 1}
	h.put("u", "a", at, recs)
	if want := recordOverhead + 10*recordSize; h.size != want {
		t.Errorf("kept %d bytes, want %d (one record and room for ten)", h.size, want)
	}
	if got := h.get("u", "a", at); len(got) != 1 || cap(got) != 1 {
		t.Errorf("handed out %d records with room for %d, want 1 and 1", len(got), cap(got))
	}
}

// TestRememberKeptInPlace: a run that made its history's array itself (it started early) hands the
// session's records to the next run in that array, what it stored appended in its spare room; a run
// whose history is shared copies it.
func TestRememberKeptInPlace(t *testing.T) {
	var got []store.Record
	o := &observer{p: &plan{user: "u"}, run: &Run{SessionID: "s"}, created: time.Unix(1, 0),
		remember: func(_, _ string, _ time.Time, records []store.Record) { got = records }}
	history := append(make([]store.Record, 0, 8), store.Record{Seq: 1}, store.Record{Seq: 2})
	for _, own := range []bool{true, false} {
		o.kept, o.stored, o.own = history[:2:2], nil, nil
		if own {
			o.own = history
		}
		o.keep(store.Record{Seq: 3}, store.Record{Seq: 4})
		o.rememberKept()
		if len(got) != 4 || got[2].Seq != 3 || got[3].Seq != 4 {
			t.Fatalf("own %v: remembered %+v", own, got)
		}
		if inPlace := &got[0] == &history[0]; inPlace != own {
			t.Errorf("own %v: remembered in the history's array: %v", own, inPlace)
		}
	}
	o.kept, o.stored, o.own = history[:2:2], nil, history[:2:2] // no room: copied
	o.keep(store.Record{Seq: 3})
	o.rememberKept()
	if len(got) != 3 || &got[0] == &history[0] {
		t.Errorf("an array without room: remembered %d records, in place %v", len(got), &got[0] == &history[0])
	}
}
