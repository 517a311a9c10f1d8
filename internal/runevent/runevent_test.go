package runevent_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/runevent"
	"chatd/internal/store"
)

var update = flag.Bool("update", false, "rewrite testdata/events.golden")

// TestEventsGolden pins the data of every event type, as clients see it, and checks that each decodes
// back to what was encoded.
func TestEventsGolden(t *testing.T) {
	ok, ms := true, int64(12)
	at := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	rec := runevent.RecordOf(&store.Record{
		ID: "rec_2", SessionID: "ses_1", RunID: "run_1", Role: store.RoleAssistant, Content: "Let me check.",
		Reasoning: "The user wants the time.", Model: "openai/gpt-4o-mini", FinishReason: "tool_calls",
		ToolCalls: []store.ToolCall{{ID: "call_a", Name: "current_time", Arguments: json.RawMessage(`{"timezone":"Europe/Paris"}`)}},
		Usage:     &store.Usage{InputTokens: 42, OutputTokens: 8}, CreatedAt: at,
		Replay:   &store.Replay{Model: "openai/gpt-4o-mini", Parts: []store.ReplayPart{{Kind: store.PartText, Text: "x"}}},
		ParentID: "never shown", Seq: 7,
	})
	toolRec := runevent.RecordOf(&store.Record{
		ID: "rec_3", SessionID: "ses_1", RunID: "run_1", Role: store.RoleTool, ToolCallID: "call_a", Name: "current_time",
		Content: `{"time":"10:00"}`, Success: &ok, DurationMS: &ms, Payload: json.RawMessage(`{"time":"10:00"}`),
		Attachments: []store.Attachment{{MediaType: "image/png", Name: "dot.png", Data: []byte{0x89, 'P', 'N', 'G'}}},
		CreatedAt:   at,
	})
	history := []runevent.ToolHistory{{ToolCallID: "call_a", Name: "current_time", Arguments: json.RawMessage(`{"timezone":"Europe/Paris"}`),
		Success: true, Content: `{"time":"10:00"}`, DurationMS: 12, Payload: json.RawMessage(`{"time":"10:00"}`)}}
	var out bytes.Buffer
	// The events of a run that called a tool and answered, in the order they come.
	roundTrip(t, &out, runevent.TypeRunStart, runevent.RunStart{RunID: "run_1", SessionID: "ses_1", Model: "openai/gpt-4o-mini", Agent: "default"})
	roundTrip(t, &out, runevent.TypeStatus, runevent.Status{Message: "Thinking…"})
	roundTrip(t, &out, runevent.TypeRecord, runevent.RecordEvent{Message: rec})
	roundTrip(t, &out, runevent.TypeToolCallDelta, runevent.ToolCallDelta{Index: 0, ID: "call_a", Name: "current_time", ArgumentsDelta: `{"timezone":"Eu`})
	roundTrip(t, &out, runevent.TypeToolStart, runevent.ToolStart{ToolCallID: "call_a", Name: "current_time", Arguments: json.RawMessage(`{"timezone":"Europe/Paris"}`)})
	roundTrip(t, &out, runevent.TypeToolProgress, runevent.ToolProgress{ToolCallID: "call_a", Progress: 1, Total: 4, Message: "fetching"})
	roundTrip(t, &out, runevent.TypeToolComplete, runevent.ToolComplete{ToolCallID: "call_a", Name: "current_time", Success: true,
		Content: `{"time":"10:00"}`, DurationMS: 12, Payload: json.RawMessage(`{"time":"10:00"}`)})
	roundTrip(t, &out, runevent.TypeRecord, runevent.RecordEvent{Message: toolRec})
	roundTrip(t, &out, runevent.TypeUsage, runevent.UsageEvent{Model: "openai/gpt-4o-mini", Usage: runevent.Usage{InputTokens: 42, OutputTokens: 8, CacheReadTokens: 3}})
	roundTrip(t, &out, runevent.TypeReasoningDelta, runevent.Text{Text: "The user wants…"})
	roundTrip(t, &out, runevent.TypeTextDelta, runevent.Text{Text: "In Paris it is \"10:00\"\n"})
	answer := runevent.RecordOf(&store.Record{
		ID: "rec_4", SessionID: "ses_1", RunID: "run_1", Role: store.RoleAssistant, Content: "In Paris it is \"10:00\"\n",
		RawContent:       "In Paris it is \"10:00\"\nSUGGESTED_VALUES: [\"Tokyo\"]\nSCHEMA_PROPOSAL: {\"table\":\"cities\"}\n",
		SuggestedValues:  json.RawMessage(`[{"label":"Tokyo","value":"Tokyo"}]`),
		SuggestedActions: json.RawMessage(`[{"label":"Show weather","action":"get_weather","handler":"server","data":{"city":"Paris"}}]`),
		Payloads: []store.Payload{{ID: "pl_0a1b2c3d4e", Type: "schema_proposal", Summary: "schema_proposal: an object with keys table",
			Data: json.RawMessage(`{"table":"cities"}`), Source: store.PayloadMarker}},
		Model: "openai/gpt-4o-mini", FinishReason: "stop", CreatedAt: at,
	})
	roundTrip(t, &out, runevent.TypeComplete, runevent.Complete{Message: answer, FinishReason: "stop", Usage: runevent.Usage{InputTokens: 84, OutputTokens: 23},
		ToolHistory: history, SuggestedValues: answer.SuggestedValues, SuggestedActions: answer.SuggestedActions,
		Payloads: append(runevent.PayloadsOf(&store.Record{ID: "rec_3", Role: store.RoleTool, ToolCallID: "call_a", Name: "current_time",
			Payload: json.RawMessage(`{"time":"10:00"}`)}), answer.Payloads...)})
	pay := runevent.ApprovalRequired{Kind: "approval", ToolCallID: "call_b", Name: "bank__pay", Arguments: json.RawMessage(`{"amount":250}`),
		Reason: "Payments over 100 need a person."}
	roundTrip(t, &out, runevent.TypeApprovalRequired, pay)
	roundTrip(t, &out, runevent.TypeAwaitingApproval, runevent.AwaitingApproval{Calls: []runevent.ApprovalRequired{pay}, ExpiresAt: at.Add(24 * time.Hour)})
	roundTrip(t, &out, runevent.TypeApprovalDecided, runevent.ApprovalDecided{ToolCallID: "call_b", Decision: "approve", Arguments: json.RawMessage(`{"amount":200}`)})
	roundTrip(t, &out, runevent.TypeApprovalDecided, runevent.ApprovalDecided{ToolCallID: "call_c", Decision: "deny", Reason: "Not today."})
	roundTrip(t, &out, runevent.TypeApprovalRequired, runevent.ApprovalRequired{Kind: "question", ToolCallID: "call_d", Name: "ask_user",
		Arguments: json.RawMessage(`{"questions":[{"question":"Which account?","choices":["checking","savings"]}]}`), Reason: "The assistant has a question for you."})
	roundTrip(t, &out, runevent.TypeApprovalDecided, runevent.ApprovalDecided{ToolCallID: "call_d", Decision: "answer", Answers: []string{"savings"}})
	lo, hi, most := 1.0, 100.0, 3
	expires := at.Add(time.Hour)
	roundTrip(t, &out, runevent.TypeApprovalRequired, runevent.ApprovalRequired{Kind: "question", ToolCallID: "call_e", Name: "crm__signup",
		Arguments: json.RawMessage(`{}`), Reason: "Who are you?", Source: "mcp", Message: "Who are you?", ExpiresAt: &expires, Fields: []runevent.Field{
			{Name: "name", Title: "Name", Type: "string", Required: true},
			{Name: "age", Type: "integer", Minimum: &lo, Maximum: &hi, Default: json.RawMessage(`42`)},
			{Name: "pets", Type: "array", Multiple: true, MaxItems: &most, Choices: []runevent.Choice{{Value: "cat", Label: "Cats"}, {Value: "dog", Label: "Dogs"}}},
		}})
	roundTrip(t, &out, runevent.TypeApprovalDecided, runevent.ApprovalDecided{ToolCallID: "call_e", Decision: "answer", Source: "mcp",
		Content: json.RawMessage(`{"age":36,"name":"Ada","pets":["cat"]}`)})
	roundTrip(t, &out, runevent.TypeError, runevent.Error{Code: "upstream_auth", Message: "openai: auth (HTTP 401)", Retryable: false})
	roundTrip(t, &out, runevent.TypeCancelled, runevent.Cancelled{Reason: "the user stopped the run"})
	roundTrip(t, &out, runevent.TypeDone, runevent.Done{Status: "completed"})

	// The per-token encoders write what Encode would.
	for _, text := range []string{"Thinking…", "In Paris it is \"10:00\"\n", "<b>&</b>", "\u2028"} {
		if got, err := runevent.Decode[runevent.Text](runevent.EncodeText(text)); err != nil || got.Text != text {
			t.Errorf("EncodeText(%q) decodes to %q, %v", text, got.Text, err)
		}
		if got, err := runevent.Decode[runevent.Status](runevent.EncodeStatus(text)); err != nil || got.Message != text {
			t.Errorf("EncodeStatus(%q) decodes to %q, %v", text, got.Message, err)
		}
	}

	path := filepath.Join("testdata", "events.golden")
	if *update {
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), out.String()); diff != "" {
		t.Errorf("event data changed (-golden +now); run with -update if that is meant:\n%s", diff)
	}
}

// roundTrip writes the event's data to out, as the golden file shows it, and checks that it is JSON
// that decodes back to d. Text and status data are written by the per-token encoders, as chat does.
func roundTrip[T runevent.Data](t *testing.T, out *bytes.Buffer, typ string, d T) {
	t.Helper()
	var data []byte
	switch v := any(d).(type) {
	case runevent.Text:
		data = runevent.EncodeText(v.Text)
	case runevent.Status:
		data = runevent.EncodeStatus(v.Message)
	default:
		data = runevent.Encode(d)
	}
	fmt.Fprintf(out, "event: %s\ndata: %s\n\n", typ, data)
	if !json.Valid(data) {
		t.Errorf("%s: not JSON: %s", typ, data)
	}
	got, err := runevent.Decode[T](data)
	if err != nil {
		t.Errorf("%s: %v", typ, err)
	} else if diff := cmp.Diff(d, got); diff != "" {
		t.Errorf("%s: decoded differs (-want +got):\n%s", typ, diff)
	}
}

// TestDecodeError: data that is not the type's JSON is an error, never a zero value.
func TestDecodeError(t *testing.T) {
	for _, data := range []string{``, `{`, `[]`, `{"status":1}`, `"done"`} {
		if _, err := runevent.Decode[runevent.Done]([]byte(data)); err == nil {
			t.Errorf("Decode[Done](%q): no error", data)
		}
	}
}

// TestRawText: the text of a delta as a JSON string — a slice of what EncodeText wrote, and the same
// string re-encoded for data written some other way; anything else is ErrNotText.
func TestRawText(t *testing.T) {
	for _, c := range []struct{ data, want string }{
		{`{"text":"hi"}`, `"hi"`},
		{`{"text":""}`, `""`},
		{`{"text":"a\"b\\"}`, `"a\"b\\"`},
		{`{"text":"\\"}`, `"\\"`},
		{`{ "text": "spaced" }`, `"spaced"`},
		{`{"text":"x","extra":1}`, `"x"`},
		{`{"text":"a\u00e9"}`, `"a\u00e9"`},
		{`{"text":"\x"}`, `ErrNotText`},
		{`{"text":"\u00"}`, `ErrNotText`},
		{"{\"text\":\"a\tb\"}", `ErrNotText`},
	} {
		if c.want == "ErrNotText" {
			if _, err := runevent.RawText([]byte(c.data)); !errors.Is(err, runevent.ErrNotText) {
				t.Errorf("RawText(%s): %v, want ErrNotText", c.data, err)
			}
			continue
		}
		got, err := runevent.RawText([]byte(c.data))
		if err != nil || string(got) != c.want {
			t.Errorf("RawText(%s) = %s, %v; want %s", c.data, got, err, c.want)
		}
	}
	for _, data := range []string{``, `{"text":"open}`, `{"text":"a"b"}`, `{"text":1}`, `{"text":"\"}`} {
		if _, err := runevent.RawText([]byte(data)); !errors.Is(err, runevent.ErrNotText) {
			t.Errorf("RawText(%s): %v, want ErrNotText", data, err)
		}
	}
}

// FuzzEncodeText checks the per-token encoder against encoding/json — both decode to the same string —
// and that RawText gives back that string without decoding.
func FuzzEncodeText(f *testing.F) {
	for _, s := range []string{"", "hello", `quote " and \ backslash`, "tab\tnew\nline\r", "\x00\x1f\x7f", "é🙂",
		"\u2028\u2029", "bad \xff utf8 \xc3", "<script>&</script>", `\`, `\"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		data := runevent.EncodeText(s)
		got, err := runevent.Decode[runevent.Text](data)
		if err != nil {
			t.Fatalf("EncodeText(%q) = %s: %v", s, data, err)
		}
		std, _ := json.Marshal(s)
		var want string
		json.Unmarshal(std, &want)
		if got.Text != want {
			t.Fatalf("EncodeText(%q) decodes to %q, encoding/json to %q", s, got.Text, want)
		}
		raw, err := runevent.RawText(data)
		if err != nil {
			t.Fatal(err)
		}
		var back string
		if err := json.Unmarshal(raw, &back); err != nil || back != want {
			t.Fatalf("RawText(%s) = %s (%q, %v), want %q", data, raw, back, err, want)
		}
	})
}

// FuzzRawText: whatever the data, RawText either refuses it or returns a JSON string that decodes to
// the text encoding/json finds in it.
func FuzzRawText(f *testing.F) {
	for _, s := range []string{`{"text":"hi"}`, `{"text":"\u00e9\n"}`, `{"text":"\x"}`, `{"text":"a\"}`, `{"text":1}`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		raw, err := runevent.RawText(data)
		if err != nil {
			return
		}
		want, err := runevent.Decode[runevent.Text](data)
		if err != nil {
			t.Fatalf("RawText(%s) = %s, but encoding/json refuses the data: %v", data, raw, err)
		}
		var got string
		if err := json.Unmarshal(raw, &got); err != nil || got != want.Text {
			t.Fatalf("RawText(%s) = %s (%q, %v), want %q", data, raw, got, err, want.Text)
		}
	})
}

func TestAppendText(t *testing.T) {
	for _, s := range []string{"", "plain", "quote \" backslash \\ newline \n tab \t", "<html> & \u2028 \x01", "invalid \xff utf-8", "é😀"} {
		prefix := []byte("before")
		got := runevent.AppendText(prefix, s)
		if string(got[:len(prefix)]) != "before" || string(got[len(prefix):]) != string(runevent.EncodeText(s)) {
			t.Errorf("AppendText(%q) = %s, want before%s", s, got, runevent.EncodeText(s))
		}
		if n := runevent.TextSize(s); n > len(runevent.EncodeText(s)) {
			t.Errorf("TextSize(%q) = %d, more than %d", s, n, len(runevent.EncodeText(s)))
		}
	}
}
