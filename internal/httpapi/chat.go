package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"chatd/internal/chat"
	"chatd/internal/runevent"
	"chatd/internal/sse"
	"chatd/internal/store"
)

// chatRequest is the body of POST /v1/chat and /v1/chat/stream.
type chatRequest struct {
	SessionID     string           `json:"session_id"`
	Message       string           `json:"message"`
	Attachments   []attachmentWire `json:"attachments"`
	Model         string           `json:"model"`
	Agent         string           `json:"agent"`
	Temperature   *float64         `json:"temperature"`
	MaxTokens     int              `json:"max_tokens"`
	SelectedTools []string         `json:"selected_tools"`
	MaxIterations int              `json:"max_iterations"`
	Context       map[string]any   `json:"context"`
	OnActiveRun   string           `json:"on_active_run"`
	// Regenerate asks for the session's last answer again, with no message.
	Regenerate bool `json:"regenerate"`
}

type attachmentWire struct {
	MediaType string `json:"media_type"`
	Name      string `json:"name"`
	Data      string `json:"data"`
}

// maxKeyLen bounds an Idempotency-Key.
const maxKeyLen = 255

func (s *server) startRun(w http.ResponseWriter, r *http.Request) (*chat.Started, error) {
	key := r.Header.Get("Idempotency-Key")
	if len(key) > maxKeyLen || !printable(key) {
		return nil, &apiError{status: http.StatusBadRequest, code: "invalid_idempotency_key",
			message: fmt.Sprintf("Idempotency-Key must be at most %d printable ASCII characters", maxKeyLen)}
	}
	var in chatRequest
	if err := s.decodeLimit(w, r, &in, s.MaxChatBodyBytes); err != nil {
		return nil, err
	}
	switch in.OnActiveRun {
	case "", chat.OnActiveReject, chat.OnActiveInterrupt, chat.OnActiveEnqueue:
	default:
		return nil, &apiError{status: http.StatusBadRequest, code: "invalid_on_active_run",
			message: "on_active_run must be reject, interrupt or enqueue"}
	}
	req := chat.Request{
		SessionID: in.SessionID, Message: in.Message, Model: in.Model, Agent: in.Agent,
		Temperature: in.Temperature, MaxTokens: in.MaxTokens, SelectedTools: in.SelectedTools,
		MaxIterations: in.MaxIterations, Context: in.Context, Regenerate: in.Regenerate,
	}
	for i, a := range in.Attachments {
		data, err := decodeBase64(a.Data)
		if err != nil {
			return nil, &apiError{status: http.StatusBadRequest, code: "invalid_attachment",
				message: fmt.Sprintf("attachment %d: data is not base64", i)}
		}
		req.Attachments = append(req.Attachments, store.Attachment{MediaType: a.MediaType, Name: a.Name, Data: data})
	}
	st, err := s.Chat.Start(r.Context(), user(r.Context()), req, chat.StartOptions{OnActiveRun: in.OnActiveRun, IdempotencyKey: key,
		Account: s.account(r.Context())})
	if err != nil {
		return nil, err
	}
	h := w.Header()
	h.Set("X-Run-Id", st.RunID)
	h.Set("X-Session-Id", st.SessionID)
	if st.Replayed {
		h.Set("Idempotent-Replayed", "true")
	}
	return st, nil
}

// printable reports whether s is printable ASCII.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// chatStream starts a run and streams its events. A retried send (same Idempotency-Key) streams the
// original run from its first event.
func (s *server) chatStream(w http.ResponseWriter, r *http.Request) error {
	st, err := s.startRun(w, r)
	if err != nil {
		return err
	}
	return s.streamEvents(w, r, st.RunID, 0)
}

// maxBatch is how many events one write to a client carries at most: with the write deadline, the bound
// on what a subscriber holds that its client has not taken.
const maxBatch = 256

// maxWrite is how much of a batch one write carries at most, so that a reader never holds a copy of
// hundreds of large events at once.
const maxWrite = 64 << 10

// streamEvents writes the run's events after seq after as SSE, as they are, until the run has ended and
// every event is written, or the client goes away (the run goes on).
func (s *server) streamEvents(w http.ResponseWriter, r *http.Request, runID string, after int64) error {
	return s.follow(w, r, runID, after, func(out *sse.Writer, batch []chat.Event) error {
		for _, ev := range batch {
			if err := out.QueueNumbered(ev.Seq, ev.Type, ev.Data); err != nil {
				return err
			}
			if out.Queued() >= maxWrite { // large events (tool results) go in writes of their own
				if err := out.Send(); err != nil {
					return err
				}
			}
		}
		return out.Send() // the batch in one write and one flush
	})
}

// follow streams the run's events after seq after to the client, a batch at a time through write,
// until the run has ended and every event is written, or the client goes away (the run goes on). The
// events are read from the run's shared log, so a reader costs no copy of them; a reader that cannot
// take a batch within the write timeout is disconnected (it resumes with Last-Event-ID) and never slows
// the run or other readers. An idle stream gets a ": ping" comment. Headers the caller set before are
// sent with the stream's own.
func (s *server) follow(w http.ResponseWriter, r *http.Request, runID string, after int64,
	write func(out *sse.Writer, batch []chat.Event) error) error {
	fw, err := s.startFollow(w, r, runID, after, write)
	if err != nil {
		return err
	}
	defer fw.close()
	fw.loop()
	return nil
}

// follower is one client's following of a run. The stream's goroutine waits in its loop for as long as
// the stream is open, and the runtime halves a waiting goroutine's stack only while it uses under a
// quarter of it: what the loop does not do at every turn (opening, writing, pinging, logging) is in
// functions of its own, so that the frames it waits on stay small.
type follower struct {
	s     *server
	r     *http.Request
	runID string
	f     *chat.Follower
	rc    *http.ResponseController
	out   *sse.Writer
	write func(out *sse.Writer, batch []chat.Event) error
	ping  *time.Ticker

	deadlineSet    time.Time
	wroteSinceTick bool
}

// startFollow opens the run's events and sends the stream's headers.
func (s *server) startFollow(w http.ResponseWriter, r *http.Request, runID string, after int64,
	write func(out *sse.Writer, batch []chat.Event) error) (*follower, error) {
	ctx := r.Context()
	f, err := s.Chat.Follow(ctx, user(ctx), runID, after)
	if err != nil {
		return nil, err
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	h.Set("X-Run-Id", runID)
	w.WriteHeader(http.StatusOK)
	s.Metrics.StreamOpened()
	// Per batch, no timer is touched: the write deadline is moved on only once half of it has passed
	// (a write always has at least half the timeout), and the ping ticker runs on, a ping going out at
	// a tick with no write since the one before.
	return &follower{s: s, r: r, runID: runID, f: f, rc: http.NewResponseController(w), out: sse.NewWriter(w), write: write,
		ping: time.NewTicker(s.PingInterval)}, nil
}

func (fw *follower) close() {
	fw.ping.Stop()
	fw.s.Metrics.StreamClosed()
	fw.f.Close()
}

// loop writes the events as they come until the run has ended and every event is written, or the
// client is gone.
func (fw *follower) loop() {
	ctx := fw.r.Context()
	for {
		events, end, err := fw.f.Read(ctx)
		if err != nil {
			fw.readFailed(err)
			return // the status is sent; the client resumes from its last id
		}
		if !fw.send(events) || end {
			return
		}
		if len(events) > 0 {
			continue // more may have come while we wrote: read again before waiting
		}
		select {
		case <-fw.f.Wait():
		case <-fw.ping.C:
			if !fw.sendPing() {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// send writes events in batches of maxBatch; false when the client is gone or too slow.
func (fw *follower) send(events []chat.Event) bool {
	for len(events) > 0 {
		batch := events[:min(len(events), maxBatch)]
		events = events[len(batch):]
		if now := time.Now(); now.Sub(fw.deadlineSet) > fw.s.WriteTimeout/2 {
			fw.rc.SetWriteDeadline(now.Add(fw.s.WriteTimeout))
			fw.deadlineSet = now
		}
		if err := fw.write(fw.out, batch); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				fw.s.Metrics.SlowReader()
			}
			fw.s.log.Debug("stream client gone or too slow", "run", fw.runID, "path", fw.r.URL.Path, "seq", batch[0].Seq, "err", err)
			return false
		}
		fw.wroteSinceTick = true
	}
	return true
}

// sendPing sends a ping at a tick with no write since the one before; false when the client is gone.
func (fw *follower) sendPing() bool {
	if fw.wroteSinceTick {
		fw.wroteSinceTick = false
		return true
	}
	now := time.Now()
	fw.rc.SetWriteDeadline(now.Add(fw.s.WriteTimeout))
	fw.deadlineSet = now
	return fw.out.Comment("ping") == nil
}

func (fw *follower) readFailed(err error) {
	if fw.r.Context().Err() == nil { // a client that left is no news
		fw.s.log.Warn("stream: read events", "run", fw.runID, "err", err)
	}
}

// batchResponse is the answer of POST /v1/chat.
type batchResponse struct {
	SessionID    string                 `json:"session_id"`
	RunID        string                 `json:"run_id"`
	Status       string                 `json:"status"`
	Message      *runevent.Record       `json:"message"`
	ToolHistory  []runevent.ToolHistory `json:"tool_history"`
	Usage        runevent.Usage         `json:"usage"`
	FinishReason string                 `json:"finish_reason"`
	Error        *runevent.Error        `json:"error,omitempty"`
}

// chatBatch starts a run and answers when it has ended. A failed run answers 502 (upstream), 429 with
// Retry-After (the caller's token or spend limit ended it) or 500, with the error and the run's ids,
// since the user's message is stored either way. A retried send (the same Idempotency-Key) answers 200
// with the run as it ended, whatever its status: sending it again cannot change it.
func (s *server) chatBatch(w http.ResponseWriter, r *http.Request) error {
	st, err := s.startRun(w, r)
	if err != nil {
		return err
	}
	o, err := s.Chat.Wait(r.Context(), user(r.Context()), st.RunID)
	if err != nil {
		if r.Context().Err() != nil {
			return nil // the client left; the run goes on and is stored
		}
		return err
	}
	status := http.StatusOK
	if o.Error != nil && !st.Replayed {
		status = runErrorStatus(o.Error)
		// A run the caller's token or spend budget ended is refused by a limit, like the next send.
		if secs := s.budgetRetry(r.Context(), o.Error.Code); secs > 0 {
			status = http.StatusTooManyRequests
			w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		}
	}
	return writeJSON(w, status, batchResponse{
		SessionID: st.SessionID, RunID: st.RunID, Status: o.Status, Message: o.Message,
		ToolHistory: o.ToolHistory, Usage: runevent.UsageOf(o.Usage), FinishReason: o.FinishReason, Error: o.Error,
	})
}
