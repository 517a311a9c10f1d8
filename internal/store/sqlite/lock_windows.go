//go:build windows

package sqlite

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// locks says that Open locks a file database on this system.
const locks = true

// tryLock takes an exclusive LockFileEx lock on f without waiting; locked is false when another handle
// holds it. Windows releases the lock when the handle is closed or its process dies. The locked byte
// lies at 1<<62, far past the holder's description: Windows locks are mandatory, and a lock on the
// description would keep the process that fails to take the lock from reading who holds it.
func tryLock(f *os.File) (locked bool, err error) {
	ol := windows.Overlapped{OffsetHigh: 1 << 30}
	err = windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY,
		0, 1, 0, &ol)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, windows.ERROR_LOCK_VIOLATION):
		return false, nil
	}
	return false, err
}
