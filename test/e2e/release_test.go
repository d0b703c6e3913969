package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"corpus/internal/keylock"
)

// releaseCache holds the binaries of previous releases, one folder per
// commit, built once and reused by later runs (outside the repository).
const releaseCache = "/var/cache/corpus-test/releases"

// releaseBuilds serialises the builds of one release in this process.
var releaseBuilds keylock.Map

// release is a listed release and its built binaries.
type release struct {
	version, commit string
	// bin is its corpus binary, corpus-supervisor beside it.
	bin string
}

// lastRelease is the newest release listed in packaging/releases.
func lastRelease(t *testing.T) (version, commit string) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "packaging", "releases"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 2 && !strings.HasPrefix(fields[0], "#") {
			version, commit = fields[0], fields[1]
		}
	}
	if version == "" {
		t.Skip("packaging/releases lists no release yet: nothing to upgrade from")
	}
	return version, commit
}

// previousRelease builds the newest listed release from the repository's
// own history (a git worktree of its commit, removed after), into
// releaseCache/COMMIT, unless a run before did. The build needs only
// what that tree's own go.mod names (from the module proxy) and the
// toolchain; the version is set as its Makefile would have.
func previousRelease(t *testing.T) release {
	t.Helper()
	version, commit := lastRelease(t)
	dir := filepath.Join(releaseCache, commit)
	r := release{version: version, commit: commit, bin: filepath.Join(dir, "corpus")}
	unlock := releaseBuilds.Lock(dir) // one build per commit in this process
	defer unlock()
	if _, err := os.Stat(filepath.Join(dir, "corpus-supervisor")); err == nil {
		return r
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(releaseCache, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(releaseCache, "build-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	tree := filepath.Join(tmp, "tree")
	run := func(dir string, env []string, args ...string) {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building release %s (%s): %v: %v\n%s", version, commit, args, err, out)
		}
	}
	run(repo, nil, "git", "worktree", "add", "--detach", tree, commit)
	defer exec.Command("git", "-C", repo, "worktree", "remove", "--force", tree).Run()
	ldflags := fmt.Sprintf("-X corpus/internal/version.Version=%s -X corpus/internal/version.Commit=%s", version, commit[:7])
	out := filepath.Join(tmp, "bin")
	run(tree, nil, "go", "build", "-ldflags", ldflags, "-o", filepath.Join(out, "corpus"), "./cmd/corpus")
	run(tree, []string{"CGO_ENABLED=0"}, "go", "build", "-ldflags", "-s -w "+ldflags, "-o", filepath.Join(out, "corpus-supervisor"), "./cmd/corpus-supervisor")
	if err := os.Rename(out, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "corpus-supervisor")); serr == nil {
			return r // another test process built it meanwhile
		}
		t.Fatalf("keeping release %s's build: %v", version, err)
	}
	return r
}
