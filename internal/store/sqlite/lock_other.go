//go:build !(darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd || windows)

package sqlite

import "os"

// locks says that Open locks a file database on this system: not here.
const locks = false

// tryLock takes no lock on the systems left (aix, solaris, plan9, wasm …), which lack flock: the lock
// file is still written, but a second process on the same database is not refused, and its start-up
// recovery ends the first one's running runs.
func tryLock(*os.File) (locked bool, err error) {
	return true, nil
}
