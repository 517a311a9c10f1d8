package storetest

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/store"
)

// testCreateRunNewSession: CreateRun with NewSession stores the session, the run and the first record
// together — under a client's id or an assigned one — and a refused CreateRun stores none of them, also
// when the id belongs to another user's session.
func testCreateRunNewSession(t *testing.T, s store.Store) {
	ctx, alice, bob := t.Context(), newUser("alice"), newUser("bob")
	run := &store.Run{Agent: "support", Model: "m", NewSession: &store.Session{Title: "Hello there", Agent: "support"}}
	first := store.Record{Role: store.RoleUser, Content: "Hello there"}
	if err := s.CreateRun(ctx, alice, run, &first); err != nil {
		t.Fatalf("CreateRun with a new session: %v", err)
	}
	sess, err := s.Session(ctx, alice, run.SessionID)
	if err != nil || run.SessionID == "" {
		t.Fatalf("the new session %q: %v", run.SessionID, err)
	}
	want := store.Session{ID: run.SessionID, Title: "Hello there", Agent: "support", Metadata: []byte("{}"),
		CreatedAt: sess.CreatedAt, UpdatedAt: sess.UpdatedAt, LastSeq: 1}
	if diff := cmp.Diff(&want, sess); diff != "" || sess.CreatedAt.IsZero() {
		t.Errorf("the new session (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(sess, run.NewSession); diff != "" {
		t.Errorf("CreateRun returned NewSession unlike the stored one (-stored +returned):\n%s", diff)
	}
	if got := records(t, s, alice, run.SessionID); len(got) != 1 || got[0].ID != first.ID || got[0].RunID != run.ID {
		t.Errorf("the new session holds %+v, want the first record of run %s", got, run.ID)
	}
	if got := getRun(t, s, alice, run.ID); got.SessionID != run.SessionID || got.Status != store.RunRunning {
		t.Errorf("Run = %+v", got)
	}

	// A client's id.
	clientID := "chat-" + alice
	queued := &store.Run{SessionID: clientID, Status: store.RunQueued, NewSession: &store.Session{Agent: "default"}}
	if err := s.CreateRun(ctx, alice, queued, nil); err != nil {
		t.Fatalf("CreateRun(queued) with a new session under a client's id: %v", err)
	}
	if got, err := s.Session(ctx, alice, clientID); err != nil || got.ID != clientID || queued.SessionID != clientID {
		t.Errorf("Session(%s) = %+v, %v", clientID, got, err)
	}

	// Refusals store no session.
	taken := &store.Run{NewSession: &store.Session{Agent: "default"}, IdempotencyKey: "k"}
	if err := s.CreateRun(ctx, alice, &store.Run{SessionID: run.SessionID, Status: store.RunQueued, IdempotencyKey: "k"}, nil); err != nil {
		t.Fatalf("CreateRun with a key: %v", err)
	}
	for _, tc := range []struct {
		name  string
		user  string
		run   *store.Run
		first *store.Record
		want  error
	}{
		{"taken key", alice, taken, nil, store.ErrDuplicate},
		{"id of another user's session", bob, &store.Run{SessionID: clientID, NewSession: &store.Session{Agent: "default"}}, nil, store.ErrConflict},
		{"id of an own session", alice, &store.Run{SessionID: clientID, NewSession: &store.Session{Agent: "default"}}, nil, store.ErrConflict},
		// With a plain first message, the common send: the stores may store it in one statement.
		{"id of another user's session, with a message", bob, &store.Run{SessionID: clientID, NewSession: &store.Session{Agent: "default"}},
			&store.Record{Role: store.RoleUser, Content: "x"}, store.ErrConflict},
		{"id of an own session, with a message", alice, &store.Run{SessionID: clientID, NewSession: &store.Session{Agent: "default"}},
			&store.Record{Role: store.RoleUser, Content: "x"}, store.ErrConflict},
		{"queued with a first record", alice, &store.Run{SessionID: "q-" + alice, Status: store.RunQueued,
			NewSession: &store.Session{Agent: "default"}}, &store.Record{Role: store.RoleUser, Content: "x"}, nil},
		{"refused first record", alice, &store.Run{SessionID: "r-" + alice, NewSession: &store.Session{Agent: "default"}},
			&store.Record{Role: store.RoleTool, Content: "x"}, nil},
	} {
		before, _, err := s.Sessions(ctx, tc.user, store.Page{Limit: 200})
		if err != nil {
			t.Fatal(err)
		}
		err = s.CreateRun(ctx, tc.user, tc.run, tc.first)
		if tc.want != nil {
			wantErr(t, "CreateRun, "+tc.name, err, tc.want)
		} else if err == nil {
			t.Errorf("CreateRun, %s: accepted", tc.name)
		}
		after, _, err := s.Sessions(ctx, tc.user, store.Page{Limit: 200})
		if err != nil {
			t.Fatal(err)
		}
		if len(after) != len(before) {
			t.Errorf("CreateRun, %s: refused, yet the user's sessions went from %d to %d", tc.name, len(before), len(after))
		}
	}
	if got, err := s.Session(ctx, alice, clientID); err != nil || got.Agent != "default" {
		t.Errorf("after bob's refused CreateRun, alice's session %s is %+v, %v", clientID, got, err)
	}
	if recs, err := s.Records(ctx, alice, clientID); err != nil || len(recs) != 0 {
		t.Errorf("after the refused CreateRuns, alice's session %s holds %d records, %v; want none", clientID, len(recs), err)
	}
}

// testCreateRunTitle: CreateRun's Title titles an untitled session, and leaves a title alone.
func testCreateRunTitle(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	untitled := &store.Session{Agent: "default"}
	if err := s.CreateSession(ctx, alice, untitled); err != nil {
		t.Fatal(err)
	}
	titled := createSession(t, s, alice)
	for _, sess := range []*store.Session{untitled, titled} {
		first := userRecord(sess.ID, "What time is it?")
		if err := s.CreateRun(ctx, alice, &store.Run{SessionID: sess.ID, Title: "What time is it?"}, &first); err != nil {
			t.Fatalf("CreateRun with a title: %v", err)
		}
	}
	if got, _ := s.Session(ctx, alice, untitled.ID); got.Title != "What time is it?" {
		t.Errorf("the untitled session's title is %q, want the run's", got.Title)
	}
	if got, _ := s.Session(ctx, alice, titled.ID); got.Title != titled.Title {
		t.Errorf("the titled session's title became %q, want %q kept", got.Title, titled.Title)
	}
}

// testReservedSeq: a run's ReservedSeq is stored as CreateRun is given it, and AppendEvents and
// StartRun raise it — with or without events — and never lower it.
func testReservedSeq(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess := createSession(t, s, alice)
	run := &store.Run{SessionID: sess.ID, ReservedSeq: 256}
	if err := s.CreateRun(ctx, alice, run, nil); err != nil {
		t.Fatal(err)
	}
	wantReserved := func(id string, want int64) {
		t.Helper()
		if got := getRun(t, s, alice, id).ReservedSeq; got != want {
			t.Errorf("run %s has ReservedSeq %d, want %d", id, got, want)
		}
	}
	wantReserved(run.ID, 256)
	if err := s.AppendEvents(ctx, []store.Event{event(run.ID, 1, "run_start", `{}`)},
		[]store.Reservation{{RunID: run.ID, Seq: 600}}); err != nil {
		t.Fatal(err)
	}
	wantReserved(run.ID, 600)
	if err := s.AppendEvents(ctx, nil, []store.Reservation{{RunID: run.ID, Seq: 300}}); err != nil {
		t.Fatal(err)
	}
	wantReserved(run.ID, 600)
	if err := s.AppendEvents(ctx, nil, []store.Reservation{{RunID: run.ID, Seq: 900}}); err != nil {
		t.Fatal(err)
	}
	wantReserved(run.ID, 900)

	queued := queueRun(t, s, alice, sess.ID, `{}`)
	wantReserved(queued.ID, 0)
	mustFinish(t, s, alice, run.ID, store.RunEnd{Status: store.RunCompleted})
	if err := s.StartRun(ctx, alice, queued.ID, nil, 128); err != nil {
		t.Fatal(err)
	}
	wantReserved(queued.ID, 128)
	runs, err := s.UnfinishedRuns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if r.ID == queued.ID && r.ReservedSeq != 128 {
			t.Errorf("UnfinishedRuns reports ReservedSeq %d, want 128", r.ReservedSeq)
		}
	}
}
