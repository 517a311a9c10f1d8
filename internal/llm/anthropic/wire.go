package anthropic

import "encoding/json"

// The JSON shapes of the Messages API, as much of them as chatd sends and reads. The response types carry
// only the fields chatd reads, so that decoding skips the rest without allocating.

type messagesRequest struct {
	Model       string       `json:"model"`
	MaxTokens   int          `json:"max_tokens"`
	System      []block      `json:"system,omitempty"`
	Messages    []message    `json:"messages"`
	Tools       []tool       `json:"tools,omitempty"`
	ToolChoice  *toolChoice  `json:"tool_choice,omitempty"`
	Thinking    *thinkingCfg `json:"thinking,omitempty"`
	Temperature *float64     `json:"temperature,omitempty"`
	Stream      bool         `json:"stream"`
}

type message struct {
	Role    string  `json:"role"`
	Content []block `json:"content"`
}

// block is one content block of a request, of any type; each type sets its own fields.
type block struct {
	Type string `json:"type"`
	// Text is a text block's text; never empty, which the API refuses.
	Text   string       `json:"text,omitempty"`
	Source *imageSource `json:"source,omitempty"` // image
	// Thinking and Signature are a thinking block's; Thinking is sent even when empty.
	Thinking  *string `json:"thinking,omitempty"`
	Signature string  `json:"signature,omitempty"`
	Data      string  `json:"data,omitempty"` // redacted_thinking
	// ID, Name and Input are a tool_use block's; Input is the JSON object of the arguments.
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// ToolUseID, Content and IsError are a tool_result block's; Content is a string or an array of
	// text and image blocks.
	ToolUseID    string          `json:"tool_use_id,omitempty"`
	Content      json.RawMessage `json:"content,omitempty"`
	IsError      bool            `json:"is_error,omitempty"`
	CacheControl *cacheControl   `json:"cache_control,omitempty"`
}

type imageSource struct {
	Type      string `json:"type"` // "base64"
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
}

type cacheControl struct {
	Type string `json:"type"` // "ephemeral"
}

var ephemeral = &cacheControl{Type: "ephemeral"}

type tool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema"`
	CacheControl *cacheControl   `json:"cache_control,omitempty"`
}

type toolChoice struct {
	Type string `json:"type"` // auto, any, none
}

type thinkingCfg struct {
	Type         string `json:"type"` // "enabled"
	BudgetTokens int    `json:"budget_tokens"`
}

// streamEvent is the data of one server-sent event. One value is reused for every event of a stream.
type streamEvent struct {
	Type    name `json:"type"`
	Index   int  `json:"index"`
	Message struct {
		ID    string `json:"id"`
		Usage usage  `json:"usage"`
	} `json:"message"` // message_start
	ContentBlock struct {
		Type      name   `json:"type"`
		Text      string `json:"text"`
		Thinking  string `json:"thinking"`
		Signature string `json:"signature"`
		Data      string `json:"data"` // redacted_thinking
		ID        string `json:"id"`
		Name      string `json:"name"`
		// Input is a tool_use block's input: "{}" from the API, whose arguments follow in deltas.
		Input json.RawMessage `json:"input"`
	} `json:"content_block"` // content_block_start
	// Delta is a content_block_delta's delta, or a message_delta's.
	Delta struct {
		Type        name   `json:"type"`
		Text        string `json:"text"`
		Thinking    string `json:"thinking"`
		Signature   string `json:"signature"`
		PartialJSON string `json:"partial_json"`
		StopReason  string `json:"stop_reason"`
	} `json:"delta"`
	Usage usage    `json:"usage"` // message_delta
	Error apiError `json:"error"`
}

// usage counts tokens. In message_start it holds the input counts; message_delta's output_tokens is a
// running total, and newer API versions repeat the input counts there.
type usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// apiError is the error object of an error body and of an in-stream error event.
type apiError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

type errorBody struct {
	Error apiError `json:"error"`
	// A few proxies answer {"message": …} without the envelope.
	Message string `json:"message"`
}

type modelList struct {
	Data []struct {
		ID string `json:"id"`
	} `json:"data"`
	HasMore bool   `json:"has_more"`
	LastID  string `json:"last_id"`
}

// name is a type tag of the stream (an event, block or delta type). The tags the decoder knows come
// back as constants, so that decoding them does not allocate: a text chunk then costs one string.
type name string

// The type tags the decoder acts on.
const (
	evMessageStart      name = "message_start"
	evContentBlockStart name = "content_block_start"
	evContentBlockDelta name = "content_block_delta"
	evContentBlockStop  name = "content_block_stop"
	evMessageDelta      name = "message_delta"
	evMessageStop       name = "message_stop"
	evPing              name = "ping"
	evError             name = "error"

	blockText             name = "text"
	blockThinking         name = "thinking"
	blockRedactedThinking name = "redacted_thinking"
	blockToolUse          name = "tool_use"

	deltaText      name = "text_delta"
	deltaThinking  name = "thinking_delta"
	deltaSignature name = "signature_delta"
	deltaInputJSON name = "input_json_delta"
)

var knownNames = []name{
	evMessageStart, evContentBlockStart, evContentBlockDelta, evContentBlockStop, evMessageDelta,
	evMessageStop, evPing, evError, blockText, blockThinking, blockRedactedThinking, blockToolUse,
	deltaText, deltaThinking, deltaSignature, deltaInputJSON,
}

func (n *name) UnmarshalJSON(b []byte) error {
	if len(b) < 2 || b[0] != '"' {
		return nil // null: the field stays empty
	}
	raw := b[1 : len(b)-1]
	for _, k := range knownNames {
		if string(raw) == string(k) {
			*n = k
			return nil
		}
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*n = name(s)
	return nil
}
