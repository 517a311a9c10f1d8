package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// children holds every process chatbench started, so that all of them are stopped on the way out,
// whether the benchmark ended, failed or was interrupted.
type children struct {
	mu   sync.Mutex
	live map[*child]struct{}
}

// child is one started process: the mock, the relay or chatd.
type child struct {
	name  string
	cmd   *exec.Cmd
	done  chan struct{} // closed when the process has exited
	err   error         // its exit, once done is closed
	ready chan string   // the address or URL it announced
	lines *lineTail     // the end of what it wrote that was kept
}

// start runs name with args and env in a session of its own: its own process group, so that stopping it
// stops what it started, and its own CPU share where the kernel groups by session (autogroup), as the
// other servers have theirs. Pdeathsig kills it should chatbench die without cleaning up. Each line it
// writes goes to announce, which returns the address to report on ready, or "" and whether to keep
// the line.
func (cs *children) start(name, path string, args, env []string, announce func(line string) (addr string, keep bool)) (*child, error) {
	c := &child{name: name, done: make(chan struct{}), ready: make(chan string, 1), lines: &lineTail{max: 40}}
	var once sync.Once
	out := &lineWriter{fn: func(line string) {
		addr, keep := announce(line)
		if addr != "" {
			once.Do(func() { c.ready <- addr })
		}
		if keep {
			c.lines.add(line)
		}
	}}
	c.cmd = exec.Command(path, args...)
	c.cmd.Env = env
	c.cmd.Stdout, c.cmd.Stderr = out, out
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	c.cmd.WaitDelay = 2 * time.Second // a grandchild holding the output pipe must not hang Wait
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cs.mu.Lock()
	if cs.live == nil {
		cs.live = map[*child]struct{}{}
	}
	cs.live[c] = struct{}{}
	cs.mu.Unlock()
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// wait returns the address c announced, or an error when it exited or did not announce within limit.
func (c *child) wait(ctx context.Context, limit time.Duration) (string, error) {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case addr := <-c.ready:
		return addr, nil
	case <-c.done:
		return "", fmt.Errorf("%s exited before it was ready (%v); its output ends with:\n%s", c.name, c.err, c.lines)
	case <-t.C:
		return "", fmt.Errorf("%s not ready after %v; its output ends with:\n%s", c.name, limit, c.lines)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// stop asks c's process group to end (SIGTERM), and kills it after grace.
func (cs *children) stop(c *child, grace time.Duration) {
	select {
	case <-c.done:
	default:
		syscall.Kill(-c.pid(), syscall.SIGTERM)
		t := time.NewTimer(grace)
		select {
		case <-c.done:
		case <-t.C:
			syscall.Kill(-c.pid(), syscall.SIGKILL)
			<-c.done
		}
		t.Stop()
	}
	// Its group may hold more (chatd's MCP servers, were any configured).
	syscall.Kill(-c.pid(), syscall.SIGKILL)
	cs.mu.Lock()
	delete(cs.live, c)
	cs.mu.Unlock()
}

// stopAll stops every process still running, all at once.
func (cs *children) stopAll() {
	cs.mu.Lock()
	list := make([]*child, 0, len(cs.live))
	for c := range cs.live {
		list = append(list, c)
	}
	cs.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range list {
		wg.Go(func() { cs.stop(c, 5*time.Second) })
	}
	wg.Wait()
}

// lineWriter calls fn with each complete line written to it.
type lineWriter struct {
	mu  sync.Mutex
	buf []byte
	fn  func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.fn(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 { // a runaway line: keep its start
		w.fn(string(w.buf[:1024]) + "…")
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

// lineTail keeps the last max lines.
type lineTail struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (t *lineTail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == t.max {
		t.lines = t.lines[1:]
	}
	t.lines = append(t.lines, line)
}

func (t *lineTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 0 {
		return "  (nothing)"
	}
	return "  " + strings.Join(t.lines, "\n  ")
}

// readRSS returns the resident set (VmRSS) of process pid in KiB.
func readRSS(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			if f := strings.Fields(rest); len(f) > 0 { // "1234 kB"
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, errors.New("no VmRSS in /proc/" + strconv.Itoa(pid) + "/status")
}

// rssPeak samples a process's RSS every 200 ms until stop is called, and returns the highest sample.
type rssPeak struct {
	pid  int
	peak int64
	quit chan struct{}
	wg   sync.WaitGroup
}

// sampleRSS starts sampling pid, and returns its RSS now (the idle figure) too.
func sampleRSS(pid int) (*rssPeak, int64) {
	p := &rssPeak{pid: pid, quit: make(chan struct{})}
	p.peak, _ = readRSS(pid)
	idle := p.peak
	p.wg.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
			case <-p.quit:
				return
			}
			if v, err := readRSS(pid); err == nil {
				p.peak = max(p.peak, v)
			}
		}
	})
	return p, idle
}

func (p *rssPeak) stop() int64 {
	close(p.quit)
	p.wg.Wait()
	if v, err := readRSS(p.pid); err == nil {
		p.peak = max(p.peak, v)
	}
	return p.peak
}
