// Package libvirttest gives tests a running libvirtd: the host's when its
// socket answers, otherwise one the test starts (with virtlogd) and stops
// again by PID. Tests that cannot have one skip with the reason, unless
// CORPUS_TEST_REQUIRE_LIBVIRT is set (CI sets it), where they fail.
package libvirttest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
)

// Socket is where libvirtd listens.
const Socket = "/run/libvirt/libvirt-sock"

// Daemon is a libvirtd the tests of one process use.
type Daemon struct {
	started []*exec.Cmd // processes this package started, stopped by Stop
	log     string      // their log file, removed by Stop
}

var (
	once   sync.Once
	daemon *Daemon
	reason string
)

// Ensure returns a running libvirtd or skips t (fails it when
// CORPUS_TEST_REQUIRE_LIBVIRT is set). A libvirtd it had to start runs
// until Stop, which TestMain should call.
func Ensure(t testing.TB) *Daemon {
	t.Helper()
	once.Do(func() { daemon, reason = start() })
	if daemon == nil {
		if os.Getenv("CORPUS_TEST_REQUIRE_LIBVIRT") != "" {
			t.Fatalf("libvirtd is required here (CORPUS_TEST_REQUIRE_LIBVIRT is set): %s", reason)
		}
		t.Skip(reason)
	}
	return daemon
}

// Stop stops what Ensure started, by PID; a libvirtd that was already
// running is left alone.
func Stop() {
	if daemon == nil {
		return
	}
	for i := len(daemon.started) - 1; i >= 0; i-- {
		c := daemon.started[i]
		c.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			c.Process.Kill()
			<-done
		}
	}
	if daemon.log != "" {
		os.Remove(daemon.log)
	}
	daemon = nil
}

func start() (*Daemon, string) {
	d := &Daemon{}
	if answers() {
		return d, ""
	}
	if os.Geteuid() != 0 {
		return nil, "libvirtd is not running and starting it needs root"
	}
	for _, bin := range []string{"libvirtd", "virtlogd"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, "needs libvirt (apt-get install --no-install-recommends libvirt-daemon-system libvirt-clients qemu-system-x86 qemu-utils): " + bin + " not found"
		}
	}
	// virtlogd keeps VMs' console logs; libvirtd talks to it over its
	// own socket. Both run in the foreground so their PIDs are ours.
	// Their chatter (no D-Bus, no /dev/kvm, ...) goes to a log file.
	log, err := os.CreateTemp("", "corpus-test-libvirtd-*.log")
	if err != nil {
		return nil, err.Error()
	}
	defer log.Close()
	d.log = log.Name()
	for _, bin := range []string{"virtlogd", "libvirtd"} {
		cmd := exec.Command(bin)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			Stop()
			return nil, fmt.Sprintf("starting %s: %v", bin, err)
		}
		d.started = append(d.started, cmd)
		daemon = d
	}
	for range 100 {
		if answers() {
			return d, ""
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.log = "" // kept for whoever reads the reason
	Stop()
	return nil, "libvirtd started but its socket " + Socket + " never answered; its log is " + log.Name()
}

// answers reports whether libvirtd answers on its socket.
func answers() bool {
	c, err := net.DialTimeout("unix", Socket, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Connect opens a connection of the test's own to uri ("test:///default",
// "qemu:///system"), closed when t ends. It is how tests act on libvirt
// behind the driver's back.
func Connect(t testing.TB, uri string) *golibvirt.Libvirt {
	t.Helper()
	l := golibvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(Socket)))
	if err := l.ConnectToURI(golibvirt.ConnectURI(uri)); err != nil {
		t.Fatalf("connecting to libvirtd (%s): %v", uri, err)
	}
	t.Cleanup(func() { l.Disconnect() })
	return l
}
