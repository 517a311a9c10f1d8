package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenLocked: while one DB holds a file, opening it again fails with ErrLocked and a message naming
// the holder; once the holder is closed, the file opens again. (flock locks open files, not processes,
// so two Opens in one process stand for two processes.)
func TestOpenLocked(t *testing.T) {
	if !locks {
		t.Skip("no file locks on this system")
	}
	path := tempPath(t)
	const owner = "chatd serve on 127.0.0.1:8080"
	first, err := Open(t.Context(), path, Options{Owner: owner})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	second, err := Open(t.Context(), path, Options{Owner: "the second"})
	if err == nil {
		second.Close()
		first.Close()
		t.Fatal("a second Open of a file the first still holds succeeded")
	}
	holder := fmt.Sprintf("(pid %d on host ", os.Getpid())
	if msg := err.Error(); !errors.Is(err, ErrLocked) || !strings.Contains(msg, holder) ||
		!strings.Contains(msg, ": "+owner+", since ") || !strings.HasPrefix(msg, "sqlite: open "+path+": ") {
		t.Errorf("second Open: %v; want ErrLocked naming the holder %q and owner %q", err, holder, owner)
	}
	for range 2 { // a second Close is no error
		if err := first.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	openTest(t, path, Options{})
	if _, err := os.Stat(path + ".lock"); err != nil {
		t.Errorf("the lock file: %v", err)
	}
}

// TestOpenLockedUndescribed: when the lock file does not say who holds it (the holder has not written it
// yet), the error says so.
func TestOpenLockedUndescribed(t *testing.T) {
	if !locks {
		t.Skip("no file locks on this system")
	}
	path := tempPath(t)
	f, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if locked, err := tryLock(f); !locked || err != nil {
		t.Fatalf("tryLock = %v, %v", locked, err)
	}
	db, err := Open(t.Context(), path, Options{})
	if err == nil {
		db.Close()
		t.Fatal("Open of a locked file succeeded")
	}
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "does not say which") {
		t.Errorf("Open: %v; want ErrLocked saying the lock file names no holder", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open of a locked file created the database (%v)", err)
	}
}

// TestOpenLockedThroughLink: a symbolic link to a held database leads to the same lock.
func TestOpenLockedThroughLink(t *testing.T) {
	if !locks {
		t.Skip("no file locks on this system")
	}
	path := tempPath(t)
	openTest(t, path, Options{})
	link := filepath.Join(t.TempDir(), "link.db")
	if err := os.Symlink(path, link); err != nil {
		t.Skipf("no symbolic links: %v", err)
	}
	if db, err := Open(t.Context(), link, Options{}); !errors.Is(err, ErrLocked) {
		if err == nil {
			db.Close()
		}
		t.Errorf("Open through a link to a held database: %v; want ErrLocked", err)
	}
}

// TestOpenMemoryTwice: in-memory databases are private and take no lock.
func TestOpenMemoryTwice(t *testing.T) {
	openTest(t, MemoryPath, Options{})
	openTest(t, MemoryPath, Options{})
}
