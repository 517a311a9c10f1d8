package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/store"
	"chatd/internal/store/postgres"
	"chatd/internal/store/postgres/pgtest"
	"chatd/internal/store/sqlite"
)

// fillSQLite stores, through the store API, a conversation of every kind of row: a finished run with a
// tool round (a call answered with an attachment, one closed by FinishRun), its events and usage, a
// queued run with its request, a key and a sign-in.
func fillSQLite(t *testing.T, path string) {
	ctx := t.Context()
	db, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	const user = "alice"
	run := &store.Run{NewSession: &store.Session{Title: "tools", Agent: "default", Metadata: json.RawMessage(`{"k":1}`)},
		Agent: "default", Model: "fake/model", IdempotencyKey: "key-1", RequestHash: "h1", ReservedSeq: 256}
	first := &store.Record{Role: store.RoleUser, Content: "look",
		Attachments: []store.Attachment{{MediaType: "image/png", Name: "a.png", Data: []byte("\x89PNG\r\n\x1a\nxx")}}}
	must("CreateRun", db.CreateRun(ctx, user, run, first))
	asst := &store.Record{SessionID: run.SessionID, RunID: run.ID, Role: store.RoleAssistant, Content: "calling",
		Reasoning: "hm", Model: "fake/model", FinishReason: "tool_calls", Usage: &store.Usage{InputTokens: 3, OutputTokens: 4},
		ToolCalls: []store.ToolCall{{ID: "c1", Name: "shot", Arguments: json.RawMessage(`{"x": 1}`)},
			{ID: "c2", Name: "slow", Arguments: json.RawMessage(`{}`)}},
		Replay:     &store.Replay{Model: "fake/model", Parts: []store.ReplayPart{{Kind: store.PartText, Text: "calling", Signature: "sig"}}},
		RawContent: "calling\nSUGGESTED_VALUES: [\"a\"]\nSCHEMA_PROPOSAL: {\"t\":1}\n", SuggestedValues: json.RawMessage(`[{"label":"a","value":"a"}]`),
		SuggestedActions: json.RawMessage(`[{"label":"Go","action":"slow","handler":"server"}]`),
		Payloads:         []store.Payload{{ID: "pl_0123456789", Type: "schema_proposal", Summary: "s", Data: json.RawMessage(`{"t":1}`), Source: store.PayloadMarker}}}
	calls := []store.ModelCall{{RunID: run.ID, SessionID: run.SessionID, N: 1, Model: "fake/model", System: "You help.",
		Tools: []string{"shot", "slow"}, Settings: json.RawMessage(`{"max_tokens":100}`), Request: []byte{0x1f, 0x8b, 1, 2},
		Output: json.RawMessage(`{"text":"calling"}`)}}
	must("AppendTurn assistant", db.AppendTurn(ctx, user, asst, nil, calls))
	ok, ms := true, int64(12)
	must("AppendRecord tool", db.AppendRecord(ctx, user, &store.Record{SessionID: run.SessionID, RunID: run.ID, Role: store.RoleTool,
		ParentID: asst.ID, ToolCallID: "c1", Name: "shot", Content: "an image", Success: &ok, DurationMS: &ms,
		Payload:     json.RawMessage(`{"p":true}`),
		Attachments: []store.Attachment{{MediaType: "image/png", Data: []byte("\x89PNG\r\n\x1a\nyy")}}}))
	must("AppendEvents", db.AppendEvents(ctx, []store.Event{{RunID: run.ID, Seq: 1, Type: "run_start", Data: []byte(`{"a":1}`)},
		{RunID: run.ID, Seq: 2, Type: "text_delta", Data: []byte(`{"text":"calling"}`)}}, nil))
	must("AddUsage", db.AddUsage(ctx, user, store.UsageEntry{RunID: run.ID, SessionID: run.SessionID, Agent: "default",
		Model: "fake/model", Usage: store.Usage{InputTokens: 3, OutputTokens: 4}, CostNanoUSD: 70}))
	queued := &store.Run{SessionID: run.SessionID, Status: store.RunQueued, Agent: "default", Model: "fake/model",
		Request: json.RawMessage(`{"message":"next"}`)}
	must("CreateRun queued", db.CreateRun(ctx, user, queued, nil))
	_, err = db.FinishRun(ctx, user, run.ID, store.RunEnd{Status: store.RunCancelled, FinishReason: "cancelled",
		Usage: store.Usage{InputTokens: 3, OutputTokens: 4}, Reason: "cut",
		Calls: []store.ModelCall{{RunID: run.ID, SessionID: run.SessionID, N: 2, Model: "fake/model", SameSystem: true,
			RequestOmitted: "too large"}},
		Events: []store.Event{{RunID: run.ID, Seq: 3, Type: "done", Data: []byte(`{"status":"cancelled"}`)}}})
	must("FinishRun", err)
	renamed := "renamed"
	_, err = db.UpdateSession(ctx, user, run.SessionID, store.SessionPatch{Title: &renamed})
	must("UpdateSession", err)
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	key := &store.APIKey{User: user, Name: "laptop", Prefix: "cd_abc", Hash: []byte("0123456789abcdef0123456789abcdef"),
		Agents: []string{"default"}, Limits: store.Limits{TokensPerDay: 1000}, ExpiresAt: &exp}
	must("CreateKey", db.CreateKey(ctx, key))
	must("CreateAuthSession", db.CreateAuthSession(ctx, &store.AuthSession{Hash: []byte("cookiehash"), KeyID: key.ID,
		ExpiresAt: exp}))
}

// snapshot is what the store API shows of a database filled by fillSQLite.
type snapshot struct {
	Sessions []store.Session
	Records  []store.Record
	Runs     []store.Run
	Events   [][]store.Event
	Keys     []store.APIKey
	Sign     *store.AuthSession
	Usage    []store.UsageTotal
	Calls    [][]store.ModelCall
	// Titled says whether a generated title would replace the session's: not after the rename.
	Titled bool
}

func snap(t *testing.T, st store.Store) snapshot {
	ctx := t.Context()
	var s snapshot
	var err error
	if s.Sessions, _, err = st.Sessions(ctx, "alice", store.Page{}); err != nil || len(s.Sessions) != 1 {
		t.Fatalf("Sessions: %v, %d", err, len(s.Sessions))
	}
	if s.Records, err = st.Records(ctx, "alice", s.Sessions[0].ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{s.Records[0].RunID} {
		r, err := st.Run(ctx, "alice", id)
		if err != nil {
			t.Fatal(err)
		}
		s.Runs = append(s.Runs, *r)
		ev, err := st.Events(ctx, "alice", id, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		s.Events = append(s.Events, ev)
		calls, err := st.ModelCalls(ctx, "alice", id)
		if err != nil {
			t.Fatal(err)
		}
		s.Calls = append(s.Calls, calls)
	}
	if s.Titled, err = st.TitleSession(ctx, "alice", s.Sessions[0].ID, "generated"); err != nil {
		t.Fatal(err)
	}
	q, err := st.UnfinishedRuns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Runs = append(s.Runs, q...)
	if s.Keys, err = st.Keys(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if s.Sign, _, err = st.AuthSession(ctx, []byte("cookiehash")); err != nil {
		t.Fatal(err)
	}
	if s.Usage, err = st.UsageTotals(ctx, store.UsageQuery{GroupBy: store.GroupByModel}); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestMigrate: chatd migrate copies a SQLite database into PostgreSQL so that the store API shows the
// same on both sides, twice without duplicating anything, and refuses a SQLite file a chatd holds.
func TestMigrate(t *testing.T) {
	dsn := pgtest.NewSchema(t)
	path := filepath.Join(t.TempDir(), "chatd.db")
	fillSQLite(t, path)

	for i := range 2 {
		var out, errOut bytes.Buffer
		if err := run(t.Context(), []string{"migrate", "--from", "sqlite:" + path, "--to", dsn}, nil, &out, &errOut); err != nil {
			t.Fatalf("migrate #%d: %v\n%s%s", i+1, err, out.String(), errOut.String())
		}
		if !strings.Contains(out.String(), "done:") {
			t.Errorf("migrate #%d said:\n%s", i+1, out.String())
		}
	}

	sdb, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := snap(t, sdb)
	pdb, err := postgres.Open(t.Context(), dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pdb.Close()
	got := snap(t, pdb)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PostgreSQL after two migrations differs from SQLite (-sqlite +postgres):\n%s", diff)
	}
	counts, err := pdb.Counts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	wantCounts := map[string]int64{"sessions": 1, "records": 2, "tool_calls": 2, "tool_records": 2, "runs": 2,
		"run_events": 3, "usage": 1, "api_keys": 1, "auth_sessions": 1, "model_calls": 2}
	if diff := cmp.Diff(wantCounts, counts); diff != "" {
		t.Errorf("row counts (-want +got):\n%s", diff)
	}

	// While a process holds the SQLite file (sdb, as a running chatd would), migrate refuses.
	var out bytes.Buffer
	err = run(context.Background(), []string{"migrate", "--from", "sqlite:" + path, "--to", dsn}, nil, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "stop it before migrating") {
		t.Errorf("migrate while the file is held: %v; want a refusal", err)
	}
	sdb.Close()
}

// TestMigrateAwaitingExpiry: a run awaiting approval copied by chatd migrate keeps its expiry where
// PostgreSQL's sweep of expired waits looks for it (SQLite keeps it in what the run waits for alone).
func TestMigrateAwaitingExpiry(t *testing.T) {
	ctx := t.Context()
	dsn := pgtest.NewSchema(t)
	path := filepath.Join(t.TempDir(), "chatd.db")
	db, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	waiting := &store.Run{NewSession: &store.Session{Title: "t", Agent: "default"}, Agent: "default", Model: "fake/model"}
	if err := db.CreateRun(ctx, "alice", waiting, &store.Record{Role: store.RoleUser, Content: "mail bob"}); err != nil {
		t.Fatal(err)
	}
	expires := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	aw, err := json.Marshal(map[string]any{"expires_at": expires, "calls": []map[string]any{{"tool_call_id": "call_1", "name": "mail__send"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.AwaitRun(ctx, "alice", waiting.ID, store.Await{Awaiting: aw, ExpiresAt: expires}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	var out bytes.Buffer
	if err := run(ctx, []string{"migrate", "--from", "sqlite:" + path, "--to", dsn}, nil, &out, &out); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out.String())
	}
	pdb, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pdb.Close()
	for _, tc := range []struct {
		before time.Time
		want   int
	}{{expires.Add(-time.Microsecond), 0}, {expires, 1}} {
		runs, err := pdb.ExpiredAwaiting(ctx, tc.before)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != tc.want || (tc.want == 1 && runs[0].ID != waiting.ID) {
			t.Errorf("ExpiredAwaiting(%s) after migrate: %+v; want %d run(s), the copied run expiring at %s", tc.before, runs, tc.want, expires)
		}
	}
}
