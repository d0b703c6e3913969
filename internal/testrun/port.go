package testrun

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
)

// Ports handed to a server a test starts come from below Linux's
// ephemeral range (32768 and up by default). A port taken with "port 0"
// comes from that range, and between the probe and the server's own bind
// an outgoing connection of a parallel test can take it as its local
// port; below the range only another probe can, and this process never
// hands out one port twice.
const (
	portLow  = 20000
	portHigh = 32000
)

var handed struct {
	sync.Mutex
	ports map[int]bool
}

// FreePort returns a port on 127.0.0.1 that is free for TCP and UDP, for
// a server the test starts itself (a replica, rsyslogd, a DNS server)
// that cannot be handed a listener.
func FreePort(t TB) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatalf("%v", err)
	}
	return port
}

// FreeAddr is FreePort as "127.0.0.1:PORT".
func FreeAddr(t TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePort(t))
}

// FreePortErr is FreePort for helpers without a test at hand.
func FreePortErr() (int, error) { return freePort() }

func freePort() (int, error) {
	handed.Lock()
	defer handed.Unlock()
	if handed.ports == nil {
		handed.ports = map[int]bool{}
	}
	for range 200 {
		port := portLow + rand.IntN(portHigh-portLow)
		if handed.ports[port] || !free(port) {
			continue
		}
		handed.ports[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("no free port on 127.0.0.1 between %d and %d", portLow, portHigh)
}

func free(port int) bool {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer ln.Close()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	pc.Close()
	return true
}
