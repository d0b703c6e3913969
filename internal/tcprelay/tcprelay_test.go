package tcprelay

import (
	"io"
	"net"
	"testing"
)

// pair is a connected pair of TCP connections on loopback.
func pair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	if a, err = net.Dial("tcp", ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	b = <-accepted
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestCopyHalf: a client's request and end of stream cross the relay,
// and the answer still comes back after that half close.
func TestCopyHalf(t *testing.T) {
	client, in := pair(t)
	out, server := pair(t)
	go CopyHalf(out, in)
	go CopyHalf(in, out)
	client.Write([]byte("request"))
	client.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(server)
	if err != nil || string(got) != "request" {
		t.Fatalf("the server read %q, %v; want the request and the end of stream", got, err)
	}
	server.Write([]byte("answer"))
	server.Close()
	got, err = io.ReadAll(client)
	if err != nil || string(got) != "answer" {
		t.Fatalf("the client read %q, %v; want the answer after its half close", got, err)
	}
}
