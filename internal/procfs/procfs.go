// Package procfs reads what Linux's /proc says of a process: its state,
// session, start time, CPU time and resident memory; and which process
// listens on a TCP port.
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
