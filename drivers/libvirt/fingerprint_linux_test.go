package libvirt

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestFingerprintSilentLibvirtd: a libvirtd that accepts the connection
// and never answers (a stopped one does) makes the fingerprint unhealthy
// with a reason once fingerprintWait has passed, instead of holding the
// agent's enrollment; fingerprints asked meanwhile wait for the same
// call to libvirtd rather than open more.
func TestFingerprintSilentLibvirtd(t *testing.T) {
	defer func(w time.Duration) { fingerprintWait = w }(fingerprintWait)
	fingerprintWait = 300 * time.Millisecond
	sock := filepath.Join(t.TempDir(), "libvirt-sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int32
	held := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			held <- c // read nothing, answer nothing
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		close(held)
		for c := range held {
			c.Close()
		}
	})
	d, err := New(Config{URI: testURI, Socket: sock, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		fp := d.Fingerprint(context.Background())
		if fp.Healthy || !strings.Contains(fp.Detail, "did not answer within") || fp.Attributes["libvirt.socket"] != sock {
			t.Errorf("fingerprint %d with a silent libvirtd = %+v, want unhealthy, saying it did not answer", i+1, fp)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("three fingerprints opened %d connections to libvirtd, want the one still waiting", n)
	}
}
