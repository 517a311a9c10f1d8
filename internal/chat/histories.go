package chat

import (
	"container/list"
	"slices"
	"sync"
	"time"
	"unsafe"

	"chatd/internal/store"
)

// DefaultHistoryBytes bounds the records the service keeps in memory between runs (Limits.HistoryBytes).
const DefaultHistoryBytes = 256 << 20

// histories keeps the records of the sessions that ran last, so that a session's next run reads from
// the store only what was stored since (store.RecordsAfter) instead of its whole history: records are
// never changed once stored. A run puts them when it starts (with its user message last) and again
// when it ends (with all it stored): when those are still the session's newest, the next run reads
// nothing, and starts before it is stored (gate.go). Whatever is kept is every record of the session
// up to the last kept. It holds at most max bytes of records, forgetting the sessions that ran
// longest ago first. A kept slice is never written: readers get it with its capacity clipped, so an
// append copies it. It is safe for concurrent use.
type histories struct {
	mu    sync.Mutex
	max   int64
	size  int64
	byKey map[histKey]*list.Element // of *history
	lru   list.List                 // most recently used first
}

type histKey struct{ user, session string }

type history struct {
	key histKey
	// created is the session's CreatedAt: a session deleted and created again under its id is another
	// session, whose records start again at Seq 1.
	created time.Time
	records []store.Record
	bytes   int64
}

func newHistories(max int64) *histories {
	return &histories{max: max, byKey: map[histKey]*list.Element{}}
}

// get returns the kept records of the user's session created at created, nil when none are kept.
func (h *histories) get(user, session string, created time.Time) []store.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.byKey[histKey{user, session}]
	if e == nil {
		return nil
	}
	hi := e.Value.(*history)
	if !hi.created.Equal(created) {
		h.remove(e)
		return nil
	}
	h.lru.MoveToFront(e)
	return hi.records[:len(hi.records):len(hi.records)]
}

// put keeps records (all the session's records, oldest first) as the session's, in place of what was
// kept; records must not be written after, nor their spare room (cap), which counts as kept memory: get
// hands out records clipped.
func (h *histories) put(user, session string, created time.Time, records []store.Record) {
	n := recordsBytes(records) + int64(cap(records)-len(records))*recordSize
	records = slices.Clip(records)
	h.mu.Lock()
	defer h.mu.Unlock()
	key := histKey{user, session}
	if e := h.byKey[key]; e != nil {
		h.remove(e)
	}
	if n > h.max/4 {
		return // one session must not push every other one out
	}
	h.byKey[key] = h.lru.PushFront(&history{key: key, created: created, records: records, bytes: n})
	h.size += n
	for h.size > h.max {
		h.remove(h.lru.Back())
	}
}

// forget drops a session's records (it was deleted).
func (h *histories) forget(user, session string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.byKey[histKey{user, session}]; e != nil {
		h.remove(e)
	}
}

// remove drops e; h.mu is held.
func (h *histories) remove(e *list.Element) {
	hi := h.lru.Remove(e).(*history)
	delete(h.byKey, hi.key)
	h.size -= hi.bytes
}

// recordOverhead is about what a record costs in memory beyond its texts: the struct and its strings'
// headers, ids and times.
const recordOverhead = 512

// recordSize is what an array's spare room costs a record.
const recordSize = int64(unsafe.Sizeof(store.Record{}))

// recordsBytes is about the memory records hold.
func recordsBytes(records []store.Record) int64 {
	var n int64
	for i := range records {
		r := &records[i]
		n += recordOverhead + int64(len(r.Content)+len(r.Reasoning)+len(r.Payload))
		for _, a := range r.Attachments {
			n += int64(len(a.Data) + len(a.Name) + len(a.MediaType))
		}
		for _, c := range r.ToolCalls {
			n += int64(len(c.ID) + len(c.Name) + len(c.Arguments))
		}
		if r.Replay != nil {
			for _, p := range r.Replay.Parts {
				n += int64(64 + len(p.Text) + len(p.Signature) + len(p.ID))
			}
		}
	}
	return n
}
