package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// target is one server under load: where to POST, what to send, and whose RSS to sample.
type target struct {
	url  string
	pid  int
	body func(client, stream int) []byte
}

// load is how a run drives a target.
type load struct {
	clients int           // concurrent streams
	streams int           // streams in all (at least clients); clients take the next one as theirs ends
	ramp    time.Duration // the clients start spread over this
	timeout time.Duration // per stream, request to end of body
	expect  int           // markers a stream must carry
}

// stream is what one client saw of one stream.
type stream struct {
	err     string // "" when it succeeded; otherwise its kind
	detail  string
	ttft    time.Duration // request sent → first marker received
	delays  []int64       // ns: receive time − the marker's stamp, one per new marker
	markers int
	repeats int // markers not above the last one seen: a server sending the text again (chatd's complete)
	stalls  int
}

// measured is the outcome of one run against one target.
type measured struct {
	Clients     int            `json:"clients"`
	Streams     int            `json:"streams"`
	OK          int            `json:"ok"`
	Errors      map[string]int `json:"errors,omitempty"`
	ErrorSample string         `json:"error_sample,omitempty"`
	TTFTp50     float64        `json:"ttft_us_p50"`
	TTFTp99     float64        `json:"ttft_us_p99"`
	Delayp50    float64        `json:"delay_us_p50"`
	Delayp99    float64        `json:"delay_us_p99"`
	Stalls      int            `json:"stalls"`
	RSSIdleKB   int64          `json:"rss_idle_kb"`
	RSSPeakKB   int64          `json:"rss_peak_kb"`
	RSSPerKB    float64        `json:"rss_per_stream_kb"`
	WallS       float64        `json:"wall_s"`
	ChatsPerS   float64        `json:"chats_per_s"`
}

// run drives t with l and samples t's RSS while it runs: idle just before, peak every 200 ms.
func run(ctx context.Context, t target, l load) measured {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		MaxIdleConnsPerHost: l.clients,
		DisableCompression:  true, // read the bytes as the server sent them
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	rss, idle := sampleRSS(t.pid)
	results := make([]stream, l.streams)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range l.clients {
		wg.Go(func() {
			if !sleepCtx(ctx, time.Until(start.Add(l.ramp*time.Duration(w)/time.Duration(l.clients)))) {
				return
			}
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= l.streams {
					return
				}
				results[i] = get(ctx, client, t.url, t.body(w, i), l)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	peak := rss.stop()
	m := summarize(results)
	m.Clients, m.WallS = l.clients, wall.Seconds()
	m.ChatsPerS = float64(m.OK) / wall.Seconds()
	m.RSSIdleKB, m.RSSPeakKB = idle, peak
	m.RSSPerKB = float64(peak-idle) / float64(l.clients)
	return m
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// get makes one streamed request and reads it to its end, noting when each marker arrived.
func get(ctx context.Context, client *http.Client, url string, body []byte, l load) (s stream) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return stream{err: "other", detail: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return stream{err: errorKind(ctx, err), detail: err.Error()}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return stream{err: "status " + strconv.Itoa(resp.StatusCode), detail: strings.TrimSpace(string(b))}
	}
	var (
		sc     markerScanner
		runErr = needleScanner{needle: []byte("event: error\n")}
		buf    = make([]byte, 16<<10)
		last   int64
		recv   []int64
		now    time.Time
	)
	emit := func(v int64) {
		if v <= last {
			s.repeats++
			return
		}
		if last = v; s.markers == 0 {
			s.ttft = now.Sub(t0)
		}
		s.markers++
		s.delays = append(s.delays, now.UnixNano()-v)
		recv = append(recv, now.UnixNano())
	}
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			now = time.Now()
			sc.feed(buf[:n], emit)
			runErr.feed(buf[:n])
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			s.err, s.detail = errorKind(ctx, err), err.Error()
			break
		}
	}
	s.stalls = countStalls(recv)
	switch {
	case s.err != "":
	case runErr.found:
		s.err, s.detail = "run-error", "the stream carried an error event"
	case s.markers == 0:
		s.err, s.detail = "no-markers", "the stream ended without a token"
	case s.markers < l.expect:
		s.err, s.detail = "short", fmt.Sprintf("%d tokens of %d", s.markers, l.expect)
	}
	return s
}

func errorKind(ctx context.Context, err error) string {
	var ne net.Error
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(ctx.Err(), context.Canceled):
		return "canceled"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "eof"
	}
	return "other"
}

// summarize pools the streams of one run: percentiles over every stream's TTFT and every token's delay.
func summarize(results []stream) measured {
	m := measured{Streams: len(results), Errors: map[string]int{}}
	var ttfts, delays []int64
	for _, r := range results {
		switch {
		case r.err == "" && r.markers == 0 && r.detail == "":
			m.Errors["not-started"]++ // interrupted before it began
		case r.err != "":
			m.Errors[r.err]++
			if m.ErrorSample == "" {
				m.ErrorSample = r.err + ": " + r.detail
			}
		default:
			m.OK++
		}
		if r.markers > 0 {
			ttfts = append(ttfts, int64(r.ttft))
		}
		delays = append(delays, r.delays...)
		m.Stalls += r.stalls
	}
	slices.Sort(ttfts)
	slices.Sort(delays)
	m.TTFTp50, m.TTFTp99 = micros(percentile(ttfts, 50)), micros(percentile(ttfts, 99))
	m.Delayp50, m.Delayp99 = micros(percentile(delays, 50)), micros(percentile(delays, 99))
	if len(m.Errors) == 0 {
		m.Errors = nil
	}
	return m
}
