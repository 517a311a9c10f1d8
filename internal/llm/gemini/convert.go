package gemini

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"chatd/internal/llm"
)

// skipSignature is the thoughtSignature Google documents for a function call Gemini did not produce (a
// history written by another model, or one whose signature was lost): Gemini 3 refuses a model turn
// whose first functionCall part has no signature, and accepts this value instead. It is sent whatever
// the model: an alias (gemini-flash-latest) may name a Gemini 3 model, and older models ignore it.
// https://ai.google.dev/gemini-api/docs/thought-signatures (FAQ: "skip_thought_signature_validator")
const skipSignature = "skip_thought_signature_validator"

var emptyObject = json.RawMessage("{}")

// newRequest translates req into a GenerateContentRequest.
//
// Message.Cache, Request.CacheSystem and Request.CacheTools are ignored: Gemini caches repeated prompt
// prefixes implicitly, and explicit caching is a separate cachedContents resource chatd does not manage.
func (c *Client) newRequest(req *llm.Request) (*generateRequest, error) {
	out := &generateRequest{Contents: make([]content, 0, len(req.Messages))}
	var system []part
	if req.System != "" {
		system = append(system, part{Text: req.System})
	}
	for i := 0; i < len(req.Messages); i++ {
		m := &req.Messages[i]
		switch m.Role {
		case llm.RoleSystem:
			// Gemini has no system turn: a system message joins the system instruction.
			system = appendText(system, m.Text(), "")
		case llm.RoleUser:
			parts, err := userParts(m.Parts)
			if err != nil {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
			out.Contents = appendContent(out.Contents, "user", parts)
		case llm.RoleAssistant:
			parts, err := c.modelParts(m, llm.Origin(c.name, req.Model))
			if err != nil {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
			out.Contents = appendContent(out.Contents, "model", parts)
		case llm.RoleTool:
			// Consecutive tool messages answer one model turn: their responses go in one content.
			j := i
			for j < len(req.Messages) && req.Messages[j].Role == llm.RoleTool {
				j++
			}
			parts, err := toolResults(req.Messages, i, j)
			if err != nil {
				return nil, err
			}
			out.Contents = appendContent(out.Contents, "user", parts)
			i = j - 1
		default:
			return nil, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	if len(system) > 0 {
		out.SystemInstruction = &content{Parts: system}
	}
	if err := convertTools(out, req); err != nil {
		return nil, err
	}
	out.GenerationConfig = generation(req)
	return out, nil
}

// isGemini3 reports whether the model is of the Gemini 3 family, which takes thinkingLevel.
func isGemini3(model string) bool {
	return strings.Contains(model, "gemini-3")
}

// appendContent adds a content unless it has no parts: the API refuses an empty content, and a message
// with nothing to send (an empty answer) carries nothing the model needs.
func appendContent(contents []content, role string, parts []part) []content {
	if len(parts) == 0 {
		return contents
	}
	return append(contents, content{Role: role, Parts: parts})
}

// appendText adds a text part unless the text is empty: the API refuses an empty text part. A signature
// on an empty part (Gemini ends some streams so) is dropped with it; only function-call signatures are
// validated.
func appendText(parts []part, text, signature string) []part {
	if text == "" {
		return parts
	}
	return append(parts, part{Text: text, ThoughtSignature: signature})
}

func userParts(in []llm.Part) ([]part, error) {
	out := make([]part, 0, len(in))
	for _, p := range in {
		switch p.Kind {
		case llm.PartText:
			out = appendText(out, p.Text, "")
		case llm.PartImage:
			if p.MediaType == "" || len(p.Data) == 0 {
				return nil, errors.New("an image part has no media type or no data")
			}
			out = append(out, part{InlineData: &blob{MIMEType: p.MediaType, Data: p.Data}})
		}
	}
	return out, nil
}

// modelParts sends an assistant message back. The model's own answers (Origin is origin) go back part
// for part with their thought signatures; another model's lose their reasoning and signatures. An
// unsigned first call gets skipSignature.
func (c *Client) modelParts(m *llm.Message, origin string) ([]part, error) {
	own := m.Origin == origin
	out := make([]part, 0, len(m.Parts)+len(m.ToolCalls))
	for _, p := range m.Parts {
		switch {
		case p.Kind == llm.PartText && own:
			out = appendText(out, p.Text, p.Signature)
		case p.Kind == llm.PartText:
			out = appendText(out, p.Text, "")
		case p.Kind == llm.PartReasoning && own && p.Text != "":
			out = append(out, part{Text: p.Text, Thought: true, ThoughtSignature: p.Signature})
		}
	}
	first := true
	for k, tc := range m.ToolCalls {
		args, err := callArguments(tc.Arguments)
		if err != nil {
			return nil, fmt.Errorf("tool call %d (%s): %w", k, tc.Name, err)
		}
		p := part{FunctionCall: &functionCall{Name: tc.Name, Args: args}}
		if own {
			p.ThoughtSignature = tc.Signature
		}
		if first && p.ThoughtSignature == "" {
			p.ThoughtSignature = skipSignature
		}
		first = false
		out = append(out, p)
	}
	return out, nil
}

// callArguments returns a call's arguments as the JSON object functionCall.args must be.
func callArguments(args json.RawMessage) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return emptyObject, nil
	}
	if trimmed[0] != '{' || !json.Valid(trimmed) {
		return nil, errors.New("the arguments are not a JSON object")
	}
	return trimmed, nil
}

// toolResults makes the function responses of msgs[from:to], all tool messages, in the order of the
// calls they answer: Gemini pairs responses with calls by position and name.
func toolResults(msgs []llm.Message, from, to int) ([]part, error) {
	var calls []llm.ToolCall
	for k := from - 1; k >= 0; k-- {
		if msgs[k].Role == llm.RoleAssistant {
			calls = msgs[k].ToolCalls
			break
		}
	}
	position := func(id string) int {
		for n, tc := range calls {
			if id != "" && tc.ID == id {
				return n
			}
		}
		return len(calls) // unknown calls keep their order, after the known ones
	}
	order := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		order = append(order, i)
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return position(msgs[a].ToolCallID) - position(msgs[b].ToolCallID)
	})
	var out, images []part
	for _, i := range order {
		m := &msgs[i]
		name := m.ToolName
		if name == "" {
			if n := position(m.ToolCallID); n < len(calls) {
				name = calls[n].Name
			}
		}
		if name == "" {
			return nil, fmt.Errorf("message %d: a tool result names no tool", i)
		}
		text := m.Text()
		env := resultEnvelope{Result: &text}
		if m.IsError {
			env = resultEnvelope{Error: &text}
		}
		out = append(out, part{FunctionResponse: &functionResponse{Name: name, Response: env}})
		for _, p := range m.Parts {
			if p.Kind == llm.PartImage && p.MediaType != "" && len(p.Data) > 0 {
				images = append(images, part{InlineData: &blob{MIMEType: p.MediaType, Data: p.Data}})
			}
		}
	}
	// Images a tool returned follow the responses, in the same user turn.
	return append(out, images...), nil
}

func convertTools(out *generateRequest, req *llm.Request) error {
	if len(req.Tools) == 0 {
		return nil
	}
	decls := make([]functionDeclaration, 0, len(req.Tools))
	for i, t := range req.Tools {
		if t.Name == "" {
			return fmt.Errorf("tool %d has no name", i)
		}
		decls = append(decls, functionDeclaration{Name: t.Name, Description: t.Description, ParametersJSONSchema: t.InputSchema})
	}
	out.Tools = []tool{{FunctionDeclarations: decls}}
	mode := ""
	switch req.ToolChoice {
	case llm.ToolChoiceAuto:
		mode = "AUTO"
	case llm.ToolChoiceNone:
		mode = "NONE"
	case llm.ToolChoiceRequired:
		mode = "ANY"
	case "":
	default:
		return fmt.Errorf("unknown tool choice %q", req.ToolChoice)
	}
	if mode != "" {
		out.ToolConfig = &toolConfig{FunctionCallingConfig: functionCallingConfig{Mode: mode}}
	}
	return nil
}

// generation returns the generation config, or nil when the request sets nothing.
func generation(req *llm.Request) *generationConfig {
	g := &generationConfig{MaxOutputTokens: req.MaxTokens, Temperature: req.Temperature}
	if r := req.Reasoning; r != nil {
		g.ThinkingConfig = thinking(r, req.Model)
	}
	if *g == (generationConfig{}) {
		return nil
	}
	return g
}

// Thinking budgets for an effort, on a model that takes a budget: within every Gemini 2.5 model's
// range (Pro 128–32768, Flash 0–24576, Flash-Lite 512–24576).
var effortBudget = map[string]int{"minimal": 512, "low": 1024, "medium": 8192, "high": 24576}

// proLevel is the thinkingLevel a Gemini 3 Pro model takes for an effort: Pro knows only LOW and HIGH,
// and refuses the others ("Thinking level MEDIUM is not supported for this model"). Flash takes all four.
var proLevel = map[string]string{"minimal": "LOW", "low": "LOW", "medium": "HIGH", "high": "HIGH"}

// thinking asks for the model's thoughts, with thinkingLevel for Gemini 3 and thinkingBudget before it.
// Given only the other setting, it derives one.
func thinking(r *llm.Reasoning, model string) *thinkingConfig {
	t := &thinkingConfig{IncludeThoughts: true}
	effort := strings.ToLower(r.Effort)
	if isGemini3(model) {
		switch {
		case effortBudget[effort] != 0 && strings.Contains(model, "pro"):
			t.ThinkingLevel = proLevel[effort]
		case effortBudget[effort] != 0:
			t.ThinkingLevel = strings.ToUpper(effort)
		case r.BudgetTokens > 0 && r.BudgetTokens <= effortBudget["low"]:
			t.ThinkingLevel = "LOW"
		case r.BudgetTokens > 0:
			t.ThinkingLevel = "HIGH"
		}
		return t
	}
	if r.BudgetTokens > 0 {
		t.ThinkingBudget = r.BudgetTokens
	} else {
		t.ThinkingBudget = effortBudget[effort]
	}
	return t
}
