package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"corpus/internal/testrun"
)

// helperEnv makes this test binary a program of its own (helperMain)
// rather than the tests: another program that holds an address.
const helperEnv = "CORPUS_E2E_HELPER"

// helperMain listens where spec says ("tcp :80", "unix /run/x.sock"),
// prints "listening", then accepts connections and answers none (each
// accept prints "accepted"), until it is killed.
func helperMain(spec string) int {
	network, addr, _ := strings.Cut(spec, " ")
	ln, err := net.Listen(network, addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	fmt.Println("listening")
	for {
		c, err := ln.Accept()
		if err != nil {
			return 1
		}
		fmt.Println("accepted")
		go io.Copy(io.Discard, c) // reads what comes, answers nothing
	}
}

// holder is a helper process holding an address in a namespace.
type holder struct {
	cmd      *exec.Cmd
	accepted chan struct{} // a value per accepted connection
}

// holdAddress starts a helper process in namespace ns listening on
// network addr, and waits until it listens; it is killed (by its PID)
// when the test ends.
func holdAddress(t *testing.T, ns, network, addr string) *holder {
	t.Helper()
	h := &holder{cmd: exec.Command("ip", "netns", "exec", ns, os.Args[0]), accepted: make(chan struct{}, 64)}
	h.cmd.Env = append(os.Environ(), helperEnv+"="+network+" "+addr)
	h.cmd.Stderr = os.Stderr
	out, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatalf("starting a listener on %s %s: %v", network, addr, err)
	}
	t.Cleanup(func() {
		syscall.Kill(h.cmd.Process.Pid, syscall.SIGKILL)
		h.cmd.Wait()
	})
	lines := bufio.NewScanner(out)
	listening := make(chan bool, 1)
	go func() {
		first := true
		for lines.Scan() {
			switch {
			case first:
				listening <- lines.Text() == "listening"
				first = false
			case lines.Text() == "accepted":
				h.accepted <- struct{}{}
			}
		}
		if first {
			listening <- false
		}
		io.Copy(io.Discard, out)
	}()
	select {
	case ok := <-listening:
		if !ok {
			t.Fatalf("the listener on %s %s did not start", network, addr)
		}
	case <-time.After(testrun.D(10 * time.Second)):
		t.Fatalf("the listener on %s %s did not start within 10s", network, addr)
	}
	return h
}

// name is the helper's command name, as /proc shows it to the one
// looking for a port's holder.
func (h *holder) name(t *testing.T) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", h.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
