package nstest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"corpus/internal/testrun"
)

// Prefix starts the name of every namespace this package makes.
const Prefix = "corpustest-"

// rootNS identifies the namespace the test binary started in; Do refuses
// to run anything there.
var rootNS = func() nsID {
	id, err := threadNS()
	if err != nil {
		panic(fmt.Sprintf("nstest: reading own network namespace: %v", err))
	}
	return id
}()

type nsID struct{ dev, ino uint64 }

func threadNS() (nsID, error) { return statNS("/proc/thread-self/ns/net") }

func statNS(path string) (nsID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nsID{}, err
	}
	return nsID{dev: st.Dev, ino: st.Ino}, nil
}

// RequireRoot skips the test unless it runs as root, which namespaces,
// links and iptables need.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces, links and iptables rules (run the tests as root, as CI does)")
	}
}

// RequireIptables skips the test when the iptables tools are missing.
func RequireIptables(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"iptables", "iptables-save", "iptables-restore"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s (apt-get install iptables): %v", bin, err)
		}
	}
}

var suffixes sync.Map // testing.TB → string

// Suffix returns the random suffix that the namespaces of t share.
func Suffix(t testing.TB) string {
	if s, ok := suffixes.Load(t); ok {
		return s.(string)
	}
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	s, loaded := suffixes.LoadOrStore(t, hex.EncodeToString(b))
	if !loaded {
		t.Cleanup(func() { suffixes.Delete(t) })
	}
	return s.(string)
}

// NS is a named network namespace that belongs to one test.
type NS struct {
	Name string // corpustest-<suffix>-<role>
	Path string // /run/netns/<Name>
	t    testing.TB
}

// New creates the namespace corpustest-<suffix>-<role> with its loopback
// up, and deletes it in t.Cleanup.
func New(t testing.TB, role string) *NS {
	t.Helper()
	RequireRoot(t)
	name := Prefix + Suffix(t) + "-" + role
	ns := &NS{Name: name, Path: filepath.Join("/run/netns", name), t: t}
	errc := make(chan error, 1)
	go func() {
		// NewNamed switches this thread into the new namespace; the thread
		// is never unlocked, so the runtime ends it when we return.
		runtime.LockOSThread()
		h, err := netns.NewNamed(name)
		if err != nil {
			errc <- err
			return
		}
		h.Close()
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	created.Store(name, struct{}{})
	testrun.Made("netns", name)
	t.Cleanup(func() {
		if err := netns.DeleteNamed(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("deleting namespace %s: %v", name, err)
		}
	})
	if err := ns.Do(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	}); err != nil {
		t.Fatalf("setting lo up in %s: %v", name, err)
	}
	return ns
}

// Do runs fn on an OS thread switched into ns and returns its error. The
// thread is thrown away afterwards. fn must not call t.Fatal (it runs on
// another goroutine); it returns an error instead.
func (ns *NS) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Never unlocked: the runtime ends the thread when this goroutine
		// returns, so no other goroutine inherits the namespace.
		if err := ns.enter(); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

func (ns *NS) enter() error {
	f, err := os.Open(ns.Path)
	if err != nil {
		return fmt.Errorf("opening namespace %s: %w", ns.Name, err)
	}
	defer f.Close()
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("entering namespace %s: %w", ns.Name, err)
	}
	want, err := statNS(ns.Path)
	if err != nil {
		return err
	}
	got, err := threadNS()
	if err != nil {
		return err
	}
	if got != want || got == rootNS {
		return fmt.Errorf("thread is not in namespace %s after setns; refusing to run", ns.Name)
	}
	return nil
}

// MustDo runs fn in ns and fails the test on error.
func (ns *NS) MustDo(fn func() error) {
	ns.t.Helper()
	if err := ns.Do(fn); err != nil {
		ns.t.Fatalf("in %s: %v", ns.Name, err)
	}
}

// Run runs argv (no shell) inside ns and returns its combined output.
func (ns *NS) Run(argv ...string) (string, error) {
	var out []byte
	err := ns.Do(func() error {
		var err error
		out, err = exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, out)
		}
		return nil
	})
	return string(out), err
}

// MustRun is Run that fails the test on error.
func (ns *NS) MustRun(argv ...string) string {
	ns.t.Helper()
	out, err := ns.Run(argv...)
	if err != nil {
		ns.t.Fatalf("in %s: %v", ns.Name, err)
	}
	return out
}

// Listen opens a listener inside ns; it is closed in t.Cleanup.
func (ns *NS) Listen(network, addr string) net.Listener {
	ns.t.Helper()
	var l net.Listener
	ns.MustDo(func() (err error) { l, err = net.Listen(network, addr); return err })
	ns.t.Cleanup(func() { l.Close() })
	return l
}

// ListenPacket opens a packet socket inside ns; it is closed in t.Cleanup.
func (ns *NS) ListenPacket(network, addr string) net.PacketConn {
	ns.t.Helper()
	var c net.PacketConn
	ns.MustDo(func() (err error) { c, err = net.ListenPacket(network, addr); return err })
	ns.t.Cleanup(func() { c.Close() })
	return c
}

// Dial connects from inside ns.
func (ns *NS) Dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := ns.Do(func() (err error) { c, err = net.DialTimeout(network, addr, timeout); return err })
	return c, err
}

// Veth joins a and b with a veth pair named aName in a and bName in b,
// both up, with the given addresses (an invalid prefix adds none).
func Veth(t testing.TB, a *NS, aName string, aAddr netip.Prefix, b *NS, bName string, bAddr netip.Prefix) {
	t.Helper()
	a.MustDo(func() error {
		f, err := os.Open(b.Path)
		if err != nil {
			return err
		}
		defer f.Close()
		attrs := netlink.NewLinkAttrs()
		attrs.Name = aName
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: bName, PeerNamespace: netlink.NsFd(f.Fd())})
	})
	a.Iface(aName, aAddr, netip.Addr{})
	b.Iface(bName, bAddr, netip.Addr{})
}

// Iface sets the link name in ns up, adds addr (when valid) and a default
// route through gw (when valid).
func (ns *NS) Iface(name string, addr netip.Prefix, gw netip.Addr) {
	ns.t.Helper()
	ns.MustDo(func() error {
		link, err := netlink.LinkByName(name)
		if err != nil {
			return fmt.Errorf("looking up %s: %w", name, err)
		}
		if addr.IsValid() {
			ipn := &net.IPNet{IP: net.IP(addr.Addr().AsSlice()), Mask: net.CIDRMask(addr.Bits(), addr.Addr().BitLen())}
			if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: ipn}); err != nil && !errors.Is(err, syscall.EEXIST) {
				return fmt.Errorf("adding %v to %s: %w", addr, name, err)
			}
		}
		if err := netlink.LinkSetUp(link); err != nil {
			return fmt.Errorf("setting %s up: %w", name, err)
		}
		if gw.IsValid() {
			r := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: net.IP(gw.AsSlice())}
			if err := netlink.RouteReplace(r); err != nil {
				return fmt.Errorf("default route via %v: %w", gw, err)
			}
		}
		return nil
	})
}

var created sync.Map // namespace name → struct{}

// Leftovers lists the namespaces this process created that still exist;
// a TestMain calls it after the tests to check they cleaned up.
func Leftovers() []string {
	var out []string
	created.Range(func(k, _ any) bool {
		if _, err := os.Stat(filepath.Join("/run/netns", k.(string))); err == nil {
			out = append(out, k.(string))
		}
		return true
	})
	return out
}

// Logger returns a logger that writes to t's log under go test -v and
// discards its records otherwise.
func Logger(t testing.TB) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(logWriter{t}, nil))
}

type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// Main runs a package's tests, from its TestMain, and fails the run when
// a namespace they made is left behind.
func Main(m *testing.M) {
	code := m.Run()
	if left := Leftovers(); len(left) > 0 {
		fmt.Fprintln(os.Stderr, "namespaces left behind:", strings.Join(left, " "))
		code = 1
	}
	os.Exit(code)
}
