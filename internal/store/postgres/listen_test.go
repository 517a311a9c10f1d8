package postgres

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/store"
)

// TestDecodeWakeup: notifications carry ids only; a payload that is not one is dropped, not guessed at.
func TestDecodeWakeup(t *testing.T) {
	for _, tc := range []struct {
		channel, payload string
		want             store.Wakeup
		ok               bool
	}{
		{chanEvents, "run-1 42", store.Wakeup{Kind: store.WakeEvents, RunID: "run-1", Seq: 42}, true},
		{chanEvents, "run-1", store.Wakeup{}, false},
		{chanEvents, "run-1 x", store.Wakeup{}, false},
		{chanCancel, "run-2", store.Wakeup{Kind: store.WakeCancel, RunID: "run-2"}, true},
		{chanSession, "s-1", store.Wakeup{Kind: store.WakeSession, SessionID: "s-1"}, true},
		{"_other", "x", store.Wakeup{}, false},
	} {
		got, ok := decodeWakeup(tc.channel, tc.payload)
		if ok != tc.ok || cmp.Diff(tc.want, got) != "" {
			t.Errorf("decodeWakeup(%q, %q) = %+v, %v; want %+v, %v", tc.channel, tc.payload, got, ok, tc.want, tc.ok)
		}
	}
}
