package proxy

import (
	"bufio"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"corpus/internal/testrun"
)

// The websocket side of these tests is a minimal RFC 6455 implementation:
// the handshake, and unfragmented frames up to 64 KiB.

const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

const (
	wsText  = 0x1
	wsClose = 0x8
)

func wsWriteFrame(w io.Writer, op byte, payload []byte, mask bool) error {
	hdr := []byte{0x80 | op, 0}
	switch n := len(payload); {
	case n < 126:
		hdr[1] = byte(n)
	default:
		hdr[1] = 126
		hdr = binary.BigEndian.AppendUint16(hdr, uint16(n))
	}
	if mask {
		hdr[1] |= 0x80
		var key [4]byte
		rand.Read(key[:])
		hdr = append(hdr, key[:]...)
		masked := make([]byte, len(payload))
		for i := range payload {
			masked[i] = payload[i] ^ key[i%4]
		}
		payload = masked
	}
	if _, err := w.Write(append(hdr, payload...)); err != nil {
		return err
	}
	return nil
}

func wsReadFrame(r io.Reader) (op byte, payload []byte, err error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	op = hdr[0] & 0x0f
	n := int(hdr[1] & 0x7f)
	if n == 126 {
		var ext [2]byte
		if _, err := io.ReadFull(r, ext[:]); err != nil {
			return 0, nil, err
		}
		n = int(binary.BigEndian.Uint16(ext[:]))
	} else if n == 127 {
		return 0, nil, fmt.Errorf("frame too large for this test")
	}
	var key [4]byte
	masked := hdr[1]&0x80 != 0
	if masked {
		if _, err := io.ReadFull(r, key[:]); err != nil {
			return 0, nil, err
		}
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, err
	}
	if masked {
		for i := range payload {
			payload[i] ^= key[i%4]
		}
	}
	return op, payload, nil
}

// wsEchoHandler upgrades with http.Hijacker and echoes every frame until a
// close frame, which it answers.
func wsEchoHandler(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") ||
		!strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade") {
		http.Error(w, "websocket upgrade expected", http.StatusBadRequest)
		return
	}
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer conn.Close()
	fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
		wsAccept(r.Header.Get("Sec-WebSocket-Key")))
	if rw.Flush() != nil {
		return
	}
	for {
		op, payload, err := wsReadFrame(rw)
		if err != nil {
			return
		}
		if err := wsWriteFrame(conn, op, payload, false); err != nil || op == wsClose {
			return
		}
	}
}

func TestWebsocketUpgradeEcho(t *testing.T) {
	t.Parallel()
	be := startBackend(t, "ws", http.HandlerFunc(wsEchoHandler))
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, httpRoutes("ws.test", be.addr()))

	conn, err := net.Dial("tcp", p.HTTPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(testrun.D(10 * time.Second)))
	var keyBytes [16]byte
	rand.Read(keyBytes[:])
	key := base64.StdEncoding.EncodeToString(keyBytes[:])
	fmt.Fprintf(conn, "GET /chat HTTP/1.1\r\nHost: WS.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", key)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the handshake answer: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake = %d, want 101", resp.StatusCode)
	}
	if got := resp.Header.Get("Sec-WebSocket-Accept"); got != wsAccept(key) {
		t.Fatalf("Sec-WebSocket-Accept = %q, want %q", got, wsAccept(key))
	}
	for _, msg := range []string{"hello", "", strings.Repeat("big ", 5000), "bye"} {
		if err := wsWriteFrame(conn, wsText, []byte(msg), true); err != nil {
			t.Fatalf("writing a frame: %v", err)
		}
		op, got, err := wsReadFrame(br)
		if err != nil {
			t.Fatalf("reading the echo of a %d-byte message: %v", len(msg), err)
		}
		if op != wsText || string(got) != msg {
			t.Fatalf("echo = op %d, %d bytes; want text, %d bytes", op, len(got), len(msg))
		}
	}
	if err := wsWriteFrame(conn, wsClose, []byte{0x03, 0xe8}, true); err != nil {
		t.Fatal(err)
	}
	if op, _, err := wsReadFrame(br); err != nil || op != wsClose {
		t.Fatalf("close answer = op %d, %v; want a close frame", op, err)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after close, read = %v, want EOF", err)
	}
	if got := p.Stats().Responses[101]; got != 1 {
		t.Errorf("Stats().Responses[101] = %d, want 1", got)
	}
}
