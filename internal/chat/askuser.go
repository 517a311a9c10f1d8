package chat

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"chatd/internal/agent"
	"chatd/internal/llm"
)

// AskUserTool is the built-in tool with which the model asks the user one to four questions: a call
// pauses the run as an approval does, and the user's answers become its result. An agent offers it
// only with ask_user: true.
const AskUserTool = "ask_user"

// Limits of an ask_user call and of its answers.
const (
	maxQuestions     = 4
	maxQuestionBytes = 1 << 10
	maxChoices       = 10
	maxChoiceBytes   = 200
	maxAnswerBytes   = 4 << 10
)

var askUserSpec = llm.ToolSpec{
	Name: AskUserTool,
	Description: "Ask the user one to four short questions and wait for the answers, when you cannot go on " +
		"without them. Offer choices when the answer is one of a few. The answers come back as this call's result.",
	InputSchema: json.RawMessage(`{"type":"object","required":["questions"],"additionalProperties":false,"properties":{` +
		`"questions":{"type":"array","minItems":1,"maxItems":4,"items":{"type":"object","required":["question"],"additionalProperties":false,"properties":{` +
		`"question":{"type":"string","description":"the question, as the user will read it"},` +
		`"choices":{"type":"array","maxItems":10,"items":{"type":"string"},"description":"answers to pick from; absent: a free answer"}}}}}}`),
}

// question is one question of an ask_user call.
type question struct {
	Question string   `json:"question"`
	Choices  []string `json:"choices,omitempty"`
}

// questionsOf reads and checks the questions of an ask_user call.
func questionsOf(args json.RawMessage) ([]question, error) {
	var in struct {
		Questions []question `json:"questions"`
	}
	if err := json.Unmarshal(args, &in); err != nil {
		return nil, fmt.Errorf("ask_user needs {\"questions\": [{\"question\": \"…\", \"choices\": [\"…\"]}]}: %v", err)
	}
	if n := len(in.Questions); n < 1 || n > maxQuestions {
		return nil, fmt.Errorf("ask_user takes 1 to %d questions, not %d", maxQuestions, n)
	}
	for i, q := range in.Questions {
		switch {
		case strings.TrimSpace(q.Question) == "":
			return nil, fmt.Errorf("question %d is empty", i+1)
		case len(q.Question) > maxQuestionBytes:
			return nil, fmt.Errorf("question %d is %d bytes; at most %d", i+1, len(q.Question), maxQuestionBytes)
		case len(q.Choices) > maxChoices:
			return nil, fmt.Errorf("question %d has %d choices; at most %d", i+1, len(q.Choices), maxChoices)
		}
		for _, c := range q.Choices {
			if c == "" || len(c) > maxChoiceBytes {
				return nil, fmt.Errorf("question %d: a choice must have 1 to %d bytes", i+1, maxChoiceBytes)
			}
		}
	}
	return in.Questions, nil
}

// withAskUser offers ask_user, when the agent enables it and the request does not leave it out.
func (ts *toolSet) withAskUser(a Agent, selected []string) *toolSet {
	if !a.AskUser || (selected != nil && !slices.Contains(selected, AskUserTool)) || ts.allowed[AskUserTool] {
		return ts
	}
	c := *ts
	c.allowed = make(map[string]bool, len(ts.allowed)+1)
	for k, v := range ts.allowed {
		c.allowed[k] = v
	}
	c.allowed[AskUserTool] = true
	c.specs = append(slices.Clip(ts.specs), askUserSpec)
	return &c
}

// askUserResult is what the model is told of an ask_user call that was answered or declined.
func askUserResult(c waitingCall) agent.ToolResult {
	if c.Decision != DecisionAnswer {
		msg := "The user did not answer."
		if c.Note != "" {
			msg += " " + c.Note
		}
		return agent.ToolResult{Content: msg}
	}
	qs, _ := questionsOf(c.Arguments)
	type qa struct {
		Question string `json:"question"`
		Answer   string `json:"answer"`
	}
	out := make([]qa, 0, len(qs))
	for i, q := range qs {
		if i < len(c.Answers) {
			out = append(out, qa{Question: q.Question, Answer: c.Answers[i]})
		}
	}
	b, _ := json.Marshal(map[string]any{"answers": out})
	return agent.ToolResult{Content: string(b), Payload: b, Success: true}
}

// checkAnswers checks a user's answers to an ask_user call: one per question, each within its limit,
// and one of the choices when the question has them.
func checkAnswers(c *waitingCall, answers []string) error {
	qs, err := questionsOf(c.Arguments)
	if err != nil {
		return invalid("invalid_answers", "%s", err.Error())
	}
	if len(answers) != len(qs) {
		return invalid("invalid_answers", "the call asks %d questions; send %d answers, in order", len(qs), len(qs))
	}
	for i, a := range answers {
		switch {
		case len(a) > maxAnswerBytes || !utf8.ValidString(a):
			return invalid("invalid_answers", "answer %d must be valid text of at most %d bytes", i+1, maxAnswerBytes)
		case len(qs[i].Choices) > 0 && !slices.Contains(qs[i].Choices, a):
			return invalid("invalid_answers", "answer %d must be one of the question's choices: %s", i+1, strings.Join(qs[i].Choices, ", "))
		}
	}
	return nil
}
