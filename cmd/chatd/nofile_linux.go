//go:build linux

package main

import (
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// raiseFileLimit raises the process's limit of open files as far as the system allows: every stream
// holds two (the client's connection and the model's), so the common default of 1,024 would cap a
// server at a few hundred streams. Go already lifts the soft limit to the hard one; a process allowed
// to (root, or CAP_SYS_RESOURCE) lifts the hard one too, up to the kernel's fs.nr_open. It logs the
// limit in effect, and warns when it is low.
func raiseFileLimit(log *slog.Logger) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("read the open files limit", "err", err)
		return
	}
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if max, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && max > lim.Max {
			want := syscall.Rlimit{Cur: max, Max: max}
			if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) == nil {
				lim = want
			}
		}
	}
	if lim.Cur < lim.Max {
		want := syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) == nil {
			lim = want
		}
	}
	if lim.Cur < 8192 {
		log.Warn("the open files limit is low: each stream holds two connections; raise it (ulimit -n, LimitNOFILE=) to serve more streams",
			"open_files", lim.Cur, "streams_at_most", lim.Cur/2)
		return
	}
	log.Debug("open files limit", "open_files", lim.Cur)
}
