package sqlite

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// A file database is held by one process at a time, through an advisory lock on a file beside it. SQLite
// itself would let a second chatd in, and that process's start-up recovery would end the first one's
// live runs as interrupted while they still stream.
//
// The lock is on <database>.lock, never on the database: SQLite's own locks are on the database, its
// -wal, -shm and -journal files, and on NFS Linux emulates flock with the same fcntl locks SQLite takes,
// which would fight them. The lock file is never deleted: a process that deleted it could leave one
// process holding the lock on the deleted file while the next one locks a new file of the same name.

// ErrLocked reports that another process holds the database: it is running on the same file.
var ErrLocked = errors.New("the database is in use by another chatd process")

// holder is what the process holding the lock writes into the lock file, for the process that cannot
// take it to say who runs on the database.
type holder struct {
	PID   int       `json:"pid"`
	Host  string    `json:"host"`
	Owner string    `json:"owner,omitempty"`
	Since time.Time `json:"since"`
}

func (h holder) String() string {
	s := fmt.Sprintf("pid %d on host %s", h.PID, h.Host)
	if h.Owner != "" {
		s += ": " + h.Owner
	}
	return s + ", since " + h.Since.UTC().Format(time.RFC3339)
}

// lockFile takes the lock of the database at path without waiting and writes the holder into the lock
// file; closing the returned file releases the lock. os.OpenFile opens it close-on-exec, so the
// children chatd starts (MCP servers on stdio) do not inherit it: a child that outlived chatd would keep
// the database locked.
func lockFile(path, owner string) (*os.File, error) {
	name := lockPath(path)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	locked, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	if !locked {
		defer f.Close()
		return nil, heldBy(f, name)
	}
	if err := writeHolder(f, owner); err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", name, err)
	}
	return f, nil
}

// lockPath names the lock file of the database at path. A symbolic link is resolved first, as SQLite
// resolves it to place its -wal and -shm files, so that every name of one database shares one lock.
func lockPath(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		return real + ".lock"
	}
	// No database yet: SQLite will create it in the directory, which may be a link itself.
	if dir, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil {
		return filepath.Join(dir, filepath.Base(path)) + ".lock"
	}
	return path + ".lock"
}

func writeHolder(f *os.File, owner string) error {
	host, err := os.Hostname()
	if err != nil {
		host = "(unknown)"
	}
	h := holder{PID: os.Getpid(), Host: host, Owner: owner, Since: time.Now().UTC().Truncate(time.Second)}
	raw, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err = f.WriteAt(append(raw, '\n'), 0)
	return err
}

// heldBy is the error for a lock another process holds, naming the holder when the lock file says it.
// It may not: the holder may not have written it yet.
func heldBy(f *os.File, name string) error {
	raw, err := io.ReadAll(io.LimitReader(f, 4096))
	var h holder
	if err != nil || json.Unmarshal(raw, &h) != nil || h.PID == 0 {
		return fmt.Errorf("%w (%s does not say which)", ErrLocked, name)
	}
	return fmt.Errorf("%w (%s)", ErrLocked, h)
}
