package store_test

import (
	"slices"
	"testing"

	"chatd/internal/store"
)

func TestCurrent(t *testing.T) {
	rec := func(id, role, retracts string) store.Record {
		return store.Record{ID: id, Role: role, Retracts: retracts}
	}
	tests := []struct {
		name string
		in   []store.Record
		want []string
	}{
		{"no marker", []store.Record{rec("u1", "user", ""), rec("a1", "assistant", "")}, []string{"u1", "a1"}},
		{"last answer retracted", []store.Record{rec("u1", "user", ""), rec("a1", "assistant", ""),
			rec("m1", "system", "u1"), rec("a2", "assistant", "")}, []string{"u1", "a2"}},
		{"regenerated twice", []store.Record{rec("u1", "user", ""), rec("a1", "assistant", ""),
			rec("m1", "system", "u1"), rec("a2", "assistant", ""), rec("m2", "system", "u1"),
			rec("a3", "assistant", ""), rec("u2", "user", "")}, []string{"u1", "a3", "u2"}},
		{"earlier turns kept", []store.Record{rec("u1", "user", ""), rec("a1", "assistant", ""),
			rec("u2", "user", ""), rec("a2", "assistant", ""), rec("t2", "tool", ""),
			rec("m1", "system", "u2")}, []string{"u1", "a1", "u2"}},
		{"a summary of what came before the question is kept", []store.Record{rec("u1", "user", ""), rec("a1", "assistant", ""),
			rec("u2", "user", ""), {ID: "s1", Role: "system", SummaryThrough: "a1"}, rec("a2", "assistant", ""),
			rec("m1", "system", "u2"), rec("a3", "assistant", "")}, []string{"u1", "a1", "u2", "s1", "a3"}},
		{"a summary that reaches into the retracted answer is not", []store.Record{rec("u1", "user", ""),
			rec("a1", "assistant", ""), {ID: "s1", Role: "system", SummaryThrough: "a1"}, rec("m1", "system", "u1"),
			rec("a2", "assistant", "")}, []string{"u1", "a2"}},
		{"marker naming nothing known", []store.Record{rec("u1", "user", ""), rec("m1", "system", "gone")},
			[]string{"u1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, r := range store.Current(tc.in) {
				got = append(got, r.ID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Current = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCurrentNoMarkerNoCopy(t *testing.T) {
	in := []store.Record{{ID: "u1", Role: "user"}}
	if got := store.Current(in); &got[0] != &in[0] {
		t.Error("Current copied records that hold no marker")
	}
}
