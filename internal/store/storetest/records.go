package storetest

import (
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"chatd/internal/store"
)

// testOtherUser checks that every method answers another user's ids as ErrNotFound and changes nothing.
func testOtherUser(t *testing.T, s store.Store) {
	ctx, alice, bob := t.Context(), newUser("alice"), newUser("bob")
	sess := createSession(t, s, alice)
	run := &store.Run{SessionID: sess.ID, Agent: "default", Model: "openai/gpt-4o-mini", IdempotencyKey: "key"}
	if err := s.CreateRun(ctx, alice, run, nil); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	queued := queueRun(t, s, alice, sess.ID, `{}`)
	mustAppend(t, s, alice, userRecord(sess.ID, "hi"))
	asst := mustAppend(t, s, alice, runAssistant(run, "call_1"))
	if err := s.AppendEvents(ctx, []store.Event{event(run.ID, 1, "run_start", `{}`)}, nil); err != nil {
		t.Fatalf("AppendEvents: %v", err)
	}
	before := records(t, s, alice, sess.ID)
	sessBefore, _ := s.Session(ctx, alice, sess.ID)

	_, err := s.Session(ctx, bob, sess.ID)
	wantErr(t, "Session", err, store.ErrNotFound)
	_, err = s.UpdateSession(ctx, bob, sess.ID, store.SessionPatch{Title: ptr("mine")})
	wantErr(t, "UpdateSession", err, store.ErrNotFound)
	wantErr(t, "DeleteSession", s.DeleteSession(ctx, bob, sess.ID), store.ErrNotFound)
	_, err = s.Records(ctx, bob, sess.ID)
	wantErr(t, "Records", err, store.ErrNotFound)
	r := userRecord(sess.ID, "intruder")
	wantErr(t, "AppendRecord(user)", s.AppendRecord(ctx, bob, &r), store.ErrNotFound)
	r = toolResult(asst, "call_1")
	wantErr(t, "AppendRecord(tool)", s.AppendRecord(ctx, bob, &r), store.ErrNotFound)
	// Alice's session is busy, which bob must not learn either.
	wantErr(t, "CreateRun", s.CreateRun(ctx, bob, &store.Run{SessionID: sess.ID}, nil), store.ErrNotFound)
	r = userRecord(sess.ID, "intruder")
	wantErr(t, "CreateRun with a first record", s.CreateRun(ctx, bob, &store.Run{SessionID: sess.ID}, &r),
		store.ErrNotFound)
	err = s.CreateRun(ctx, bob, &store.Run{SessionID: sess.ID, Status: store.RunQueued}, nil)
	wantErr(t, "CreateRun(queued)", err, store.ErrNotFound)
	_, err = s.Run(ctx, bob, run.ID)
	wantErr(t, "Run", err, store.ErrNotFound)
	_, err = s.ActiveRun(ctx, bob, sess.ID)
	wantErr(t, "ActiveRun", err, store.ErrNotFound)
	_, err = s.RunByKey(ctx, bob, "key")
	wantErr(t, "RunByKey", err, store.ErrNotFound)
	wantErr(t, "StartRun", s.StartRun(ctx, bob, queued.ID, nil, 0), store.ErrNotFound)
	_, err = s.CloseCalls(ctx, bob, run.ID, "mine")
	wantErr(t, "CloseCalls", err, store.ErrNotFound)
	_, err = s.Events(ctx, bob, run.ID, 0, 10)
	wantErr(t, "Events", err, store.ErrNotFound)
	for _, id := range []string{run.ID, queued.ID} {
		_, err = s.FinishRun(ctx, bob, id, store.RunEnd{Status: store.RunCancelled})
		wantErr(t, "FinishRun", err, store.ErrNotFound)
	}

	// Ids that exist for nobody answer the same.
	_, err = s.Session(ctx, alice, "no-such-session")
	wantErr(t, "Session(unknown)", err, store.ErrNotFound)
	_, err = s.Run(ctx, alice, "no-such-run")
	wantErr(t, "Run(unknown)", err, store.ErrNotFound)
	r = userRecord("no-such-session", "hello")
	wantErr(t, "AppendRecord(unknown session)", s.AppendRecord(ctx, alice, &r), store.ErrNotFound)

	if diff := cmp.Diff(before, records(t, s, alice, sess.ID), cmpOpts); diff != "" {
		t.Errorf("another user changed the records (-before +after):\n%s", diff)
	}
	if sessAfter, err := s.Session(ctx, alice, sess.ID); err != nil || !cmp.Equal(sessBefore, sessAfter, cmpOpts) {
		t.Errorf("another user changed the session: %+v, then %+v (%v)", sessBefore, sessAfter, err)
	}
	if got, err := s.Run(ctx, alice, run.ID); err != nil || got.Status != store.RunRunning || got.LastEventSeq != 1 {
		t.Errorf("another user changed the run: %+v, %v", got, err)
	}
	if got, err := s.Run(ctx, alice, queued.ID); err != nil || got.Status != store.RunQueued {
		t.Errorf("another user changed the queued run: %+v, %v", got, err)
	}
}

func testAppendOrder(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess, other := createSession(t, s, alice), createSession(t, s, alice)
	var want []store.Record
	for _, r := range []store.Record{
		{SessionID: sess.ID, Role: store.RoleSystem, Content: "be brief"},
		userRecord(sess.ID, "one"),
		{SessionID: sess.ID, Role: store.RoleAssistant, Content: "two", FinishReason: "stop"},
		userRecord(sess.ID, "three"),
	} {
		r = mustAppend(t, s, alice, r)
		if r.ID == "" || r.CreatedAt.IsZero() || r.CreatedAt.Location() != time.UTC {
			t.Errorf("AppendRecord left ID %q, CreatedAt %v", r.ID, r.CreatedAt)
		}
		want = append(want, r)
	}
	wantSeqs(t, want)
	if o := mustAppend(t, s, alice, userRecord(other.ID, "elsewhere")); o.Seq != 1 {
		t.Errorf("first record of another session has Seq %d, want 1", o.Seq)
	}
	// A refused append takes no Seq.
	bad := store.Record{SessionID: sess.ID, Role: store.RoleTool, ParentID: want[2].ID, ToolCallID: "call_x"}
	wantErr(t, "AppendRecord(tool without call)", s.AppendRecord(ctx, alice, &bad), store.ErrConflict)
	want = append(want, mustAppend(t, s, alice, userRecord(sess.ID, "four")))
	wantSeqs(t, want)

	got := records(t, s, alice, sess.ID)
	if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
		t.Errorf("Records differ from the appended records (-want +got):\n%s", diff)
	}
	after, err := s.Session(ctx, alice, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if last := want[len(want)-1]; after.UpdatedAt.Before(last.CreatedAt) || after.UpdatedAt.Before(sess.UpdatedAt) {
		t.Errorf("session UpdatedAt %v not touched by the append at %v", after.UpdatedAt, last.CreatedAt)
	}
}

// testRoundTrip stores every field of every role and reads it back unchanged.
func testRoundTrip(t *testing.T, s store.Store) {
	alice := newUser("alice")
	sess := createSession(t, s, alice)
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	args := json.RawMessage(`{ "city" : "Paris",  "q": "<a href=\"x\">&amp;</a>", "n": 1.50 }`)
	user := mustAppend(t, s, alice, store.Record{ID: "chosen-" + alice, SessionID: sess.ID, RunID: "run-1",
		Role: store.RoleUser, Content: "what's this?",
		Attachments: []store.Attachment{{MediaType: "image/png", Name: "shot.png", Data: binary}}})
	if user.ID != "chosen-"+alice || user.Success != nil || user.DurationMS != nil {
		t.Errorf("user record came back as %+v", user)
	}
	asst := mustAppend(t, s, alice, store.Record{SessionID: sess.ID, RunID: "run-1", Role: store.RoleAssistant,
		Content: "let me look", Reasoning: "the user wants weather", Model: "anthropic/claude-sonnet-4-5",
		FinishReason: "tool_calls", Usage: &store.Usage{InputTokens: 10, OutputTokens: 5, CacheReadTokens: 3,
			CacheWriteTokens: 2, ReasoningTokens: 1},
		ToolCalls: []store.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: args},
			{ID: "call_2", Name: "current_time"}},
		Replay: &store.Replay{Model: "anthropic/claude-sonnet-4-5", Parts: []store.ReplayPart{
			{Kind: store.PartReasoning, Text: "the user wants weather", Signature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3h\u00e9=="},
			{Kind: store.PartRedactedReasoning, Signature: "EmwKAhgBEgy3va3pzix/LafPsn4a"},
			{Kind: store.PartText, Text: "let me look"},
			{Kind: store.PartToolCall, ID: "call_1", Signature: "CiQBjz1rX2"}}}})
	if got := string(asst.ToolCalls[1].Arguments); got != "{}" {
		t.Errorf("absent arguments stored as %q, want {}", got)
	}
	ok := mustAppend(t, s, alice, store.Record{SessionID: sess.ID, RunID: "run-1", Role: store.RoleTool,
		ParentID: asst.ID, ToolCallID: "call_1", Name: "get_weather", Content: "21.5°C",
		Success: ptr(true), DurationMS: ptr(int64(12)), Payload: json.RawMessage(`{"temp": 21.5, "unit":"C"}`),
		Attachments: []store.Attachment{{MediaType: "image/jpeg", Data: []byte{0xff, 0xd8, 0}}}})
	failed := mustAppend(t, s, alice, store.Record{SessionID: sess.ID, Role: store.RoleTool,
		ParentID: asst.ID, ToolCallID: "call_2", Content: "boom", Success: ptr(false), DurationMS: ptr(int64(0))})

	summary := mustAppend(t, s, alice, store.Record{SessionID: sess.ID, RunID: "run-1", Role: store.RoleSystem,
		Content: "The user asked for the weather.", SummaryThrough: failed.ID})

	want := []store.Record{user, asst, ok, failed, summary}
	got := records(t, s, alice, sess.ID)
	if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
		t.Fatalf("Records differ from the appended records (-want +got):\n%s", diff)
	}
	if a := string(got[1].ToolCalls[0].Arguments); a != string(args) {
		t.Errorf("arguments came back as %s, want %s byte for byte", a, args)
	}
	if got[0].Success != nil || got[0].DurationMS != nil || got[0].Usage != nil || got[0].Payload != nil || got[0].Replay != nil {
		t.Errorf("unset optional fields came back set: %+v", got[0])
	}
	if *got[3].Success || *got[3].DurationMS != 0 {
		t.Errorf("success false / duration 0 came back as %v / %v", *got[3].Success, *got[3].DurationMS)
	}
	a, err := s.Attachment(t.Context(), alice, sess.ID, ok.ID, 0)
	if err != nil || a.MediaType != "image/jpeg" || string(a.Data) != "\xff\xd8\x00" {
		t.Errorf("Attachment(ok, 0) = %+v, %v", a, err)
	}
	for _, c := range []struct {
		user, session, record string
		n                     int
	}{{alice, sess.ID, ok.ID, 1}, {alice, sess.ID, ok.ID, -1}, {alice, sess.ID, asst.ID, 0},
		{alice, sess.ID, "nope", 0}, {newUser("bob"), sess.ID, ok.ID, 0}} {
		_, err := s.Attachment(t.Context(), c.user, c.session, c.record, c.n)
		wantErr(t, "Attachment of nothing", err, store.ErrNotFound)
	}
	wantErr(t, "a user record with a replay", s.AppendRecord(t.Context(), alice, &store.Record{SessionID: sess.ID,
		Role: store.RoleUser, Content: "x", Replay: &store.Replay{Model: "p/m"}}), store.ErrConflict)
	wantErr(t, "a user record that summarizes", s.AppendRecord(t.Context(), alice, &store.Record{SessionID: sess.ID,
		Role: store.RoleUser, Content: "x", SummaryThrough: user.ID}), store.ErrConflict)
}

// testConcurrentAppend appends from 8 goroutines at once: Seq must come out 1..N, no gap, no repeat.
func testConcurrentAppend(t *testing.T, s store.Store) {
	const writers, each = 8, 10
	alice := newUser("alice")
	sess := createSession(t, s, alice)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				r := store.Record{SessionID: sess.ID, Role: store.RoleUser, Name: string(rune('a' + w)),
					Content: string(rune('0' + i))}
				if err := s.AppendRecord(t.Context(), alice, &r); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", w, err)
		}
	}
	got := records(t, s, alice, sess.ID)
	if len(got) != writers*each {
		t.Fatalf("got %d records, want %d", len(got), writers*each)
	}
	wantSeqs(t, got)
	// Each writer's records keep the order it appended them in.
	next := map[string]rune{}
	for _, r := range got {
		if want := '0' + next[r.Name]; []rune(r.Content)[0] != want {
			t.Fatalf("writer %s: record %q at Seq %d, want %q next", r.Name, r.Content, r.Seq, want)
		}
		next[r.Name]++
	}
}

// testRetracts stores a regeneration marker: it round-trips, names a user record of its own session, and
// store.Current leaves the retracted answer out.
func testRetracts(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess := createSession(t, s, alice)
	other := createSession(t, s, alice)
	first := mustAppend(t, s, alice, userRecord(sess.ID, "first"))
	answer1 := mustAppend(t, s, alice, store.Record{SessionID: sess.ID, Role: store.RoleAssistant, Content: "one"})
	q := mustAppend(t, s, alice, userRecord(sess.ID, "second"))
	old := mustAppend(t, s, alice, store.Record{SessionID: sess.ID, Role: store.RoleAssistant, Content: "old answer"})
	foreign := mustAppend(t, s, alice, userRecord(other.ID, "elsewhere"))

	wantErr(t, "a marker naming an assistant record", s.AppendRecord(ctx, alice, &store.Record{SessionID: sess.ID,
		Role: store.RoleSystem, Retracts: old.ID}), store.ErrConflict)
	wantErr(t, "a marker naming another session's record", s.AppendRecord(ctx, alice, &store.Record{SessionID: sess.ID,
		Role: store.RoleSystem, Retracts: foreign.ID}), store.ErrConflict)
	wantErr(t, "a user record that retracts", s.AppendRecord(ctx, alice, &store.Record{SessionID: sess.ID,
		Role: store.RoleUser, Content: "x", Retracts: q.ID}), store.ErrConflict)

	wantErr(t, "a marker naming an older user record", s.AppendRecord(ctx, alice, &store.Record{SessionID: sess.ID,
		Role: store.RoleSystem, Retracts: first.ID}), store.ErrConflict)

	marker := mustAppend(t, s, alice, store.Record{SessionID: sess.ID, Role: store.RoleSystem, Retracts: q.ID})
	again := mustAppend(t, s, alice, store.Record{SessionID: sess.ID, Role: store.RoleAssistant, Content: "new answer"})
	got := records(t, s, alice, sess.ID)
	if diff := cmp.Diff([]store.Record{first, answer1, q, old, marker, again}, got, cmpOpts); diff != "" {
		t.Fatalf("Records (-want +got):\n%s", diff)
	}
	cur := store.Current(got)
	var ids []string
	for _, r := range cur {
		ids = append(ids, r.Content)
	}
	if want := []string{"first", "one", "second", "new answer"}; !slices.Equal(ids, want) {
		t.Errorf("Current = %q, want %q", ids, want)
	}
}

// testRecordsAfter checks that RecordsAfter reads the records stored after a Seq, with their tool
// calls, as Records reads them, and only from the user's own session.
func testRecordsAfter(t *testing.T, s store.Store) {
	ctx, alice, bob := t.Context(), newUser("alice"), newUser("bob")
	sess := createSession(t, s, alice)
	mustAppend(t, s, alice, userRecord(sess.ID, "one"))
	asst := mustAppend(t, s, alice, assistantCalls(sess.ID, "call_1", "call_2"))
	mustAppend(t, s, alice, toolResult(asst, "call_1"))
	mustAppend(t, s, alice, toolResult(asst, "call_2"))
	mustAppend(t, s, alice, userRecord(sess.ID, "two"))
	all := records(t, s, alice, sess.ID)
	for _, after := range []int64{-1 << 62, -1, 0, 1, 2, 5, 9} {
		got, err := s.RecordsAfter(ctx, alice, sess.ID, after)
		if err != nil {
			t.Fatalf("RecordsAfter(%d): %v", after, err)
		}
		want := all[min(max(after, 0), int64(len(all))):]
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("RecordsAfter(%d) (-want +got):\n%s", after, diff)
		}
		if cap(got) > len(all) {
			t.Errorf("RecordsAfter(%d) made room for %d records of a session of %d", after, cap(got), len(all))
		}
	}
	_, err := s.RecordsAfter(ctx, bob, sess.ID, 0)
	wantErr(t, "RecordsAfter of another user's session", err, store.ErrNotFound)
	_, err = s.RecordsAfter(ctx, alice, "no-such-session", 0)
	wantErr(t, "RecordsAfter of no session", err, store.ErrNotFound)
}

// testAppendTurn checks that AppendTurn stores a record with its usage entries together, and that a
// refused record stores no usage either.
func testAppendTurn(t *testing.T, s store.Store) {
	ctx, alice := t.Context(), newUser("alice")
	sess := createSession(t, s, alice)
	run := createRun(t, s, alice, sess.ID)
	mustAppend(t, s, alice, userRecord(sess.ID, "hi"))
	usage := []store.UsageEntry{
		{RunID: run.ID, SessionID: sess.ID, Agent: "default", Model: "x/m", Usage: store.Usage{InputTokens: 10, OutputTokens: 3}, CostNanoUSD: 7},
		{RunID: run.ID, SessionID: sess.ID, Agent: "default", Model: "x/m", Usage: store.Usage{InputTokens: 5, OutputTokens: 2}},
	}
	turn := runAssistant(run, "call_1")
	if err := s.AppendTurn(ctx, alice, &turn, usage, nil); err != nil {
		t.Fatalf("AppendTurn: %v", err)
	}
	if turn.Seq != 2 || turn.ID == "" {
		t.Errorf("the turn was not completed: %+v", turn)
	}
	totals := func() []store.UsageTotal {
		got, err := s.UsageTotals(ctx, store.UsageQuery{User: alice, GroupBy: "model"})
		if err != nil {
			t.Fatalf("UsageTotals: %v", err)
		}
		return got
	}
	want := []store.UsageTotal{{Group: "x/m", Calls: 2, Usage: store.Usage{InputTokens: 15, OutputTokens: 5}, CostNanoUSD: 7}}
	if diff := cmp.Diff(want, totals()); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	// A user record while the turn's call is open is refused: its usage is not stored either.
	refused := userRecord(sess.ID, "too soon")
	wantErr(t, "AppendTurn while a call is open", s.AppendTurn(ctx, alice, &refused, usage, nil), store.ErrConflict)
	if diff := cmp.Diff(want, totals()); diff != "" {
		t.Errorf("usage after a refused turn (-want +got):\n%s", diff)
	}
	if n := len(records(t, s, alice, sess.ID)); n != 2 {
		t.Errorf("%d records, want 2", n)
	}
}

// testParsed stores an assistant record with what was parsed out of its text: suggested values and
// actions, payloads and the raw text come back as they went in, and a record without any has none.
func testParsed(t *testing.T, s store.Store) {
	alice := newUser("alice")
	sess := createSession(t, s, alice)
	mustAppend(t, s, alice, userRecord(sess.ID, "where to?"))
	rec := mustAppend(t, s, alice, store.Record{SessionID: sess.ID, Role: store.RoleAssistant, Content: "Pick one.\n",
		RawContent:       "Pick one.\nSUGGESTED_VALUES: [\"Paris\"]\nSCHEMA_PROPOSAL: {\"table\": \"t\"}\n",
		SuggestedValues:  json.RawMessage(`[{"label":"Paris","value":"Paris"}]`),
		SuggestedActions: json.RawMessage(`[{"label":"Go","action":"go","handler":"client"}]`),
		Payloads: []store.Payload{{ID: "pl_1", Type: "schema_proposal", Summary: "an object with keys table",
			Data: json.RawMessage(`{"table":"t"}`), Source: store.PayloadMarker}}})
	plain := mustAppend(t, s, alice, store.Record{SessionID: sess.ID, Role: store.RoleAssistant, Content: "plain"})
	got := records(t, s, alice, sess.ID)
	if diff := cmp.Diff(rec, got[1], cmpOpts); diff != "" {
		t.Errorf("a record with parsed blocks (-stored +read):\n%s", diff)
	}
	if g := got[2]; g.SuggestedValues != nil || g.SuggestedActions != nil || g.Payloads != nil || g.RawContent != "" {
		t.Errorf("a plain record reads back with parsed fields: %+v", g)
	}
	if diff := cmp.Diff(plain, got[2], cmpOpts); diff != "" {
		t.Errorf("a plain record (-stored +read):\n%s", diff)
	}
}
