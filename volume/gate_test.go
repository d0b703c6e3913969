package volume

import (
	"errors"
	"fmt"
	"testing"
)

// TestGate: a resize that cannot be done is refused before anything is
// stopped and reported once; a new size or freed space is judged
// afresh; a shrink the backend refused offline is not tried again at
// that size until the volume uses less.
func TestGate(t *testing.T) {
	t.Parallel()
	var g Gate
	admit := func(from, to, used int64, wantChanged bool, want error) {
		t.Helper()
		changed, err := g.Admit("db", from, to, used)
		if !errors.Is(err, want) || (want == nil) != (err == nil) || changed != wantChanged {
			t.Fatalf("Admit(db, %d, %d, %d) = %v, %v; want %v, %v", from, to, used, changed, err, wantChanged, want)
		}
	}
	admit(256*MiB, 512*MiB, 200*MiB, false, nil)             // a grow
	admit(256*MiB, 128*MiB, 200*MiB, true, ErrCannotShrink)  // 200 MiB in 128: refused, reported
	admit(256*MiB, 128*MiB, 200*MiB, false, ErrCannotShrink) // the next pass: not again
	if r, ok := g.Refused("db", 128*MiB); !ok || r.Used != 200*MiB || !errors.Is(r.Err, ErrCannotShrink) {
		t.Fatalf("Refused(db, 128 MiB) = %+v, %v; want the refusal", r, ok)
	}
	if _, ok := g.Refused("db", 256*MiB); ok {
		t.Fatalf("Refused(db, 256 MiB) stands; only 128 MiB was refused")
	}
	admit(256*MiB, 100003840, 200*MiB, true, ErrCannotShrink) // a new size is judged afresh
	admit(256*MiB, 100000000, 10*MiB, true, ErrInvalid)       // no backend makes it
	admit(256*MiB, 128*MiB, 10*MiB, false, nil)               // space freed: go ahead
	if _, ok := g.Refused("db", 128*MiB); ok {
		t.Fatalf("a refusal stands after an admitted resize")
	}

	// Refused offline: not tried again while as much is used.
	offline := fmt.Errorf("resize2fs: %w", ErrCannotShrink)
	if !g.Refuse("db", 128*MiB, 60*MiB, offline) {
		t.Fatalf("Refuse = false for a new refusal")
	}
	admit(256*MiB, 128*MiB, 60*MiB, false, ErrCannotShrink)
	admit(256*MiB, 128*MiB, 61*MiB, false, ErrCannotShrink)
	admit(256*MiB, 128*MiB, 50*MiB, false, nil) // less used: try again
	if g.Refuse("db", 128*MiB, 50*MiB, offline); !g.Refuse("db", 128*MiB, 50*MiB, fmt.Errorf("other: %w", ErrCannotShrink)) {
		t.Fatalf("Refuse = false for a refusal with a new reason")
	}
	g.Forget("db")
	if _, ok := g.Refused("db", 128*MiB); ok {
		t.Fatalf("a refusal stands after Forget")
	}
	admit(256*MiB, 128*MiB, 50*MiB, false, nil)
}
