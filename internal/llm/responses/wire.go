package responses

import "encoding/json"

// The JSON shapes of the Responses API, as much of them as chatd sends and reads. The response types
// carry only the fields chatd reads, so that decoding skips the rest (the whole response object repeated
// in response.created, the obfuscation padding of every delta) without allocating.

type request struct {
	Model           string           `json:"model"`
	Instructions    string           `json:"instructions,omitempty"`
	Input           []any            `json:"input"`
	Tools           []tool           `json:"tools,omitempty"`
	ToolChoice      string           `json:"tool_choice,omitempty"`
	MaxOutputTokens int              `json:"max_output_tokens,omitempty"`
	Temperature     *float64         `json:"temperature,omitempty"`
	Reasoning       *reasoningConfig `json:"reasoning,omitempty"`
	Store           bool             `json:"store"`
	Include         []string         `json:"include,omitempty"`
	Stream          bool             `json:"stream"`
}

type reasoningConfig struct {
	Effort  string `json:"effort,omitempty"`
	Summary string `json:"summary"`
}

type tool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      bool            `json:"strict"`
}

// inputMessage is a user, system or assistant message of the input; Content is an array of parts.
type inputMessage struct {
	Type    string        `json:"type,omitempty"`
	Role    string        `json:"role"`
	Content []contentPart `json:"content"`
}

// contentPart is an input_text, input_image or output_text part.
type contentPart struct {
	Type     string `json:"type"`
	Text     string `json:"text,omitempty"`
	ImageURL string `json:"image_url,omitempty"`
}

// reasoningItem is a reasoning item sent back. Its fields are in the order the API sends them, so that
// the item chatd sends is byte for byte the item it received.
type reasoningItem struct {
	ID               string        `json:"id"`
	Type             string        `json:"type"`
	EncryptedContent string        `json:"encrypted_content"`
	Summary          []summaryText `json:"summary"` // [] rather than null: the API requires the field
}

type summaryText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type functionCall struct {
	Type      string `json:"type"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // a JSON text, as a string
}

type functionCallOutput struct {
	Type   string `json:"type"`
	CallID string `json:"call_id"`
	Output string `json:"output"`
}

// streamEvent is one event of the stream. It is decoded into again and again: the json.RawMessage fields
// keep their capacity from one event to the next, which is why the type and item id are raw.
type streamEvent struct {
	Type         json.RawMessage `json:"type"`
	ItemID       json.RawMessage `json:"item_id"`
	OutputIndex  int             `json:"output_index"`
	SummaryIndex int             `json:"summary_index"`
	ContentIndex int             `json:"content_index"`
	Delta        string          `json:"delta"`
	Arguments    string          `json:"arguments"` // response.function_call_arguments.done
	Item         *outputItem     `json:"item"`
	Response     *responseState  `json:"response"`
	// An error event carries code and message at the top level, as documented; the API itself nests
	// them in error, as the Chat Completions API does.
	Code    json.RawMessage `json:"code"`
	Message string          `json:"message"`
	Error   *apiError       `json:"error"`
}

// outputItem is an item of the response's output, as response.output_item.added and .done carry it.
type outputItem struct {
	ID               string     `json:"id"`
	Type             string     `json:"type"`
	CallID           string     `json:"call_id"`
	Name             string     `json:"name"`
	Arguments        string     `json:"arguments"`
	EncryptedContent string     `json:"encrypted_content"`
	Summary          []textPart `json:"summary"`
	Content          []textPart `json:"content"`
}

// textPart is a summary_text of a reasoning item, or an output_text or refusal of a message.
type textPart struct {
	Type    string `json:"type"`
	Text    string `json:"text"`
	Refusal string `json:"refusal"`
}

// responseState is the response object of the terminal events.
type responseState struct {
	Status            string `json:"status"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Error *apiError `json:"error"`
	Usage *usage    `json:"usage"`
}

type usage struct {
	InputTokens        int64 `json:"input_tokens"`
	OutputTokens       int64 `json:"output_tokens"`
	InputTokensDetails *struct {
		CachedTokens     int64 `json:"cached_tokens"`
		CacheWriteTokens int64 `json:"cache_write_tokens"`
	} `json:"input_tokens_details"`
	OutputTokensDetails *struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
}

// apiError is an error body's error, an error event's, or a failed response's.
type apiError struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"` // a string, null, or a number on some compatible servers
}

// code is the error's code, or its type when the code is null.
func (e *apiError) code() string {
	if c := rawString(e.Code); c != "" {
		return c
	}
	return e.Type
}

type errorBody struct {
	Error *apiError `json:"error"`
	// Some compatible servers answer {"message": …} without the envelope.
	Message string `json:"message"`
}

type modelList struct {
	Data []struct {
		ID string `json:"id"`
	} `json:"data"`
	HasMore bool   `json:"has_more"`
	LastID  string `json:"last_id"`
}

// rawString returns a raw JSON value as text: a string unquoted, null and nothing as "", anything else
// as written.
func rawString(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	}
	return string(raw)
}
