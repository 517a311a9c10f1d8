//go:build unix

package mcpclient

import (
	"os/exec"
	"syscall"
)

// ownGroup starts a stdio child in a process group of its own, so that what it starts (npx → node)
// can be stopped with it.
func ownGroup() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// killGroup kills what is left of a stdio child's process group once the child has been stopped.
func killGroup(cmd *exec.Cmd) {
	if cmd != nil && cmd.Process != nil && cmd.Process.Pid > 0 {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
