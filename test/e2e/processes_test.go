package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// procSite is a project whose web process is busybox httpd on $PORT,
// serving the release's www with the page of its version and, in
// greeting.txt, a config value the process saw; and a worker.
func (l *deployLab) commitProcSite(version string) {
	l.t.Helper()
	l.write("www/index.html", "version "+version+"\n", 0o644)
	l.write("Procfile", `# the app
web: echo "greeting=$GREETING port=$PORT" > www/greeting.txt; exec httpd -f -p "$PORT" -h www
worker: while :; do date > /tmp/worker.beat; sleep 1; done
`, 0o644)
	os.Remove(filepath.Join(l.work, ".corpus/install.d/10-site"))
	l.git("add", "-A")
	l.git("commit", "-q", "-m", "proc site "+version)
}

func (l *deployLab) pageAt(path string) string {
	code, body, err := get(l.hc, "http://"+l.nodeAddr+path, deployDomain)
	if err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprintf("%d %s", code, strings.TrimSpace(body))
}

type psView struct {
	Name     string `json:"name"`
	State    string `json:"state"`
	Pid      int    `json:"pid"`
	Port     int    `json:"port"`
	Restarts int    `json:"restarts"`
	Release  string `json:"release"`
	Instance uint32 `json:"instance"`
	Guest    string `json:"guest"`
	Command  string `json:"command"`
}

func (l *deployLab) ps() []psView {
	l.t.Helper()
	var res struct {
		Processes []psView `json:"processes"`
	}
	if err := l.c.json(&res, "ps", "hello"); err != nil {
		l.t.Fatal(err)
	}
	return res.Processes
}

func (l *deployLab) proc(name string) psView {
	l.t.Helper()
	var found []psView
	for _, p := range l.ps() {
		if p.Name == name {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		l.t.Fatalf("%d %s processes: %+v", len(found), name, l.ps())
	}
	return found[0]
}

// load requests the site until stop, counting the answers that are not
// 200.
type load struct {
	stop  chan struct{}
	wg    sync.WaitGroup
	total atomic.Int64
	mu    sync.Mutex
	bad   []string
}

func (l *deployLab) startLoad(workers int) *load {
	ld := &load{stop: make(chan struct{})}
	for range workers {
		ld.wg.Add(1)
		go func() {
			defer ld.wg.Done()
			for {
				select {
				case <-ld.stop:
					return
				default:
				}
				code, body, err := get(l.hc, "http://"+l.nodeAddr+"/", deployDomain)
				ld.total.Add(1)
				if err != nil || code != 200 {
					ld.mu.Lock()
					ld.bad = append(ld.bad, fmt.Sprintf("%d %v %.60q", code, err, body))
					ld.mu.Unlock()
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	return ld
}

func (ld *load) end(t *testing.T, what string) {
	t.Helper()
	close(ld.stop)
	ld.wg.Wait()
	t.Logf("%s: %d requests, %d not 200", what, ld.total.Load(), len(ld.bad))
	if len(ld.bad) > 0 {
		t.Errorf("%s: %d of %d requests failed, first: %v", what, len(ld.bad), ld.total.Load(), ld.bad[:min(len(ld.bad), 5)])
	}
	if ld.total.Load() < 20 {
		t.Errorf("%s: only %d requests under load", what, ld.total.Load())
	}
}

// TestProcesses: a Procfile's processes run under the supervisor in a
// real LXC guest; a crash is restarted at once; config reaches them
// through a release; pushes, config changes, restarts and rollbacks under
// load answer no request with anything but 200; bad processes are refused
// at push; a secret never appears in clear outside the guest.
func TestProcesses(t *testing.T) {
	l := newDeployLab(t)
	l.commitProcSite("one")
	out := l.mustPush()
	for _, want := range []string{"-----> start", "web: echo", "(PORT=81)", "routes -> port 81", "r1 is live"} {
		if !strings.Contains(out, want) {
			t.Errorf("push output lacks %q:\n%s", want, out)
		}
	}
	l.wantPage("version one")
	web := l.proc("web")
	if web.State != "running" || web.Port != 81 || web.Release != "r1" || web.Pid == 0 {
		t.Fatalf("web = %+v", web)
	}
	if w := l.proc("worker"); w.State != "running" {
		t.Fatalf("worker = %+v", w)
	}

	// A crash: restarted within a second, counted, the site back.
	l.guestSh(fmt.Sprintf("kill -9 %d", web.Pid))
	crashed := time.Now()
	var again psView
	eventually(t, 5*time.Second, "web restarted", func() error {
		again = l.proc("web")
		if again.Pid == web.Pid || again.State != "running" {
			return fmt.Errorf("web = %+v", again)
		}
		return nil
	})
	t.Logf("web restarted within %s of the kill (ps polled)", time.Since(crashed).Round(time.Millisecond))
	if again.Restarts != 1 {
		t.Errorf("web restarts = %d after one crash, want 1", again.Restarts)
	}
	l.wantPage("version one")

	// Config: a release of the same commit, the value seen by the app,
	// under load.
	const secret = "s3cret-planted-e2e-4711"
	ld := l.startLoad(4)
	out = l.c.mustCLI("config", "set", "hello", "GREETING="+secret, "MODE=one")
	ld.end(t, "config set")
	if !strings.Contains(out, "config changes: +GREETING +MODE") || !strings.Contains(out, "r2 is live") || strings.Contains(out, secret) {
		t.Errorf("config set output:\n%s", out)
	}
	if got := l.pageAt("/greeting.txt"); got != "200 greeting="+secret+" port=80" {
		t.Errorf("greeting = %q", got)
	}
	cur, rels := l.releases()
	if cur != 2 || rels[0].Commit != rels[1].Commit {
		t.Fatalf("after config set: current r%d, releases %+v", cur, rels)
	}
	if r := rels[0]; r.Trigger != "config" || strings.Join(r.ConfigChanges, " ") != "+GREETING +MODE" || rels[1].Trigger != "push" {
		t.Errorf("the config release is recorded as %q %v (r1 as %q)", r.Trigger, r.ConfigChanges, rels[1].Trigger)
	}
	if w := l.proc("web"); w.Port != 80 || w.Release != "r2" {
		t.Errorf("web after the config release = %+v", w)
	}
	// Bad config changes nothing.
	for _, bad := range [][]string{{"PORT=1"}, {"CORPUS_X=1"}, {"1BAD=x"}, {"OK=1", "bad-key=2"}} {
		if _, stderr, code := l.c.cli(append([]string{"config", "set", "hello"}, bad...)...); code == 0 {
			t.Errorf("config set %v was accepted", bad)
		} else if !strings.Contains(stderr, "config key") {
			t.Errorf("config set %v: %s", bad, stderr)
		}
	}
	if cur, _ := l.releases(); cur != 2 {
		t.Errorf("refused config changes made a release: current r%d", cur)
	}

	// A push under load: the new web starts on the other port, the
	// routes move, the old web finishes its requests, then stops.
	l.commitProcSite("two")
	ld = l.startLoad(4)
	out = l.mustPush()
	ld.end(t, "push")
	l.wantPage("version two")
	if w := l.proc("web"); w.Port != 81 || w.Release != "r3" {
		t.Errorf("web after the push = %+v", w)
	}
	if !strings.Contains(out, "stopped the processes of r2") {
		t.Errorf("push output does not say the old processes stopped:\n%s", out)
	}

	// A rolling restart under load.
	before := l.proc("web")
	ld = l.startLoad(4)
	l.c.mustCLI("restart", "hello", "web")
	ld.end(t, "restart")
	after := l.proc("web")
	if after.Pid == before.Pid || after.Port == before.Port {
		t.Errorf("web before restart %+v, after %+v", before, after)
	}
	if w := l.proc("worker"); w.Release != "r3" {
		t.Errorf("worker after a restart of web = %+v", w)
	}

	// Bad processes are refused at push; r3 keeps serving.
	l.write("Procfile", "web httpd -f -p $PORT\n", 0o644)
	l.git("commit", "-qam", "no colon")
	if out, err := l.push(); err == nil || !strings.Contains(out, "Procfile line 1") {
		t.Errorf("a Procfile without a colon: %v\n%s", err, out)
	}
	l.write("Procfile", "web: echo cannot find app.py >&2; exit 3\n", 0o644)
	l.git("commit", "-qam", "crashes")
	out, err := l.push()
	if err == nil || !strings.Contains(out, "process web exited") || !strings.Contains(out, "cannot find app.py") {
		t.Errorf("a web that exits at once: %v\n%s", err, out)
	}
	l.wantPage("version two")
	if w := l.proc("web"); w.Release != "r3" {
		t.Errorf("web after a refused push = %+v", w)
	}

	// Rollback to r1: its processes, and its (empty) config, come back.
	ld = l.startLoad(4)
	l.c.mustCLI("rollback", "hello", "--to", "r1")
	ld.end(t, "rollback")
	l.wantPage("version one")
	if got := l.pageAt("/greeting.txt"); !strings.HasPrefix(got, "200 greeting= port=") {
		t.Errorf("greeting after rolling back to r1 = %q (r1 ran without config)", got)
	}
	if out := l.c.mustCLI("config", "list", "hello"); !strings.Contains(out, "no config") {
		t.Errorf("config after rolling back to r1:\n%s", out)
	}

	// A guest stopped and started again runs its processes by itself.
	l.c.mustCLI("guest", "stop", "hello-dev")
	l.c.mustCLI("guest", "start", "hello-dev")
	eventually(t, 30*time.Second, "processes back after the guest restarted", func() error {
		var res struct {
			Processes []psView `json:"processes"`
		}
		if err := l.c.json(&res, "ps", "hello"); err != nil {
			return err
		}
		running := 0
		for _, p := range res.Processes {
			if p.State == "running" && p.Release == "r1" {
				running++
			}
		}
		if running != 2 || len(res.Processes) != 2 {
			return fmt.Errorf("processes: %+v", res.Processes)
		}
		return nil
	})
	l.wantPage("version one")

	// The secret is nowhere in clear outside the guest: not in the
	// coordinator's raft log and snapshots, the agent's cache, the
	// daemons' logs, the release logs or the audit log.
	l.c.mustCLI("config", "set", "hello", "GREETING="+secret, "--no-restart")
	var leaks []string
	guestData := map[string]bool{filepath.Join(l.a.stateDir, "lxc"): true, filepath.Join(l.a.stateDir, "volumes"): true}
	filepath.Walk(l.c.dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		if fi.IsDir() && guestData[p] {
			return filepath.SkipDir // the guest's own disk: where the secret belongs
		}
		if !fi.Mode().IsRegular() || fi.Size() > 256<<20 {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(secret)) {
			leaks = append(leaks, p)
		}
		return nil
	})
	for _, p := range []*proc{l.c.coord, l.a.proc} {
		if strings.Contains(p.log.String(), secret) {
			leaks = append(leaks, p.name+" log")
		}
	}
	for _, args := range [][]string{{"release", "show", "hello", "r2", "--log"}, {"audit", "--json"}, {"release", "list", "hello", "--json"}} {
		if strings.Contains(l.c.mustCLI(args...), secret) {
			leaks = append(leaks, strings.Join(args, " "))
		}
	}
	if len(leaks) > 0 {
		t.Errorf("the secret is in clear in: %s", strings.Join(leaks, ", "))
	}
	// Inside the guest, the release's environment is the user's alone.
	if got := l.guestSh("stat -c '%a' /srv/projects/hello/.env/r2.json"); got != "600" {
		t.Errorf("mode of r2's environment file = %s, want 600", got)
	}
}

// TestProcessDeployCrash kills the agent during a deploy of a project
// with processes: once its new processes started, and once the routes
// already point at them. After the restart the old release serves, on
// its processes and port, and the new processes are gone.
func TestProcessDeployCrash(t *testing.T) {
	l := newDeployLab(t)
	l.commitProcSite("one")
	l.mustPush()
	l.wantPage("version one")
	args := l.a.proc.args
	for i, step := range []string{"health", "notify"} {
		l.a.kill()
		l.a.proc = startIn(t, l.a.node.ns, "agent n1 (failpoint)", []string{"CORPUS_FAILPOINTS=deploy-" + step}, args...)
		eventually(t, 20*time.Second, "git endpoint up", func() error {
			_, err := l.gitAs("alice", "ls-remote", "corpus")
			return err
		})
		l.commitProcSite(fmt.Sprintf("crash-%d", i))
		if out, err := l.push(); err == nil {
			t.Fatalf("push with the agent dying at %s succeeded:\n%s", step, out)
		}
		<-l.a.proc.done
		l.a.proc = startIn(t, l.a.node.ns, "agent n1", nil, args...)
		eventually(t, 30*time.Second, "interrupted deploy resolved", func() error {
			_, rels := l.releases()
			if len(rels) == 0 || rels[0].Number != i+2 || rels[0].Status != "failed" {
				return fmt.Errorf("releases: %+v", rels)
			}
			return nil
		})
		l.wantPage("version one")
		eventually(t, 10*time.Second, "only r1's processes", func() error {
			for _, p := range l.ps() {
				if p.Release != "r1" || p.State != "running" {
					return fmt.Errorf("after a crash at %s: %+v", step, l.ps())
				}
			}
			return nil
		})
		if w := l.proc("web"); w.Port != 81 {
			t.Errorf("after a crash at %s web is on port %d", step, w.Port)
		}
	}
	l.commitProcSite("after")
	l.mustPush()
	l.wantPage("version after")
}
