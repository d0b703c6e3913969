// Package procfs reads what Linux's /proc says of a process: its state,
// session, start time, CPU time and resident memory; which process
// listens on a TCP port, which processes a session holds and which are
// below a process.
package procfs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the times in /proc/PID/stat (USER_HZ, 100 on
// every Linux architecture Go supports).
const userHZ = 100

// Stat is /proc/PID/stat from field 3 (state) on, nil when there is no
// such process: f[0] the state, f[3] the session, f[11] and f[12] the
// user and system CPU time, f[19] the start time.
func Stat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	// The command name (field 2) may hold spaces and parentheses; it ends
	// at the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// Running reports whether the process exists and is not a zombie (dead,
// waiting for its parent to reap it).
func Running(pid int) bool {
	f := Stat(pid)
	return len(f) > 0 && f[0] != "Z"
}

// Start is the process's start time in clock ticks since boot (field 22),
// "" when there is no such process: with the pid, it names one process
// across pid reuse.
func Start(pid int) string {
	if f := Stat(pid); len(f) >= 20 {
		return f[19]
	}
	return ""
}

// CPU is the CPU time the process used, user and system (0 when there is
// no such process).
func CPU(pid int) time.Duration {
	f := Stat(pid)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * time.Second / userHZ
}

// RSS is the process's resident memory in bytes (0 when there is no such
// process).
func RSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
	if err != nil {
		return 0
	}
	var size, rss int64
	fmt.Sscan(string(b), &size, &rss)
	return rss * int64(os.Getpagesize())
}

// Session lists the processes of session sid that are alive (zombies,
// which only wait to be reaped, left out), as this process's pid
// namespace numbers them, from /proc. A session's id is its leader's
// pid, which no other process gets while the leader (a zombie included)
// or any member of the session is left.
func Session(sid int) []int {
	dirs, _ := os.ReadDir("/proc")
	want := strconv.Itoa(sid)
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if f := Stat(pid); len(f) > 3 && f[0] != "Z" && f[3] == want {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Descendants lists the processes alive now below pid (its children,
// theirs, and so on) from /proc, parents before their children. A
// process whose parent exited was given to another (init, a subreaper)
// and is no longer found.
func Descendants(pid int) []int {
	dirs, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, d := range dirs {
		p, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		f := Stat(p)
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	for next := children[pid]; len(next) > 0; {
		p := next[0]
		next = append(next[1:], children[p]...)
		out = append(out, p)
	}
	return out
}
