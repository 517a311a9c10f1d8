package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"
	"unicode/utf8"
)

// errTimedOut is the cause of a call's context when its own timeout fires,
// to tell it apart from a cancel by the caller.
var errTimedOut = errors.New("tool call timed out")

// errClosed fails calls made after Close.
var errClosed = errors.New("the tool registry is shutting down")

// Call runs the tool called name with the model's arguments. It never
// panics: every failure is an Outcome with Success false and a Content that
// says what went wrong, for the model to read.
func (r *Registry) Call(ctx context.Context, name string, args json.RawMessage) Outcome {
	start := time.Now()
	out := r.call(ctx, name, args)
	out.Duration = time.Since(start)
	// Argument values may hold secrets: they are logged at debug level only.
	r.log.Debug("tool call", "tool", name, "success", out.Success,
		"duration", out.Duration, "arguments", string(out.Arguments))
	return out
}

func (r *Registry) call(ctx context.Context, name string, raw json.RawMessage) Outcome {
	e, ok := r.lookup(name)
	if !ok {
		return failure(emptyObject, r.unknownTool(name))
	}
	args, err := prepareArguments(name, raw, e.schema)
	if err != nil {
		return failure(args, err.Error())
	}
	res, err := r.run(ctx, e, args)
	if err != nil {
		return failure(args, err.Error())
	}
	res = r.sanitize(name, res)
	return Outcome{Arguments: args, Content: res.Content, Payload: res.Payload, Attachments: res.Attachments, Success: !res.IsError}
}

// sanitize makes a tool's result safe to store and send: a payload that is not JSON is dropped (tools
// from MCP servers are not trusted), text is made valid UTF-8, and each part is held to its limit.
func (r *Registry) sanitize(name string, res Result) Result {
	if p := bytes.TrimSpace(res.Payload); len(p) == 0 || string(p) == "null" {
		res.Payload = nil
	} else if !json.Valid(p) {
		r.log.Warn("tool returned a payload that is not JSON; dropped", "tool", name, "bytes", len(res.Payload))
		res.Payload = nil
	} else if len(p) > r.maxResult {
		r.log.Warn("tool returned a payload over the limit; dropped", "tool", name, "bytes", len(p), "limit", r.maxResult)
		res.Payload = nil
	} else {
		res.Payload = p
	}
	res.Content = strings.ToValidUTF8(res.Content, "\uFFFD")
	if len(res.Content) > r.maxResult {
		res.Content = cut(res.Content, r.maxResult) + fmt.Sprintf("\n[chatd cut this result: it was %d bytes; at most %d are kept]", len(res.Content), r.maxResult)
	}
	total := 0
	for i, a := range res.Attachments {
		total += len(a.Data) + len(a.MediaType) + len(a.Name)
		if total > r.maxAttachments || i == maxAttachments {
			res.Content += fmt.Sprintf("\n[chatd dropped %d of the result's %d attachments: it keeps %d at most, of %d bytes together]",
				len(res.Attachments)-i, len(res.Attachments), maxAttachments, r.maxAttachments)
			res.Attachments = res.Attachments[:i:i]
			break
		}
	}
	return res
}

// maxAttachments bounds the attachments of one result: each is a stored part of its record.
const maxAttachments = 32

// cut returns at most n bytes of s, ending on a character boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// failure is the outcome of a call that failed, with its message held to maxErrorBytes.
func failure(args json.RawMessage, msg string) Outcome {
	if len(msg) > maxErrorBytes {
		msg = cut(msg, maxErrorBytes) + "…"
	}
	return Outcome{Arguments: args, Content: msg}
}

func (r *Registry) unknownTool(name string) string {
	names := r.names()
	if len(names) == 0 {
		return fmt.Sprintf("unknown tool %q; no tools are available", name)
	}
	return fmt.Sprintf("unknown tool %q; the available tools are: %s", name, strings.Join(names, ", "))
}

// result is what a tool goroutine hands back.
type result struct {
	res Result
	err error
}

// run calls the tool in its own goroutine and waits for its result or the
// end of the call's context, whichever comes first. A tool still running
// then is abandoned: Close waits for it and its result is dropped.
func (r *Registry) run(ctx context.Context, e *entry, args json.RawMessage) (Result, error) {
	timeout := e.info.Timeout
	if timeout <= 0 {
		timeout = r.timeout
	}
	callCtx, cancel := context.WithTimeoutCause(ctx, timeout, errTimedOut)
	defer cancel()
	if callCtx.Err() != nil {
		return Result{}, stopped(callCtx, e.info.Name, timeout)
	}

	// Buffered so that an abandoned tool can still deliver and exit.
	done := make(chan result, 1)
	if err := r.start(func() { r.invoke(callCtx, e, args, done) }); err != nil {
		return Result{}, err
	}
	select {
	case out := <-done:
		if out.err != nil && callCtx.Err() != nil {
			// The tool gave up because of the context; say why in words.
			return Result{}, stopped(callCtx, e.info.Name, timeout)
		}
		return out.res, out.err
	case <-callCtx.Done():
		return r.abandon(callCtx, e.info.Name, timeout, done)
	}
}

// abandon stops waiting for a tool whose context has ended, unless its
// result arrived at the same moment: a finished result is never dropped.
func (r *Registry) abandon(ctx context.Context, name string, timeout time.Duration, done <-chan result) (Result, error) {
	select {
	case out := <-done:
		if out.err == nil {
			return out.res, nil
		}
	default:
	}
	err := stopped(ctx, name, timeout)
	if errors.Is(context.Cause(ctx), errTimedOut) {
		// Cancels are routine; a tool overrunning its timeout is worth a look.
		r.log.Warn("tool call abandoned", "tool", name, "reason", err)
	}
	return Result{}, err
}

// start runs f in a goroutine Close waits for. Checking closed under the
// lock orders every Add before Close's Wait, as WaitGroup requires.
func (r *Registry) start(f func()) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return errClosed
	}
	r.running.Go(f)
	return nil
}

// invoke calls the tool and always delivers a result on done: a panic
// becomes an error, and so does a tool that ends its goroutine with
// runtime.Goexit without returning.
func (r *Registry) invoke(ctx context.Context, e *entry, args json.RawMessage, done chan<- result) {
	out := result{err: fmt.Errorf("tool %s stopped without returning a result", e.info.Name)}
	defer func() {
		if v := recover(); v != nil {
			r.log.Error("tool panicked", "tool", e.info.Name, "panic", v, "stack", string(debug.Stack()))
			out = result{err: fmt.Errorf("tool %s panicked: %v", e.info.Name, v)}
		}
		done <- out
	}()
	out.res, out.err = e.tool.Call(ctx, args)
}

// stopped explains why a call's context ended: its own timeout, a cancel, or what else the caller
// said (a run that reached its time limit).
func stopped(ctx context.Context, name string, timeout time.Duration) error {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errTimedOut):
		return fmt.Errorf("tool %s timed out after %s", name, timeout)
	case cause == nil || errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded):
		return fmt.Errorf("tool %s was cancelled", name)
	}
	return fmt.Errorf("tool %s was stopped: %v", name, cause)
}

// CheckArguments checks arguments for the named tool as a call would, without running it: the object
// it would run with, or why it would not run.
func (r *Registry) CheckArguments(name string, args json.RawMessage) (json.RawMessage, error) {
	e, ok := r.lookup(name)
	if !ok {
		return nil, errors.New(r.unknownTool(name))
	}
	return prepareArguments(name, args, e.schema)
}
