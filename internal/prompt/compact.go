package prompt

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"chatd/internal/llm"
	"chatd/internal/store"
)

// Compaction: when a conversation nears the model's context window, the records before a cut are
// summarized by the model, and the summary — stored as a record — stands in for them from then on.

// summarySystem is the summarizer's system prompt.
const summarySystem = `You write the summary that replaces the earlier part of a conversation between a user and an AI assistant, so that the assistant can continue the conversation without it.

Keep everything the assistant needs to continue: the user's goals, requests and preferences; decisions made; facts learned, above all from tool results (names, numbers, ids, dates, file paths, URLs, error messages), exactly; what has been done and what is still open or was promised. Leave out pleasantries and repetition. Write in the language of the conversation, as compact notes, in the third person ("The user asked…"). Answer with the summary only.`

// Limits of a summary.
const (
	summaryMaxTokens  = 4096     // the summary's own length, at most
	transcriptResult  = 4 << 10  // of a tool result or arguments, in a transcript
	transcriptMessage = 64 << 10 // of a message
	maxSummaryChunks  = 16       // model calls for one summary; beyond, the oldest records are left out
	transcriptOmitted = "[Older messages were left out of this summary: there were too many to summarize.]\n\n"
)

// Summarizer writes summaries with one model.
type Summarizer struct {
	Provider llm.Provider
	Model    string
	// Window is the model's context window in tokens; each call of the summarizer stays within half.
	Window int
	// Ratio is the calibration of the local estimate for the model (0: 1).
	Ratio float64
	// Usage, when set, receives the usage of every model call the summarizer makes.
	Usage func(llm.Usage)
	// IdleTime ends a summary call that sends nothing for that long (default 5m), as a run's calls.
	IdleTime time.Duration
}

// Limits on what a summary call streams: a model that ignores max_tokens, or a broken upstream, must
// not grow a summary (stored, and sent on every later request) or the call's time without bound.
const (
	summaryMaxBytes  = 64 << 10  // the summary kept: far more than summaryMaxTokens of text
	summaryReadBytes = 256 << 10 // all a call may stream, reasoning and signatures included
)

// Summarize returns a summary of previous (an earlier summary, or "") followed by records. A transcript
// too long for one call is summarized in chunks, each with the summary so far.
func (s *Summarizer) Summarize(ctx context.Context, previous string, records []store.Record) (string, error) {
	ratio := s.Ratio
	if ratio <= 0 {
		ratio = 1
	}
	budget := int(float64(s.Window/2)/ratio) - Estimate(previous)
	chunks := transcript(records, max(budget, 1000))
	if len(chunks) > maxSummaryChunks {
		chunks = chunks[len(chunks)-maxSummaryChunks:]
		chunks[0] = transcriptOmitted + chunks[0]
	}
	summary := previous
	for _, chunk := range chunks {
		var err error
		if summary, err = s.call(ctx, summary, chunk); err != nil {
			return "", err
		}
	}
	if strings.TrimSpace(summary) == "" {
		return "", errors.New("the model wrote an empty summary")
	}
	return summary, nil
}

func (s *Summarizer) call(ctx context.Context, previous, chunk string) (string, error) {
	var in strings.Builder
	if previous != "" {
		in.WriteString("The summary of what came before:\n<summary>\n")
		in.WriteString(previous)
		in.WriteString("\n</summary>\n\nThe conversation after it:\n")
	} else {
		in.WriteString("The conversation:\n")
	}
	in.WriteString("<conversation>\n")
	in.WriteString(chunk)
	in.WriteString("</conversation>\n\nWrite the summary that replaces all of the above")
	if previous != "" {
		in.WriteString(", the earlier summary included")
	}
	in.WriteString(".")
	req := &llm.Request{
		Model:     s.Model,
		System:    summarySystem,
		Messages:  []llm.Message{llm.TextMessage(llm.RoleUser, in.String())},
		MaxTokens: SummaryTokens(s.Window),
	}
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	quiet := llm.NewWatchdog(cmp.Or(s.IdleTime, 5*time.Minute), func() { cancel(errSummaryQuiet) })
	defer quiet.Stop()
	var out strings.Builder
	read := 0
	for ev, err := range s.Provider.Stream(callCtx, req) {
		if err != nil {
			if quiet.Fired() && ctx.Err() == nil {
				return "", errSummaryQuiet
			}
			return "", err
		}
		if n := len(ev.Text) + len(ev.Signature); n > 0 {
			quiet.Poke()
			read += n
		}
		if read > summaryReadBytes {
			break // what came so far is the summary, if anything
		}
		switch ev.Kind {
		case llm.EventText:
			out.WriteString(ev.Text[:min(len(ev.Text), max(summaryMaxBytes-out.Len(), 0))])
		case llm.EventUsage:
			if s.Usage != nil {
				s.Usage(ev.Usage)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	return strings.TrimSpace(strings.ToValidUTF8(out.String(), "")), nil
}

// errSummaryQuiet fails a summary call whose stream went quiet.
var errSummaryQuiet = errors.New("the model sent nothing for the summary for too long")

// SummaryTokens is the longest summary a model of this window writes.
func SummaryTokens(window int) int {
	return min(summaryMaxTokens, max(window/8, 512))
}

// transcript renders records as plain text for the summarizer, in chunks of about chunkTokens. One
// message is cut to fit a chunk.
func transcript(records []store.Record, chunkTokens int) []string {
	msgMax := min(transcriptMessage, chunkTokens*3) // about three bytes a token, erring short
	resultMax := min(transcriptResult, msgMax)
	var chunks []string
	var sb strings.Builder
	tokens := 0
	for i := range records {
		r := &records[i]
		start := sb.Len()
		switch r.Role {
		case store.RoleUser:
			sb.WriteString("User: ")
			sb.Write(cutBytes([]byte(r.Content), msgMax))
			if n := len(r.Attachments); n > 0 {
				sb.WriteString(" [with ")
				sb.WriteString(plural(n, "attachment"))
				sb.WriteString("]")
			}
		case store.RoleAssistant:
			sb.WriteString("Assistant: ")
			sb.Write(cutBytes([]byte(r.Content), msgMax))
			for _, c := range r.ToolCalls {
				sb.WriteString("\nAssistant called ")
				sb.WriteString(c.Name)
				sb.WriteString(" ")
				sb.Write(cutBytes(c.Arguments, resultMax))
			}
		case store.RoleTool:
			if r.Success != nil && *r.Success {
				sb.WriteString("Tool " + r.Name + " returned: ")
			} else {
				sb.WriteString("Tool " + r.Name + " failed: ")
			}
			sb.Write(cutBytes([]byte(r.Content), resultMax))
		default:
			continue
		}
		sb.WriteString("\n\n")
		t := Estimate(sb.String()[start:])
		if tokens > 0 && tokens+t > chunkTokens {
			chunks = append(chunks, sb.String()[:start])
			rest := sb.String()[start:]
			sb.Reset()
			sb.WriteString(rest)
			tokens = 0
		}
		tokens += t
	}
	if sb.Len() > 0 {
		chunks = append(chunks, sb.String())
	}
	return chunks
}

func cutBytes(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	for n > 0 && b[n]&0xC0 == 0x80 {
		n--
	}
	return append(b[:n:n], " …[cut]"...)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}
