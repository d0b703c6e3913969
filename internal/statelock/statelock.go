// Package statelock makes a state folder one process's own: a daemon
// takes an exclusive POSIX record lock (fcntl) on a lock file in its
// folder before it opens a database or listens on a port, and writes
// its PID into the file so that a second process can say who holds the
// folder. The kernel drops the lock when the holder ends, so a process
// that was killed (even with SIGKILL) leaves no stale lock, even where
// a fork of it lives on; the PID in the file is only a hint for the
// message. A record lock does not keep out the process that holds it,
// so a second Acquire in the same process is refused by the package.
package statelock

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// FileName is the lock file's name inside the state folder.
const FileName = "corpus.lock"

// Lock is a held lock on a state folder. Release it, or let the process
// end.
type Lock struct {
	f    *os.File
	path string
}

// held are the lock files this process holds. Its own record lock does
// not refuse it a second time, and opening and closing the file again
// would drop the lock (record locks go with any close of the file).
var (
	heldMu    sync.Mutex
	heldFiles = map[string]bool{}
)

// Release drops the lock. The lock file stays: removing it would let a
// third process lock a new file while a second still waits on the old.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := unlock(l.f)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	heldMu.Lock()
	delete(heldFiles, l.path)
	heldMu.Unlock()
	return err
}

// Acquire takes the lock of folder dir, creating the folder (0700) and
// its lock file as needed, and never waits: when another process holds
// the folder it returns an *InUseError naming the
// folder and, where the holder wrote it, the holder's PID. Descriptors
// are close-on-exec, so programs the holder starts do not inherit it.
func Acquire(dir string) (*Lock, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("locking state folder %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("creating state folder %s: %w", abs, err)
	}
	path := filepath.Join(abs, FileName)
	heldMu.Lock()
	defer heldMu.Unlock()
	if heldFiles[path] {
		return nil, &InUseError{Dir: abs, File: path, PID: os.Getpid()}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock file %s: %w", path, err)
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if !held {
		f.Close()
		return nil, &InUseError{Dir: abs, File: path, PID: holderPID(path)}
	}
	if err := writePID(f); err != nil {
		unlock(f)
		f.Close()
		return nil, fmt.Errorf("writing PID into %s: %w", path, err)
	}
	heldFiles[path] = true
	return &Lock{f: f, path: path}, nil
}

func writePID(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt([]byte(fmt.Sprintf("%d\n", os.Getpid())), 0); err != nil {
		return err
	}
	return f.Sync()
}
