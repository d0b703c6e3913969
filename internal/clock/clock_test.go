package clock

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"corpus/internal/atomicfile"
	"corpus/internal/testrun"
)

func TestOffset(t *testing.T) {
	var o Offset
	if d := time.Until(o.Now()); d > time.Second || d < -time.Second {
		t.Fatalf("zero Offset is %s from time.Now", d)
	}
	o.Set(time.Hour)
	o.Add(-90 * time.Minute)
	if got := o.Get(); got != -30*time.Minute {
		t.Fatalf("offset %s after Set(1h), Add(-90m), want -30m", got)
	}
	a := o.Now()
	o.Add(time.Hour)
	b := o.Now()
	// No monotonic reading: the step shows in a duration measured with it.
	if d := b.Sub(a); d < time.Hour {
		t.Fatalf("a step of 1h measured as %s", d)
	}
	if Or(nil) != System || Or(&o) != &o {
		t.Fatal("Or does not default to System")
	}
}

// TestFailpointClock runs the test binary again with the clock file set:
// System follows what the file says, and ignores what does not parse.
func TestFailpointClock(t *testing.T) {
	if path := os.Getenv("CORPUS_FAILPOINT_CLOCK"); path != "" {
		childFollows(t, path)
		return
	}
	path := filepath.Join(t.TempDir(), "clock")
	if err := os.WriteFile(path, []byte("2h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestFailpointClock$", "-test.v")
	cmd.Env = append(os.Environ(), "CORPUS_FAILPOINT_CLOCK="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func childFollows(t *testing.T, path string) {
	o, ok := System.(*Offset)
	if !ok {
		t.Fatalf("System is %T with CORPUS_FAILPOINT_CLOCK set", System)
	}
	if d := time.Until(System.Now()); d < 2*time.Hour-time.Second || d > 2*time.Hour+time.Second {
		t.Fatalf("System is %s from time.Now, the file says 2h", d)
	}
	wait := func(want time.Duration) {
		t.Helper()
		for deadline := time.Now().Add(testrun.D(3 * time.Second)); o.Get() != want; {
			if time.Now().After(deadline) {
				t.Fatalf("offset %s, want %s", o.Get(), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, step := range []struct {
		text string
		want time.Duration
	}{{"-30m", -30 * time.Minute}, {"not a duration", -30 * time.Minute}, {"", 0}} {
		// Replaced whole, never truncated in place: a read between the
		// truncation and the write would see "" (an offset of 0), and
		// the text that does not parse would then leave it at 0.
		if err := atomicfile.Write(path, []byte(step.text), 0o644); err != nil {
			t.Fatal(err)
		}
		wait(step.want)
		time.Sleep(250 * time.Millisecond) // more than one read of the file
		wait(step.want)
	}
}
