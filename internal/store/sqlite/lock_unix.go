//go:build darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd

package sqlite

import (
	"os"
	"syscall"
)

// locks says that Open locks a file database on this system.
const locks = true

// tryLock takes an exclusive flock on f without waiting; locked is false when another open file holds
// it. flock rather than fcntl: an fcntl lock belongs to the process, so a second Open in the same
// process would get it too, and closing any descriptor of the file would drop it. The kernel releases
// the lock when its holder dies, so a crash leaves no stale lock. (On NFS, Linux emulates flock with
// fcntl: two Opens in one process are not told apart there, two processes still are.)
func tryLock(f *os.File) (locked bool, err error) {
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch err {
		case nil:
			return true, nil
		case syscall.EINTR:
			continue
		case syscall.EWOULDBLOCK:
			return false, nil
		}
		return false, err
	}
}
