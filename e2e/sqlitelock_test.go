package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"chatd/internal/llm/llmtest"
)

// TestSecondProcessOnOneSQLiteFile starts a second chatd on the database file of one that is streaming
// a run: the second must refuse to start, saying who holds the database, and leave the run alone. The
// run then completes with a clean stream and one stored answer, and the first chatd goes on answering.
// The second chatd is started on another address, then on the first one's, which it cannot have.
func TestSecondProcessOnOneSQLiteFile(t *testing.T) {
	t.Parallel() // each test has its own processes, ports and files
	if testing.Short() {
		t.Skip("starts chatd four times")
	}
	bin := buildChatd(t)
	t.Run("another address", func(t *testing.T) { testSecondProcess(t, bin, false) })
	t.Run("the first one's address", func(t *testing.T) { testSecondProcess(t, bin, true) })
}

// heldMessage is a message whose final answer the model holds before its finish until the test lets it
// go: the run is live, for certain, while the second chatd starts.
const heldMessage = "What time is it in Paris and in Tokyo? (held)"

func testSecondProcess(t *testing.T, bin string, sameAddr bool) {
	up, release := newHeldModel(t)
	env := chatdEnv(up, "5s")
	db := filepath.Join(t.TempDir(), "chatd.db")
	first := startChatd(t, "chatd (first)", bin, db, env...)
	firstAddr := strings.TrimPrefix(first.base, "http://")

	s := first.openStream(t, map[string]any{"message": heldMessage})
	runID, sessionID := s.header.Get("X-Run-Id"), s.header.Get("X-Session-Id")
	var answer strings.Builder // the text after the last record: the answer to the tool results
	seen, err := s.until(func(ev event) bool {
		switch ev.Type {
		case "record":
			answer.Reset()
		case "text_delta":
			answer.WriteString(fmt.Sprint(ev.Data["text"]))
		}
		return strings.HasSuffix(answer.String(), theAnswer)
	}, 30*time.Second)
	if err != nil {
		t.Fatalf("waiting for the answer to stream: %v\n%s", err, eventList(seen))
	}

	addr := "127.0.0.1:0" // a free port: one picked here could be taken by another test run meanwhile
	if sameAddr {
		addr = firstAddr
	}
	code, out, err := runSecond(t, bin, db, addr, env)
	t.Logf("the second chatd, on the first one's database and %s, exited %d:\n%s", addr, code, out)
	if err != nil {
		t.Errorf("the second chatd: %v", err)
	} else if code == 0 {
		t.Error("the second chatd exited 0; want it to fail")
	}
	pid := first.cmd.Process.Pid
	wantLocked := []string{"the database is in use by another chatd process", fmt.Sprintf("(pid %d on host ", pid),
		": chatd serve on " + firstAddr + ", since ", "; stop it, or start this one with another --db"}
	locked := containsAll(out, wantLocked)
	switch {
	case sameAddr && !locked && !strings.Contains(out, "address already in use"):
		// The lock is taken first; a chatd that listened first would be right to say the address is taken.
		t.Errorf("the second chatd's output says neither that the database is in use (by pid %d) nor that the address is", pid)
	case !sameAddr && !locked:
		t.Errorf("the second chatd's output does not say that the database is in use, naming the first: want %q", wantLocked)
	}

	release()
	rest, err := s.rest(30 * time.Second)
	events := append(seen, rest...)
	if err != nil {
		t.Errorf("the first chatd's stream: %v", err)
	}
	if err := checkSeq(events); err != nil {
		t.Errorf("the first chatd's stream: %v\n%s", err, eventList(events))
	} else if last := events[len(events)-1]; last.Data["status"] != "completed" {
		t.Errorf("the first chatd's run ended %v, want done completed:\n%s", last, eventList(events[max(0, len(events)-5):]))
	}
	run := first.run(t, runID)
	if run.Status != "completed" {
		t.Errorf("run %s is %s, want completed", runID, run.Status)
	}
	if err := checkLog(first.replay(t, runID, ""), run); err != nil {
		t.Errorf("event log of run %s: %v", runID, err)
	}
	recs := first.records(t, sessionID)
	answers := 0
	for _, r := range recs {
		if r.Role == "assistant" && r.RunID == runID && strings.HasSuffix(r.Content, theAnswer) {
			answers++
		}
	}
	if answers != 1 {
		t.Errorf("the session holds %d answers of run %s, want 1:\n%s", answers, runID, describe(recs))
	}
	if err := checkRecords(recs); err != nil {
		t.Errorf("stored records:\n%v\n%s", err, describe(recs))
	}

	r := first.chat(t, map[string]any{"message": "Thanks. And in London?", "session_id": sessionID}, "")
	if r.status != 200 {
		t.Errorf("the first chatd, next message: %d %s", r.status, r.body)
	} else if last := r.last(); last.Type != "done" || last.Data["status"] != "completed" {
		t.Errorf("the first chatd, next message: the run ended with %v, want done completed:\n%s", last, eventList(r.events))
	}
	checkModelRequests(t, up, 0)
}

// newHeldModel is newModel whose final answer to heldMessage waits before its finish until release is
// called (at the latest when the test ends, before the model server closes).
func newHeldModel(t *testing.T) (up *llmtest.Server, release func()) {
	held := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	up = llmtest.NewServer(t)
	t.Cleanup(release) // runs before the server's Close, which waits for the held answer
	up.Respond = func(n int, req llmtest.Request) llmtest.Turn {
		turn := respond(n, req)
		if len(turn.ToolCalls) == 0 && lastUserText(req.Messages()) == heldMessage {
			turn.BeforeFinish = func() { <-held }
		}
		return turn
	}
	up.Strict = true
	up.Requests() // orders the writes above before every request, as in newModel
	return up, release
}

// runSecond runs a second chatd serve on db and addr until it exits, and returns its exit code and its
// output. It is an error when the process does not exit within 30s (it is then killed): it started.
func runSecond(t *testing.T, bin, db, addr string, env []string) (code int, out string, err error) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--addr", addr, "--db", "sqlite:"+db)
	cmd.Env = append(os.Environ(), env...)
	raw, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return 0, string(raw), errors.New("still running after 30s: it started instead of refusing")
	}
	if _, exited := errors.AsType[*exec.ExitError](err); err != nil && !exited {
		return 0, string(raw), err
	}
	return cmd.ProcessState.ExitCode(), string(raw), nil
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
