//go:build unix

package statelock

import (
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// tryLock takes an exclusive POSIX record lock (fcntl F_SETLK) on the
// whole of f without waiting; false means another process holds it.
// A record lock belongs to the process, not to the open file: a child
// that shares the descriptor without exec (liblxc forks the daemon to
// attach a command in a guest, and that fork lives as long as the
// command) does not hold it, so a killed holder's folder is free at
// once. flock(2) locks the open file, which such a child kept locked.
func tryLock(f *os.File) (bool, error) {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	for {
		err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EACCES):
			return false, nil
		case errors.Is(err, unix.EINTR):
			continue
		default:
			return false, err
		}
	}
}

func unlock(f *os.File) error {
	return unix.FcntlFlock(f.Fd(), unix.F_SETLK, &unix.Flock_t{Type: unix.F_UNLCK, Whence: io.SeekStart})
}

// holderPID reads the holder's PID from the lock file. A holder writes
// it just after it takes the lock, so an empty file, or the PID of a
// process that is gone, is read again for a short while.
func holderPID(path string) int {
	deadline := time.Now().Add(500 * time.Millisecond)
	for {
		pid := readPID(path)
		if pid > 0 && alive(pid) {
			return pid
		}
		if time.Now().After(deadline) {
			return 0
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return pid
}

func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}
