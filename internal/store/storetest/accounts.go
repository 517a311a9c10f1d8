package storetest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
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

// signInAt stores a sign-in of the key made at created, expiring at expires.
func signInAt(t *testing.T, s store.Store, keyID string, created, expires time.Time) *store.AuthSession {
	t.Helper()
	a := &store.AuthSession{Hash: newHash(), KeyID: keyID, CreatedAt: created, ExpiresAt: expires}
	if err := s.CreateAuthSession(t.Context(), a); err != nil {
		t.Fatalf("CreateAuthSession: %v", err)
	}
	if !a.CreatedAt.Equal(created) {
		t.Errorf("CreateAuthSession made at %v, want the CreatedAt given, %v", a.CreatedAt, created)
	}
	return a
}

// wantSignIn fails unless the sign-in is stored (live) or gone.
func wantSignIn(t *testing.T, s store.Store, what string, a *store.AuthSession, live bool) {
	t.Helper()
	_, _, err := s.AuthSession(t.Context(), a.Hash)
	switch {
	case live && err != nil:
		t.Errorf("%s: AuthSession = %v; want it kept", what, err)
	case !live && !errors.Is(err, store.ErrNotFound):
		t.Errorf("%s: AuthSession = %v; want it gone (ErrNotFound)", what, err)
	}
}

// testSignInsBounded: a key keeps at most 100 sign-ins — signing in again and again cannot grow the
// table: the 101st ends the oldest, and each one more the next oldest. Another key's are its own.
func testSignInsBounded(t *testing.T, s store.Store) {
	alice := newUser("alice")
	k, other := createKey(t, s, alice, "laptop"), createKey(t, s, alice, "phone")
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	expires := start.AddDate(1, 0, 0)
	elsewhere := signInAt(t, s, other.ID, start.Add(-time.Hour), expires) // older than all of k's
	var made []*store.AuthSession
	for i := range 101 {
		made = append(made, signInAt(t, s, k.ID, start.Add(time.Duration(i)*time.Second), expires))
	}
	wantSignIn(t, s, "the oldest of 101", made[0], false)
	for i, a := range made[1:] {
		wantSignIn(t, s, fmt.Sprintf("sign-in %d of 101", i+2), a, true)
	}
	wantSignIn(t, s, "another key's older sign-in", elsewhere, true)

	signInAt(t, s, k.ID, start.Add(time.Hour), expires)
	wantSignIn(t, s, "the oldest after one more", made[1], false)
	wantSignIn(t, s, "the next oldest after one more", made[2], true)
	wantSignIn(t, s, "another key's sign-in after one more", elsewhere, true)
}

// testSignInsSwept: storing a sign-in forgets the sign-ins, of any key, that expired before it was
// made (its CreatedAt, not the store's clock); those expiring later stay.
func testSignInsSwept(t *testing.T, s store.Store) {
	alice, bob := newUser("alice"), newUser("bob")
	k, other := createKey(t, s, alice, "laptop"), createKey(t, s, bob, "ci")
	// Long ago, so that the store's own clock would call every one of these expired.
	at := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	before := at.Add(-2 * time.Hour)
	expired := signInAt(t, s, k.ID, before, at.Add(-time.Hour))
	justExpired := signInAt(t, s, other.ID, before, at.Add(-time.Microsecond))
	kept := signInAt(t, s, k.ID, before, at.Add(time.Microsecond))
	keptOther := signInAt(t, s, other.ID, before, at.Add(time.Hour))

	signInAt(t, s, k.ID, at, at.Add(24*time.Hour))
	wantSignIn(t, s, "a sign-in expired an hour before", expired, false)
	wantSignIn(t, s, "another user's sign-in expired a microsecond before", justExpired, false)
	wantSignIn(t, s, "a sign-in expiring a microsecond after", kept, true)
	wantSignIn(t, s, "another user's sign-in expiring an hour after", keptOther, true)
}

// createLimited creates a run of status (running or queued) in the user's session, made with keyID,
// under quota.
func createLimited(t *testing.T, s store.Store, user, sessionID, keyID, status string,
	quota ...store.Limit) (*store.Run, error) {
	t.Helper()
	run := &store.Run{SessionID: sessionID, Status: status, Agent: "default", Model: "m", KeyID: keyID,
		Quota: quota}
	if status == store.RunQueued {
		run.Request = []byte(`{}`)
	}
	return run, s.CreateRun(t.Context(), user, run, nil)
}

// mustCreateLimited is createLimited that fails the test when the run is refused.
func mustCreateLimited(t *testing.T, s store.Store, user, sessionID, keyID, status string,
	quota ...store.Limit) *store.Run {
	t.Helper()
	run, err := createLimited(t, s, user, sessionID, keyID, status, quota...)
	if err != nil {
		t.Fatalf("CreateRun under %+v: %v", quota, err)
	}
	return run
}

// wantLimit fails unless err is a *store.LimitError (so ErrLimit) for limit, reporting used as Used.
func wantLimit(t *testing.T, what string, err error, limit store.Limit, used int64) {
	t.Helper()
	le, ok := errors.AsType[*store.LimitError](err)
	if !ok || !errors.Is(err, store.ErrLimit) {
		t.Errorf("%s: got error %v, want a *store.LimitError", what, err)
		return
	}
	if diff := cmp.Diff(store.LimitError{Limit: limit, Used: used}, *le); diff != "" {
		t.Errorf("%s: LimitError (-want +got):\n%s", what, diff)
	}
}

// testQuotaConcurrentRuns: a concurrent-runs limit counts the user's running and queued runs, not
// another user's; a run it refuses stores nothing: no run, no new session, no first record; a run that
// ends makes room.
func testQuotaConcurrentRuns(t *testing.T, s store.Store) {
	ctx, alice, bob := t.Context(), newUser("alice"), newUser("bob")
	limit := store.Limit{Name: store.LimitConcurrentRuns, Max: 2}
	for range 3 {
		createRun(t, s, bob, createSession(t, s, bob).ID)
	}
	s1, s2, s3 := createSession(t, s, alice), createSession(t, s, alice), createSession(t, s, alice)
	r1 := mustCreateLimited(t, s, alice, s1.ID, "", store.RunRunning, limit)
	r2 := mustCreateLimited(t, s, alice, s2.ID, "", store.RunRunning, limit)

	plain := &store.Run{ID: "over-" + alice, SessionID: s3.ID, Quota: []store.Limit{limit}}
	wantLimit(t, "a third run", s.CreateRun(ctx, alice, plain, nil), limit, 2)
	wantNoRun(t, s, alice, plain.ID)

	newSess := &store.Run{SessionID: "new-" + alice, NewSession: &store.Session{Agent: "default"},
		Quota: []store.Limit{limit}}
	first := store.Record{Role: store.RoleUser, Content: "hello"}
	wantLimit(t, "a third run in a new session", s.CreateRun(ctx, alice, newSess, &first), limit, 2)
	_, err := s.Session(ctx, alice, "new-"+alice)
	wantErr(t, "Session of a refused run's new session", err, store.ErrNotFound)

	first = userRecord(s3.ID, "hello")
	withFirst := &store.Run{SessionID: s3.ID, Quota: []store.Limit{limit}}
	wantLimit(t, "a third run with a first record", s.CreateRun(ctx, alice, withFirst, &first), limit, 2)
	if got := records(t, s, alice, s3.ID); len(got) != 0 || first.ID != "" || first.Seq != 0 {
		t.Errorf("a refused run stored %+v; the caller's record became %+v", got, first)
	}
	_, err = createLimited(t, s, alice, s1.ID, "", store.RunQueued, limit)
	wantLimit(t, "a third run, queued", err, limit, 2)

	// A queued run counts as much as a running one.
	mustFinish(t, s, alice, r1.ID, store.RunEnd{Status: store.RunCompleted})
	waiting := mustCreateLimited(t, s, alice, s2.ID, "", store.RunQueued, limit)
	_, err = createLimited(t, s, alice, s3.ID, "", store.RunRunning, limit)
	wantLimit(t, "a run beside a running and a queued one", err, limit, 2)
	mustFinish(t, s, alice, waiting.ID, store.RunEnd{Status: store.RunCancelled})
	mustCreateLimited(t, s, alice, s3.ID, "", store.RunRunning, limit)
	_, err = createLimited(t, s, alice, s1.ID, "", store.RunRunning, limit)
	wantLimit(t, "a third run again", err, limit, 2)
	mustFinish(t, s, alice, r2.ID, store.RunEnd{Status: store.RunFailed})
	mustCreateLimited(t, s, alice, s1.ID, "", store.RunRunning, limit)
}

// testQuotaKeyRuns: a concurrent-runs limit of a key counts the user's runs made with that key only,
// never another user's runs under the same key id; the user's limit counts runs of every key.
func testQuotaKeyRuns(t *testing.T, s store.Store) {
	alice, bob := newUser("alice"), newUser("bob")
	k1, k2 := createKey(t, s, alice, "one").ID, createKey(t, s, alice, "two").ID
	limit := store.Limit{Name: store.LimitConcurrentRuns, KeyID: k1, Max: 1}
	for _, key := range []string{k2, ""} {
		mustCreateLimited(t, s, alice, createSession(t, s, alice).ID, key, store.RunRunning)
	}
	mustCreateLimited(t, s, bob, createSession(t, s, bob).ID, k1, store.RunRunning)
	mustCreateLimited(t, s, bob, createSession(t, s, bob).ID, k1, store.RunQueued)

	run := mustCreateLimited(t, s, alice, createSession(t, s, alice).ID, k1, store.RunRunning, limit)
	_, err := createLimited(t, s, alice, createSession(t, s, alice).ID, k1, store.RunRunning, limit)
	wantLimit(t, "a second run of the key", err, limit, 1)
	mustCreateLimited(t, s, alice, createSession(t, s, alice).ID, k2, store.RunRunning,
		store.Limit{Name: store.LimitConcurrentRuns, KeyID: k2, Max: 2})
	user := store.Limit{Name: store.LimitConcurrentRuns, Max: 4}
	_, err = createLimited(t, s, alice, createSession(t, s, alice).ID, k1, store.RunRunning, user)
	wantLimit(t, "a run past the user's limit", err, user, 4)

	mustFinish(t, s, alice, run.ID, store.RunEnd{Status: store.RunCompleted})
	mustCreateLimited(t, s, alice, createSession(t, s, alice).ID, k1, store.RunRunning, limit, user)
}

// testQuotaRace: of 50 CreateRuns racing under a limit of 5 concurrent runs, each for a new session,
// exactly 5 pass; the others are refused and leave no session behind.
func testQuotaRace(t *testing.T, s store.Store) {
	const racers, most = 50, 5
	alice := newUser("alice")
	limit := store.Limit{Name: store.LimitConcurrentRuns, Max: most}
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			run := &store.Run{Agent: "default", NewSession: &store.Session{Agent: "default"},
				Quota: []store.Limit{limit}}
			errs[i] = s.CreateRun(t.Context(), alice, run, nil)
		})
	}
	wg.Wait()
	passed := 0
	for _, err := range errs {
		if err == nil {
			passed++
			continue
		}
		wantLimit(t, "a losing CreateRun", err, limit, most)
	}
	if passed != most {
		t.Errorf("%d of %d racing CreateRuns passed a limit of %d", passed, racers, most)
	}
	sessions, _, err := s.Sessions(t.Context(), alice, store.Page{Limit: 200})
	if err != nil {
		t.Fatalf("Sessions: %v", err)
	}
	if len(sessions) != passed {
		t.Errorf("the race left %d sessions, want one for each of the %d runs that passed", len(sessions), passed)
	}
}

// usageRow is a usage entry and the user it was added under.
type usageRow struct {
	user string
	store.UsageEntry
}

func addUsage(t *testing.T, s store.Store, rows []usageRow) {
	t.Helper()
	for _, r := range rows {
		if err := s.AddUsage(t.Context(), r.user, r.UsageEntry); err != nil {
			t.Fatalf("AddUsage: %v", err)
		}
	}
}

// usedSince sums what a tokens and a spend limit count of rows: the input and output tokens and the cost
// of the user's rows (made with keyID, when not "") created at or after since.
func usedSince(rows []usageRow, user, keyID string, since time.Time) (tokens, cost int64) {
	for _, r := range rows {
		if r.user == user && (keyID == "" || r.KeyID == keyID) && !r.CreatedAt.Before(since) {
			tokens += r.InputTokens + r.OutputTokens
			cost += r.CostNanoUSD
		}
	}
	return tokens, cost
}

// testQuotaUsage: a tokens limit counts input and output tokens (not cache or reasoning tokens), a
// spend limit the cost, of the user's usage entries created at or after Since, or of one key's; a run is
// refused at Max and passes below it. Limits sharing a Quota are counted each with its own key and
// Since. UsageSince returns the same sums.
func testQuotaUsage(t *testing.T, s store.Store) {
	ctx, alice, bob := t.Context(), newUser("alice"), newUser("bob")
	k1, k2 := createKey(t, s, alice, "one").ID, createKey(t, s, alice, "two").ID
	since := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	rows := []usageRow{
		{alice, store.UsageEntry{KeyID: k1, Model: "m", Usage: store.Usage{InputTokens: 100, OutputTokens: 20,
			CacheReadTokens: 1000, CacheWriteTokens: 500, ReasoningTokens: 300}, CostNanoUSD: 7_000, CreatedAt: since}},
		{alice, store.UsageEntry{KeyID: k2, Model: "m", Usage: store.Usage{InputTokens: 40, OutputTokens: 2},
			CostNanoUSD: 3_000, CreatedAt: since.Add(5 * time.Hour)}},
		{alice, store.UsageEntry{Model: "m", Usage: store.Usage{InputTokens: 5, OutputTokens: 5, CacheReadTokens: 9},
			CostNanoUSD: 11, CreatedAt: since.Add(30 * time.Minute).In(time.FixedZone("CET", 3600))}},
		{alice, store.UsageEntry{KeyID: k1, Model: "m", Usage: store.Usage{InputTokens: 9_000, OutputTokens: 900},
			CostNanoUSD: 9_000_000, CreatedAt: since.Add(-time.Microsecond)}},
		{bob, store.UsageEntry{KeyID: k1, Model: "m", Usage: store.Usage{InputTokens: 50_000, OutputTokens: 1},
			CostNanoUSD: 5_000_000, CreatedAt: since.Add(time.Hour)}},
	}
	addUsage(t, s, rows)
	sess := createSession(t, s, alice)
	try := func(quota ...store.Limit) error {
		t.Helper()
		run, err := createLimited(t, s, alice, sess.ID, "", store.RunRunning, quota...)
		if err == nil {
			mustFinish(t, s, alice, run.ID, store.RunEnd{Status: store.RunCompleted})
		}
		return err
	}
	for _, key := range []string{"", k1, k2} {
		tokens, cost := usedSince(rows, alice, key, since)
		for _, l := range []struct {
			name string
			used int64
		}{{store.LimitTokens, tokens}, {store.LimitSpend, cost}} {
			at := store.Limit{Name: l.name, KeyID: key, Max: l.used, Since: since}
			wantLimit(t, fmt.Sprintf("%s of key %q at its limit", l.name, key), try(at), at, l.used)
			below := at
			below.Max++
			if err := try(below); err != nil {
				t.Errorf("%s of key %q below its limit: %v", l.name, key, err)
			}
		}
		gotTokens, gotCost, err := s.UsageSince(ctx, alice, key, since.In(time.FixedZone("PST", -8*3600)))
		if err != nil || gotTokens != tokens || gotCost != cost {
			t.Errorf("UsageSince(key %q) = %d tokens, %d nano-USD, %v; want %d, %d", key, gotTokens, gotCost, err,
				tokens, cost)
		}
	}
	testQuotaUsageShared(t, s, alice, k1, since, rows, try)

	later := store.Limit{Name: store.LimitTokens, Max: 1, Since: since.Add(6 * time.Hour)}
	if err := try(later); err != nil {
		t.Errorf("a tokens limit since after every entry: %v", err)
	}
	if tokens, cost, err := s.UsageSince(ctx, alice, "", later.Since); err != nil || tokens != 0 || cost != 0 {
		t.Errorf("UsageSince after every entry = %d, %d, %v; want nothing", tokens, cost, err)
	}
	tokens, cost := usedSince(rows, bob, k1, since)
	gotTokens, gotCost, err := s.UsageSince(ctx, bob, k1, since)
	if err != nil || gotTokens != tokens || gotCost != cost {
		t.Errorf("UsageSince(bob, key %s) = %d, %d, %v; want %d, %d", k1, gotTokens, gotCost, err, tokens, cost)
	}
}

// testQuotaUsageShared: of limits in one Quota, each is counted on its own: two with the same key and
// Since, one of the user beside one of a key, two with different Since.
func testQuotaUsageShared(t *testing.T, s store.Store, user, keyID string, since time.Time, rows []usageRow,
	try func(...store.Limit) error) {
	tokens, cost := usedSince(rows, user, "", since)
	keyTokens, _ := usedSince(rows, user, keyID, since)
	earlier := since.Add(-time.Hour)
	allTokens, _ := usedSince(rows, user, "", earlier)
	for _, tc := range []struct {
		name    string
		passing store.Limit
		reached store.Limit
		used    int64
	}{
		{"spend beside tokens", store.Limit{Name: store.LimitTokens, Max: tokens + 1, Since: since},
			store.Limit{Name: store.LimitSpend, Max: cost, Since: since}, cost},
		{"the user's beside a key's",
			store.Limit{Name: store.LimitTokens, KeyID: keyID, Max: keyTokens + 1, Since: since},
			store.Limit{Name: store.LimitTokens, Max: tokens, Since: since}, tokens},
		{"an earlier Since", store.Limit{Name: store.LimitTokens, Max: tokens + 1, Since: since},
			store.Limit{Name: store.LimitTokens, Max: allTokens, Since: earlier}, allTokens},
	} {
		wantLimit(t, tc.name, try(tc.passing, tc.reached), tc.reached, tc.used)
	}
}

// sumUsage sums rows as UsageTotals answers q, groups in ascending order.
func sumUsage(rows []usageRow, q store.UsageQuery) []store.UsageTotal {
	sums := map[string]*store.UsageTotal{}
	for _, r := range rows {
		if q.User != "" && r.user != q.User || !q.From.IsZero() && r.CreatedAt.Before(q.From) ||
			!q.To.IsZero() && !r.CreatedAt.Before(q.To) {
			continue
		}
		group := map[string]string{store.GroupByUser: r.user, store.GroupByKey: r.KeyID, store.GroupByAgent: r.Agent,
			store.GroupByModel: r.Model, store.GroupByDay: r.CreatedAt.UTC().Format(time.DateOnly)}[q.GroupBy]
		sum := sums[group]
		if sum == nil {
			sum = &store.UsageTotal{Group: group}
			sums[group] = sum
		}
		sum.Calls++
		sum.Usage.Add(r.Usage)
		sum.CostNanoUSD += r.CostNanoUSD
	}
	var totals []store.UsageTotal
	for _, g := range slices.Sorted(maps.Keys(sums)) {
		totals = append(totals, *sums[g])
	}
	return totals
}

// usageEntries adds, for each of three new users, entries of two agents and two models at times, with
// the user's two keys in turn and different tokens and costs. It returns the users, their keys and the
// entries.
func usageEntries(t *testing.T, s store.Store, times []time.Time) (users, keys []string, rows []usageRow) {
	t.Helper()
	var n int64
	for _, name := range []string{"alice", "bob", "carol"} {
		user := newUser(name)
		users = append(users, user)
		own := []string{createKey(t, s, user, "a").ID, createKey(t, s, user, "b").ID}
		keys = append(keys, own...)
		for _, agent := range []string{"default", "support"} {
			for _, model := range []string{"openai/gpt-4o-mini", "anthropic/claude-sonnet-4"} {
				for _, at := range times {
					n++
					rows = append(rows, usageRow{user, store.UsageEntry{RunID: "run-" + user, SessionID: "s",
						KeyID: own[n%2], Agent: agent, Model: model, CostNanoUSD: 1000*n + 7, CreatedAt: at,
						Usage: store.Usage{InputTokens: 100*n + 1, OutputTokens: n, CacheReadTokens: 2 * n,
							CacheWriteTokens: 3 * n, ReasoningTokens: 5 * n}}})
				}
			}
		}
	}
	addUsage(t, s, rows)
	return users, keys, rows
}

// testUsageTotals: UsageTotals sums the entries of [From, To) per user, key, agent, model or UTC day,
// of one user or of all, in ascending order of group; Calls counts the entries. An unknown grouping is
// an error.
func testUsageTotals(t *testing.T, s store.Store) {
	day1 := time.Date(2026, 2, 3, 0, 0, 0, 0, time.UTC)
	day2 := day1.AddDate(0, 0, 1)
	// The second is 01:30 on day 2 where it was written, and still day 1 in UTC.
	times := []time.Time{day1.Add(10 * time.Hour),
		day1.Add(23*time.Hour + 30*time.Minute).In(time.FixedZone("EET", 2*3600)), day2, day2.Add(time.Hour)}
	users, keys, rows := usageEntries(t, s, times)
	groupings := []string{store.GroupByUser, store.GroupByKey, store.GroupByAgent, store.GroupByModel, store.GroupByDay}
	var open time.Time
	bounds := []struct{ from, to time.Time }{{open, open}, {times[1], times[3]}, {times[2], open}, {open, times[1]}}
	for _, b := range bounds {
		for _, by := range []string{store.GroupByUser, store.GroupByKey} {
			q := store.UsageQuery{From: b.from, To: b.to, GroupBy: by}
			mine := users
			if by == store.GroupByKey {
				mine = keys
			}
			got := slices.DeleteFunc(usageTotals(t, s, q), func(u store.UsageTotal) bool {
				return !slices.Contains(mine, u.Group)
			})
			if diff := cmp.Diff(sumUsage(rows, q), got, cmpOpts); diff != "" {
				t.Errorf("UsageTotals(%+v) of this test's %ss (-want +got):\n%s", q, by, diff)
			}
		}
		for _, user := range users {
			for _, by := range groupings {
				q := store.UsageQuery{User: user, From: b.from, To: b.to, GroupBy: by}
				if diff := cmp.Diff(sumUsage(rows, q), usageTotals(t, s, q), cmpOpts); diff != "" {
					t.Errorf("UsageTotals(%+v) (-want +got):\n%s", q, diff)
				}
			}
		}
	}
	if got, err := s.UsageTotals(t.Context(), store.UsageQuery{User: users[0], GroupBy: "week"}); err == nil {
		t.Errorf("UsageTotals grouped by week = %+v, want an error", got)
	}
}

// usageTotals returns UsageTotals(q), having checked that its groups are in ascending order.
func usageTotals(t *testing.T, s store.Store, q store.UsageQuery) []store.UsageTotal {
	t.Helper()
	totals, err := s.UsageTotals(t.Context(), q)
	if err != nil {
		t.Fatalf("UsageTotals(%+v): %v", q, err)
	}
	if !slices.IsSortedFunc(totals, func(a, b store.UsageTotal) int { return strings.Compare(a.Group, b.Group) }) {
		t.Errorf("UsageTotals(%+v) is not in ascending order of group: %+v", q, totals)
	}
	return totals
}

// testRunKeyID: a run keeps the key it was created with, running or queued, in Run and UnfinishedRuns.
func testRunKeyID(t *testing.T, s store.Store) {
	alice := newUser("alice")
	k := createKey(t, s, alice, "laptop")
	sess := createSession(t, s, alice)
	running := mustCreateLimited(t, s, alice, sess.ID, k.ID, store.RunRunning)
	queued := mustCreateLimited(t, s, alice, sess.ID, k.ID, store.RunQueued)
	plain := createRun(t, s, alice, createSession(t, s, alice).ID)
	if diff := cmp.Diff(running, getRun(t, s, alice, running.ID)); diff != "" || running.KeyID != k.ID {
		t.Errorf("Run of a run created with key %s (-want +got):\n%s", k.ID, diff)
	}
	want := map[string]string{running.ID: k.ID, queued.ID: k.ID, plain.ID: ""}
	for id, key := range want {
		if got := getRun(t, s, alice, id).KeyID; got != key {
			t.Errorf("Run(%s).KeyID = %q, want %q", id, got, key)
		}
	}
	all, err := s.UnfinishedRuns(t.Context())
	if err != nil {
		t.Fatalf("UnfinishedRuns: %v", err)
	}
	got := map[string]string{}
	for _, r := range all {
		if _, ok := want[r.ID]; ok {
			got[r.ID] = r.KeyID
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("UnfinishedRuns' key ids (-want +got):\n%s", diff)
	}
}
