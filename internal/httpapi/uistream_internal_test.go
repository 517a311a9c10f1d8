package httpapi

import (
	"strings"
	"testing"

	"chatd/internal/chat"
	"chatd/internal/runevent"
)

// TestUIConverterRefusesBadData: an event whose data does not decode is an error that ends the stream,
// not a chunk with empty fields.
func TestUIConverterRefusesBadData(t *testing.T) {
	for _, ev := range []chat.Event{
		{Seq: 1, Type: runevent.TypeRunStart, Data: []byte(`{"run_id":`)},
		{Seq: 1, Type: runevent.TypeTextDelta, Data: []byte(`{"text":"\x"}`)},
		{Seq: 1, Type: runevent.TypeReasoningDelta, Data: []byte(`{"text":7}`)},
		{Seq: 1, Type: runevent.TypeToolCallDelta, Data: []byte(`{"index":"0"}`)},
		{Seq: 1, Type: runevent.TypeToolStart, Data: []byte(`[]`)},
		{Seq: 1, Type: runevent.TypeToolProgress, Data: []byte(`{"progress":"half"}`)},
		{Seq: 1, Type: runevent.TypeToolComplete, Data: []byte(`{"success":"yes"}`)},
		{Seq: 1, Type: runevent.TypeUsage, Data: []byte(`{"input_tokens":"many"}`)},
		{Seq: 1, Type: runevent.TypeComplete, Data: []byte(`{"tool_history":{}}`)},
		{Seq: 1, Type: runevent.TypeError, Data: []byte(`{"message":1}`)},
		{Seq: 1, Type: runevent.TypeCancelled, Data: []byte(`nope`)},
		{Seq: 1, Type: runevent.TypeDone, Data: []byte(`{"status":false}`)},
		{Seq: 1, Type: "no_such_event", Data: []byte(`{}`)},
	} {
		c := uiConverter{messageID: "msg_x"}
		if err := c.event(ev); err == nil {
			t.Errorf("%s %s: no error; wrote %q", ev.Type, ev.Data, c.buf)
		}
	}
	// The same types with good data convert.
	c := uiConverter{messageID: "msg_x"}
	for _, ev := range []chat.Event{
		{Seq: 1, Type: runevent.TypeRunStart, Data: runevent.Encode(runevent.RunStart{RunID: "r"})},
		{Seq: 2, Type: runevent.TypeTextDelta, Data: runevent.EncodeText("hi")},
		{Seq: 3, Type: runevent.TypeDone, Data: runevent.Encode(runevent.Done{Status: "completed"})},
	} {
		if err := c.event(ev); err != nil {
			t.Fatalf("%s: %v", ev.Type, err)
		}
	}
	if got := string(c.buf); !strings.Contains(got, `"delta":"hi"`) || !strings.HasSuffix(got, "data: [DONE]\n\n") {
		t.Errorf("converted %q", got)
	}
}

// TestUIConverterElicitation: a question from an MCP server becomes a data-elicitation part with the
// call's id, and its decision the same part again, decided; neither is an approval request.
func TestUIConverterElicitation(t *testing.T) {
	c := uiConverter{messageID: "msg_x"}
	for _, ev := range []chat.Event{
		{Seq: 1, Type: runevent.TypeToolStart, Data: runevent.Encode(runevent.ToolStart{ToolCallID: "call_1", Name: "crm__signup", Arguments: []byte(`{}`)})},
		{Seq: 2, Type: runevent.TypeApprovalRequired, Data: runevent.Encode(runevent.ApprovalRequired{Kind: "question", ToolCallID: "call_1",
			Name: "crm__signup", Arguments: []byte(`{}`), Source: "mcp", Message: "Who are you?", Fields: []runevent.Field{{Name: "name", Type: "string"}}})},
		{Seq: 3, Type: runevent.TypeApprovalDecided, Data: runevent.Encode(runevent.ApprovalDecided{ToolCallID: "call_1", Decision: "answer",
			Source: "mcp", Content: []byte(`{"name":"Ada"}`)})},
	} {
		if err := c.event(ev); err != nil {
			t.Fatalf("%s: %v", ev.Type, err)
		}
	}
	got := string(c.buf)
	for _, want := range []string{
		`data: {"data":{"fields":[{"name":"name","type":"string"}],"message":"Who are you?","name":"crm__signup","state":"waiting","tool_call_id":"call_1"},"id":"call_1","type":"data-elicitation"}`,
		`data: {"data":{"content":{"name":"Ada"},"decision":"answer","fields":[{"name":"name","type":"string"}],"message":"Who are you?","name":"crm__signup","state":"decided","tool_call_id":"call_1"},"id":"call_1","type":"data-elicitation"}`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("converted:\n%s\nwant a chunk\n%s", got, want)
		}
	}
	if strings.Contains(got, "tool-approval") || strings.Count(got, "tool-input-available") != 1 {
		t.Errorf("converted %s", got)
	}
}

// TestUIConverterElicitationLeftOpen: a question still waiting when the run's done comes (a log stored
// without its decision) is shown decided, cancel, before the stream ends: a replay shows no card waiting.
func TestUIConverterElicitationLeftOpen(t *testing.T) {
	c := uiConverter{messageID: "msg_x"}
	for _, ev := range []chat.Event{
		{Seq: 1, Type: runevent.TypeToolStart, Data: runevent.Encode(runevent.ToolStart{ToolCallID: "call_1", Name: "crm__signup", Arguments: []byte(`{}`)})},
		{Seq: 2, Type: runevent.TypeApprovalRequired, Data: runevent.Encode(runevent.ApprovalRequired{Kind: "question", ToolCallID: "call_1",
			Name: "crm__signup", Arguments: []byte(`{}`), Source: "mcp", Message: "Who are you?", Fields: []runevent.Field{{Name: "name", Type: "string"}}})},
		{Seq: 3, Type: runevent.TypeToolComplete, Data: runevent.Encode(runevent.ToolComplete{ToolCallID: "call_1", Name: "crm__signup", Success: true, Content: "ok"})},
		{Seq: 4, Type: runevent.TypeDone, Data: runevent.Encode(runevent.Done{Status: "completed"})},
	} {
		if err := c.event(ev); err != nil {
			t.Fatalf("%s: %v", ev.Type, err)
		}
	}
	got := string(c.buf)
	want := `data: {"data":{"decision":"cancel","fields":[{"name":"name","type":"string"}],"message":"Who are you?","name":"crm__signup",` +
		`"reason":"The run ended before anyone answered.","state":"decided","tool_call_id":"call_1"},"id":"call_1","type":"data-elicitation"}`
	if i := strings.Index(got, want); i < 0 || i > strings.Index(got, "data: [DONE]") {
		t.Errorf("converted:\n%s\nwant before [DONE] a chunk\n%s", got, want)
	}
}
