//go:build unix

package mcpclient

import (
	"errors"
	"syscall"
)

// processAlive reports whether a process with this pid exists (a zombie not yet waited for counts).
func processAlive(pid int) bool {
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
