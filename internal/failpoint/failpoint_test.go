package failpoint

import (
	"os"
	"os/exec"
	"testing"
)

func TestParse(t *testing.T) {
	got := parse(" a, b ,,c")
	for _, n := range []string{"a", "b", "c"} {
		if !got[n] {
			t.Errorf("parse: %q not armed in %v", n, got)
		}
	}
	if len(got) != 3 {
		t.Errorf("parse = %v, want 3 names", got)
	}
}

// TestHit: an armed failpoint ends the process with ExitCode; an unarmed
// one does nothing.
func TestHit(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") == "1" {
		Hit("other")
		Hit("boom")
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestHit$")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", "CORPUS_FAILPOINTS=boom")
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != ExitCode {
		t.Fatalf("child with an armed failpoint = %v, want exit %d", err, ExitCode)
	}
}
