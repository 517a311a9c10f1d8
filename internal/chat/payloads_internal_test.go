package chat

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"chatd/internal/marker"
	"chatd/internal/store"
)

// TestParseKeepsTheFirst: an answer keeps its first 20 values, 20 actions and 20 payloads, however many
// blocks they come in, and says what it dropped; a value or action with fields of its own is kept.
func TestParseKeepsTheFirst(t *testing.T) {
	types, err := compilePayloadTypes([]PayloadType{{Name: "note", Marker: "NOTE:"}})
	if err != nil {
		t.Fatal(err)
	}
	p := newAnswerParser(types, 0)
	text := "Answer.\nSUGGESTED_VALUES: [" + strings.Repeat(`"v",`, 15) + `{"label":"L","value":"V","description":"d"}]` + "\n" +
		"SUGGESTED_VALUES: [" + strings.Repeat(`"w",`, 5) + `"w"]` + "\n" +
		"SUGGESTED_ACTIONS: [" + strings.Repeat(`{"action":"a","description":"d"},`, 20) + `{"action":"b","prompt":"p"}]` + "\n" +
		strings.Repeat("NOTE: {\"n\": 1}\n", 25)
	var rec store.Record
	var notes []string
	p.parse(text, &rec, func(m, reason string) { notes = append(notes, m+" "+reason) })
	if rec.Content != "Answer.\n" {
		t.Errorf("content %q", rec.Content)
	}
	var values []marker.Value
	var actions []marker.Action
	if err := json.Unmarshal(rec.SuggestedValues, &values); err != nil || len(values) != 20 || values[15] != (marker.Value{Label: "L", Value: "V"}) {
		t.Errorf("values %s (%v)", rec.SuggestedValues, err)
	}
	if err := json.Unmarshal(rec.SuggestedActions, &actions); err != nil || len(actions) != 20 || actions[0].Action != "a" {
		t.Errorf("actions %s (%v)", rec.SuggestedActions, err)
	}
	if len(rec.Payloads) != 20 {
		t.Errorf("%d payloads", len(rec.Payloads))
	}
	want := []string{
		"SUGGESTED_VALUES: gave 22 values; the first 20 are kept",
		"SUGGESTED_ACTIONS: gave 21 actions; the first 20 are kept",
		"payload markers gave 5 more payload blocks; the first 20 are kept",
	}
	if d := cmp.Diff(want, notes); d != "" {
		t.Errorf("notes (-want +got):\n%s", d)
	}
}
