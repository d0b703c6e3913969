package procfs

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// TestTCPListener: the holder of a listening socket is found by its port,
// also when it is another program (sleep, given the socket) and over
// IPv6; a port nobody listens on has none.
func TestTCPListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if p, ok := TCPListener(port); !ok || p.PID != os.Getpid() {
		t.Errorf("TCPListener(%d) = %v, %t; want this process (pid %d)", port, p, ok, os.Getpid())
	}

	// Another program holds it: sleep, given the socket, and it alone.
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	sleep := exec.Command("sleep", "60")
	sleep.ExtraFiles = []*os.File{f}
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleep.Process.Kill(); sleep.Wait() })
	f.Close()
	ln.Close()
	if p, ok := TCPListener(port); !ok || p.PID != sleep.Process.Pid || p.Name != "sleep" || p.String() != "sleep (pid "+strconv.Itoa(sleep.Process.Pid)+")" {
		t.Errorf("TCPListener(%d) = %v, %t; want sleep (pid %d)", port, p, ok, sleep.Process.Pid)
	}

	if ln6, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		defer ln6.Close()
		if p, ok := TCPListener(ln6.Addr().(*net.TCPAddr).Port); !ok || p.PID != os.Getpid() {
			t.Errorf("TCPListener of an IPv6 listener = %v, %t; want this process", p, ok)
		}
	}

	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freePort := free.Addr().(*net.TCPAddr).Port
	free.Close()
	if p, ok := TCPListener(freePort); ok {
		t.Errorf("TCPListener(%d) of a closed listener = %v, want none", freePort, p)
	}
}
