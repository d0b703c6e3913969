package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// commitSlowStopSite commits a site whose web takes a few seconds to stop
// (a graceful shutdown, as real servers do on SIGTERM).
func (l *deployLab) commitSlowStopSite(version string) {
	l.t.Helper()
	l.write("www/index.html", "version "+version+"\n", 0o644)
	l.write("Procfile", `web: echo "$CORPUS_RELEASE" > www/release.txt; trap 'sleep 3; exit 0' TERM; httpd -f -p "$PORT" -h www & wait
`, 0o644)
	l.git("add", "-A")
	l.git("commit", "-q", "-m", "slow-stopping site "+version)
}

// deployNow runs corpus deploy hello with args, which must be accepted at
// once: nothing else runs. It returns the output.
func (l *deployLab) deployNow(what string, args ...string) string {
	l.t.Helper()
	first := time.Now()
	start := first
	out, stderr, code := l.c.cli(append([]string{"deploy", "hello"}, args...)...)
	if code != 0 {
		// How long it would have been refused, for the record.
		l.t.Logf("%s: %s", what, strings.TrimSpace(stderr))
		for code != 0 && strings.Contains(stderr, "busy") && time.Since(first) < 3*time.Minute {
			start = time.Now()
			out, stderr, code = l.c.cli(append([]string{"deploy", "hello"}, args...)...)
		}
		l.t.Errorf("%s: refused for %s (until accepted); nothing else ran", what, start.Sub(first).Round(100*time.Millisecond))
	}
	if code != 0 {
		l.t.Fatalf("%s: corpus deploy %s: %s", what, strings.Join(args, " "), stderr)
	}
	l.t.Logf("%s: took %s", what, time.Since(start).Round(100*time.Millisecond))
	return out
}

// releasesRunning is which releases' processes run.
func (l *deployLab) releasesRunning() []string {
	l.t.Helper()
	var rel []string
	for _, p := range l.ps() {
		if !slices.Contains(rel, p.Release) {
			rel = append(rel, p.Release)
		}
	}
	slices.Sort(rel)
	return rel
}

// TestBlueGreenThenDeploy: after a blue-green deploy, another, a switch
// back and a standby's end, the next deploy is accepted at once (nothing
// else runs; an instance's sync is not a deploy), and the release a
// blue-green deploy ends the standby of stops with that deploy.
func TestBlueGreenThenDeploy(t *testing.T) {
	l := newDeployLab(t)
	c := l.c
	l.commitSlowStopSite("one")
	l.mustPush()

	l.deployNow("blue-green r2", "--strategy", "blue-green", "--keep", "5m")
	l.deployNow("blue-green r3 right after", "--strategy", "blue-green", "--keep", "5m")
	// r2 stands by; r1, which stood by until r3 began, went with r3's
	// deploy.
	if got := l.releasesRunning(); !slices.Equal(got, []string{"r2", "r3"}) {
		live := time.Now()
		eventually(t, time.Minute, "r1 stopped", func() error {
			if got := l.releasesRunning(); slices.Contains(got, "r1") {
				return fmt.Errorf("running: %v", got)
			}
			return nil
		})
		t.Errorf("when r3 was live the processes of %v ran, want r2 (standing by) and r3; r1 stopped %s later",
			got, time.Since(live).Round(100*time.Millisecond))
	}
	l.deployNow("deploy r4 right after")

	l.deployNow("blue-green r5", "--strategy", "blue-green", "--keep", "5m")
	c.mustCLI("switch", "back", "hello")
	l.deployNow("deploy r6 right after a switch back")

	l.deployNow("blue-green r7 (r6 standing by 6s)", "--strategy", "blue-green", "--keep", "6s")
	eventually(t, time.Minute, "the standby r6 stopping", func() error {
		for _, p := range l.ps() {
			if p.Release == "r6" && p.State == "running" {
				return fmt.Errorf("r6's %s runs", p.Name)
			}
		}
		return nil
	})
	l.deployNow("deploy r8 as the standby ends")
	if got := l.releasesRunning(); !slices.Equal(got, []string{"r8"}) {
		t.Errorf("after r8: the processes of %v run, want r8's", got)
	}
}
