package supervisor

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"corpus/internal/testrun"
)

// inOwnNetns runs the test calling it again in a network namespace of
// its own (unshare --net), and says whether this is that run: what it
// makes (links, forwarding, a masquerade) goes with the namespace.
func inOwnNetns(t *testing.T) bool {
	t.Helper()
	if os.Getenv("CORPUS_TEST_NETNS") != "" {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			t.Fatal(err)
		}
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root (network namespaces, chroot)")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("skipping: needs unshare (util-linux)")
	}
	cmd := exec.Command("unshare", "--net", "--", os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "CORPUS_TEST_NETNS=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in a network namespace of its own:\n%s", out)
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("the run in its own network namespace: %v", err)
	}
	return false
}

// TestImageOwnNetwork: two generations of an image whose web listens on
// its own port (8080, PORT ignored) run at once, each in a network of
// its own behind the port the deploy gave it; each reaches an address
// of the guest's network (through the pair and the route) and is
// reached through its guest port; the masquerade is in place, and a
// stopped process's pair goes with it.
func TestImageOwnNetwork(t *testing.T) {
	if !inOwnNetns(t) {
		return
	}
	// An address of the "guest's" network beyond loopback, serving.
	up := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "up0"}, PeerName: "up1"}
	if err := netlink.LinkAdd(up); err != nil {
		t.Fatal(err)
	}
	addr, _ := netlink.ParseAddr("10.123.0.1/24")
	if err := netlink.AddrAdd(up, addr); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(up); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "10.123.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "upstream ok")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	s, dir := newTest(t)
	script := `bb=/bin/busybox
echo "$GEN PORT=$PORT $($bb wget -q -O - http://` + ln.Addr().String() + `/)" > /www/index.html
exec $bb httpd -f -p 8080 -h /www`
	for i, name := range []string{"r1", "r2"} {
		root := testrun.BusyboxRoot(t, filepath.Join(dir, name), "www")
		g := gen(dir, name, Process{Name: "web", Command: "httpd on 8080", Argv: []string{"/bin/busybox", "sh", "-c", script},
			Port: 5000 + i, InnerPort: 8080})
		g.Root, g.Dir, g.EnvFile = root, "/", filepath.Join(dir, name+".env")
		if err := os.WriteFile(g.EnvFile, []byte(`{"GEN":"`+name+`"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if res := s.Handle(Request{Op: OpStart, Generation: &g}); res.Error != "" {
			t.Fatalf("starting %s: %s", name, res.Error)
		}
	}
	for i, name := range []string{"r1", "r2"} {
		url := fmt.Sprintf("http://127.0.0.1:%d/", 5000+i)
		var got string
		waitFor(t, name+"'s page at "+url, func() bool {
			resp, err := http.Get(url)
			if err != nil {
				return false
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got = strings.TrimSpace(string(b))
			return resp.StatusCode == 200
		})
		if want := name + " PORT=8080 upstream ok"; got != want {
			t.Errorf("%s answers %q; want %q", url, got, want)
		}
	}
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 1 || tables[0].Name != "corpus_release" {
		t.Errorf("nftables ip tables %v; want corpus_release", tables)
	}
	if b, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); strings.TrimSpace(string(b)) != "1" {
		t.Errorf("ip_forward = %q", b)
	}

	if res := s.Handle(Request{Op: OpStop, Project: "site", ID: "r1"}); res.Error != "" {
		t.Fatal(res.Error)
	}
	waitFor(t, "r1's pair gone", func() bool {
		_, err := netlink.LinkByName("cw5000")
		return errors.As(err, new(netlink.LinkNotFoundError))
	})
	if _, err := netlink.LinkByName("cw5001"); err != nil {
		t.Errorf("r2's pair: %v", err)
	}
}

// TestParseOwnNet: the option takes two ports and nothing else; each
// outer port has a pair of its own, none of them 169.254.169.254.
func TestParseOwnNet(t *testing.T) {
	for _, bad := range []string{"", "80", "0:80", "80:0", "70000:80", "a:b", "80:80:80"} {
		if _, err := parseOwnNet(bad); err == nil {
			t.Errorf("parseOwnNet(%q) took it", bad)
		}
	}
	n, err := parseOwnNet("5000:8080")
	if err != nil || n != (ownNet{5000, 8080}) || n.String() != "5000:8080" {
		t.Fatalf("parseOwnNet(5000:8080) = %v, %v", n, err)
	}
	seen := map[string]int{}
	for outer := 1; outer <= pairBlocks; outer++ {
		g, in := ownNet{outer: outer}.addrs()
		if !pairNet.Contains(g) || !pairNet.Contains(in) || in.String() == "169.254.169.254" || g.String() == "169.254.169.254" {
			t.Fatalf("port %d: pair %s-%s", outer, g, in)
		}
		if prev, ok := seen[g.String()]; ok {
			t.Fatalf("ports %d and %d share %s", prev, outer, g)
		}
		seen[g.String()] = outer
	}
}

// TestOwnNetworkDrains: what a process of its own network sent just
// before it exited reaches its client whole: the chroot command's relay
// copies it out before the command exits with the process.
func TestOwnNetworkDrains(t *testing.T) {
	if !inOwnNetns(t) {
		return
	}
	dir := t.TempDir()
	root := testrun.BusyboxRoot(t, dir)
	body := make([]byte, 8<<20)
	rand.Read(body)
	if err := os.WriteFile(filepath.Join(root, "big"), body, 0o644); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// nc hands its one client to cat, which sends the file and exits:
	// the process ends with the end of the file in the buffers on the
	// way, the relay's among them.
	cmd := chrootCmd(self, root, "/", 0, 0, ownNet{outer: 5100, inner: 8080}, []string{"/bin/busybox", "nc", "-l", "-p", "8080", "-e", "/bin/busybox", "cat", "/big"})
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	// nc takes one connection: each try waits for its first byte as
	// long as it takes, and a try the relay closes at once (nc not
	// listening yet) is made again.
	var c net.Conn
	waitFor(t, "the relay on 5100 reaching nc", func() bool {
		if c, err = net.Dial("tcp", "127.0.0.1:5100"); err != nil {
			return false
		}
		c.SetReadDeadline(time.Now().Add(testrun.D(30 * time.Second)))
		var b [1]byte
		if n, _ := c.Read(b[:]); n == 1 {
			if b[0] != body[0] {
				t.Fatalf("the first byte through the relay is %#x, want %#x", b[0], body[0])
			}
			return true
		}
		c.Close()
		return false
	})
	// nc is left to fill every buffer on the way before it is read.
	time.Sleep(300 * time.Millisecond)
	c.SetReadDeadline(time.Now().Add(testrun.D(30 * time.Second)))
	rest, err := io.ReadAll(c)
	c.Close()
	if got := append([]byte{body[0]}, rest...); !bytes.Equal(got, body) {
		t.Errorf("the client got %d bytes of %d (%v); output:\n%s", len(got), len(body), err, out.String())
	}
	if err := <-done; err != nil {
		t.Errorf("the chroot command: %v; output:\n%s", err, out.String())
	}
	done <- nil
}
