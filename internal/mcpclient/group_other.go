//go:build !unix

package mcpclient

import (
	"os/exec"
	"syscall"
)

// ownGroup is nil where there are no process groups (Windows): the child is stopped alone, and what it
// started may outlive it.
func ownGroup() *syscall.SysProcAttr { return nil }

// killGroup kills the stdio child, if it still runs: without process groups, its own children are not
// reached.
func killGroup(cmd *exec.Cmd) {
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}
