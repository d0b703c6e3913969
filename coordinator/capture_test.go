package coordinator_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator/state"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestReplicationTrafficIsEncrypted captures the loopback traffic of a
// three-replica group's Raft transport and gossip while a write replicates
// and the members gossip, and finds neither the written name nor the
// replicas' ids in it. A canary sent in clear over a captured port shows
// the capture would have found them.
func TestReplicationTrafficIsEncrypted(t *testing.T) {
	t.Parallel()
	const canary = "zqxcanary"
	rs := startGroupNamed(t, canary+"-r", 3)
	lead := rs.leader()
	var follower string
	for id := range rs.reps {
		if id != lead {
			follower = id
		}
	}
	ports := map[int]string{}
	for id, r := range rs.reps {
		ports[port(t, rs.raft[id])] = "raft"
		ports[port(t, r.GossipAddr())] = "gossip"
	}
	control, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer control.Close()
	ports[port(t, control.Addr().String())] = "control"

	cap := startCapture(t, ports)
	// A write through a follower: forwarded to the leader, replicated to
	// every replica.
	name := canary + "-guest"
	if _, err := rs.ops(follower).guests.CreateGuest(context.Background(), connect.NewRequest(&corpusv1.CreateGuestRequest{
		Name: name, Spec: &corpusv1.GuestSpec{Image: "busybox"},
	})); err != nil {
		t.Fatalf("CreateGuest(%s) = %v", name, err)
	}
	for _, r := range rs.reps {
		r.waitFor("the guest replicated", func(v *state.Snap) bool { return v.GuestByName(name) != nil })
	}
	// Gossip probes every second or so; give it a few rounds.
	time.Sleep(3 * time.Second)
	go func() {
		if c, err := net.Dial("tcp", control.Addr().String()); err == nil {
			fmt.Fprintf(c, "in clear: %s\n", canary)
			c.Close()
		}
	}()
	if c, err := control.Accept(); err == nil {
		c.SetReadDeadline(time.Now().Add(testrun.D(2 * time.Second)))
		b := make([]byte, 64)
		c.Read(b)
		c.Close()
	}
	time.Sleep(200 * time.Millisecond)
	got := cap.stop()

	if !bytes.Contains(got["control"], []byte(canary)) {
		t.Fatalf("the capture missed the canary sent in clear (%d bytes captured): the capture is broken", len(got["control"]))
	}
	for _, kind := range []string{"raft", "gossip"} {
		if len(got[kind]) < 1000 {
			t.Errorf("captured %d bytes of %s traffic, want some (did it flow?)", len(got[kind]), kind)
		}
		if i := bytes.Index(got[kind], []byte(canary)); i >= 0 {
			t.Errorf("%s traffic carries %q in clear: ...%q...", kind, canary, got[kind][max(0, i-40):min(len(got[kind]), i+40)])
		}
		t.Logf("%s: %d payload bytes captured, no plaintext names", kind, len(got[kind]))
	}
}

func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// capture reads every IPv4 TCP and UDP packet on the loopback interface
// through a raw packet socket and keeps the payloads of those to or from
// the watched ports, by the ports' labels.
type capture struct {
	fd   int
	mu   sync.Mutex
	got  map[string][]byte
	done chan struct{}
	// stopFn ends the capture once.
	stopFn func()
}

func startCapture(t *testing.T, ports map[int]string) *capture {
	t.Helper()
	const ethPAll = 0x0003
	fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, int(htons(ethPAll)))
	if errors.Is(err, syscall.EPERM) {
		t.Skip("capturing packets needs root (CAP_NET_RAW); CI runs as root")
	}
	if err != nil {
		t.Fatalf("packet socket: %v", err)
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrLinklayer{Protocol: htons(ethPAll), Ifindex: lo.Index}); err != nil {
		syscall.Close(fd)
		t.Fatalf("binding to lo: %v", err)
	}
	// A large buffer: the socket sees every loopback packet of the
	// machine, and a busy CI run filled the default one, dropping the
	// canary ("0 bytes captured").
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, 64<<20); err != nil {
		syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<20)
	}
	// Reads wake up regularly so stop is noticed.
	tv := syscall.Timeval{Usec: 100000}
	syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	c := &capture{fd: fd, got: map[string][]byte{}, done: make(chan struct{})}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		buf := make([]byte, 1<<16)
		for {
			select {
			case <-c.done:
				return
			default:
			}
			n, _, err := syscall.Recvfrom(fd, buf, 0)
			if err != nil {
				continue
			}
			src, dst, payload, ok := parseFrame(buf[:n])
			if !ok {
				continue
			}
			label, hit := ports[src]
			if !hit {
				label, hit = ports[dst]
			}
			if hit && len(payload) > 0 {
				c.mu.Lock()
				c.got[label] = append(c.got[label], payload...)
				c.mu.Unlock()
			}
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			close(c.done)
			<-stopped
			syscall.Close(fd)
		})
	}
	t.Cleanup(stop)
	c.stopFn = stop
	return c
}

func (c *capture) stop() map[string][]byte {
	c.stopFn()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.got
}

// parseFrame reads an Ethernet (loopback) frame holding IPv4 TCP or UDP.
func parseFrame(f []byte) (src, dst int, payload []byte, ok bool) {
	if len(f) < 14+20 || binary.BigEndian.Uint16(f[12:14]) != 0x0800 {
		return 0, 0, nil, false
	}
	ip := f[14:]
	ihl := int(ip[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(ip[2:4]))
	if ihl < 20 || total > len(ip) || total < ihl {
		return 0, 0, nil, false
	}
	l4 := ip[ihl:total]
	switch ip[9] {
	case 6: // TCP
		if len(l4) < 20 {
			return 0, 0, nil, false
		}
		off := int(l4[12]>>4) * 4
		if off < 20 || off > len(l4) {
			return 0, 0, nil, false
		}
		return int(binary.BigEndian.Uint16(l4[0:2])), int(binary.BigEndian.Uint16(l4[2:4])), l4[off:], true
	case 17: // UDP
		if len(l4) < 8 {
			return 0, 0, nil, false
		}
		return int(binary.BigEndian.Uint16(l4[0:2])), int(binary.BigEndian.Uint16(l4[2:4])), l4[8:], true
	}
	return 0, 0, nil, false
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
