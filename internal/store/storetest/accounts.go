package storetest

import (
	"crypto/sha256"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"chatd/internal/store"
)

// newHash returns a key or sign-in hash no other subtest uses: hashes are unique across users.
func newHash() []byte {
	h := sha256.Sum256([]byte(uuid.NewString()))
	return h[:]
}

func createKey(t *testing.T, s store.Store, user, name string) *store.APIKey {
	t.Helper()
	k := &store.APIKey{User: user, Name: name, Prefix: "chd_" + name, Hash: newHash()}
	if err := s.CreateKey(t.Context(), k); err != nil {
		t.Fatalf("CreateKey(%s): %v", name, err)
	}
	return k
}

func keyByHash(t *testing.T, s store.Store, hash []byte) *store.APIKey {
	t.Helper()
	k, err := s.KeyByHash(t.Context(), hash)
	if err != nil {
		t.Fatalf("KeyByHash: %v", err)
	}
	return k
}

// wantStoredTime fails unless tm is as the store keeps times: UTC, to the microsecond.
func wantStoredTime(t *testing.T, what string, tm time.Time) {
	t.Helper()
	if tm.IsZero() || tm.Location() != time.UTC || tm.Nanosecond()%1000 != 0 {
		t.Errorf("%s = %v, want a time in UTC to the microsecond", what, tm)
	}
}

// testKeys: CreateKey assigns the id and creation time and keeps the rest, an expiry in UTC to the
// microsecond; KeyByHash finds a key by its hash alone, expired or not; Keys lists a user's keys, or
// everyone's, newest first.
func testKeys(t *testing.T, s store.Store) {
	ctx, alice, bob := t.Context(), newUser("alice"), newUser("bob")
	expires := time.Date(2027, 1, 2, 3, 4, 5, 6789, time.FixedZone("CET", 3600))
	k := &store.APIKey{User: alice, Name: "laptop", Prefix: "chd_ab12", Hash: newHash(), Admin: true,
		Agents: []string{"support", "default"}, ExpiresAt: &expires,
		Limits: store.Limits{ConcurrentRuns: 2, RequestsPerMinute: 30, TokensPerDay: 100_000, SpendUSD: 1.5,
			SpendPeriod: "week"}}
	want := *k
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatalf("CreateKey: %v", err)
	}
	if k.ID == "" {
		t.Fatal("CreateKey assigned no id")
	}
	wantStoredTime(t, "CreatedAt", k.CreatedAt)
	want.ID, want.CreatedAt, want.ExpiresAt = k.ID, k.CreatedAt, ptr(expires.UTC().Truncate(time.Microsecond))
	if diff := cmp.Diff(&want, k, cmpOpts); diff != "" {
		t.Errorf("CreateKey returned (-want +got):\n%s", diff)
	}
	got := keyByHash(t, s, want.Hash)
	if diff := cmp.Diff(&want, got, cmpOpts); diff != "" {
		t.Errorf("KeyByHash (-want +got):\n%s", diff)
	}
	wantStoredTime(t, "stored ExpiresAt", *got.ExpiresAt)
	_, err := s.KeyByHash(ctx, newHash())
	wantErr(t, "KeyByHash(unknown)", err, store.ErrNotFound)

	expired := &store.APIKey{User: alice, Name: "old", Prefix: "chd_old", Hash: newHash(),
		ExpiresAt: ptr(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))}
	if err := s.CreateKey(ctx, expired); err != nil {
		t.Fatalf("CreateKey(expired): %v", err)
	}
	if got := keyByHash(t, s, expired.Hash); got.ID != expired.ID {
		t.Errorf("KeyByHash of an expired key = %+v, want %s", got, expired.ID)
	}
	bobs := createKey(t, s, bob, "ci")

	wantKeys(t, s, alice, nil, []*store.APIKey{expired, k})
	wantKeys(t, s, bob, nil, []*store.APIKey{bobs})
	wantKeys(t, s, "", []string{alice, bob}, []*store.APIKey{bobs, expired, k})
	if has, err := s.HasKeys(ctx); err != nil || !has {
		t.Errorf("HasKeys after CreateKey = %v, %v; want true", has, err)
	}
}

// wantKeys fails unless Keys(user) is newest first and lists, of the keys of users (user's alone when
// nil), want in this order.
func wantKeys(t *testing.T, s store.Store, user string, users []string, want []*store.APIKey) {
	t.Helper()
	all, err := s.Keys(t.Context(), user)
	if err != nil {
		t.Fatalf("Keys(%q): %v", user, err)
	}
	if !slices.IsSortedFunc(all, func(a, b store.APIKey) int { return b.CreatedAt.Compare(a.CreatedAt) }) {
		t.Errorf("Keys(%q) is not newest first: %+v", user, all)
	}
	if users == nil {
		users = []string{user}
	}
	var got []*store.APIKey
	for _, k := range all {
		if slices.Contains(users, k.User) {
			got = append(got, &k)
		}
	}
	if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
		t.Errorf("Keys(%q) (-want +got):\n%s", user, diff)
	}
}

// testCreateKeyRefused: a key without a user or a hash is a key that breaks the shape of keys,
// ErrConflict as such records are; a hash taken, by the same user or another, is ErrConflict. Nothing
// of a refused key is stored.
func testCreateKeyRefused(t *testing.T, s store.Store) {
	ctx, alice, bob := t.Context(), newUser("alice"), newUser("bob")
	err := s.CreateKey(ctx, &store.APIKey{User: alice, Prefix: "chd_x"})
	wantErr(t, "CreateKey without a hash", err, store.ErrConflict)
	err = s.CreateKey(ctx, &store.APIKey{Prefix: "chd_x", Hash: newHash()})
	wantErr(t, "CreateKey without a user", err, store.ErrConflict)
	wantKeys(t, s, alice, nil, nil)

	k := createKey(t, s, alice, "first")
	for _, user := range []string{alice, bob} {
		dup := &store.APIKey{User: user, Name: "second", Prefix: "chd_y", Hash: k.Hash}
		wantErr(t, "CreateKey with "+user+"'s taken hash", s.CreateKey(ctx, dup), store.ErrConflict)
	}
	if got := keyByHash(t, s, k.Hash); got.ID != k.ID {
		t.Errorf("KeyByHash after the refused duplicates = %+v, want the first key %s", got, k.ID)
	}
	wantKeys(t, s, alice, nil, []*store.APIKey{k})
	wantKeys(t, s, bob, nil, nil)
}

// testRevokeKey: RevokeKey revokes one of the user's keys once, keeping the first time; another user's
// key is not found, unless no user is named (an admin's revoke). A revoked key is still found by hash.
func testRevokeKey(t *testing.T, s store.Store) {
	ctx, alice, bob := t.Context(), newUser("alice"), newUser("bob")
	k, other, bobs := createKey(t, s, alice, "laptop"), createKey(t, s, alice, "phone"), createKey(t, s, bob, "ci")

	_, err := s.RevokeKey(ctx, bob, k.ID)
	wantErr(t, "RevokeKey of another user's key", err, store.ErrNotFound)
	_, err = s.RevokeKey(ctx, alice, "no-such-key")
	wantErr(t, "RevokeKey(unknown)", err, store.ErrNotFound)
	if got := keyByHash(t, s, k.Hash); got.RevokedAt != nil {
		t.Fatalf("a refused RevokeKey revoked the key: %+v", got)
	}

	revoked, err := s.RevokeKey(ctx, alice, k.ID)
	if err != nil {
		t.Fatalf("RevokeKey: %v", err)
	}
	if revoked.RevokedAt == nil {
		t.Fatalf("RevokeKey returned %+v, want it revoked", revoked)
	}
	wantStoredTime(t, "RevokedAt", *revoked.RevokedAt)
	want := *k
	want.RevokedAt = revoked.RevokedAt
	if diff := cmp.Diff(&want, revoked, cmpOpts); diff != "" || revoked.RevokedAt.Before(k.CreatedAt) {
		t.Errorf("RevokeKey returned (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&want, keyByHash(t, s, k.Hash), cmpOpts); diff != "" {
		t.Errorf("KeyByHash of the revoked key (-want +got):\n%s", diff)
	}
	again, err := s.RevokeKey(ctx, alice, k.ID)
	if err != nil || again.RevokedAt == nil || !again.RevokedAt.Equal(*revoked.RevokedAt) {
		t.Errorf("second RevokeKey = %+v, %v; want it revoked at the first time, %v", again, err, revoked.RevokedAt)
	}
	if got := keyByHash(t, s, k.Hash); !got.RevokedAt.Equal(*revoked.RevokedAt) {
		t.Errorf("after a second RevokeKey the key was revoked at %v, want %v", got.RevokedAt, revoked.RevokedAt)
	}
	if got := keyByHash(t, s, other.Hash); got.RevokedAt != nil {
		t.Errorf("RevokeKey revoked another key of the user: %+v", got)
	}

	if byAdmin, err := s.RevokeKey(ctx, "", bobs.ID); err != nil || byAdmin.RevokedAt == nil || byAdmin.User != bob {
		t.Errorf("RevokeKey(\"\", bob's key) = %+v, %v; want bob's key revoked", byAdmin, err)
	}
	if got := keyByHash(t, s, bobs.Hash); got.RevokedAt == nil {
		t.Errorf("bob's key after RevokeKey(\"\") = %+v, want it revoked", got)
	}
}

func createAuthSession(t *testing.T, s store.Store, keyID string) *store.AuthSession {
	t.Helper()
	a := &store.AuthSession{Hash: newHash(), KeyID: keyID,
		ExpiresAt: time.Date(2030, 6, 7, 8, 9, 10, 11_123_456, time.FixedZone("PDT", -7*3600))}
	if err := s.CreateAuthSession(t.Context(), a); err != nil {
		t.Fatalf("CreateAuthSession: %v", err)
	}
	return a
}

// testSignIns: a sign-in is found by its hash with its key; deleting one ends it (deleting a missing one
// is no error); revoking a key ends its sign-ins and no others.
func testSignIns(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	k, other := createKey(t, s, alice, "laptop"), createKey(t, s, alice, "phone")
	a := createAuthSession(t, s, k.ID)
	wantStoredTime(t, "sign-in CreatedAt", a.CreatedAt)
	got, key, err := s.AuthSession(ctx, a.Hash)
	if err != nil {
		t.Fatalf("AuthSession: %v", err)
	}
	want := *a
	want.ExpiresAt = time.Date(2030, 6, 7, 15, 9, 10, 11_123_000, time.UTC)
	if diff := cmp.Diff(&want, got); diff != "" {
		t.Errorf("AuthSession (-want +got):\n%s", diff)
	}
	wantStoredTime(t, "sign-in ExpiresAt", got.ExpiresAt)
	if diff := cmp.Diff(k, key, cmpOpts); diff != "" {
		t.Errorf("AuthSession's key (-want +got):\n%s", diff)
	}
	_, _, err = s.AuthSession(ctx, newHash())
	wantErr(t, "AuthSession(unknown)", err, store.ErrNotFound)

	kept, elsewhere := createAuthSession(t, s, k.ID), createAuthSession(t, s, other.ID)
	for range 2 {
		if err := s.DeleteAuthSession(ctx, a.Hash); err != nil {
			t.Errorf("DeleteAuthSession: %v", err)
		}
	}
	_, _, err = s.AuthSession(ctx, a.Hash)
	wantErr(t, "AuthSession after DeleteAuthSession", err, store.ErrNotFound)
	if err := s.DeleteAuthSession(ctx, newHash()); err != nil {
		t.Errorf("DeleteAuthSession(unknown): %v", err)
	}
	if _, _, err := s.AuthSession(ctx, kept.Hash); err != nil {
		t.Errorf("DeleteAuthSession ended another sign-in of the key: %v", err)
	}

	if _, err := s.RevokeKey(ctx, alice, k.ID); err != nil {
		t.Fatalf("RevokeKey: %v", err)
	}
	_, _, err = s.AuthSession(ctx, kept.Hash)
	wantErr(t, "AuthSession of a revoked key", err, store.ErrNotFound)
	if _, key, err := s.AuthSession(ctx, elsewhere.Hash); err != nil || key.ID != other.ID {
		t.Errorf("AuthSession of the other key = %v, %v; want it kept", key, err)
	}
}
