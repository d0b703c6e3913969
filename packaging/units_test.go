package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// units are the systemd units the package installs.
var units = []string{"corpus-coordinator.service", "corpus-agent.service", "corpus-agent-k8s@.service"}

// TestUnitsVerify: systemd-analyze verify finds nothing to say about the
// units (it exits 0 on many mistakes, so any output fails the test).
// verify only checks that ExecStart names an executable, so it points at
// this test binary (building corpus here cost minutes on a cold cache);
// test/package/run verifies the installed units with the packaged binary.
// The template is checked as an instance.
func TestUnitsVerify(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		if os.Getenv("CORPUS_TEST_REQUIRE_SYSTEMD_ANALYZE") != "" {
			t.Fatalf("systemd-analyze is required here (CORPUS_TEST_REQUIRE_SYSTEMD_ANALYZE is set): %v", err)
		}
		t.Skip("needs systemd-analyze (apt-get install systemd; scripts/setup --test installs it)")
	}
	t.Parallel()
	dir := t.TempDir()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, u := range units {
		src, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(src), "ExecStart=/usr/bin/corpus ") {
			t.Fatalf("%s does not start /usr/bin/corpus", u)
		}
		path := filepath.Join(dir, strings.Replace(u, "@.", "@test.", 1))
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(src), "/usr/bin/corpus ", bin+" ")), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path)
	}
	// The man pages are checked where the package is installed
	// (test/package/run).
	out, err := exec.Command("systemd-analyze", append([]string{"verify", "--man=no"}, paths...)...).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify = %v\n%s", err, out)
	}
}

// TestUnitsNotify: every unit waits for READY=1, has a watchdog, and
// takes notifications from the daemon only.
func TestUnitsNotify(t *testing.T) {
	t.Parallel()
	for _, u := range units {
		src, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"\nType=notify\n", "\nNotifyAccess=main\n", "\nWatchdogSec="} {
			if !strings.Contains(string(src), want) {
				t.Errorf("%s lacks %q", u, strings.TrimSpace(want))
			}
		}
	}
}
