package gemini

import "encoding/json"

// The JSON shapes of the Generative Language API (v1beta), as much of them as chatd sends and reads.
// Response types carry only the fields chatd reads, so decoding skips the rest without allocating.

// generateRequest is a GenerateContentRequest.
type generateRequest struct {
	Contents          []content         `json:"contents"`
	SystemInstruction *content          `json:"systemInstruction,omitempty"`
	Tools             []tool            `json:"tools,omitempty"`
	ToolConfig        *toolConfig       `json:"toolConfig,omitempty"`
	GenerationConfig  *generationConfig `json:"generationConfig,omitempty"`
}

// content is one turn: role "user" or "model" (none in systemInstruction).
type content struct {
	Role  string `json:"role,omitempty"`
	Parts []part `json:"parts"`
}

// part is one part of a request's content. Exactly one of Text, InlineData, FunctionCall and
// FunctionResponse is set; ThoughtSignature goes back on the part it came on.
type part struct {
	Text             string            `json:"text,omitempty"`
	Thought          bool              `json:"thought,omitempty"`
	InlineData       *blob             `json:"inlineData,omitempty"`
	FunctionCall     *functionCall     `json:"functionCall,omitempty"`
	FunctionResponse *functionResponse `json:"functionResponse,omitempty"`
	ThoughtSignature string            `json:"thoughtSignature,omitempty"`
}

type blob struct {
	MIMEType string `json:"mimeType"`
	Data     []byte `json:"data"` // base64 in JSON, as encoding/json writes []byte
}

// functionCall is a call the model made, sent back in history. Its id is never sent: chatd assigns its
// own ids, and Gemini pairs calls with responses by order and name.
type functionCall struct {
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

type functionResponse struct {
	Name     string         `json:"name"`
	Response resultEnvelope `json:"response"`
}

// resultEnvelope is the function response object: {"result": …} or {"error": …}, the keys Google's
// documentation and SDKs use for a tool's output and its failure.
type resultEnvelope struct {
	Result *string `json:"result,omitempty"`
	Error  *string `json:"error,omitempty"`
}

type tool struct {
	FunctionDeclarations []functionDeclaration `json:"functionDeclarations"`
}

// functionDeclaration passes the tool's JSON Schema as parametersJsonSchema, which takes a JSON Schema
// as is, unlike parameters (an OpenAPI subset that refuses $ref, additionalProperties and friends).
type functionDeclaration struct {
	Name                 string          `json:"name"`
	Description          string          `json:"description,omitempty"`
	ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema,omitempty"`
}

type toolConfig struct {
	FunctionCallingConfig functionCallingConfig `json:"functionCallingConfig"`
}

type functionCallingConfig struct {
	Mode string `json:"mode"` // AUTO, ANY, NONE
}

type generationConfig struct {
	MaxOutputTokens int             `json:"maxOutputTokens,omitempty"`
	Temperature     *float64        `json:"temperature,omitempty"`
	ThinkingConfig  *thinkingConfig `json:"thinkingConfig,omitempty"`
}

// thinkingConfig sets one of thinkingBudget (Gemini 2.5) and thinkingLevel (Gemini 3): the API refuses
// both at once ("You can only set only one of thinking budget and thinking level.").
type thinkingConfig struct {
	IncludeThoughts bool   `json:"includeThoughts"`
	ThinkingBudget  int    `json:"thinkingBudget,omitempty"`
	ThinkingLevel   string `json:"thinkingLevel,omitempty"`
}

// chunk is one streamed GenerateContentResponse, or an in-band error.
type chunk struct {
	Candidates     []candidate     `json:"candidates"`
	PromptFeedback *promptFeedback `json:"promptFeedback"`
	// UsageMetadata is a value, not a pointer: every chunk carries it, and decoding into a reused value
	// costs no allocation.
	UsageMetadata usageMetadata `json:"usageMetadata"`
	Error         *apiError     `json:"error"`
}

type candidate struct {
	Content       candidateContent `json:"content"`
	FinishReason  string           `json:"finishReason"`
	FinishMessage string           `json:"finishMessage"`
}

type candidateContent struct {
	Parts []responsePart `json:"parts"`
}

type responsePart struct {
	Text             string                `json:"text"`
	Thought          bool                  `json:"thought"`
	ThoughtSignature string                `json:"thoughtSignature"`
	FunctionCall     *responseFunctionCall `json:"functionCall"`
}

// responseFunctionCall leaves out the call's id on purpose; see functionCall.
type responseFunctionCall struct {
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

type promptFeedback struct {
	BlockReason string `json:"blockReason"`
}

// usageMetadata holds running totals: each chunk may repeat them, the last one counts.
type usageMetadata struct {
	PromptTokenCount        int64 `json:"promptTokenCount"`
	CandidatesTokenCount    int64 `json:"candidatesTokenCount"`
	CachedContentTokenCount int64 `json:"cachedContentTokenCount"`
	ThoughtsTokenCount      int64 `json:"thoughtsTokenCount"`
	ToolUsePromptTokenCount int64 `json:"toolUsePromptTokenCount"`
}

// apiError is a google.rpc.Status as the API writes it in JSON.
type apiError struct {
	Code    int               `json:"code"`
	Message string            `json:"message"`
	Status  string            `json:"status"`
	Details []json.RawMessage `json:"details"`
}

type errorBody struct {
	Error *apiError `json:"error"`
}

// errorDetail is one of an error's details; only RetryInfo's delay and ErrorInfo's reason are read.
type errorDetail struct {
	Type       string `json:"@type"`
	RetryDelay string `json:"retryDelay"` // RetryInfo
	Reason     string `json:"reason"`     // ErrorInfo
}

type modelList struct {
	Models        []listedModel `json:"models"`
	NextPageToken string        `json:"nextPageToken"`
}

type listedModel struct {
	Name                       string   `json:"name"`
	SupportedGenerationMethods []string `json:"supportedGenerationMethods"`
}
