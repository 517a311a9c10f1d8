package chat

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"chatd/internal/tool"
)

// TestFieldsOfChoices: a field of at most tool.MaxQuestionChoices choices is read; one more is refused,
// saying so, whether the choices are the field's or its items'.
func TestFieldsOfChoices(t *testing.T) {
	schema := func(n int, array bool) json.RawMessage {
		enum := make([]string, n)
		for i := range enum {
			enum[i] = "c" + strconv.Itoa(i)
		}
		p := map[string]any{"type": "string", "enum": enum}
		if array {
			p = map[string]any{"type": "array", "items": p}
		}
		b, _ := json.Marshal(map[string]any{"type": "object", "properties": map[string]any{"pick": p}})
		return b
	}
	for _, array := range []bool{false, true} {
		if f, err := fieldsOf(schema(tool.MaxQuestionChoices, array)); err != nil || len(f[0].Choices) != tool.MaxQuestionChoices {
			t.Errorf("array %v: %d choices: %v", array, tool.MaxQuestionChoices, err)
		}
		if _, err := fieldsOf(schema(tool.MaxQuestionChoices+1, array)); err == nil || !strings.Contains(err.Error(), "101 choices; at most 100") {
			t.Errorf("array %v: %d choices: %v, want an error naming the limit", array, tool.MaxQuestionChoices+1, err)
		}
	}
}
