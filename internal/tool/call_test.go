package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

// searchSchema declares an object, an array and a string parameter: the
// string one may legitimately hold JSON text.
const searchSchema = `{
	"type": "object",
	"properties": {
		"filter": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
		"ids": {"type": "array", "items": {"type": "integer"}},
		"code": {"type": "string"},
		"n": {"type": "integer"}
	},
	"additionalProperties": false
}`

func TestCallArguments(t *testing.T) {
	tests := []struct {
		name string
		tool string
		args string
		want outcome
	}{
		{
			name: "unknown tool",
			tool: "nope",
			args: `{}`,
			want: outcome{Arguments: `{}`, Content: `unknown tool "nope"; the available tools are: current_time, echo, search`},
		},
		{"nil arguments", "echo", "", outcome{Arguments: `{}`, Content: `{}`, Success: true}},
		{"blank arguments", "echo", " \n\t", outcome{Arguments: `{}`, Content: `{}`, Success: true}},
		{"null arguments", "echo", ` null `, outcome{Arguments: `{}`, Content: `{}`, Success: true}},
		{
			name: "kept as sent",
			tool: "echo",
			args: "{ \"b\": 1,\n \"a\": 12345678901234567890, \"h\": \"<&>\" }",
			want: outcome{
				Arguments: `{"b":1,"a":12345678901234567890,"h":"<&>"}`,
				Content:   `{"b":1,"a":12345678901234567890,"h":"<&>"}`,
				Success:   true,
			},
		},
		{
			name: "invalid UTF-8 replaced",
			tool: "echo",
			args: "{\"a\": \"\xff\"}",
			want: outcome{Arguments: "{\"a\":\"\uFFFD\"}", Content: "{\"a\":\"\uFFFD\"}", Success: true},
		},
		{
			name: "truncated JSON",
			tool: "echo",
			args: `{"a":`,
			want: outcome{Arguments: `{}`, Content: `invalid arguments for echo: not valid JSON: unexpected EOF`},
		},
		{
			name: "bad character",
			tool: "echo",
			args: `{"a": tru}`,
			want: outcome{Arguments: `{}`, Content: `invalid arguments for echo: not valid JSON: invalid character '}' in literal true (expecting 'e') (at byte 10)`},
		},
		{
			name: "trailing data",
			tool: "echo",
			args: `{"a":1} {"b":2}`,
			want: outcome{Arguments: `{}`, Content: `invalid arguments for echo: not valid JSON: invalid character after top-level value`},
		},
		{
			name: "array",
			tool: "echo",
			args: `[1,2]`,
			want: outcome{Arguments: `{}`, Content: `invalid arguments for echo: the arguments must be a JSON object, not an array`},
		},
		{
			name: "number",
			tool: "echo",
			args: `42`,
			want: outcome{Arguments: `{}`, Content: `invalid arguments for echo: the arguments must be a JSON object, not a number`},
		},
		{
			name: "plain string",
			tool: "echo",
			args: `"Paris"`,
			want: outcome{Arguments: `{}`, Content: `invalid arguments for echo: the arguments must be a JSON object, not a string`},
		},
		{
			name: "string holding an array",
			tool: "echo",
			args: `"[1]"`,
			want: outcome{Arguments: `{}`, Content: `invalid arguments for echo: the arguments must be a JSON object, not a string`},
		},
		{
			name: "whole value double-encoded",
			tool: "search",
			args: `"{\"n\": 1, \"code\": \"x\"}"`,
			want: outcome{Arguments: `{"n":1,"code":"x"}`, Content: `{"n":1,"code":"x"}`, Success: true},
		},
		{
			name: "nested object double-encoded",
			tool: "search",
			args: `{"filter":" {\"a\":1} ","n":2}`,
			want: outcome{Arguments: `{"filter":{"a":1},"n":2}`, Content: `{"filter":{"a":1},"n":2}`, Success: true},
		},
		{
			name: "nested array double-encoded",
			tool: "search",
			args: `{"ids":"[1,2]"}`,
			want: outcome{Arguments: `{"ids":[1,2]}`, Content: `{"ids":[1,2]}`, Success: true},
		},
		{
			name: "string parameter holding JSON is left alone",
			tool: "search",
			args: `{"code":"{\"x\":[1]}"}`,
			want: outcome{Arguments: `{"code":"{\"x\":[1]}"}`, Content: `{"code":"{\"x\":[1]}"}`, Success: true},
		},
		{
			name: "only the rejected value is repaired",
			tool: "search",
			args: `{"code":"[1]","filter":"{\"a\":1}"}`,
			want: outcome{Arguments: `{"code":"[1]","filter":{"a":1}}`, Content: `{"code":"[1]","filter":{"a":1}}`, Success: true},
		},
		{
			name: "repair that does not validate is not used",
			tool: "search",
			args: `{"filter":"{\"b\":1}"}`,
			want: outcome{Arguments: `{"filter":"{\"b\":1}"}`, Content: "invalid arguments for search:\n- /filter: got string, want object"},
		},
		{
			name: "every error listed",
			tool: "search",
			args: `{"n":"two","ids":[1,"x",3],"filter":{},"extra":true}`,
			want: outcome{
				Arguments: `{"n":"two","ids":[1,"x",3],"filter":{},"extra":true}`,
				Content: "invalid arguments for search:\n" +
					"- (root): additional properties 'extra' not allowed\n" +
					"- /filter: missing property 'a'\n" +
					"- /ids/1: got string, want integer\n" +
					"- /n: got string, want integer",
			},
		},
		{
			name: "current_time wrong type",
			tool: "current_time",
			args: `{"timezone":5}`,
			want: outcome{Arguments: `{"timezone":5}`, Content: "invalid arguments for current_time:\n- /timezone: got number, want string"},
		},
	}
	r := newTestRegistry(t, Options{}, echoTool("echo", ""), echoTool("search", searchSchema), CurrentTime(nil))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var args json.RawMessage
			if tt.args != "" {
				args = json.RawMessage(tt.args)
			}
			got := summarize(r.Call(t.Context(), tt.tool, args))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Call(%s, %s) (-want +got):\n%s", tt.tool, tt.args, diff)
			}
		})
	}
}

func TestCallUnknownToolInEmptyRegistry(t *testing.T) {
	got := summarize(newTestRegistry(t, Options{}).Call(t.Context(), "x", nil))
	want := outcome{Arguments: `{}`, Content: `unknown tool "x"; no tools are available`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Call (-want +got):\n%s", diff)
	}
}

func TestCallToolFailures(t *testing.T) {
	tests := []struct {
		name string
		call func(ctx context.Context, args json.RawMessage) (Result, error)
		want outcome
	}{
		{
			name: "payload",
			call: func(context.Context, json.RawMessage) (Result, error) {
				return Result{Content: "ok", Payload: json.RawMessage(`{"rows":1}`)}, nil
			},
			want: outcome{Arguments: `{}`, Content: "ok", Payload: `{"rows":1}`, Success: true},
		},
		{
			name: "error",
			call: func(context.Context, json.RawMessage) (Result, error) {
				return Result{}, errors.New("lookup weather: city not found; try a larger city nearby")
			},
			want: outcome{Arguments: `{}`, Content: "lookup weather: city not found; try a larger city nearby"},
		},
		{
			name: "IsError",
			call: func(context.Context, json.RawMessage) (Result, error) {
				return Result{Content: "quota exceeded", Payload: json.RawMessage(`{"retry":false}`), IsError: true}, nil
			},
			want: outcome{Arguments: `{}`, Content: "quota exceeded", Payload: `{"retry":false}`},
		},
		{
			name: "panic",
			call: func(context.Context, json.RawMessage) (Result, error) {
				var m map[string]int
				m["boom"]++ // a nil map write, the classic
				return Result{}, nil
			},
			want: outcome{Arguments: `{}`, Content: "tool flaky panicked: assignment to entry in nil map"},
		},
		{
			name: "panic with error value",
			call: func(context.Context, json.RawMessage) (Result, error) {
				panic(fmt.Errorf("wrapped: %w", errors.New("inner")))
			},
			want: outcome{Arguments: `{}`, Content: "tool flaky panicked: wrapped: inner"},
		},
		{
			name: "Goexit",
			call: func(context.Context, json.RawMessage) (Result, error) {
				runtime.Goexit()
				return Result{}, nil
			},
			want: outcome{Arguments: `{}`, Content: "tool flaky stopped without returning a result"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestRegistry(t, Options{}, fakeTool{info: Info{Name: "flaky"}, call: tt.call})
			got := summarize(r.Call(t.Context(), "flaky", nil))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Call (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPanicIsLogged(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	bomb := fakeTool{info: Info{Name: "bomb"}, call: func(context.Context, json.RawMessage) (Result, error) {
		panic("boom")
	}}
	r := newTestRegistry(t, Options{Logger: log}, bomb)
	if out := r.Call(t.Context(), "bomb", json.RawMessage(`{"password":"hunter2"}`)); out.Success {
		t.Fatal("Call succeeded, want a failure")
	}
	var entry struct {
		Level, Msg, Tool, Panic, Stack string
	}
	if err := json.Unmarshal(logs.Bytes(), &entry); err != nil {
		t.Fatalf("decode log %q: %v", logs.String(), err)
	}
	if entry.Level != "ERROR" || entry.Tool != "bomb" || entry.Panic != "boom" || !strings.Contains(entry.Stack, "call_test.go") {
		t.Errorf("log entry = %+v, want an error with the tool, the panic and its stack", entry)
	}
	if strings.Contains(logs.String(), "hunter2") {
		t.Errorf("argument values logged at info level: %s", logs.String())
	}
}

// blockingTool waits for its context, or for release when it ignores it.
func blockingTool(name string, timeout time.Duration, started chan<- struct{}, release <-chan struct{}) Tool {
	return fakeTool{info: Info{Name: name, Timeout: timeout}, call: func(ctx context.Context, _ json.RawMessage) (Result, error) {
		if started != nil {
			close(started)
		}
		if release != nil {
			<-release // ignores ctx, like a tool stuck in a system call
			return Result{Content: "too late"}, nil
		}
		<-ctx.Done()
		return Result{}, ctx.Err()
	}}
}

func TestCallTimeout(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		timeout time.Duration
		want    string
	}{
		{"default 30s", Options{}, 0, "tool slow timed out after 30s"},
		{"registry default", Options{DefaultTimeout: time.Minute}, 0, "tool slow timed out after 1m0s"},
		{"tool timeout wins", Options{DefaultTimeout: time.Minute}, 1500 * time.Millisecond, "tool slow timed out after 1.5s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newTestRegistry(t, tt.opts, blockingTool("slow", tt.timeout, nil, nil))
				got := summarize(r.Call(t.Context(), "slow", nil))
				want := outcome{Arguments: `{}`, Content: tt.want}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("Call (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// TestCallTimeoutIgnoredByTool checks that a tool ignoring its context
// does not hold up the call, and that its late result is dropped.
func TestCallTimeoutIgnoredByTool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		r := NewRegistry(Options{DefaultTimeout: 5 * time.Second})
		if err := r.Register(blockingTool("stuck", 0, nil, release)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		out := r.Call(t.Context(), "stuck", nil)
		if want := "tool stuck timed out after 5s"; out.Content != want || out.Success {
			t.Errorf("Call = %+v, want failure %q", out, want)
		}
		// In the bubble time is fake and exact: the call took its timeout.
		if out.Duration != 5*time.Second || time.Since(start) != 5*time.Second {
			t.Errorf("Duration = %v, want 5s", out.Duration)
		}

		closed := make(chan struct{})
		go func() { r.Close(); close(closed) }()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while the abandoned tool still runs")
		default:
		}
		close(release)
		<-closed
	})
}

func TestCallCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		started := make(chan struct{})
		r := newTestRegistry(t, Options{}, blockingTool("slow", 0, started, nil))
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			<-started
			cancel()
		}()
		got := summarize(r.Call(ctx, "slow", nil))
		want := outcome{Arguments: `{}`, Content: "tool slow was cancelled"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Call (-want +got):\n%s", diff)
		}
	})
}

func TestCallAlreadyCancelled(t *testing.T) {
	ran := false
	tl := fakeTool{info: Info{Name: "t"}, call: func(context.Context, json.RawMessage) (Result, error) {
		ran = true
		return Result{}, nil
	}}
	r := newTestRegistry(t, Options{}, tl)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if out := r.Call(ctx, "t", nil); out.Content != "tool t was cancelled" {
		t.Errorf("Content = %q, want a cancel", out.Content)
	}
	if ran {
		t.Error("the tool ran on a cancelled context")
	}
}

// TestCloseWaitsForAbandoned runs outside a bubble, with a real but short
// timeout, so goleak sees the real goroutines; nothing asserts on timing.
// TestCloseWaitsForAbandoned runs on synctest's clock: the 1ms timeout passes only once the tool is
// blocked, and synctest.Wait shows Close blocked while the abandoned tool still runs.
func TestCloseWaitsForAbandoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release, started := make(chan struct{}), make(chan struct{})
		r := NewRegistry(Options{DefaultTimeout: time.Millisecond})
		if err := r.Register(blockingTool("stuck", 0, started, release)); err != nil {
			t.Fatal(err)
		}
		if out := r.Call(t.Context(), "stuck", nil); out.Content != "tool stuck timed out after 1ms" {
			t.Fatalf("Call content = %q, want a timeout", out.Content)
		}
		<-started // the tool ran, and still runs: it ignores its context

		closed := make(chan struct{})
		go func() { r.Close(); close(closed) }()
		synctest.Wait() // every goroutine is blocked: Close too, or it has returned
		select {
		case <-closed:
			t.Fatal("Close returned while the abandoned tool still runs")
		default:
		}
		close(release)
		<-closed

		want := outcome{Arguments: `{}`, Content: "the tool registry is shutting down"}
		if diff := cmp.Diff(want, summarize(r.Call(t.Context(), "stuck", nil))); diff != "" {
			t.Errorf("Call after Close (-want +got):\n%s", diff)
		}
	})
	goleak.VerifyNone(t)
}

func TestConcurrentCalls(t *testing.T) {
	r := newTestRegistry(t, Options{}, CurrentTime(nil), echoTool("search", searchSchema))
	ctx := t.Context()
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			args := json.RawMessage(fmt.Sprintf(`{"filter":"{\"a\":%d}"}`, i))
			want := fmt.Sprintf(`{"filter":{"a":%d}}`, i)
			if out := r.Call(ctx, "search", args); out.Content != want {
				t.Errorf("search content = %q, want %q", out.Content, want)
			}
			if out := r.Call(ctx, "current_time", json.RawMessage(`{"timezone":"Asia/Tokyo"}`)); !out.Success {
				t.Errorf("current_time failed: %s", out.Content)
			}
			if out := r.Call(ctx, "current_time", json.RawMessage(`{"timezone":1}`)); out.Success {
				t.Error("current_time with a bad argument succeeded")
			}
		})
	}
	wg.Wait()
}

func TestResultSanitized(t *testing.T) {
	r := NewRegistry(Options{})
	defer r.Close()
	for name, res := range map[string]Result{
		"badpayload":  {Content: "ok", Payload: json.RawMessage(`{"unterminated":`)},
		"nullpayload": {Content: "ok", Payload: json.RawMessage(` null `)},
		"badutf8":     {Content: "caf\xe9"},
	} {
		if err := r.Register(fakeTool{info: Info{Name: name}, call: func(context.Context, json.RawMessage) (Result, error) { return res, nil }}); err != nil {
			t.Fatal(err)
		}
	}
	if out := r.Call(t.Context(), "badpayload", nil); !out.Success || out.Payload != nil || out.Content != "ok" {
		t.Errorf("bad payload: %+v", out)
	}
	if out := r.Call(t.Context(), "nullpayload", nil); out.Payload != nil {
		t.Errorf("null payload: %+v", out)
	}
	if out := r.Call(t.Context(), "badutf8", nil); out.Content != "caf\uFFFD" {
		t.Errorf("invalid UTF-8: %q", out.Content)
	}
}

// TestResultLimits: a result is stored within its limits whatever the tool returns: longer text is cut
// at a character boundary with a note, a longer payload dropped, attachments past their total dropped
// with a note, and an error message held to a sentence's size.
func TestResultLimits(t *testing.T) {
	r := NewRegistry(Options{MaxResultBytes: 100, MaxAttachmentBytes: 50})
	defer r.Close()
	for name, res := range map[string]Result{
		"longtext":    {Content: strings.Repeat("é", 80)}, // 160 bytes
		"bigpayload":  {Content: "ok", Payload: json.RawMessage(`{"a":"` + strings.Repeat("x", 200) + `"}`)},
		"attachments": {Content: "ok", Attachments: []Attachment{{Data: make([]byte, 30)}, {Data: make([]byte, 30)}, {Data: make([]byte, 1)}}},
	} {
		if err := r.Register(fakeTool{info: Info{Name: name}, call: func(context.Context, json.RawMessage) (Result, error) { return res, nil }}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Register(fakeTool{info: Info{Name: "echoerr"}, call: func(_ context.Context, args json.RawMessage) (Result, error) {
		return Result{}, fmt.Errorf("bad input %s", args)
	}}); err != nil {
		t.Fatal(err)
	}
	out := r.Call(t.Context(), "longtext", nil)
	kept, note, _ := strings.Cut(out.Content, "\n")
	if len(kept) != 100 || !strings.HasPrefix(note, "[chatd cut this result: it was 160 bytes") {
		t.Errorf("long text kept %d bytes, note %q", len(kept), note)
	}
	if out := r.Call(t.Context(), "bigpayload", nil); out.Payload != nil || !out.Success {
		t.Errorf("a payload over the limit: %+v", out)
	}
	out = r.Call(t.Context(), "attachments", nil)
	if len(out.Attachments) != 1 || !strings.Contains(out.Content, "dropped 2 of the result's 3 attachments") {
		t.Errorf("attachments: kept %d, content %q", len(out.Attachments), out.Content)
	}
	out = r.Call(t.Context(), "echoerr", json.RawMessage(`{"x":"`+strings.Repeat("y", 100_000)+`"}`))
	if out.Success || len(out.Content) > maxErrorBytes+8 {
		t.Errorf("an error echoing 100 KB of arguments came back as %d bytes", len(out.Content))
	}
}

// TestResultAttachmentsCountWhole: the attachment limit counts each attachment's media type and name
// as well as its data, and keeps at most 32: empty attachments in any number, or one whose name is
// megabytes long, pass no more.
func TestResultAttachmentsCountWhole(t *testing.T) {
	r := NewRegistry(Options{MaxResultBytes: 100, MaxAttachmentBytes: 1000})
	defer r.Close()
	many := make([]Attachment, 100_000)
	for i := range many {
		many[i] = Attachment{MediaType: "image/png", Name: "x"}
	}
	big := []Attachment{{MediaType: "image/png", Name: strings.Repeat("n", 1<<20), Data: []byte("ab")}}
	for name, atts := range map[string][]Attachment{"many": many, "bigname": big} {
		if err := r.Register(fakeTool{info: Info{Name: name}, call: func(context.Context, json.RawMessage) (Result, error) {
			return Result{Content: "ok", Attachments: atts}, nil
		}}); err != nil {
			t.Fatal(err)
		}
	}
	if out := r.Call(t.Context(), "many", nil); len(out.Attachments) != maxAttachments {
		t.Errorf("%d empty attachments kept, want %d", len(out.Attachments), maxAttachments)
	}
	if out := r.Call(t.Context(), "bigname", nil); len(out.Attachments) != 0 || !strings.Contains(out.Content, "dropped 1") {
		t.Errorf("an attachment with a 1 MiB name: kept %d, content %q", len(out.Attachments), out.Content)
	}
}
