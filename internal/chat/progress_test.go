package chat_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"chatd/internal/chat"
	"chatd/internal/llm/llmtest"
	"chatd/internal/runevent"
	"chatd/internal/store"
	"chatd/internal/tool"
)

// progressTool reports a step, a flood of reports at the same moment, then, a quarter of a second
// later on the service's clock, two more steps; it returns an image, and reports once more after
// returning, as an MCP server may.
type progressTool struct {
	late  chan func()
	clock *stepClock
}

// stepClock is a clock that moves only when told.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (progressTool) Info() tool.Info {
	return tool.Info{Name: "render", Description: "Renders a chart."}
}

func (p progressTool) Call(ctx context.Context, _ json.RawMessage) (tool.Result, error) {
	tool.ReportProgress(ctx, tool.Progress{Progress: 1, Total: 3, Message: "step"})
	for range 10_000 {
		tool.ReportProgress(ctx, tool.Progress{Progress: 1.5, Total: 3, Message: "flood"})
	}
	p.clock.Advance(250 * time.Millisecond)
	for i := 2; i <= 3; i++ {
		tool.ReportProgress(ctx, tool.Progress{Progress: float64(i), Total: 3, Message: "step"})
	}
	p.late <- func() { tool.ReportProgress(ctx, tool.Progress{Progress: 4, Total: 3, Message: "late"}) }
	return tool.Result{Content: "rendered", Attachments: []tool.Attachment{{MediaType: "image/png", Name: "chart", Data: []byte("\x89PNG")}}}, nil
}

// TestToolProgressAndAttachments: a tool's progress reports become tool_progress events of its call,
// in order and before its tool_complete, at most about five a second (the one completing the total always
// passes); a report after the call has returned is dropped; the images a tool returns are kept as
// attachments of its stored record.
func TestToolProgressAndAttachments(t *testing.T) {
	late := make(chan func(), 1)
	clock := &stepClock{now: time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)}
	f := newFixture(t, setup{Now: clock.Now, Tools: []tool.Tool{progressTool{late: late, clock: clock}}, Respond: func(n int, _ llmtest.Request) llmtest.Turn {
		if n == 0 {
			return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "render", Arguments: `{}`}}}
		}
		// The call has returned and the run goes on: a report now must go nowhere.
		(<-late)()
		return llmtest.Turn{Text: "Here is the chart."}
	}})
	started := f.send(t, chat.Request{Message: "chart please"}, chat.StartOptions{})
	f.wait(t, started.RunID)

	type progress = runevent.ToolProgress
	var got []progress
	completeAt := -1
	events := stored(t, f.db, started.RunID)
	for i, e := range events {
		switch e.Type {
		case runevent.TypeToolProgress:
			if completeAt >= 0 {
				t.Errorf("tool_progress after tool_complete: %s", e.Data)
			}
			p, err := runevent.Decode[runevent.ToolProgress](e.Data)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, p)
		case runevent.TypeToolComplete:
			completeAt = i
		}
	}
	// The first report passes; the flood came at the same moment and is dropped; step 2 came 250ms
	// later and passes; step 3, right after it, passes because it completes the total.
	if len(got) != 3 {
		t.Fatalf("%d tool_progress events, want 3: %+v; log: %s", len(got), got, types(events))
	}
	for i, want := range []float64{1, 2, 3} {
		if p := got[i]; p.ToolCallID != "call_1" || p.Progress != want || p.Total != 3 || p.Message != "step" {
			t.Errorf("tool_progress %d = %+v, want progress %v", i+1, p, want)
		}
	}
	checkLog(t, "run", events)

	var rec *store.Record
	for _, r := range records(t, f.db, started.SessionID) {
		if r.Role == store.RoleTool {
			rec = &r
		}
	}
	if rec == nil || len(rec.Attachments) != 1 || rec.Attachments[0].MediaType != "image/png" || string(rec.Attachments[0].Data) != "\x89PNG" {
		t.Fatalf("tool record %+v does not keep the image", rec)
	}
}
