package listen

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
)

// TestDescribeInUse: an address in use is described with its holder (this
// process here), and so it stays through JSON, as a proxy process sends
// it to its agent.
func TestDescribeInUse(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, err = net.Listen("tcp", taken.Addr().String())
	e := Describe("http", taken.Addr().String(), err)
	var back *Error
	b, _ := json.Marshal(e)
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for _, got := range []*Error{e, back} {
		if !errors.Is(got, ErrFailed) || !errors.Is(got, syscall.EADDRINUSE) || got.Port() != taken.Addr().(*net.TCPAddr).Port ||
			got.Holder == nil || got.Holder.PID != os.Getpid() || got.Error() != e.Error() {
			t.Errorf("Describe of an address in use = %#v (%v), want one in use, held by pid %d", got, got, os.Getpid())
		}
	}
}

func TestOn(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	for a, want := range map[string]bool{addr: true, "127.0.0.1:0": true, ":" + port: false, "127.0.0.2:" + port: false, "127.0.0.1:1": false, "nonsense": false} {
		if got := On(ln, a); got != want {
			t.Errorf("On(listener on %s, %q) = %t, want %t", addr, a, got, want)
		}
	}
}
