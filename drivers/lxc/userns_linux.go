//go:build linux && cgo

package lxc

/*
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

// corpus_userns_child forks a child in a new user namespace that only
// waits to be killed, and returns its pid (-1 and errno on failure).
// The child is a fork of a multithreaded process, so it makes system
// calls only: no allocation, no lock, no Go. It blocks every signal
// (SIGKILL ends it) and dies with the thread that forked it.
static int corpus_userns_child(void) {
	long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
	if (pid == 0) {
		sigset_t all;
		sigfillset(&all);
		syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, 0, sizeof(long));
		syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		for (;;)
			syscall(SYS_pause);
	}
	return (int)pid;
}
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// userns returns a handle on a new user namespace mapping ids
// 0..guestIDs-1 to m; the caller closes it.
//
// A namespace is held open by a process in it while the handle is
// taken: a fork of this process that makes no call but pause, never an
// exec. The driver's process has threads and cannot unshare one itself,
// and an exec of a helper binary costs more than the rest of a guest's
// image mount (the corpus binary's start: about 17 ms, against well
// under one for the fork).
func userns(m idmap) (*os.File, error) {
	// The child dies with the thread that forked it (PR_SET_PDEATHSIG):
	// keep that thread until the child is reaped.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, err := C.corpus_userns_child()
	if pid < 0 {
		return nil, fmt.Errorf("making a user namespace for ids %d:%d: clone: %w", m.UID, m.GID, err)
	}
	defer func() {
		_ = unix.Kill(int(pid), unix.SIGKILL)
		var ws unix.WaitStatus
		for {
			if _, err := unix.Wait4(int(pid), &ws, 0, nil); err != unix.EINTR {
				return
			}
		}
	}()
	for _, f := range []struct {
		file  string
		start int64
	}{{"uid_map", m.UID}, {"gid_map", m.GID}} {
		line := fmt.Sprintf("0 %d %d\n", f.start, guestIDs)
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/%s", pid, f.file), []byte(line), 0); err != nil {
			return nil, fmt.Errorf("making a user namespace for ids %d:%d: %w", m.UID, m.GID, err)
		}
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", pid))
	if err != nil {
		return nil, fmt.Errorf("making a user namespace for ids %d:%d: %w", m.UID, m.GID, err)
	}
	return ns, nil
}
