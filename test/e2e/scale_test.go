package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// scaleSite is a project whose web says which guest answered.
func (l *deployLab) commitScaleSite(version, install string) {
	l.t.Helper()
	l.write("www/index.html", "version "+version+"\n", 0o644)
	l.write("Procfile", `web: hostname > www/host.txt; echo "$CORPUS_RELEASE" > www/release.txt; exec httpd -f -p "$PORT" -h www
worker: while :; do sleep 1; done
`, 0o644)
	if install != "" {
		l.write(".corpus/install.d/10-check", "#!/bin/sh\n"+install+"\n", 0o755)
	}
	l.git("add", "-A")
	l.git("commit", "-q", "-m", "scale site "+version)
}

// onlyRelease waits until every process of every instance (corpus ps)
// is of release rel.
func (l *deployLab) onlyRelease(rel string, within time.Duration, what string) {
	l.t.Helper()
	eventually(l.t, within, what, func() error {
		for _, p := range l.ps() {
			if p.Release != rel {
				return fmt.Errorf("still running: %+v", p)
			}
		}
		return nil
	})
}

type instanceView struct {
	Index      uint32   `json:"index"`
	GuestName  string   `json:"guest_name"`
	NodeName   string   `json:"node_name"`
	Release    uint32   `json:"release"`
	Error      string   `json:"error"`
	Processes  []string `json:"processes"`
	GuestState string   `json:"guest_status"`
}

func (l *deployLab) instances() []instanceView {
	l.t.Helper()
	var res struct {
		Project struct {
			Envs []struct {
				Instances []instanceView `json:"instances"`
			} `json:"envs"`
		} `json:"project"`
	}
	if err := l.c.json(&res, "project", "show", "hello"); err != nil {
		l.t.Fatal(err)
	}
	return res.Project.Envs[0].Instances
}

// waitInstances waits until n instances serve release rel.
func (l *deployLab) waitInstances(n int, rel uint32, within time.Duration) []instanceView {
	l.t.Helper()
	var ins []instanceView
	eventually(l.t, within, fmt.Sprintf("%d instances serving r%d", n, rel), func() error {
		ins = l.instances()
		if len(ins) != n {
			return fmt.Errorf("%d instances: %+v", len(ins), ins)
		}
		for _, in := range ins[1:] {
			if in.Release != rel || in.Error != "" {
				return fmt.Errorf("instance %d: %+v", in.Index, in)
			}
		}
		return nil
	})
	return ins
}

// hosts asks the site n times which guest answers, counting non-200s.
func (l *deployLab) hosts(n int) (map[string]int, int) {
	count, bad := map[string]int{}, 0
	for range n {
		code, body, err := get(l.hc, "http://"+l.nodeAddr+"/host.txt", deployDomain)
		if err != nil || code != 200 {
			bad++
			continue
		}
		count[strings.TrimSpace(body)]++
	}
	return count, bad
}

// TestScale: a project scaled to three instances over two nodes (one
// guest on the other node), balanced by the proxy; an instance's guest
// killed by hand is out of rotation without an error and back once the
// agent repairs it; a push rolls through the instances under load with
// no answer but 200; a push one instance refuses is rolled back on all;
// scaling down leaves the first instance alone.
func TestScale(t *testing.T) {
	l := newDeployLab(t)
	c := l.c
	c.addAgent("n2")
	c.lab.routeGuestSubnets(c)
	l.commitScaleSite("one", "")
	l.mustPush()
	l.wantPage("version one")

	if _, stderr, code := c.cli("scale", "hello", "web=3"); code == 0 || !strings.Contains(stderr, "--shared-nothing") {
		t.Fatalf("scaling a project with a data volume: exit %d: %s", code, stderr)
	}
	start := time.Now()
	out := c.mustCLI("scale", "hello", "web=3", "--shared-nothing")
	if !strings.Contains(out, "hello-dev-3") {
		t.Errorf("scale output:\n%s", out)
	}
	ins := l.waitInstances(3, 1, 3*time.Minute)
	t.Logf("scale 1->3: all serving r1 after %s", time.Since(start).Round(100*time.Millisecond))
	nodes := map[string]bool{}
	for _, in := range ins {
		nodes[in.NodeName] = true
	}
	if !nodes["n2"] || !nodes["n1"] {
		t.Errorf("instances not spread over both nodes: %+v", ins)
	}
	if strings.Join(ins[0].Processes, ",") != "web,worker" || strings.Join(ins[1].Processes, ",") != "web" {
		t.Errorf("processes per instance: %+v", ins)
	}
	var count map[string]int
	eventually(t, 20*time.Second, "traffic over the three instances", func() error {
		var bad int
		count, bad = l.hosts(60)
		if len(count) != 3 || bad > 0 {
			return fmt.Errorf("answers by guest %v, %d failed", count, bad)
		}
		return nil
	})
	for h, n := range count {
		if n < 10 {
			t.Errorf("guest %s answered %d of 60 (round robin over three)", h, n)
		}
	}
	t.Logf("answers by guest: %v", count)

	// ps and restart reach every instance.
	webPids := func() map[string]int {
		pids := map[string]int{}
		for _, p := range l.ps() {
			if p.Name == "web" && p.State == "running" {
				pids[p.Guest] = p.Pid
			}
		}
		return pids
	}
	pids := webPids()
	if len(pids) != 3 || pids["hello-dev-3"] == 0 {
		t.Errorf("web processes listed: %v (%+v)", pids, l.ps())
	}
	restartLoad := l.startLoad(4)
	out = c.mustCLI("restart", "hello")
	restartLoad.end(t, "a restart of every instance")
	if !containsAll(out, "on hello-dev-2", "on hello-dev-3") {
		t.Errorf("restart output:\n%s", out)
	}
	for guest, pid := range webPids() {
		if pid == pids[guest] {
			t.Errorf("web of %s not restarted (pid %d)", guest, pid)
		}
	}

	// Kill instance 2's guest by hand: out of rotation, no error seen,
	// then repaired and back.
	var victim instanceView
	for _, in := range ins {
		if in.Index == 2 {
			victim = in
		}
	}
	host := c.agents[victim.NodeName].lxc
	ld := l.startLoad(4)
	if out, err := host.command("lxc-stop", "-n", victim.GuestName, "-k").CombinedOutput(); err != nil {
		t.Fatalf("lxc-stop: %v: %s", err, out)
	}
	killed := time.Now()
	eventually(t, 10*time.Second, "the killed instance out of rotation", func() error {
		count, _ := l.hosts(12)
		if count[victim.GuestName] > 0 {
			return fmt.Errorf("still answering: %v", count)
		}
		return nil
	})
	t.Logf("instance %s out of rotation within %s of the kill", victim.GuestName, time.Since(killed).Round(100*time.Millisecond))
	eventually(t, 2*time.Minute, "the killed instance repaired and back", func() error {
		count, _ := l.hosts(30)
		if count[victim.GuestName] == 0 {
			return fmt.Errorf("not answering yet: %v", count)
		}
		return nil
	})
	t.Logf("instance %s back in rotation %s after the kill", victim.GuestName, time.Since(killed).Round(100*time.Millisecond))
	ld.end(t, "an instance killed")

	// A rolling deploy under load.
	l.commitScaleSite("two", "")
	ld = l.startLoad(4)
	start = time.Now()
	out = l.mustPush()
	took := time.Since(start)
	ld.end(t, "rolling push")
	for _, want := range []string{"-----> roll", "instance 2 (hello-dev-2 on", "instance 3 (hello-dev-3 on", "staged r2", "r2 is live"} {
		if !strings.Contains(out, want) {
			t.Errorf("push output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("rolling deploy of 3 instances: %s", took.Round(100*time.Millisecond))
	l.waitInstances(3, 2, 30*time.Second)
	for range 9 {
		if got := l.page(); got != "200 version two" {
			t.Fatalf("after the rolling push: %q", got)
		}
	}

	// A release instance 3 cannot install, pushed at once: r1's
	// processes are still settling (each instance's r1 stops once other
	// proxies had time to hear of the move; the push did not wait for
	// that, nor does this one). The push is refused, every instance
	// serves r2 again, and r1 still stops.
	l.commitScaleSite("three", `[ "$(hostname)" != hello-dev-3 ] || { echo "no room on this one"; exit 1; }`)
	out, err := l.push()
	if err == nil || !strings.Contains(out, "no room on this one") && !strings.Contains(out, "instance 3") {
		t.Fatalf("a push instance 3 refuses: %v\n%s", err, out)
	}
	// Instances stage a rolling deploy's release while the first builds
	// it: instance 3's failure comes before any instance switched.
	if !containsAll(out, "instance 2 still serves r2", "instance 3 still serves r2") {
		t.Errorf("push output does not say the instances still serve r2:\n%s", out)
	}
	l.waitInstances(3, 2, 30*time.Second)
	for range 9 {
		if got := l.page(); got != "200 version two" {
			t.Fatalf("after the refused push: %q", got)
		}
	}
	l.onlyRelease("r2", 20*time.Second, "r1's and r3's processes stopped on every instance")

	// A release the first instance cannot install, while the others
	// stage it: nothing switched, the push is refused, and what the
	// others staged stops.
	l.commitScaleSite("four", `[ "$(hostname)" != hello-dev ] || { echo "no room on the first"; exit 1; }`)
	out, err = l.push()
	if err == nil || !strings.Contains(out, "no room on the first") {
		t.Fatalf("a push the first instance refuses: %v\n%s", err, out)
	}
	if !containsAll(out, "instance 2 still serves r2", "instance 3 still serves r2", "Push rejected: hello/dev still serves r2") {
		t.Errorf("push output does not say the instances still serve r2:\n%s", out)
	}
	l.onlyRelease("r2", 30*time.Second, "the staged r4 stopped on every instance")
	for range 9 {
		if got := l.page(); got != "200 version two" {
			t.Fatalf("after the push the first refused: %q", got)
		}
	}

	// Blue-green under load: every instance starts r5 beside r2, then
	// every answer is r5 at once; switch back: every answer r2 at once.
	releases := func(n int) map[string]int {
		count := map[string]int{}
		for range n {
			code, body, err := get(l.hc, "http://"+l.nodeAddr+"/release.txt", deployDomain)
			if err != nil || code != 200 {
				count[fmt.Sprintf("error %d %v", code, err)]++
				continue
			}
			count[strings.TrimSpace(body)]++
		}
		return count
	}
	if got := releases(9); got["r2"] != 9 {
		t.Fatalf("before blue-green: %v", got)
	}
	ld = l.startLoad(4)
	start = time.Now()
	out = c.mustCLI("deploy", "hello", "--strategy", "blue-green", "--keep", "20s")
	t.Logf("blue-green deploy of 3 instances: %s", time.Since(start).Round(100*time.Millisecond))
	for _, want := range []string{"-----> stage", "instance 2 (hello-dev-2 on", "staged r5", "every domain -> r5; r2 stands by", "r5 is live"} {
		if !strings.Contains(out, want) {
			t.Errorf("blue-green output lacks %q:\n%s", want, out)
		}
	}
	if got := releases(30); got["r5"] != 30 {
		t.Errorf("after the blue-green switch: %v", got)
	}
	start = time.Now()
	c.mustCLI("switch", "back", "hello")
	eventually(t, 5*time.Second, "every answer from r2 again", func() error {
		if got := releases(12); got["r2"] != 12 {
			return fmt.Errorf("answers %v", got)
		}
		return nil
	})
	t.Logf("switch back: every answer from r2 %s after the command", time.Since(start).Round(10*time.Millisecond))
	ld.end(t, "blue-green deploy and switch back")
	// The standby expires: its processes stop, and switching is refused.
	time.Sleep(21 * time.Second)
	if _, stderr, code := c.cli("switch", "back", "hello"); code == 0 || !strings.Contains(stderr, "expired") {
		t.Errorf("switch back after --keep: exit %d: %s", code, stderr)
	}
	eventually(t, 20*time.Second, "the standby's processes stopped", func() error {
		for _, p := range l.ps() {
			if p.Release == "r5" {
				return fmt.Errorf("still running: %+v", p)
			}
		}
		return nil
	})
	if got := releases(9); got["r2"] != 9 {
		t.Errorf("after the standby expired: %v", got)
	}

	// A push whose corpus.yaml asks for blue-green goes live so too.
	l.write(".corpus/corpus.yaml", "deploy: {strategy: blue-green, keep: 10m}\n", 0o644)
	os.Remove(filepath.Join(l.work, ".corpus/install.d/10-check"))
	l.commitScaleSite("five", "")
	ld = l.startLoad(4)
	out = l.mustPush()
	ld.end(t, "a blue-green push")
	if !containsAll(out, "-----> stage", "staged r", "stands by") {
		t.Errorf("blue-green push output:\n%s", out)
	}
	if got := l.page(); got != "200 version five" {
		t.Errorf("after the blue-green push: %q", got)
	}

	// Down to one: the others go, the first serves alone.
	c.mustCLI("scale", "hello", "web=1")
	eventually(t, time.Minute, "one instance left", func() error {
		count, bad := l.hosts(10)
		if len(count) != 1 || count["hello-dev"] != 10 || bad > 0 {
			return fmt.Errorf("answers %v, %d failed", count, bad)
		}
		if len(c.running("hello-dev-2")) > 0 || len(c.running("hello-dev-3")) > 0 {
			return fmt.Errorf("instances still running: %v %v", c.running("hello-dev-2"), c.running("hello-dev-3"))
		}
		return nil
	})
	var left []string
	for _, in := range l.instances() {
		left = append(left, in.GuestName)
	}
	sort.Strings(left)
	if strings.Join(left, ",") != "hello-dev" {
		t.Errorf("instances after scaling down: %v", left)
	}
}

// pacedLoad asks the site rps times a second until stopped.
type pacedLoad struct {
	stop chan struct{}
	wg   sync.WaitGroup
	bad  atomic.Int64
	all  atomic.Int64
}

func (l *deployLab) pace(rps int) *pacedLoad {
	pl := &pacedLoad{stop: make(chan struct{})}
	pl.wg.Add(1)
	go func() {
		defer pl.wg.Done()
		t := time.NewTicker(time.Second / time.Duration(rps))
		defer t.Stop()
		for {
			select {
			case <-pl.stop:
				return
			case <-t.C:
			}
			pl.wg.Add(1)
			go func() {
				defer pl.wg.Done()
				code, _, err := get(l.hc, "http://"+l.nodeAddr+"/", deployDomain)
				pl.all.Add(1)
				if err != nil || code != 200 {
					pl.bad.Add(1)
				}
			}()
		}
	}()
	return pl
}

func (pl *pacedLoad) end() (all, bad int64) {
	close(pl.stop)
	pl.wg.Wait()
	return pl.all.Load(), pl.bad.Load()
}

// autoscaleEntries are the autoscaler's scale decisions so far.
func (l *deployLab) autoscaleEntries() []string {
	l.t.Helper()
	var res struct {
		Entries []struct {
			Actor  string `json:"actor"`
			Target string `json:"target"`
		} `json:"entries"`
	}
	if err := l.c.json(&res, "audit", "--action", "scale_env"); err != nil {
		l.t.Fatal(err)
	}
	var out []string
	for _, e := range res.Entries {
		if e.Actor == "autoscaler" {
			out = append(out, e.Target)
		}
	}
	return out
}

// TestAutoscale: web scaled by request rate: up to the max under a load
// step, held under a steady load (no flapping), down to the min once the
// load ends and the window passed; every decision in the audit log with
// its reason.
func TestAutoscale(t *testing.T) {
	l := newDeployLabCoord(t, []string{"--autoscale-interval", "1s"}, []string{"--image", "busybox", "--memory", "64M", "--cpus", "0.2"})
	c := l.c
	l.commitScaleSite("one", "")
	l.mustPush()
	l.wantPage("version one")
	c.mustCLI("scale", "hello", "web=1", "--shared-nothing")
	out := c.mustCLI("autoscale", "hello", "web", "--min", "1", "--max", "3", "--target-rps", "15", "--scale-down-window", "8s")
	if !strings.Contains(out, "1 to 3 instances at 15 requests/s") {
		t.Errorf("autoscale output: %s", out)
	}
	// Steady: 10 requests a second is within one instance's target.
	pl := l.pace(10)
	time.Sleep(6 * time.Second)
	if got := l.autoscaleEntries(); len(got) != 0 {
		t.Errorf("decisions under a load one instance carries: %v", got)
	}
	pl.end()

	// A step to 40 requests a second: three instances.
	step := time.Now()
	pl = l.pace(40)
	l.waitInstances(3, 1, 2*time.Minute)
	t.Logf("autoscaler reaction to a load step (10 -> 40 req/s, target 15 per instance): 3 instances serving %s after the step", time.Since(step).Round(100*time.Millisecond))
	settled := len(l.autoscaleEntries())
	time.Sleep(12 * time.Second) // beyond the window: the steady 40 holds 3
	if got := l.autoscaleEntries(); len(got) != settled {
		t.Errorf("flapping under a steady load: %v", got[settled:])
	}
	all, bad := pl.end()
	t.Logf("under the step: %d requests, %d not 200", all, bad)
	if bad > 0 {
		t.Errorf("%d of %d requests failed while scaling out", bad, all)
	}

	// The load ends: down to the min after the window.
	ended := time.Now()
	eventually(t, time.Minute, "scaled down to one", func() error {
		if ins := l.instances(); len(ins) != 1 {
			return fmt.Errorf("%d instances", len(ins))
		}
		return nil
	})
	t.Logf("scaled down to 1 instance %s after the load ended (window 8s)", time.Since(ended).Round(100*time.Millisecond))
	got := l.autoscaleEntries()
	if len(got) < 2 || !strings.Contains(strings.Join(got, "\n"), "rps") {
		t.Errorf("audit of the autoscaler: %v", got)
	}
	for _, e := range got {
		t.Logf("audit: %s", e)
	}
	show := c.mustCLI("autoscale", "hello", "web")
	if !strings.Contains(show, "last decision") {
		t.Errorf("autoscale show:\n%s", show)
	}

	// By CPU: a busy loop in the guest (0.2 cpus) is 100% of its
	// allowance, twice the target: a second instance; once it ends,
	// back to one.
	c.mustCLI("autoscale", "hello", "web", "--min", "1", "--max", "2", "--target-cpu", "50%", "--scale-down-window", "6s")
	busy := make(chan struct{})
	go func() {
		defer close(busy)
		c.cli("guest", "exec", "hello-dev", "--", "timeout", "15", "sh", "-c", "while :; do :; done")
	}()
	step = time.Now()
	eventually(t, time.Minute, "a second instance for the CPU load", func() error {
		if ins := l.instances(); len(ins) != 2 {
			return fmt.Errorf("%d instances", len(ins))
		}
		return nil
	})
	t.Logf("autoscaler by CPU: a second instance %s after the busy loop started", time.Since(step).Round(100*time.Millisecond))
	<-busy
	eventually(t, time.Minute, "back to one instance after the CPU load", func() error {
		if ins := l.instances(); len(ins) != 1 {
			return fmt.Errorf("%d instances", len(ins))
		}
		return nil
	})
	if got := strings.Join(l.autoscaleEntries(), "\n"); !strings.Contains(got, "cpu% ") {
		t.Errorf("no CPU decision in the audit log:\n%s", got)
	}
}
