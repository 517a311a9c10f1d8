package chat_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"chatd/internal/chat"
	"chatd/internal/llm/llmtest"
	"chatd/internal/runevent"
	"chatd/internal/store"
	"chatd/internal/store/postgres"
	"chatd/internal/store/postgres/pgtest"
	"chatd/internal/tool"
)

// closingStore closes the service right after the store resumes a run: Close begins between the
// resume's write and the run's admission.
type closingStore struct {
	store.Store
	svc atomic.Pointer[chat.Service]
}

func (c *closingStore) ResumeRun(ctx context.Context, user, runID string, before json.RawMessage, reserve int64, quota []store.Limit) error {
	if err := c.Store.ResumeRun(ctx, user, runID, before, reserve, quota); err != nil {
		return err
	}
	return c.svc.Load().Close(ctx)
}

// checkStillWaits fails unless the run still waits, with its call undecided.
func checkStillWaits(t *testing.T, db store.Store, runID string) {
	t.Helper()
	r := storedRun(t, db, runID)
	aw := chat.AwaitingOf(r)
	if r.Status != store.RunAwaiting || aw == nil || len(aw.Calls) != 1 || aw.Calls[0].Decision != "" {
		t.Fatalf("the run is %s, waiting for %+v; want it still awaiting approval with its call undecided", r.Status, aw)
	}
}

// TestDecideWhileClosing: a decision that would resume a run on a service that is shutting down is
// refused (shutting_down) and not recorded, and the run still waits — whether the service was closing
// before the decision or began closing as the store resumed the run.
func TestDecideWhileClosing(t *testing.T) {
	t.Run("closed before", func(t *testing.T) {
		counts := map[string]*atomic.Int32{}
		f := newFixture(t, approvalSetup(counts))
		st := pause(t, f, counts)
		if err := f.svc.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		_, err := f.svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_2", Decision: chat.DecisionApprove})
		if !isCode(err, "shutting_down") {
			t.Fatalf("Decide on a closed service: %v, want shutting_down", err)
		}
		checkStillWaits(t, f.db, st.RunID)
	})
	t.Run("closing during the resume", func(t *testing.T) {
		counts := map[string]*atomic.Int32{}
		cs := &closingStore{}
		su := approvalSetup(counts)
		su.Wrap = func(db store.Store) store.Store { cs.Store = db; return cs }
		f := newFixture(t, su)
		cs.svc.Store(f.svc)
		st := pause(t, f, counts)
		_, err := f.svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_2", Decision: chat.DecisionApprove})
		if !isCode(err, "shutting_down") {
			t.Fatalf("Decide as the service closes: %v, want shutting_down", err)
		}
		checkStillWaits(t, f.db, st.RunID)
		if counts["mail__send"].Load() != 0 {
			t.Error("the call ran")
		}
	})
}

// cancelThenCloseStore is a store shared by instances on which, as a run resumes, another instance asks
// its cancel, and then this service begins to close: the run, resumed in the store but never admitted,
// is put back to wait.
type cancelThenCloseStore struct {
	*postgres.DB
	svc atomic.Pointer[chat.Service]
}

func (c *cancelThenCloseStore) ResumeRun(ctx context.Context, user, runID string, before json.RawMessage, reserve int64, quota []store.Limit) error {
	if err := c.DB.ResumeRun(ctx, user, runID, before, reserve, quota); err != nil {
		return err
	}
	if asked, err := c.DB.RequestCancel(ctx, user, runID, "cancelled on another instance"); err != nil || !asked {
		return fmt.Errorf("request cancel: %v, %v", asked, err)
	}
	return c.svc.Load().Close(ctx)
}

// TestCancelWhileUnresuming: on PostgreSQL, a cancel asked on another instance while a closing service
// puts back to wait a run it resumed but could not start is not lost: the run ends cancelled, its call
// closed without running, instead of waiting with nothing to carry the cancel out.
func TestCancelWhileUnresuming(t *testing.T) {
	dsn := pgtest.NewSchema(t)
	db, err := postgres.Open(t.Context(), dsn, postgres.Options{Instance: "a", LeaseTTL: leaseTTL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	up := llmtest.NewServer(t, llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "mail__send", Arguments: `{}`}}})
	client, err := newClient(up, "")
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int32
	reg := tool.NewRegistry(tool.Options{})
	t.Cleanup(reg.Close)
	if err := reg.Register(policyTool{info: tool.Info{Name: "mail__send", Description: "Sends mail.", Destructive: true}, calls: &sent}); err != nil {
		t.Fatal(err)
	}
	cs := &cancelThenCloseStore{DB: db}
	svc := chat.New(chat.Options{TitleModel: chat.TitleNone, Store: cs, Models: oneModel{client}, Tools: reg, DefaultModel: "x/m",
		FlushInterval: 5 * time.Millisecond, RetryBase: time.Millisecond, SweepInterval: time.Hour})
	cs.svc.Store(svc)
	t.Cleanup(func() { svc.Close(context.Background()) })
	st, err := svc.Start(t.Context(), user, chat.Request{Message: "mail bob"}, chat.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if o, err := svc.Wait(t.Context(), user, st.RunID); err != nil || o.Status != store.RunAwaiting {
		t.Fatalf("run: %+v, %v", o, err)
	}
	_, err = svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_1", Decision: chat.DecisionApprove})
	if !isCode(err, "shutting_down") {
		t.Fatalf("Decide as the service closes: %v, want shutting_down", err)
	}
	if r := storedRun(t, db, st.RunID); r.Status != store.RunCancelled {
		t.Errorf("the run cancelled as it was put back to wait is %s, want cancelled", r.Status)
	}
	if rec := toolRecord(t, db, st.SessionID, "call_1"); rec.Success == nil || *rec.Success {
		t.Errorf("call_1's record: %+v, want a failed one", rec)
	}
	if n := sent.Load(); n != 0 {
		t.Errorf("the call ran %d times", n)
	}
}

// TestApprovedCallDeniedByNewPolicy: a call approved after the operator changed the agent's policy to
// deny it (and restarted) does not run: it gets the policy's denial, and the model goes on.
func TestApprovedCallDeniedByNewPolicy(t *testing.T) {
	counts := map[string]*atomic.Int32{}
	su := approvalSetup(counts)
	f := newFixture(t, su)
	st := pause(t, f, counts)
	if err := f.svc.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	// chatd restarts on the same database, its agent now denying mail__send.
	su.Agents = map[string]chat.Agent{"default": {Approvals: []tool.ApprovalRule{
		{Tools: []string{"mail__send"}, Decision: tool.Deny, Reason: "Mail is off for now."},
	}}}
	svc := restart(t, f, su)
	if _, err := svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_2", Decision: chat.DecisionApprove}); err != nil {
		t.Fatal(err)
	}
	o, err := svc.Wait(t.Context(), user, st.RunID)
	if err != nil || o.Status != store.RunCompleted {
		t.Fatalf("resumed run: %+v, %v", o, err)
	}
	if counts["mail__send"].Load() != 0 {
		t.Error("a call the policy now denies ran")
	}
	if rec := toolRecord(t, f.db, st.SessionID, "call_2"); rec.Success == nil || *rec.Success || !strings.Contains(rec.Content, "Not permitted: Mail is off for now.") {
		t.Errorf("call_2's record: %+v", rec)
	}
}

// restart is a new service on the fixture's store and model, as chatd started again with su's agents
// and tools: the fixture's own service must be closed.
func restart(t *testing.T, f *fixture, su setup) *chat.Service {
	t.Helper()
	client, err := newClient(f.up, su.Protocol)
	if err != nil {
		t.Fatal(err)
	}
	reg := tool.NewRegistry(tool.Options{})
	t.Cleanup(reg.Close)
	for _, tl := range su.Tools {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	svc := chat.New(chat.Options{Store: f.db, Models: oneModel{client}, Tools: reg, DefaultModel: "x/m",
		FlushInterval: 5 * time.Millisecond, RetryBase: time.Millisecond, Agents: su.Agents, TitleModel: chat.TitleNone,
		Quota: su.Quota})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		if err := svc.Close(ctx); err != nil {
			t.Errorf("close service: %v", err)
		}
	})
	return svc
}

// TestCancelKeyEndsWaitingRuns: revoking a key (CancelKey) cancels its runs awaiting approval too, which
// no process runs; another key's waiting run goes on waiting.
func TestCancelKeyEndsWaitingRuns(t *testing.T) {
	counts := map[string]*atomic.Int32{}
	f := newFixture(t, everySession(approvalSetup(counts)))
	paused := func(keyID string) string {
		t.Helper()
		// A run whose key is not in the store (or is revoked) is cancelled once it is stored.
		if err := f.db.CreateKey(t.Context(), &store.APIKey{ID: keyID, User: user, Hash: []byte(keyID)}); err != nil {
			t.Fatal(err)
		}
		st := f.send(t, chat.Request{Message: "mail bob"}, chat.StartOptions{Account: chat.Account{KeyID: keyID}})
		if o := f.wait(t, st.RunID); o.Status != store.RunAwaiting {
			t.Fatalf("run: %+v %+v", o, o.Error)
		}
		return st.RunID
	}
	revoked, kept := paused("key-1"), paused("key-2")
	if n, err := f.svc.CancelKey(t.Context(), user, "key-1", "the API key that started the run was revoked"); n != 1 || err != nil {
		t.Errorf("CancelKey cancelled %d runs (%v), want 1", n, err)
	}
	if r := storedRun(t, f.db, revoked); r.Status != store.RunCancelled {
		t.Errorf("the revoked key's waiting run is %s, want cancelled", r.Status)
	}
	if r := storedRun(t, f.db, kept); r.Status != store.RunAwaiting {
		t.Errorf("the other key's waiting run is %s, want still awaiting approval", r.Status)
	}
}

// everySession makes the approval fixture's model pause every new session's run, not only the first.
func everySession(su setup) setup {
	respond := su.Respond
	su.Respond = func(n int, req llmtest.Request) llmtest.Turn {
		if toolResultOf(req, "call_1") == "" {
			return respond(0, req)
		}
		return respond(n, req)
	}
	return su
}

// revokingStore revokes key-1 as the store resumes a run: before the resume's write or, with after,
// once it has committed, and then cancels what the key started as the API's revoke does (CancelKey).
type revokingStore struct {
	store.Store
	db        store.Store
	svc       atomic.Pointer[chat.Service]
	after     bool
	cancelled atomic.Int32
}

func (c *revokingStore) ResumeRun(ctx context.Context, user, runID string, before json.RawMessage, reserve int64, quota []store.Limit) error {
	if c.after {
		if err := c.Store.ResumeRun(ctx, user, runID, before, reserve, quota); err != nil {
			return err
		}
	}
	if _, err := c.db.RevokeKey(ctx, user, "key-1"); err != nil {
		return err
	}
	if !c.after {
		// The resume reads the key next; the revoke's cancel, not yet run, would find the run waiting.
		return c.Store.ResumeRun(ctx, user, runID, before, reserve, quota)
	}
	n, err := c.svc.Load().CancelKey(ctx, user, "key-1", "the API key that started the run was revoked")
	if err != nil {
		n = -1 // the resume is written: its caller must not see the cancel's failure; the test reports it
	}
	c.cancelled.Store(int32(n))
	return nil
}

// TestRevokeAroundResume: a run whose key is revoked around the decision that resumes it does not run
// the approved call, whenever the revoke lands. Revoked before the decision (with no cancel of the
// key's runs, as an expired key has none) or as the resume is written (before the revoke's cancel of
// the key's runs), the decision is refused as a send with the key is (key_revoked) and the run ends
// failed. Revoked once the resume is written but before the run is live — where the revoke's cancel
// finds the run neither live nor waiting —, the run is cancelled before the call runs.
func TestRevokeAroundResume(t *testing.T) {
	for _, tc := range []struct {
		name    string
		wrap    bool // revoke in the store's resume, else before the decision
		after   bool // after the resume's write
		wantErr string
		wantRun string
	}{
		{name: "before the decision", wantErr: "key_revoked", wantRun: store.RunFailed},
		{name: "as the resume is written", wrap: true, wantErr: "key_revoked", wantRun: store.RunFailed},
		{name: "once the resume is written", wrap: true, after: true, wantRun: store.RunCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			counts := map[string]*atomic.Int32{}
			su := approvalSetup(counts)
			rs := &revokingStore{after: tc.after}
			if tc.wrap {
				su.Wrap = func(db store.Store) store.Store { rs.Store = db; return rs }
			}
			f := newFixture(t, su)
			rs.db = f.db
			rs.svc.Store(f.svc)
			if err := f.db.CreateKey(t.Context(), &store.APIKey{ID: "key-1", User: user, Hash: []byte("key-1")}); err != nil {
				t.Fatal(err)
			}
			st := f.send(t, chat.Request{Message: "mail bob"}, chat.StartOptions{Account: chat.Account{KeyID: "key-1"}})
			if o := f.wait(t, st.RunID); o.Status != store.RunAwaiting {
				t.Fatalf("run: %+v", o)
			}
			if !tc.wrap {
				if _, err := f.db.RevokeKey(t.Context(), user, "key-1"); err != nil {
					t.Fatal(err)
				}
			}
			_, err := f.svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_2", Decision: chat.DecisionApprove})
			if (tc.wantErr == "" && err != nil) || (tc.wantErr != "" && !isCode(err, tc.wantErr)) {
				t.Fatalf("Decide: %v, want %q", err, tc.wantErr)
			}
			if e, ok := errors.AsType[*chat.Error](err); ok && !errors.Is(e, chat.ErrForbidden) {
				t.Errorf("Decide: %v is not ErrForbidden", err)
			}
			if o := f.wait(t, st.RunID); o.Status != tc.wantRun {
				t.Errorf("the run ended %s, want %s", o.Status, tc.wantRun)
			}
			if n := counts["mail__send"].Load(); n != 0 {
				t.Errorf("the approved call of a revoked key's run ran %d times", n)
			}
			if n := rs.cancelled.Load(); n != 0 {
				t.Errorf("the revoke's CancelKey cancelled %d runs (-1: it failed): the run was not between its resume and its start", n)
			}
			if rec := toolRecord(t, f.db, st.SessionID, "call_2"); rec.Success == nil || *rec.Success {
				t.Errorf("call_2's record: %+v, want a failed one", rec)
			}
		})
	}
}

// TestResumeAdmittedAsASend: a decision that would resume a run is admitted with the limits of the key
// that sent it, as a send is: past the key's concurrent runs (another of its runs resumed and still
// running) or its token budget, it is refused with the limit's *store.LimitError, the run still waits
// and the decision is not recorded, so it can be given again once the limit allows.
func TestResumeAdmittedAsASend(t *testing.T) {
	counts := map[string]*atomic.Int32{}
	su := everySession(approvalSetup(counts))
	held := newGate(t)
	respond := su.Respond
	su.Respond = func(n int, req llmtest.Request) llmtest.Turn {
		turn := respond(n, req)
		if lastUserMessage(req) == "first" && toolResultOf(req, "call_2") != "" {
			turn.BeforeFinish = held.hold // the first run, resumed, runs on
		}
		return turn
	}
	var tokens atomic.Int64 // the key's tokens a day; 0: no such limit
	su.Quota = func(_ context.Context, u, keyID string) ([]store.Limit, error) {
		if u != user || keyID != "key-1" {
			t.Errorf("Quota(%q, %q), want %s's key-1", u, keyID, user)
		}
		q := []store.Limit{{Name: store.LimitConcurrentRuns, KeyID: keyID, Max: 1}}
		if n := tokens.Load(); n > 0 {
			q = append(q, store.Limit{Name: store.LimitTokens, KeyID: keyID, Max: n})
		}
		return q, nil
	}
	f := newFixture(t, su)
	if err := f.db.CreateKey(t.Context(), &store.APIKey{ID: "key-1", User: user, Hash: []byte("key-1")}); err != nil {
		t.Fatal(err)
	}
	paused := func(msg string) string {
		t.Helper()
		st, err := f.svc.Start(t.Context(), user, chat.Request{Message: msg}, chat.StartOptions{Account: chat.Account{KeyID: "key-1"}})
		if err != nil {
			t.Fatal(err)
		}
		if o, err := f.svc.Wait(t.Context(), user, st.RunID); err != nil || o.Status != store.RunAwaiting {
			t.Fatalf("run: %+v, %v", o, err)
		}
		return st.RunID
	}
	first, second := paused("first"), paused("second")
	approve := chat.Decision{ToolCallID: "call_2", Decision: chat.DecisionApprove}
	if _, err := f.svc.Decide(t.Context(), user, first, approve); err != nil {
		t.Fatal(err)
	}
	held.wait(t)
	_, err := f.svc.Decide(t.Context(), user, second, approve)
	if le, ok := errors.AsType[*store.LimitError](err); !ok || le.Name != store.LimitConcurrentRuns {
		t.Fatalf("a resume past the key's concurrent runs: %v, want a concurrent_runs *store.LimitError", err)
	}
	checkStillWaits(t, f.db, second)
	held.open()
	if o, err := f.svc.Wait(t.Context(), user, first); err != nil || o.Status != store.RunCompleted {
		t.Fatalf("the first run: %+v, %v", o, err)
	}

	tokens.Store(1) // the runs so far used more
	_, err = f.svc.Decide(t.Context(), user, second, approve)
	if le, ok := errors.AsType[*store.LimitError](err); !ok || le.Name != store.LimitTokens {
		t.Fatalf("a resume past the key's tokens a day: %v, want a tokens_per_day *store.LimitError", err)
	}
	checkStillWaits(t, f.db, second)
	tokens.Store(0)
	if _, err := f.svc.Decide(t.Context(), user, second, approve); err != nil {
		t.Fatalf("the decision again, within the limits: %v", err)
	}
	if o, err := f.svc.Wait(t.Context(), user, second); err != nil || o.Status != store.RunCompleted {
		t.Fatalf("the second run: %+v, %v", o, err)
	}
}

// TestResumeWithMessageQueuedBehind: under a key's concurrent_runs of 1, a message sent to the session of
// a run awaiting approval is queued behind it (the waiting run is not counted), and the approval is
// admitted all the same: the queued run waits for the resumed one and does not count against it. The
// approved call runs, then the queued message.
func TestResumeWithMessageQueuedBehind(t *testing.T) {
	counts := map[string]*atomic.Int32{}
	su := approvalSetup(counts)
	su.Quota = func(_ context.Context, _, keyID string) ([]store.Limit, error) {
		return []store.Limit{{Name: store.LimitConcurrentRuns, KeyID: keyID, Max: 1}}, nil
	}
	f := newFixture(t, su)
	if err := f.db.CreateKey(t.Context(), &store.APIKey{ID: "key-1", User: user, Hash: []byte("key-1")}); err != nil {
		t.Fatal(err)
	}
	quota, _ := su.Quota(t.Context(), user, "key-1")
	acct := chat.StartOptions{Account: chat.Account{KeyID: "key-1", Quota: quota}}
	st := f.send(t, chat.Request{Message: "mail bob"}, acct)
	if o := f.wait(t, st.RunID); o.Status != store.RunAwaiting {
		t.Fatalf("run: %+v", o)
	}
	acct.OnActiveRun = chat.OnActiveEnqueue
	queued := f.send(t, chat.Request{Message: "and also", SessionID: st.SessionID}, acct)
	if queued.Status != store.RunQueued {
		t.Fatalf("the message sent behind the waiting run: %+v, want queued", queued)
	}
	if _, err := f.svc.Decide(t.Context(), user, st.RunID, chat.Decision{ToolCallID: "call_2", Decision: chat.DecisionApprove}); err != nil {
		t.Fatalf("the approval with a message queued behind the run: %v", err)
	}
	for _, id := range []string{st.RunID, queued.RunID} {
		if o := f.wait(t, id); o.Status != store.RunCompleted {
			t.Errorf("run %s: %+v, want completed", id, o)
		}
	}
	if n := counts["mail__send"].Load(); n != 1 {
		t.Errorf("the approved call ran %d times, want once", n)
	}
}

// TestUnreadableWaitEnds: a run awaiting approval whose state cannot be read (no decision can resume
// it) ends failed, its call closed without running: at a restart, which cannot know its expiry, and
// when PostgreSQL's sweep finds its wait expired (else every sweep would find it again, first).
func TestUnreadableWaitEnds(t *testing.T) {
	const unreadable = `{"expires_at":`
	check := func(t *testing.T, db store.Store, runID string, sent int32) {
		t.Helper()
		r, err := db.Run(t.Context(), user, runID)
		if err != nil || r.Status != store.RunFailed {
			t.Fatalf("the run whose wait is unreadable: %+v, %v; want failed", r, err)
		}
		if rec := toolRecord(t, db, r.SessionID, "call_1"); rec.Success == nil || *rec.Success {
			t.Errorf("its waiting call's record: %+v, want a failed one", rec)
		}
		if sent != 0 {
			t.Errorf("the waiting call ran %d times", sent)
		}
	}
	t.Run("at a restart", func(t *testing.T) {
		counts := map[string]*atomic.Int32{}
		su := approvalSetup(counts)
		su.Respond = func(n int, req llmtest.Request) llmtest.Turn {
			return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "mail__send", Arguments: `{"to":"bob@example.com"}`}}}
		}
		f := newFixture(t, su)
		st := f.send(t, chat.Request{Message: "mail bob"}, chat.StartOptions{})
		if o := f.wait(t, st.RunID); o.Status != store.RunAwaiting {
			t.Fatalf("run: %+v", o)
		}
		if err := f.db.UpdateAwaiting(t.Context(), user, st.RunID, storedRun(t, f.db, st.RunID).Awaiting, []byte(unreadable)); err != nil {
			t.Fatal(err)
		}
		if err := f.svc.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		svc := restart(t, f, su)
		if err := svc.Recover(t.Context()); err != nil {
			t.Fatal(err)
		}
		check(t, f.db, st.RunID, counts["mail__send"].Load())
	})
	t.Run("swept", func(t *testing.T) {
		dsn := pgtest.NewSchema(t)
		clk := newClock()
		a := newInstance(t, dsn, "a", clk, true, llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "mail__send", Arguments: `{}`}}})
		b := newInstance(t, dsn, "b", clk, true)
		var sent atomic.Int32
		for _, in := range []*instance{a, b} {
			if err := in.reg.Register(policyTool{info: tool.Info{Name: "mail__send", Description: "Sends mail.", Destructive: true}, calls: &sent}); err != nil {
				t.Fatal(err)
			}
		}
		st, err := a.svc.Start(t.Context(), user, chat.Request{Message: "mail bob"}, chat.StartOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if o, err := a.svc.Wait(t.Context(), user, st.RunID); err != nil || o.Status != store.RunAwaiting {
			t.Fatalf("run on a: %+v, %v", o, err)
		}
		if err := a.db.UpdateAwaiting(t.Context(), user, st.RunID, storedRun(t, a.db, st.RunID).Awaiting, []byte(unreadable)); err != nil {
			t.Fatal(err)
		}
		clk.step(chat.DefaultApprovalTimeout + 2*time.Minute) // past the expiry and its grace
		if err := b.svc.Sweep(t.Context()); err != nil {
			t.Fatal(err)
		}
		check(t, b.db, st.RunID, sent.Load())
	})
}

// TestExpirySweptAcrossInstances: on PostgreSQL, a run whose wait expired while no instance kept its
// timer (the clock is stepped; no timer fires) is expired by the instances' sweep once a grace has
// passed — not before —, and two instances sweeping at once expire it once: one resume wins, the run
// is denied as expired and completes, and the model is called once more in all.
func TestExpirySweptAcrossInstances(t *testing.T) {
	dsn := pgtest.NewSchema(t)
	clk := newClock()
	a := newInstance(t, dsn, "a", clk, true, llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "mail__send", Arguments: `{}`}}},
		llmtest.Turn{Text: "not sent, on a"})
	b := newInstance(t, dsn, "b", clk, true, llmtest.Turn{Text: "not sent, on b"})
	var sent atomic.Int32
	for _, in := range []*instance{a, b} {
		if err := in.reg.Register(policyTool{info: tool.Info{Name: "mail__send", Description: "Sends mail.", Destructive: true}, calls: &sent}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := a.svc.Start(t.Context(), user, chat.Request{Message: "mail bob"}, chat.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if o, err := a.svc.Wait(t.Context(), user, st.RunID); err != nil || o.Status != store.RunAwaiting {
		t.Fatalf("run on a: %+v, %v", o, err)
	}
	clk.step(chat.DefaultApprovalTimeout + 30*time.Second) // expired, within the grace
	if err := b.svc.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r, err := b.db.Run(t.Context(), user, st.RunID); err != nil || r.Status != store.RunAwaiting {
		t.Fatalf("after a sweep within the grace: %+v, %v; want still awaiting approval", r, err)
	}
	clk.step(time.Minute)
	var wg sync.WaitGroup
	for _, in := range []*instance{a, b} {
		wg.Go(func() {
			if err := in.svc.Sweep(t.Context()); err != nil {
				t.Errorf("sweep: %v", err)
			}
		})
	}
	wg.Wait()
	events := readUntil(t, b.svc, st.RunID, 0, isType(runevent.TypeDone))
	checkRunLog(t, events, 1, true, store.RunCompleted)
	decided := 0
	for _, e := range events {
		if e.Type == runevent.TypeApprovalDecided {
			decided++
			if !strings.Contains(string(e.Data), "expired") {
				t.Errorf("approval_decided %s: want the denial as expired", e.Data)
			}
		}
	}
	if n := len(a.up.Requests()) + len(b.up.Requests()); decided != 1 || n != 2 || sent.Load() != 0 {
		t.Errorf("%d approval_decided events, %d model calls in all, mail sent %d times; want 1, 2 and 0", decided, n, sent.Load())
	}
}
