package sshd

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"corpus/internal/testrun"
)

// TestGitEndpointLimits: connections that never finish the SSH handshake
// hold at most maxSSHConns slots, one more is closed at once, and the
// handshake timeout frees them all for new clients.
func TestGitEndpointLimits(t *testing.T) {
	t.Parallel()
	s, err := New(Config{StateDir: t.TempDir(), Addr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Serve(ctx)
	addr := s.listener.Addr().String()

	// banner dials and reads the server's SSH version line.
	banner := func() (net.Conn, *bufio.Reader, string) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(testrun.D(5 * time.Second)))
		r := bufio.NewReader(c)
		line, _ := r.ReadString('\n')
		return c, r, strings.TrimSpace(line)
	}
	type slow struct {
		c net.Conn
		r *bufio.Reader
	}
	var held []slow
	defer func() {
		for _, h := range held {
			h.c.Close()
		}
	}()
	for i := range maxSSHConns {
		c, r, line := banner()
		if line != "SSH-2.0-corpus" {
			t.Fatalf("connection %d got %q, want the SSH banner", i+1, line)
		}
		held = append(held, slow{c, r}) // and never a word more
	}
	start := time.Now()
	c, _, line := banner()
	c.Close()
	if line != "" || time.Since(start) > testrun.D(2*time.Second) {
		t.Errorf("connection %d beyond the limit got %q after %s, want it closed at once", maxSSHConns+1, line, time.Since(start))
	}
	for i, h := range held {
		h.c.SetReadDeadline(time.Now().Add(testrun.D(sshHandshakeTimeout + 5*time.Second)))
		if _, err := io.Copy(io.Discard, h.r); err != nil {
			t.Fatalf("slow connection %d still open %s after the handshake timeout: %v", i+1, time.Since(start), err)
		}
	}
	if d := time.Since(start); d > sshHandshakeTimeout+5*time.Second {
		t.Errorf("slow connections were cut off after %s, want about %s", d, sshHandshakeTimeout)
	}
	// A new client is served again. The slots free as the handlers end,
	// just after their connections close.
	deadline := time.Now().Add(testrun.D(5 * time.Second))
	for {
		c, _, line := banner()
		c.Close()
		if line == "SSH-2.0-corpus" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a new connection after the slow ones were cut off got %q, want the SSH banner", line)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
