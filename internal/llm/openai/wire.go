package openai

import "encoding/json"

// The JSON shapes of the Chat Completions API, as much of them as chatd sends and reads. Fields chatd does
// not read are left out of the response types so that decoding skips them without allocating.

// chunk is one chat.completion.chunk, or an in-band error.
type chunk struct {
	Choices []choice  `json:"choices"`
	Usage   *usage    `json:"usage"`
	Error   *apiError `json:"error"`
}

type choice struct {
	Index        int    `json:"index"`
	Delta        delta  `json:"delta"`
	FinishReason string `json:"finish_reason"`
}

type delta struct {
	Content string `json:"content"`
	Refusal string `json:"refusal"`
	// ReasoningContent is DeepSeek's and vLLM's name for the thinking; Reasoning is Ollama's and
	// OpenRouter's.
	ReasoningContent string          `json:"reasoning_content"`
	Reasoning        string          `json:"reasoning"`
	ToolCalls        []toolCallDelta `json:"tool_calls"`
}

type toolCallDelta struct {
	// Index is a pointer because a few compatible servers omit it; see accumulate.
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name string `json:"name"`
		// Arguments is a fragment of a JSON text, sent as a string; a few servers send the whole
		// object instead, so it is kept raw.
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type usage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// apiError is the body of an error response and of an in-band error chunk. Code is a string on OpenAI
// and a number on some compatible servers.
type apiError struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
}

type errorBody struct {
	Error *apiError `json:"error"`
	// Some compatible servers answer {"message": …} or {"detail": …} without the envelope.
	Message string `json:"message"`
	Detail  string `json:"detail"`
}
