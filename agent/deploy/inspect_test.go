package deploy

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"corpus/agent/deploy/githook"
)

// TestInspectWithoutParents reads a commit from a repository that holds
// only it and its tree, as an instance's does after fetching a release
// whose parent was a refused push.
func TestInspectWithoutParents(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst.git")
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1",
			"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@b", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@b"}
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return string(out)
	}
	run("", "init", "-q", src)
	run("", "-C", src, "commit", "-q", "--allow-empty", "-m", "refused")
	run("", "-C", src, "commit", "-q", "--allow-empty", "-m", "the release")
	commit := strings.TrimSpace(run("", "-C", src, "rev-parse", "HEAD"))
	run("", "init", "-q", "--bare", dst)
	pack := run(run("", "-C", src, "rev-list", "--objects", "--no-walk", commit), "-C", src, "pack-objects", "--stdout", "-q")
	run(pack, "--git-dir", dst, "index-pack", "--stdin", "--fix-thin")
	_, _, subject, err := inspectPush(quarantineGit{repo: dst, req: &githook.Request{}}, commit, 1<<20)
	if err != nil || subject != "the release" {
		t.Fatalf("inspectPush = %q, %v; want the commit's subject", subject, err)
	}
}
