package prompt_test

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"chatd/internal/prompt"
	"chatd/internal/store"
)

// BenchmarkBuild builds the conversation of sessions of growing length, as chatd does before every
// model call. The time should grow with the records, linearly.
func BenchmarkBuild(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 10000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			recs := benchSession(n)
			var built *prompt.Built
			b.ReportAllocs()
			for b.Loop() {
				built = prompt.Build(recs, prompt.Options{Tools: true})
			}
			b.ReportMetric(float64(built.Tokens), "tokens")
			b.ReportMetric(float64(len(built.Messages)), "msgs")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/record")
		})
	}
	// As a run builds: the estimates of the records kept from the call before.
	for _, n := range []int{10, 100, 1000, 10000} {
		b.Run("warm/"+strconv.Itoa(n), func(b *testing.B) {
			recs := benchSession(n)
			opt := prompt.Options{Tools: true, Estimates: new(prompt.Estimates)}
			prompt.Build(recs, opt)
			b.ReportAllocs()
			for b.Loop() {
				prompt.Build(recs, opt)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/record")
		})
	}
}

// BenchmarkBuildOneRun builds a session of one user message and one long agent run: every round
// older than the last few is sent by name only, and all of them merge into one assistant message.
// Runs stop after at most 50 rounds, so the longer sessions here are not what chatd stores; they
// show how the time grows with the messages merged into one.
func BenchmarkBuildOneRun(b *testing.B) {
	for _, n := range []int{100, 1000, 4000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			r := rand.New(rand.NewPCG(uint64(n), 2))
			ok := true
			recs := []store.Record{{ID: "rec_1", Seq: 1, Role: store.RoleUser, Content: benchText(r, 200)}}
			for len(recs) < n {
				id, call := "rec_"+strconv.Itoa(len(recs)+1), "toolu_"+strconv.Itoa(len(recs)+1)
				recs = append(recs,
					store.Record{ID: id, Seq: int64(len(recs) + 1), Role: store.RoleAssistant, Content: benchText(r, 300),
						ToolCalls: []store.ToolCall{{ID: call, Name: "search", Arguments: json.RawMessage(`{"query":"x"}`)}}},
					store.Record{ID: id + "_result", Seq: int64(len(recs) + 2), Role: store.RoleTool, ParentID: id,
						ToolCallID: call, Name: "search", Content: benchText(r, 1<<10), Success: &ok})
			}
			b.ReportAllocs()
			for b.Loop() {
				prompt.Build(recs, prompt.Options{Tools: true})
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(recs)), "ns/record")
		})
	}
}

// benchSession is a session of n records as people and agents make them: about one in six records a
// user message of ~200 bytes; assistant turns of ~300 bytes, half of them calling one to three
// tools; tool results of ~1 KB, one in fifty of 50 KB.
func benchSession(n int) []store.Record {
	r := rand.New(rand.NewPCG(uint64(n), 1))
	recs := make([]store.Record, 0, n+3)
	ok := true
	at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	add := func(rec store.Record) string {
		rec.Seq = int64(len(recs) + 1)
		rec.ID = "rec_" + strconv.FormatInt(rec.Seq, 10)
		rec.SessionID = "sess_1"
		rec.CreatedAt = at.Add(time.Duration(rec.Seq) * time.Second)
		recs = append(recs, rec)
		return rec.ID
	}
	for len(recs) < n {
		if r.IntN(6) == 0 {
			add(store.Record{Role: store.RoleUser, Content: benchText(r, 200)})
			continue
		}
		turn := store.Record{Role: store.RoleAssistant, Content: benchText(r, 300), Model: "anthropic/claude-sonnet-4-5"}
		if r.IntN(2) == 0 {
			for i := range 1 + r.IntN(3) {
				turn.ToolCalls = append(turn.ToolCalls, store.ToolCall{
					ID:        "toolu_" + strconv.Itoa(len(recs)) + "_" + strconv.Itoa(i),
					Name:      []string{"search", "read_file", "run_command"}[r.IntN(3)],
					Arguments: benchArgs(benchText(r, 40)),
				})
			}
		}
		parent := add(turn)
		for _, call := range turn.ToolCalls {
			size := 1 << 10
			if r.IntN(50) == 0 {
				size = 50 << 10
			}
			add(store.Record{Role: store.RoleTool, ParentID: parent, ToolCallID: call.ID, Name: call.Name,
				Content: benchText(r, size), Success: &ok})
		}
	}
	return recs[:n]
}

// benchWords are what the texts are made of: prose, code and numbers, as a chat about code holds.
var benchWords = strings.Fields(`the a of to and in is it that for on with as this be are was file
	function return error value func err nil if := } { ( ) main.go 200 404 2025-01-01 0x1f config
	request response build test — naïve résumé 東京 ok true false "quoted" path/to/thing.go:42`)

// benchText is about size bytes of words.
// benchArgs are the arguments of a search for q.
func benchArgs(q string) json.RawMessage {
	b, err := json.Marshal(map[string]string{"query": q})
	if err != nil {
		panic(err)
	}
	return b
}

func benchText(r *rand.Rand, size int) string {
	var sb strings.Builder
	sb.Grow(size + 16)
	for sb.Len() < size {
		if sb.Len() > 0 {
			if r.IntN(12) == 0 {
				sb.WriteByte('\n')
			} else {
				sb.WriteByte(' ')
			}
		}
		sb.WriteString(benchWords[r.IntN(len(benchWords))])
	}
	return sb.String()
}
