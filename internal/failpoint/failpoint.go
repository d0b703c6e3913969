// Package failpoint lets tests crash a process at a named step, to check
// that what a crash leaves behind is repaired. A process whose
// CORPUS_FAILPOINTS environment variable lists a name (comma-separated)
// exits at once, without cleanup, as kill -9 would, when it reaches Hit
// with that name. Unset, Hit costs one map lookup. (The process's clock
// has a failpoint of its own: CORPUS_FAILPOINT_CLOCK, see package clock.)
package failpoint

import (
	"fmt"
	"os"
	"strings"
)

var armed = parse(os.Getenv("CORPUS_FAILPOINTS"))

func parse(s string) map[string]bool {
	m := map[string]bool{}
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			m[n] = true
		}
	}
	return m
}

// ExitCode is the status a failpoint exits with.
const ExitCode = 137

// Hit ends the process when the failpoint name is armed.
func Hit(name string) {
	if armed[name] {
		fmt.Fprintf(os.Stderr, "failpoint %s: exiting\n", name)
		os.Exit(ExitCode)
	}
}
