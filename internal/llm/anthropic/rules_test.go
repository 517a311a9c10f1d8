package anthropic

import (
	"errors"

	"chatd/internal/llm/llmtest"
)

// checkBody checks a decoded request body against the rules the Messages API enforces, as
// llmtest.ValidateAnthropic knows them, and that it streams, as every request of this adapter does.
func checkBody(body map[string]any) error {
	if body["stream"] != true {
		return errors.New("stream: not true")
	}
	if err := llmtest.ValidateAnthropic(body); err != nil {
		return err
	}
	return nil
}
