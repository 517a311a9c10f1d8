package responses

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"chatd/internal/llm"
	"chatd/internal/llm/llmtest"
	"chatd/internal/llm/upstream"
)

func TestConformance(t *testing.T) {
	llmtest.Conformance(t, llmtest.Adapter{
		Name: "conformance",
		New: func(t *testing.T, baseURL string, idle time.Duration) llm.Provider {
			c, err := New(Options{Name: "conformance", BaseURL: baseURL + "/v1", APIKey: "sk-conformance", Timeouts: upstream.Timeouts{Idle: idle}})
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
		Recordings:   os.DirFS("testdata/conformance"),
		CheckRequest: checkRequest,
	})
}

// checkRequest checks a request the way the Responses API would refuse it.
func checkRequest(t *testing.T, r *http.Request, body []byte) {
	t.Helper()
	if r.Method != http.MethodPost || r.URL.Path != "/v1/responses" {
		t.Errorf("request %s %s, want POST /v1/responses", r.Method, r.URL.Path)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer sk-conformance" {
		t.Errorf("Authorization %q", got)
	}
	var req struct {
		Model      string            `json:"model"`
		Input      []json.RawMessage `json:"input"`
		Stream     *bool             `json:"stream"`
		Store      *bool             `json:"store"`
		Include    []string          `json:"include"`
		Reasoning  json.RawMessage   `json:"reasoning"`
		Temp       json.RawMessage   `json:"temperature"`
		Tools      []json.RawMessage `json:"tools"`
		ToolChoice string            `json:"tool_choice"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Errorf("body: %v", err)
		return
	}
	switch {
	case req.Model == "" || len(req.Input) == 0:
		t.Errorf("no model or no input: %s", body)
	case req.Stream == nil || !*req.Stream || req.Store == nil || *req.Store:
		t.Errorf("want stream true and store false: %s", body)
	case req.Reasoning == nil && !isReasoningModel(req.Model) && len(req.Include) > 0:
		// What the API says to gpt-4o, gpt-4.1, gpt-5-chat-latest, …
		t.Errorf("Encrypted content is not supported with this model: %s", body)
	case (req.Reasoning != nil || isReasoningModel(req.Model)) && !slices.Contains(req.Include, "reasoning.encrypted_content"):
		t.Errorf("include lacks reasoning.encrypted_content: %s", body)
	case req.Reasoning != nil && req.Temp != nil:
		t.Errorf("Unsupported parameter: 'temperature' is not supported with this model.")
	case req.ToolChoice != "" && len(req.Tools) == 0:
		t.Errorf("Tool choices other than 'auto' are only supported with tools.")
	}
	if err := checkInput(req.Input); err != "" {
		t.Errorf("%s; body:\n%s", err, body)
	}
}

// checkInput applies the rules the API applies to input items.
func checkInput(input []json.RawMessage) string {
	calls := map[string]bool{}
	for i, raw := range input {
		var it struct {
			Type             string            `json:"type"`
			ID               *string           `json:"id"`
			Role             string            `json:"role"`
			Content          []json.RawMessage `json:"content"`
			EncryptedContent *string           `json:"encrypted_content"`
			Summary          []struct {
				Type, Text string
			} `json:"summary"`
			CallID    string  `json:"call_id"`
			Name      string  `json:"name"`
			Arguments *string `json:"arguments"`
			Output    *string `json:"output"`
		}
		if err := json.Unmarshal(raw, &it); err != nil {
			return err.Error()
		}
		switch it.Type {
		case "", "message":
			parts := map[string]bool{"user": true, "system": true, "developer": true, "assistant": true}
			if !parts[it.Role] || len(it.Content) == 0 {
				return "bad message item: " + string(raw)
			}
			want := "input_"
			if it.Role == "assistant" {
				want = "output_text"
			}
			for _, p := range it.Content {
				var part struct {
					Type string
					Text *string
				}
				json.Unmarshal(p, &part)
				if !strings.HasPrefix(part.Type, want) {
					return "content of type " + part.Type + " in a " + it.Role + " message"
				}
				if strings.HasSuffix(part.Type, "_text") && part.Text == nil {
					return "Missing required parameter: 'text' of an " + part.Type + " part: " + string(raw)
				}
			}
		case "reasoning":
			if it.ID == nil || !strings.HasPrefix(*it.ID, "rs_") || it.EncryptedContent == nil || *it.EncryptedContent == "" || it.Summary == nil {
				return "a reasoning item needs its id, summary and encrypted content with store false: " + string(raw)
			}
			var next struct{ Type string }
			if i+1 < len(input) {
				json.Unmarshal(input[i+1], &next)
			}
			if next.Type != "message" && next.Type != "function_call" {
				return "Item '" + *it.ID + "' of type 'reasoning' was provided without its required following item."
			}
		case "function_call":
			if it.CallID == "" || it.Name == "" || it.Arguments == nil || !json.Valid([]byte(*it.Arguments)) {
				return "bad function_call: " + string(raw)
			}
			calls[it.CallID] = true
		case "function_call_output":
			if !calls[it.CallID] || it.Output == nil {
				return "No tool call found for function call output with call_id " + it.CallID + "."
			}
		default:
			return "unknown item type " + it.Type
		}
	}
	return ""
}
