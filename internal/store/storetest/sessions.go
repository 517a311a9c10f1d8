package storetest

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"chatd/internal/store"
)

func testSessionCRUD(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")

	sess := createSession(t, s, alice)
	if sess.ID == "" || sess.CreatedAt.IsZero() || !sess.UpdatedAt.Equal(sess.CreatedAt) {
		t.Fatalf("CreateSession did not assign ID and times: %+v", sess)
	}
	if sess.CreatedAt.Location() != time.UTC {
		t.Errorf("CreatedAt in %v, want UTC", sess.CreatedAt.Location())
	}
	if string(sess.Metadata) != "{}" {
		t.Errorf("Metadata = %s, want {} when none was given", sess.Metadata)
	}
	got, err := s.Session(ctx, alice, sess.ID)
	if err != nil {
		t.Fatalf("Session: %v", err)
	}
	if diff := gocmp.Diff(sess, got, cmpOpts); diff != "" {
		t.Errorf("Session differs from what CreateSession returned (-want +got):\n%s", diff)
	}

	meta := json.RawMessage(`{"page": "reports", "n": [1, 2]}`)
	withID := &store.Session{ID: "chosen-" + alice, Title: "t", Metadata: meta}
	if err := s.CreateSession(ctx, alice, withID); err != nil {
		t.Fatalf("CreateSession with an ID: %v", err)
	}
	if got, err := s.Session(ctx, alice, withID.ID); err != nil || string(got.Metadata) != string(meta) {
		t.Errorf("Session(chosen id) = %v, %v; want metadata %s byte for byte", got, err, meta)
	}
	err = s.CreateSession(ctx, alice, &store.Session{Metadata: json.RawMessage(`[1]`)})
	wantErr(t, "CreateSession with array metadata", err, store.ErrConflict)

	testSessionUpdate(t, s, alice, sess)

	if err := s.DeleteSession(ctx, alice, sess.ID); err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	_, err = s.Session(ctx, alice, sess.ID)
	wantErr(t, "Session after delete", err, store.ErrNotFound)
	wantErr(t, "DeleteSession twice", s.DeleteSession(ctx, alice, sess.ID), store.ErrNotFound)
	_, err = s.UpdateSession(ctx, alice, sess.ID, store.SessionPatch{Title: ptr("x")})
	wantErr(t, "UpdateSession after delete", err, store.ErrNotFound)
}

// testSessionUpdate changes the title, then the metadata, each leaving the other as it was.
func testSessionUpdate(t *testing.T, s store.Store, user string, sess *store.Session) {
	ctx := t.Context()
	up, err := s.UpdateSession(ctx, user, sess.ID, store.SessionPatch{Title: ptr("renamed")})
	if err != nil {
		t.Fatalf("UpdateSession(title): %v", err)
	}
	if up.Title != "renamed" || string(up.Metadata) != "{}" || up.UpdatedAt.Before(sess.UpdatedAt) ||
		!up.CreatedAt.Equal(sess.CreatedAt) || up.Agent != sess.Agent {
		t.Errorf("UpdateSession(title) = %+v, from %+v", up, sess)
	}
	meta := json.RawMessage(`{"tab":"articles"}`)
	up2, err := s.UpdateSession(ctx, user, sess.ID, store.SessionPatch{Metadata: meta})
	if err != nil {
		t.Fatalf("UpdateSession(metadata): %v", err)
	}
	if up2.Title != "renamed" || string(up2.Metadata) != string(meta) || up2.UpdatedAt.Before(up.UpdatedAt) {
		t.Errorf("UpdateSession(metadata) = %+v", up2)
	}
	got, err := s.Session(ctx, user, sess.ID)
	if err != nil {
		t.Fatalf("Session: %v", err)
	}
	if diff := gocmp.Diff(up2, got, cmpOpts); diff != "" {
		t.Errorf("Session differs from what UpdateSession returned (-want +got):\n%s", diff)
	}
	_, err = s.UpdateSession(ctx, user, sess.ID, store.SessionPatch{Metadata: json.RawMessage(`"x"`)})
	wantErr(t, "UpdateSession with string metadata", err, store.ErrConflict)
}

func testSessionsPagination(t *testing.T, s store.Store) {
	ctx, alice, bob := t.Context(), newUser("alice"), newUser("bob")
	var ids []string
	for range 7 {
		ids = append(ids, createSession(t, s, alice).ID)
	}
	createSession(t, s, bob)
	// Touching the oldest session moves it to the front (unless the store's clock stands still).
	if _, err := s.UpdateSession(ctx, alice, ids[0], store.SessionPatch{Title: ptr("touched")}); err != nil {
		t.Fatalf("UpdateSession: %v", err)
	}
	want := sortedSessions(t, s, alice, ids)

	var got []store.Session
	cursor, pages := "", 0
	for {
		page, next, err := s.Sessions(ctx, alice, store.Page{Limit: 3, Cursor: cursor})
		if err != nil {
			t.Fatalf("Sessions page %d: %v", pages, err)
		}
		pages++
		got = append(got, page...)
		if next == "" {
			break
		}
		if pages > len(ids) {
			t.Fatalf("Sessions keeps returning a next cursor after %d pages", pages)
		}
		cursor = next
	}
	if pages != 3 {
		t.Errorf("7 sessions in pages of 3 took %d pages, want 3", pages)
	}
	if diff := gocmp.Diff(want, got, cmpOpts); diff != "" {
		t.Errorf("Sessions, newest updated first, id descending on ties (-want +got):\n%s", diff)
	}
	_, _, err := s.Sessions(ctx, alice, store.Page{Cursor: "not a cursor"})
	wantErr(t, "Sessions with a bad cursor", err, store.ErrNotFound)
	page, next, err := s.Sessions(ctx, newUser("nobody"), store.Page{})
	if err != nil || len(page) != 0 || next != "" {
		t.Errorf("Sessions of a user with none = %v, %q, %v", page, next, err)
	}
}

// sortedSessions reads the sessions and sorts them the way Sessions must list them.
func sortedSessions(t *testing.T, s store.Store, user string, ids []string) []store.Session {
	t.Helper()
	var list []store.Session
	for _, id := range ids {
		sess, err := s.Session(t.Context(), user, id)
		if err != nil {
			t.Fatalf("Session: %v", err)
		}
		list = append(list, *sess)
	}
	slices.SortFunc(list, func(a, b store.Session) int {
		return cmp.Or(b.UpdatedAt.Compare(a.UpdatedAt), cmp.Compare(b.ID, a.ID))
	})
	return list
}

// testSessionsPageLimits checks the default page of 50 and the cap of 200.
func testSessionsPageLimits(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	for i := range 201 {
		if err := s.CreateSession(ctx, alice, &store.Session{Title: fmt.Sprint(i)}); err != nil {
			t.Fatalf("CreateSession: %v", err)
		}
	}
	for _, tc := range []struct{ limit, want int }{{0, 50}, {-1, 50}, {7, 7}, {1000, 200}} {
		page, next, err := s.Sessions(ctx, alice, store.Page{Limit: tc.limit})
		if err != nil || len(page) != tc.want || next == "" {
			t.Errorf("Sessions(Limit %d) = %d sessions, next %q, %v; want %d and a next cursor",
				tc.limit, len(page), next, err, tc.want)
		}
	}
	page, next, err := s.Sessions(ctx, alice, store.Page{Limit: 200})
	if err != nil {
		t.Fatal(err)
	}
	last, next, err := s.Sessions(ctx, alice, store.Page{Limit: 200, Cursor: next})
	if err != nil || len(last) != 1 || next != "" {
		t.Errorf("second page of 200 = %d sessions, next %q, %v; want the one left and no cursor",
			len(last), next, err)
	}
	if len(last) == 1 && slices.ContainsFunc(page, func(s store.Session) bool { return s.ID == last[0].ID }) {
		t.Errorf("session %s is on both pages", last[0].ID)
	}
}
