package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"corpus/internal/testrun"
)

// deployLab is a cluster with one node, a client namespace outside it, a
// project hello (dev) and a real git working copy that pushes over SSH.
type deployLab struct {
	t        *testing.T
	c        *cluster
	a        *agentProc
	client   string // the client's namespace
	nodeAddr string
	hc       *http.Client
	work     string // the git working copy
	keys     map[string]string
	remote   string
}

const deployDomain = "hello.dev.example.test"

func newDeployLab(t *testing.T, agentArgs ...string) *deployLab {
	t.Helper()
	return newDeployLabFor(t, []string{"--image", "busybox", "--memory", "64M", "--cpus", "0.2"}, agentArgs...)
}

// newDeployLabFor is newDeployLab with the project's guest made with
// guestArgs (image, driver, resources).
func newDeployLabFor(t *testing.T, guestArgs []string, agentArgs ...string) *deployLab {
	t.Helper()
	return newDeployLabCoord(t, nil, guestArgs, agentArgs...)
}

// newDeployLabCoord is newDeployLabFor with the coordinator started with
// coordArgs.
func newDeployLabCoord(t *testing.T, coordArgs, guestArgs []string, agentArgs ...string) *deployLab {
	t.Helper()
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("needs the OpenSSH client (apt-get install openssh-client)")
	}
	c := newCluster(t, coordArgs...)
	a := c.addAgent("n1")
	client, nodeAddr := c.lab.addClient(a.node)
	a.kill()
	args := append([]string{"--address", nodeAddr}, agentArgs...)
	a.proc = c.startAgent(a, args...)
	c.waitAgentBack(a)
	return deployLabOn(t, c, a, client, nodeAddr, guestArgs)
}

// deployLabOn sets the deploy lab up on a running cluster whose node a
// is reached from namespace client at nodeAddr.
func deployLabOn(t *testing.T, c *cluster, a *agentProc, client, nodeAddr string, guestArgs []string) *deployLab {
	t.Helper()
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("needs the OpenSSH client (apt-get install openssh-client)")
	}
	l := &deployLab{t: t, c: c, a: a, client: client, nodeAddr: nodeAddr, hc: httpIn(client), keys: map[string]string{}}
	dir := tempDir(t)
	for _, u := range []string{"alice", "bob", "eve"} {
		key := filepath.Join(dir, u)
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", u+"@laptop", "-f", key).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v: %s", err, out)
		}
		l.keys[u] = key
	}
	c.mustCLI("user", "add", "alice", "--role", "dev")
	c.mustCLI("key", "add", "alice", l.keys["alice"]+".pub")
	c.mustCLI("user", "add", "bob", "--role", "dev")
	c.mustCLI("key", "add", "bob", l.keys["bob"]+".pub")
	out := c.mustCLI(append(append([]string{"project", "create", "hello", "--env", "dev"}, guestArgs...), "--domain", deployDomain)...)
	l.remote = "ssh://git@" + nodeAddr + ":2222/hello"
	if !strings.Contains(out, l.remote) {
		t.Fatalf("project create did not print the remote %s:\n%s", l.remote, out)
	}
	c.mustCLI("project", "grant", "hello", "alice")

	l.work = filepath.Join(dir, "hello")
	l.git("init", "-q", "-b", "main", l.work)
	l.git("remote", "add", "corpus", l.remote)
	return l
}

// git runs git in the working copy (as alice unless GIT_SSH_COMMAND is
// overridden by gitAs), from the client's namespace.
func (l *deployLab) git(args ...string) string {
	l.t.Helper()
	out, err := l.gitAs("alice", args...)
	if err != nil {
		l.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (l *deployLab) gitAs(user string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(3*time.Minute))
	defer cancel()
	if l.work != "" && args[0] != "init" {
		args = append([]string{"-C", l.work}, args...)
	}
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/" + l.client, "git"}, args...)...)
	cmd.Env = append(os.Environ(),
		"GIT_SSH_COMMAND=ssh -i "+l.keys[user]+" -o IdentitiesOnly=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes",
		"GIT_AUTHOR_NAME=Alice", "GIT_AUTHOR_EMAIL=alice@example.test",
		"GIT_COMMITTER_NAME=Alice", "GIT_COMMITTER_EMAIL=alice@example.test",
		"HOME="+filepath.Dir(l.keys[user]))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// write writes a file of the working copy (mode 0755 for executables).
func (l *deployLab) write(name, content string, mode os.FileMode) {
	l.t.Helper()
	p := filepath.Join(l.work, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		l.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		l.t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		l.t.Fatal(err)
	}
}

// siteInstall writes the page and makes sure a server answers for the
// current release: busybox httpd started per connection by nc, so every
// request sees where current points at that moment.
const siteInstall = `#!/bin/sh
set -e
echo "building $CORPUS_PROJECT/$CORPUS_ENV $CORPUS_RELEASE from $CORPUS_COMMIT"
sed "s/@RELEASE@/$CORPUS_RELEASE/" page.tmpl > index.html
if [ ! -e /tmp/site.pid ] || ! kill -0 "$(cat /tmp/site.pid)" 2>/dev/null; then
	nc -ll -p 80 -e httpd -i -h "$CORPUS_CURRENT" </dev/null >/dev/null 2>&1 &
	echo $! > /tmp/site.pid
	echo "server started"
fi
`

// commitSite commits a version of the site.
func (l *deployLab) commitSite(version string) string {
	l.t.Helper()
	l.write("page.tmpl", "version "+version+" (@RELEASE@)\n", 0o644)
	l.write(".corpus/install.d/10-site", siteInstall, 0o755)
	l.git("add", "-A")
	l.git("commit", "-q", "-m", "site "+version)
	return strings.TrimSpace(l.git("rev-parse", "HEAD"))
}

func (l *deployLab) push(args ...string) (string, error) {
	return l.gitAs("alice", append([]string{"push", "corpus", "main"}, args...)...)
}

func (l *deployLab) mustPush(args ...string) string {
	l.t.Helper()
	out, err := l.push(args...)
	if err != nil {
		l.t.Fatalf("git push: %v\n%s", err, out)
	}
	return out
}

// page is what the proxy serves for the project's domain.
func (l *deployLab) page() string {
	code, body, err := get(l.hc, "http://"+l.nodeAddr+"/", deployDomain)
	if err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprintf("%d %s", code, strings.TrimSpace(body))
}

func (l *deployLab) wantPage(want string) {
	l.t.Helper()
	eventually(l.t, 15*time.Second, "page "+want, func() error {
		if got := l.page(); got != "200 "+want {
			return fmt.Errorf("page = %q, want %q", got, "200 "+want)
		}
		return nil
	})
}

// remoteHead is the commit the remote's main points at ("" for none).
func (l *deployLab) remoteHead() string {
	l.t.Helper()
	out, err := l.gitAs("alice", "ls-remote", "corpus", "refs/heads/main")
	if err != nil {
		l.t.Fatalf("git ls-remote: %v\n%s", err, out)
	}
	f := strings.Fields(out)
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

type releaseView struct {
	Number int    `json:"number"`
	Commit string `json:"commit"`
	// Image and ImageDigest are a release's from an image.
	Image       string `json:"image"`
	ImageDigest string `json:"image_digest"`
	Author      string `json:"author"`
	Status      string `json:"status"`
	FailedStep  string `json:"failed_step"`
	Message     string `json:"message"`
	Pruned      bool   `json:"pruned"`
	Log         string `json:"log"`
	Trigger     string `json:"trigger"`
	// ConfigChanges are keys only: "+KEY", "~KEY", "-KEY".
	ConfigChanges []string `json:"config_changes"`
	Steps         []struct {
		Name   string `json:"name"`
		Status string `json:"status"`
	} `json:"steps"`
}

func (l *deployLab) releases() (current int, rels []releaseView) {
	l.t.Helper()
	var res struct {
		Releases []releaseView `json:"releases"`
		Current  int           `json:"current"`
	}
	if err := l.c.json(&res, "release", "list", "hello"); err != nil {
		l.t.Fatal(err)
	}
	return res.Current, res.Releases
}

// guestSh runs a shell command in the project's guest.
func (l *deployLab) guestSh(script string) string {
	l.t.Helper()
	return strings.TrimSpace(l.c.mustCLI("guest", "exec", "hello-dev", "--", "sh", "-c", script))
}

func TestGitPushDeploy(t *testing.T) {
	l := newDeployLab(t)
	c := l.c

	// First push: the pipeline streams step by step and the site serves.
	v1 := l.commitSite("one")
	start := time.Now()
	out := l.mustPush()
	t.Logf("first push took %s:\n%s", time.Since(start), out)
	for _, want := range []string{"remote: -----> archive", "remote: -----> release-sync", "remote: -----> install 10-site",
		"building hello/dev r1", "remote: -----> fixperms", "remote: -----> switch", "remote: -----> notify", "r1 is live"} {
		if !strings.Contains(out, want) {
			t.Errorf("push output lacks %q", want)
		}
	}
	l.wantPage("version one (r1)")
	if h := l.remoteHead(); h != v1 {
		t.Fatalf("remote main = %q, want %s", h, v1)
	}
	// The environment's name in the cluster zone is its ingress node
	// (real dig), with the proxy's port in SRV.
	for _, q := range [][2]string{{"hello.dev.corpus.test", "A"}, {"_http._tcp.hello.dev.corpus.test", "SRV"}} {
		out, err := exec.Command("nsenter", "--net=/run/netns/"+c.lab.ctl, "dig", "@127.0.0.1", "-p", "8600", "+short", q[0], q[1]).CombinedOutput()
		want := l.nodeAddr
		if q[1] == "SRV" {
			want = "0 10 80 n1.node.corpus.test."
		}
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("dig %s %s = %q, %v; want %s", q[0], q[1], out, err, want)
		}
	}

	// Second push: the new page, the first release archived.
	l.commitSite("two")
	start = time.Now()
	l.mustPush()
	t.Logf("push-to-serving of a new commit: %s", time.Since(start))
	l.wantPage("version two (r2)")
	if got := l.guestSh("cat /srv/projects/hello/archives/r1/release.env | head -1; readlink /srv/projects/hello/current"); got != "release=r1\nreleases/r2" {
		t.Errorf("archive and current = %q", got)
	}

	// A failing install step: rejected with its output, the branch does
	// not move, the old page serves all along, the failed tree is removed.
	v2 := l.remoteHead()
	l.write(".corpus/install.d/20-test", "#!/bin/sh\necho 'running tests'\necho 'FAIL: 3 of 10 tests failed' >&2\nexit 1\n", 0o755)
	l.git("add", "-A")
	l.git("commit", "-q", "-m", "broken")
	stop := make(chan struct{})
	blips := make(chan string, 100)
	go func() {
		for {
			select {
			case <-stop:
				close(blips)
				return
			default:
			}
			if p := l.page(); p != "200 version two (r2)" {
				blips <- p
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	out, err := l.push()
	close(stop)
	for b := range blips {
		t.Errorf("while a failing deploy ran the page was %q", b)
	}
	if err == nil {
		t.Fatalf("a failing push was accepted:\n%s", out)
	}
	for _, want := range []string{"install failed: 20-test: exit status 1", "Push rejected", "FAIL: 3 of 10 tests failed", "still serves r2", "[remote rejected]"} {
		if !strings.Contains(out, want) {
			t.Errorf("rejected push output lacks %q:\n%s", want, out)
		}
	}
	if h := l.remoteHead(); h != v2 {
		t.Errorf("remote main moved to %s after a rejected push, want %s", h, v2)
	}
	l.wantPage("version two (r2)")
	if got := l.guestSh("ls /srv/projects/hello/releases /srv/projects/hello/.env"); got != "/srv/projects/hello/.env:\nr1.json\nr1.run.json\nr2.json\nr2.run.json\n\n/srv/projects/hello/releases:\nr1\nr2" {
		t.Errorf("releases in the guest = %q, want r1 r2 (the failed r3 removed)", got)
	}
	if !strings.Contains(out, "removed the files of r3") {
		t.Errorf("rejected push output does not say r3's files were removed:\n%s", out)
	}
	var shown struct {
		Release releaseView `json:"release"`
	}
	if err := c.json(&shown, "release", "show", "hello", "r3", "--log"); err != nil {
		t.Fatal(err)
	}
	if r := shown.Release; r.Status != "failed" || r.FailedStep != "install" || !strings.Contains(r.Log, "FAIL: 3 of 10") || r.Author != "alice" {
		t.Errorf("release r3 = %+v", r)
	}
	if out := c.mustCLI("release", "show", "hello", "r3", "--log"); !strings.Contains(out, "FAIL: 3 of 10") {
		t.Errorf("release show --log lacks the step output:\n%s", out)
	}

	// The audit log names who did what: the operator, the node's deploys.
	var audit struct {
		Entries []struct {
			Actor, Action, Target, Result string
		} `json:"entries"`
	}
	if err := c.json(&audit, "audit", "--limit", "1000"); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, e := range audit.Entries {
		seen[e.Action+" "+e.Target] = e.Actor + " " + e.Result
		if e.Action == "finish_release" {
			seen["finish_release "] = e.Actor + " " + e.Result
		}
	}
	for what, want := range map[string]string{
		"create_project hello":    "ops ok",
		"grant_project hello":     "ops ok",
		"begin_release hello/dev": "node:n1 ok",
		"finish_release ":         "node:n1 ok",
	} {
		if got := seen[what]; got != want {
			t.Errorf("audit %q = %q, want %q", what, got, want)
		}
	}
	out = c.mustCLI("rollback", "hello")
	if !strings.Contains(out, "r1") {
		t.Errorf("rollback output = %q", out)
	}
	l.wantPage("version one (r1)")
	cur, rels := l.releases()
	if cur != 1 || len(rels) != 3 || rels[0].Status != "failed" || rels[1].Status != "succeeded" || rels[2].Commit != v1 {
		t.Errorf("after rollback: current r%d, releases %+v", cur, rels)
	}
	c.mustCLI("rollback", "hello", "--to", "r2")
	l.wantPage("version two (r2)")
	if _, errOut, code := c.cli("rollback", "hello", "--to", "r3"); code == 0 || !strings.Contains(errOut, "failed") {
		t.Errorf("rollback to a failed release: exit %d, %s", code, errOut)
	}

	// Fix the build; keep: 2 prunes the older trees (the failed r3,
	// whose files are gone, does not count).
	os.Remove(filepath.Join(l.work, ".corpus/install.d/20-test"))
	l.write(".corpus/corpus.yaml", "keep: 2\nenv:\n  GREETING: hi\ndomains: [www.hello.example.test]\n", 0o644)
	l.commitSite("three")
	out = l.mustPush()
	if !strings.Contains(out, "pruned r1 (keep: 2)") {
		t.Errorf("push with keep: 2 did not prune r1 alone:\n%s", out)
	}
	l.wantPage("version three (r4)")
	eventually(t, 10*time.Second, "the manifest's domain", wantBody(l.hc, "http://"+l.nodeAddr+"/", "www.hello.example.test", "version three (r4)"))
	if got := l.guestSh("ls /srv/projects/hello/releases"); got != "r2\nr4" {
		t.Errorf("releases kept = %q, want r2 r4", got)
	}
	_, rels = l.releases()
	for _, r := range rels {
		if pruned := r.Number == 1; r.Pruned != pruned {
			t.Errorf("r%d pruned = %v, want %v", r.Number, r.Pruned, pruned)
		}
	}
	if _, errOut, code := c.cli("rollback", "hello", "--to", "r1"); code == 0 || !strings.Contains(errOut, "pruned") {
		t.Errorf("rollback to a pruned release: exit %d, %s", code, errOut)
	}

	// A health check that never answers rejects the push.
	l.write(".corpus/corpus.yaml", "keep: 2\nhealth:\n  http: {port: 9999, path: /, timeout: 2s}\n", 0o644)
	l.commitSite("four")
	if out, err := l.push(); err == nil || !strings.Contains(out, "health failed") {
		t.Errorf("push with a failing health check: %v\n%s", err, out)
	}
	l.wantPage("version three (r4)")
	// The rejected release dropped the domain, but nothing changed.
	if code, _, err := get(l.hc, "http://"+l.nodeAddr+"/", "www.hello.example.test"); err != nil || code != 200 {
		t.Errorf("the manifest's domain after a rejected push = %d, %v", code, err)
	}
}

func TestGitPushRefusals(t *testing.T) {
	l := newDeployLab(t, "--git-max-push-bytes", "65536")
	c := l.c
	base := l.commitSite("one")
	l.mustPush()
	l.wantPage("version one (r1)")
	_, before := l.releases()

	refused := func(what, want string, args ...string) {
		t.Helper()
		out, err := l.push(args...)
		if err == nil {
			t.Errorf("%s: push accepted:\n%s", what, out)
			return
		}
		if !strings.Contains(out, want) {
			t.Errorf("%s: push output lacks %q:\n%s", what, want, out)
		}
		if h := l.remoteHead(); h != base {
			t.Errorf("%s: remote main moved to %s", what, h)
		}
		if _, after := l.releases(); len(after) != len(before) {
			t.Errorf("%s: a release was recorded (%d → %d)", what, len(before), len(after))
		}
		l.wantPage("version one (r1)")
	}
	reset := func() {
		t.Helper()
		l.git("reset", "-q", "--hard", base)
	}

	// Keys and access.
	l.commitSite("two")
	for _, tc := range []struct{ user, want string }{
		{"eve", "Permission denied"},
		{"bob", "may not use project hello"},
	} {
		if out, err := l.gitAs(tc.user, "push", "corpus", "main"); err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("push by %s: %v, output lacks %q:\n%s", tc.user, err, tc.want, out)
		}
	}
	if out, err := l.gitAs("alice", "push", "ssh://git@"+l.nodeAddr+":2222/nope", "main"); err == nil || !strings.Contains(out, `no project named "nope"`) {
		t.Errorf("push to an unknown project: %v\n%s", err, out)
	}
	// The refused pushes are in the audit log as refused API calls are:
	// who, the project, why.
	wantAudit(t, c, "refused git push", "user:bob", "hello", "may not use project hello")
	wantAudit(t, c, "refused git push", "user:alice", "nope", `no project named "nope"`)
	if out, err := l.gitAs("alice", "push", "corpus", "main:other"); err == nil || !strings.Contains(out, "only main deploys") {
		t.Errorf("push of another branch: %v\n%s", err, out)
	}
	reset()

	// Contract violations in the tree.
	l.write(".corpus/install.d/20-noexec", "#!/bin/sh\necho hi\n", 0o644)
	l.git("add", "-A")
	l.git("commit", "-q", "-m", "not executable")
	refused("non-executable step", "is not executable")
	reset()
	if err := os.Symlink("/etc", filepath.Join(l.work, "escape")); err != nil {
		t.Fatal(err)
	}
	l.git("add", "-A")
	l.git("commit", "-q", "-m", "symlink out")
	refused("symlink outside", "symlink escape points outside the release")
	reset()
	if err := os.Symlink("../../etc/passwd", filepath.Join(l.work, "up")); err != nil {
		t.Fatal(err)
	}
	l.git("add", "-A")
	l.git("commit", "-q", "-m", "relative symlink out")
	refused("relative symlink outside", "symlink up points outside the release")
	reset()
	l.write(".corpus/corpus.yaml", "keep: 3\nkeeep: 4\n", 0o644)
	l.git("add", "-A")
	l.git("commit", "-q", "-m", "typo")
	refused("manifest typo", "field keeep not found")
	reset()

	// A push over the size limit.
	big := make([]byte, 512<<10)
	rand.Read(big)
	if err := os.WriteFile(filepath.Join(l.work, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	l.git("add", "-A")
	l.git("commit", "-q", "-m", "big")
	refused("huge push", "pack exceeds maximum allowed size")
	reset()

	// Non-fast-forward: refused unless forced, like git.
	l.git("commit", "-q", "--allow-empty", "-m", "other history")
	l.mustPush()
	l.wantPage("version one (r2)")
	base2 := l.remoteHead()
	l.git("reset", "-q", "--hard", "HEAD~1")
	l.git("commit", "-q", "--allow-empty", "-m", "diverged")
	if out, err := l.push(); err == nil || !strings.Contains(out, "non-fast-forward") {
		t.Errorf("non-fast-forward push: %v\n%s", err, out)
	}
	if h := l.remoteHead(); h != base2 {
		t.Errorf("non-fast-forward push moved main")
	}
	l.mustPush("--force")
	l.wantPage("version one (r3)")

	// One deploy at a time.
	l.write(".corpus/install.d/05-slow", "#!/bin/sh\nsleep 4\n", 0o755)
	l.git("add", "-A")
	l.git("commit", "-q", "-m", "slow")
	first := make(chan error, 1)
	go func() { _, err := l.push(); first <- err }()
	time.Sleep(1500 * time.Millisecond)
	l.git("commit", "-q", "--allow-empty", "-m", "second")
	if out, err := l.push(); err == nil || !strings.Contains(out, "another deploy of hello/dev is running") {
		t.Errorf("concurrent push: %v\n%s", err, out)
	}
	if err := <-first; err != nil {
		t.Errorf("the first of two pushes failed: %v", err)
	}
	_ = c
}

// TestDeployCrash kills the agent at each pipeline step and checks that
// after a restart the previous release serves completely and the deploy
// is resolved.
func TestDeployCrash(t *testing.T) {
	l := newDeployLab(t)
	l.commitSite("one")
	l.mustPush()
	l.wantPage("version one (r1)")
	good := l.remoteHead()
	args := l.a.proc.args
	steps := []string{"archive", "release-sync", "install", "fixperms", "start", "health", "switch", "switched", "notify"}
	for i, step := range steps {
		l.a.kill()
		l.a.proc = startIn(t, l.a.node.ns, "agent n1 (failpoint)", []string{"CORPUS_FAILPOINTS=deploy-" + step}, args...)
		eventually(t, 20*time.Second, "git endpoint up", func() error {
			_, err := l.gitAs("alice", "ls-remote", "corpus")
			return err
		})
		l.commitSite(fmt.Sprintf("crash-%d", i))
		out, err := l.push()
		if err == nil {
			t.Fatalf("push with the agent dying at %s succeeded:\n%s", step, out)
		}
		<-l.a.proc.done
		l.a.proc = startIn(t, l.a.node.ns, "agent n1", nil, args...)
		n := i + 2
		eventually(t, 30*time.Second, "interrupted deploy resolved", func() error {
			_, rels := l.releases()
			if len(rels) == 0 || rels[0].Number != n {
				return fmt.Errorf("newest release is not r%d: %+v", n, rels)
			}
			if rels[0].Status != "failed" {
				return fmt.Errorf("r%d is %s", n, rels[0].Status)
			}
			return nil
		})
		l.wantPage("version one (r1)")
		if got := l.guestSh("cd /srv/projects/hello; readlink current; ls -a | grep -c -e current.new -e '.tmp' || true; ls releases | grep -c tmp || true"); got != "releases/r1\n0\n0" {
			t.Errorf("after a crash at %s: current, leftovers = %q", step, got)
		}
		if h := l.remoteHead(); h != good {
			t.Errorf("after a crash at %s the remote main moved", step)
		}
		cur, _ := l.releases()
		if cur != 1 {
			t.Errorf("after a crash at %s the current release is r%d", step, cur)
		}
	}
	// And a deploy works again afterwards.
	l.commitSite("after")
	l.mustPush()
	l.wantPage(fmt.Sprintf("version after (r%d)", len(steps)+2))
}

// wantAudit fails t unless the audit log has an entry of action by
// actor on target whose result says why.
func wantAudit(t *testing.T, c *cluster, action, actor, target, why string) {
	t.Helper()
	var res struct {
		Entries []struct {
			Actor, Target, Result string
		} `json:"entries"`
	}
	if err := c.json(&res, "audit", "--action", action, "--actor", actor, "--target", target); err != nil {
		t.Fatal(err)
	}
	for _, e := range res.Entries {
		if strings.Contains(e.Result, why) {
			return
		}
	}
	t.Errorf("the audit log has no %q of %s on %s saying %q: %+v", action, actor, target, why, res.Entries)
}

// TestFailedDeployFreesDisk: an install step that fills the guest's disk
// fails the deploy, and the failed release's files go with it: the free
// space is back, the release before serves, and the next push deploys.
func TestFailedDeployFreesDisk(t *testing.T) {
	l := newDeployLabFor(t, []string{"--image", "busybox", "--memory", "64M", "--cpus", "0.2", "--disk", "64M"})
	l.commitSite("one")
	l.mustPush()
	l.wantPage("version one (r1)")
	free := func() int {
		t.Helper()
		f := strings.Fields(l.guestSh("df -Pk /srv/projects/hello | tail -1"))
		if len(f) < 4 {
			t.Fatalf("df: %q", f)
		}
		n, err := strconv.Atoi(f[3])
		if err != nil {
			t.Fatalf("df: %q: %v", f, err)
		}
		return n
	}
	before := free()
	l.write(".corpus/install.d/20-fill", "#!/bin/sh\ndd if=/dev/zero of=fill bs=1M\nexit 1\n", 0o755)
	l.git("add", "-A")
	l.git("commit", "-q", "-m", "fill the disk")
	out, err := l.push()
	if err == nil {
		t.Fatalf("a push whose install fills the disk was accepted:\n%s", out)
	}
	if !containsAll(out, "No space left on device", "install failed: 20-fill", "removed the files of r2", "still serves r1") {
		t.Errorf("rejected push output:\n%s", out)
	}
	after := free()
	t.Logf("free on the guest's disk: %d KiB before the push, %d KiB after its failure", before, after)
	if after < before-1024 {
		t.Errorf("free space %d KiB after the failed deploy, was %d KiB: its files stayed", after, before)
	}
	l.wantPage("version one (r1)")
	if got := l.guestSh("ls /srv/projects/hello/releases"); got != "r1" {
		t.Errorf("releases in the guest = %q, want r1 alone", got)
	}
	os.Remove(filepath.Join(l.work, ".corpus/install.d/20-fill"))
	l.commitSite("three")
	l.mustPush()
	l.wantPage("version three (r3)")
}
