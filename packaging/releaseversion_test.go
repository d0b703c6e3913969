package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReleaseVersion: release-version names the release HEAD is, or the
// newest listed one it follows and how many commits past it; it does
// not count a release HEAD does not descend from, and says dev outside
// git.
func TestReleaseVersion(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	script, err := os.ReadFile("release-version")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "packaging"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "packaging", "release-version"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	releases := func(lines ...string) {
		t.Helper()
		text := "# version commit\n" + strings.Join(lines, "\n") + "\n"
		if err := os.WriteFile(filepath.Join(dir, "packaging", "releases"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Through bash, not exec of the file just written: a test running in
	// parallel may fork while the write's descriptor is open, and exec
	// of a file open for writing fails with "text file busy".
	version := func() string { return run("bash", "packaging/release-version") }

	if got := version(); got != "dev" {
		t.Errorf("outside git: %q, want dev", got)
	}
	releases()
	run("git", "init", "-q", "-b", "main")
	run("git", "add", ".")
	run("git", "commit", "-q", "-m", "first")
	if got := version(); got != "v0.0.0+1" {
		t.Errorf("no release yet: %q, want v0.0.0+1", got)
	}
	first := run("git", "rev-parse", "HEAD")
	run("git", "commit", "-q", "--allow-empty", "-m", "second")
	second := run("git", "rev-parse", "HEAD")
	releases("v0.1.0 "+first, "v9.0.0 0123456789012345678901234567890123456789")
	run("git", "commit", "-q", "-am", "list v0.1.0")
	if got := version(); got != "v0.1.0+2" {
		t.Errorf("two commits past v0.1.0 (and an unknown v9.0.0): %q, want v0.1.0+2", got)
	}
	newer := filepath.Join(t.TempDir(), "releases")
	if err := os.WriteFile(newer, []byte("v0.1.0 "+first+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run("git", "checkout", "-q", first)
	if got := version(); got != "v0.0.0+1" {
		t.Errorf("at v0.1.0's commit, which does not list itself: %q, want v0.0.0+1", got)
	}
	if got := run("env", "CORPUS_RELEASES="+newer, "bash", "packaging/release-version"); got != "v0.1.0" {
		t.Errorf("at v0.1.0's commit with a newer list: %q, want v0.1.0", got)
	}
	run("git", "checkout", "-q", "main")
	releases("v0.1.0 "+first, "v0.2.0 "+second)
	if got := version(); got != "v0.2.0+1-dirty" {
		t.Errorf("one commit past v0.2.0, releases changed: %q, want v0.2.0+1-dirty", got)
	}
}
