//go:build !unix

package mcpclient

import "os"

// processAlive reports whether a process with this pid exists: Windows finds only a live one.
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	p.Release()
	return true
}
