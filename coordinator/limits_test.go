package coordinator_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/internal/pki"
	"corpus/internal/rpc"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestSlowClientsAndBigBodies: connections that never finish their TLS
// handshake or their headers do not stop the API from answering others
// and are cut off, and a request over the size limit is refused without
// changing anything.
func TestSlowClientsAndBigBodies(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	tc := pki.ClientConfig(s.caPool(), nil, pki.RoleCoordinator, "")
	tc.NextProtos = []string{"http/1.1"}
	for i := 0; i < 200; i++ {
		var c net.Conn
		var err error
		if i%2 == 0 {
			c, err = net.Dial("tcp", s.APIAddr()) // and never a handshake
		} else {
			c, err = tls.Dial("tcp", s.APIAddr(), tc)
			if err == nil {
				fmt.Fprintf(c, "POST /corpus.v1.ClusterService/Status HTTP/1.1\r\nHost: x\r\n") // and never more
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	start := time.Now()
	if _, err := s.ops().cluster.Status(context.Background(), connect.NewRequest(&corpusv1.StatusRequest{})); err != nil {
		t.Fatalf("Status with 200 slow clients connected = %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Status took %s with slow clients connected", d)
	}

	// The slow ones are cut off once the handshake or header deadline
	// passes.
	for i, what := range []string{"its TLS handshake", "its headers"} {
		c := conns[i]
		c.SetReadDeadline(time.Now().Add(testrun.D(15 * time.Second)))
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		if err == nil && !strings.Contains(string(buf[:n]), "408") {
			t.Errorf("a connection that never finished %s got %q, want it cut off", what, buf[:n])
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("a connection that never finished %s was still open after 15s", what)
		}
	}

	before := len(s.Store().Read().Guests())
	big := `{"name":"big","spec":{"image":"busybox","env":{"A":"` + strings.Repeat("x", 5<<20) + `"}}}`
	req, _ := http.NewRequest("POST", s.url()+"/corpus.v1.GuestService/CreateGuest", bytes.NewReader([]byte(big)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.OpsToken())
	res, err := rpc.HTTPClient(pki.ClientConfig(s.caPool(), nil, pki.RoleCoordinator, "")).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode < 400 {
		t.Errorf("a 5 MiB request = %s, want it refused", res.Status)
	}
	if after := len(s.Store().Read().Guests()); after != before {
		t.Errorf("a refused big request changed the state (%d -> %d guests)", before, after)
	}
}
