package procfs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Process names a process: its PID and its command name (/proc/PID/comm,
// at most 15 characters).
type Process struct {
	PID  int    `json:"pid"`
	Name string `json:"name"`
}

func (p Process) String() string { return fmt.Sprintf("%s (pid %d)", p.Name, p.PID) }

// TCPListener finds the process listening on TCP port in this process's
// network namespace: the listening sockets of /proc/net/tcp and tcp6
// give their inodes, and a process holding one as a descriptor
// (/proc/PID/fd/N -> socket:[INODE]) is its holder. ok is false when no
// socket listens there, or when none of the holders can be seen (another
// user's, for a caller that is not root).
func TCPListener(port int) (p Process, ok bool) {
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		listeningInodes(table, port, inodes)
	}
	if len(inodes) == 0 {
		return Process{}, false
	}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(filepath.Join("/proc", d.Name(), "fd"))
		if err != nil {
			continue // gone, or not ours to see
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join("/proc", d.Name(), "fd", fd.Name()))
			if err != nil {
				continue
			}
			if inode, ok := strings.CutPrefix(link, "socket:["); ok && inodes[strings.TrimSuffix(inode, "]")] {
				comm, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "comm"))
				return Process{PID: pid, Name: strings.TrimSpace(string(comm))}, true
			}
		}
	}
	return Process{}, false
}

// tcpListen is the state of a listening socket in /proc/net/tcp.
const tcpListen = "0A"

// listeningInodes adds to inodes those of the sockets of table (the
// format of /proc/net/tcp) that listen on port.
func listeningInodes(table string, port int, inodes map[string]bool) {
	f, err := os.Open(table)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != tcpListen {
			continue
		}
		_, hexPort, ok := strings.Cut(fields[1], ":")
		if p, err := strconv.ParseUint(hexPort, 16, 16); !ok || err != nil || int(p) != port {
			continue
		}
		if fields[9] != "0" {
			inodes[fields[9]] = true
		}
	}
}
