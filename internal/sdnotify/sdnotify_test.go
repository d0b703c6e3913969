package sdnotify

import (
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// listen makes a notify socket, points NOTIFY_SOCKET at it and returns
// a function that reads what arrived (nil once nothing does for 100ms).
func listen(t *testing.T) func() []string {
	dir, err := os.MkdirTemp("", "sdn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "s")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return func() []string {
		var got []string
		buf := make([]byte, 256)
		for {
			conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			n, err := conn.Read(buf)
			if err != nil {
				return got
			}
			got = append(got, string(buf[:n]))
		}
	}
}

// TestHeartsGateReadyAndWatchdog: READY=1 waits for every Heart's first
// beat, each WATCHDOG=1 for every Heart to beat again, so one stuck loop
// starves the watchdog.
func TestHeartsGateReadyAndWatchdog(t *testing.T) {
	read := listen(t)
	t.Setenv("WATCHDOG_USEC", "2000000")
	n := New(slog.New(slog.DiscardHandler))
	if got := n.every; got != time.Second {
		t.Fatalf("watchdog interval = %v, want 1s (half of WATCHDOG_USEC)", got)
	}
	a, b := n.Heart("a"), n.Heart("b")
	steps := []struct {
		beat *Heart
		want []string
	}{
		{a, nil},
		{a, nil},
		{b, []string{"READY=1"}},
		{b, nil},
		{b, nil}, // a is stuck
		{a, []string{"WATCHDOG=1"}},
		{a, nil},
		{b, []string{"WATCHDOG=1"}},
	}
	for i, s := range steps {
		s.beat.Beat()
		if got := read(); !slices.Equal(got, s.want) {
			t.Fatalf("step %d: beat of %s sent %q, want %q", i, s.beat.name, got, s.want)
		}
	}
	n.Stopping()
	if got := read(); !slices.Equal(got, []string{"STOPPING=1"}) {
		t.Errorf("Stopping() sent %q, want STOPPING=1", got)
	}
}

// TestNoWatchdog: without WATCHDOG_USEC the Hearts need not wake, READY=1
// still waits for them, and no WATCHDOG=1 is sent; a nil Heart is valid.
func TestNoWatchdog(t *testing.T) {
	read := listen(t)
	t.Setenv("WATCHDOG_USEC", "")
	n := New(slog.New(slog.DiscardHandler))
	h := n.Heart("only")
	if c, stop := h.Ticker(); c != nil || h.Every() != 0 {
		t.Errorf("Ticker() = %v, Every() = %v; want none without a watchdog", c, h.Every())
	} else {
		stop()
	}
	h.Beat()
	h.Beat()
	if got := read(); !slices.Equal(got, []string{"READY=1"}) {
		t.Errorf("beats sent %q, want READY=1 only", got)
	}
	var none *Heart
	none.Beat()
	if none.Every() != 0 {
		t.Errorf("nil Heart Every() = %v, want 0", none.Every())
	}
}
