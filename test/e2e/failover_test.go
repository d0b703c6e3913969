package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// running returns the nodes whose LXC (seen from inside the node's
// namespace) runs a container named guest.
func (c *cluster) running(guest string) []string {
	var on []string
	for name, a := range c.agents {
		if st, _, err := a.lxc.info(guest); err == nil && st == "RUNNING" {
			on = append(on, name)
		}
	}
	slices.Sort(on)
	return on
}

// runsOnlyOn checks that every guest runs on node and on no other.
func (c *cluster) runsOnlyOn(node string, guests ...string) error {
	for _, g := range guests {
		if on := c.running(g); !slices.Equal(on, []string{node}) {
			return fmt.Errorf("guest %s runs on %v, want only %s", g, on, node)
		}
		if v := c.guest(g); v.NodeName != node || v.Status != "running" {
			return fmt.Errorf("guest %s is %v, want running on %s", g, v, node)
		}
	}
	return nil
}

func (c *cluster) createGuests(args []string, names ...string) {
	c.t.Helper()
	for _, n := range names {
		c.mustCLI(append([]string{"guest", "create", n, "--image", "busybox", "--memory", "32M", "--cpus", "0.05"}, args...)...)
	}
}

// killNode takes a node down as a power cut would: its agent is killed
// and its containers stopped.
func (c *cluster) killNode(a *agentProc) {
	c.t.Helper()
	a.kill()
	for _, g := range guestContainers(a.lxc) {
		if out, err := a.lxc.command("lxc-stop", "-n", g, "-k").CombinedOutput(); err != nil {
			c.t.Fatalf("lxc-stop %s on %s: %v: %s", g, a.name, err, out)
		}
	}
}

// TestNodeKilled: when a node dies, its stateless guests run on another
// node within 10 seconds (the gossip pool notices; the heartbeat deadline
// is set to a minute so it cannot be what did), each under an address of
// its new node; a guest with a volume stays, lost, until its node
// returns, and the returning node removes its stale copies.
func TestNodeKilled(t *testing.T) {
	c := newCluster(t, "--node-timeout", "1m")
	n1 := c.addAgent("n1", "--label", "zone=a")
	c.addAgent("n2", "--label", "zone=b")
	c.createGuests(nil, "web", "api")
	c.mustCLI("guest", "create", "db", "--image", "busybox", "--memory", "32M", "--cpus", "0.05", "--volume", "32M")
	if err := c.runsOnlyOn("n1", "web", "api", "db"); err != nil {
		t.Fatalf("before the failure: %v (bin-packing puts them on n1)", err)
	}
	// n2 has built its busybox image once, as a node that ran guests has.
	c.createGuests([]string{"--constraint", "zone=b"}, "warm")
	// A follow of web's log goes on across the move.
	logs := c.follow("guest", "logs", "web", "-f", "--source", "system")
	logs.waitLine(t, 15*time.Second, "activate this console")

	killed := time.Now()
	c.killNode(n1)
	eventually(t, 10*time.Second, "web and api running on n2", func() error {
		return c.runsOnlyOn("n2", "web", "api")
	})
	t.Logf("node killed -> its guests running on another node: %s", time.Since(killed).Round(100*time.Millisecond))
	var web struct {
		Guest struct {
			Address string `json:"address"`
		} `json:"guest"`
	}
	if err := c.json(&web, "guest", "show", "web"); err != nil || !strings.HasPrefix(web.Guest.Address, "10.210.1.") {
		t.Errorf("web on n2 has address %q (%v), want one of n2's subnet 10.210.1.0/24", web.Guest.Address, err)
	}
	eventually(t, 20*time.Second, "web's log followed onto n2", func() error {
		logs.mu.Lock()
		defer logs.mu.Unlock()
		n := 0
		for _, l := range logs.got {
			if strings.Contains(l, "activate this console") {
				n++
			}
		}
		if n < 2 {
			return fmt.Errorf("%d console prompts followed: %q", n, logs.got)
		}
		return nil
	})
	if v := c.guest("db"); v.Status != "lost" || v.NodeName != "n1" {
		t.Errorf("db = %s on %s, want lost on n1 (its data is there)", v.Status, v.NodeName)
	}
	if out := c.mustCLI("guest", "list"); !strings.Contains(out, "lost") {
		t.Errorf("guest list = %s, want db shown lost", out)
	}

	// n1 returns: db runs there again; web and api do not.
	c.restartAgent(n1)
	eventually(t, 30*time.Second, "db running on n1 again", func() error { return c.runsOnlyOn("n1", "db") })
	eventually(t, 20*time.Second, "n1's stale copies removed", func() error {
		if got := guestContainers(n1.lxc); !slices.Equal(got, []string{"db"}) {
			return fmt.Errorf("containers on n1 = %v, want only db", got)
		}
		return nil
	})
	if err := c.runsOnlyOn("n2", "web", "api"); err != nil {
		t.Error(err)
	}
}

// TestPartitionHeal: a node cut off from the network for longer than the
// node timeout keeps running its guests as last told (also across an
// agent restart, from its cached desired state) while the cluster runs
// its stateless guests elsewhere and marks its guest with a volume lost
// (its data is on the node); once the network is back, its stale copies
// go, the guest with the volume runs there again, no guest runs twice
// and the volume is attached on one node only (its loop devices are
// counted, not assumed).
func TestPartitionHeal(t *testing.T) {
	c := newCluster(t)
	n1 := c.addAgent("n1")
	n2 := c.addAgent("n2")
	c.createGuests(nil, "web", "api")
	c.mustCLI("guest", "create", "db", "--image", "busybox", "--memory", "32M", "--cpus", "0.05", "--volume", "32M")
	if err := c.runsOnlyOn("n1", "web", "api", "db"); err != nil {
		t.Fatalf("before the partition: %v", err)
	}
	attachedOnce := func() error {
		on := map[string]int{}
		for _, a := range []*agentProc{n1, n2} {
			on[a.name] = loopAttachments(t, filepath.Join(a.stateDir, "volumes", "images", "db.img"))
		}
		if on["n1"] != 1 || on["n2"] != 0 {
			return fmt.Errorf("volume db attached by loop devices %v times per node, want once on n1", on)
		}
		return nil
	}
	if err := attachedOnce(); err != nil {
		t.Fatalf("before the partition: %v", err)
	}

	c.lab.partition(n1.node)
	cut := time.Now()
	eventually(t, 30*time.Second, "web and api running on n2", func() error {
		for _, g := range []string{"web", "api"} {
			if v := c.guest(g); v.NodeName != "n2" || v.Status != "running" {
				return fmt.Errorf("guest %s is %v", g, v)
			}
		}
		return nil
	})
	t.Logf("node partitioned -> its guests running on another node: %s", time.Since(cut).Round(100*time.Millisecond))
	eventually(t, 30*time.Second, "db lost on n1", func() error {
		if v := c.guest("db"); v.Status != "lost" || v.NodeName != "n1" {
			return fmt.Errorf("db is %v, want lost on n1 (its data is there)", v)
		}
		return nil
	})
	// Cut off, n1 keeps its copies: it cannot know it was replaced.
	n1.kill()
	c.restartAgent(n1)
	time.Sleep(3 * time.Second)
	for _, g := range []string{"web", "api", "db"} {
		if st, _, err := n1.lxc.info(g); err != nil || st != "RUNNING" {
			t.Errorf("guest %s on the partitioned n1 = %s, %v; want RUNNING as last told", g, st, err)
		}
	}
	if err := attachedOnce(); err != nil {
		t.Errorf("during the partition: %v", err)
	}

	c.lab.heal(n1.node)
	healed := time.Now()
	eventually(t, 60*time.Second, "one copy of each guest: web and api on n2, db on n1", func() error {
		if got := guestContainers(n1.lxc); !slices.Equal(got, []string{"db"}) {
			return fmt.Errorf("containers on n1 = %v, want db alone", got)
		}
		if err := c.runsOnlyOn("n1", "db"); err != nil {
			return err
		}
		return c.runsOnlyOn("n2", "web", "api")
	})
	t.Logf("partition healed -> stale copies removed: %s", time.Since(healed).Round(100*time.Millisecond))
	eventually(t, 30*time.Second, "n1 ready again", func() error {
		if out := c.mustCLI("node", "show", "n1"); !strings.Contains(out, "ready") {
			return fmt.Errorf("node show n1: %s", out)
		}
		return nil
	})
	for range 3 { // and it stays so
		time.Sleep(2 * time.Second)
		if err := c.runsOnlyOn("n2", "web", "api"); err != nil {
			t.Fatal(err)
		}
		if err := c.runsOnlyOn("n1", "db"); err != nil {
			t.Fatal(err)
		}
		if err := attachedOnce(); err != nil {
			t.Fatal(err)
		}
	}
}

// loopAttachments counts the loop devices backed by the file img.
func loopAttachments(t *testing.T, img string) int {
	t.Helper()
	out, err := exec.Command("losetup", "--list", "--noheadings", "--output", "BACK-FILE").Output()
	if err != nil {
		t.Fatalf("losetup --list: %v", err)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(line), "(deleted)")) == img {
			n++
		}
	}
	return n
}

// TestDrain: draining a node moves every stateless guest to another node,
// each new copy running before the old one stops, so no guest is ever
// without a running copy; the node ends empty.
func TestDrain(t *testing.T) {
	c := newCluster(t)
	n1 := c.addAgent("n1")
	n2 := c.addAgent("n2")
	guests := []string{"web", "api"}
	c.createGuests(nil, guests...)
	if err := c.runsOnlyOn("n1", guests...); err != nil {
		t.Fatalf("before the drain: %v", err)
	}

	// Watch the containers through LXC during the drain.
	var (
		mu     sync.Mutex
		gaps   []string
		twice  []string
		stop   = make(chan struct{})
		wg     sync.WaitGroup
		sample = 0
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			mu.Lock()
			sample++
			for _, g := range guests {
				switch on := c.running(g); len(on) {
				case 0:
					gaps = append(gaps, fmt.Sprintf("sample %d: %s runs nowhere", sample, g))
				case 2:
					twice = append(twice, g)
				}
			}
			mu.Unlock()
		}
	}()
	out, errOut, code := c.cli("node", "mode", "n1", "drain", "--deadline", "2m")
	close(stop)
	wg.Wait()
	if code != 0 || !strings.Contains(out, "node n1 is drained") {
		t.Fatalf("node mode n1 drain = exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	for _, g := range guests {
		if !strings.Contains(errOut, g+": moved to n2") {
			t.Errorf("drain progress = %s, want %s moved to n2", errOut, g)
		}
	}
	if len(gaps) > 0 {
		t.Errorf("during the drain (%d samples): %s", sample, strings.Join(gaps, "; "))
	}
	t.Logf("drain: %d samples; a guest ran on both nodes (new copy up, old one not stopped yet) %d times", sample, len(twice))
	eventually(t, 20*time.Second, "n1 empty", func() error {
		if got := guestContainers(n1.lxc); len(got) != 0 {
			return fmt.Errorf("containers on n1 = %v", got)
		}
		return c.runsOnlyOn("n2", guests...)
	})
	if got := guestContainers(n2.lxc); !slices.Equal(got, []string{"api", "web"}) {
		t.Errorf("containers on n2 = %v, want api and web", got)
	}
	// The moved guest has its new address, on n2's network.
	var web struct {
		Guest struct {
			Address string `json:"address"`
		} `json:"guest"`
	}
	if err := c.json(&web, "guest", "show", "web"); err != nil {
		t.Fatal(err)
	}
	if out := c.mustCLI("guest", "exec", "web", "--", "ip", "-4", "addr", "show", "eth0"); !strings.HasPrefix(web.Guest.Address, "10.210.1.") ||
		!strings.Contains(out, web.Guest.Address+"/24") {
		t.Errorf("web on n2: address %s, eth0 %q; want one address of n2's subnet 10.210.1.0/24 on eth0", web.Guest.Address, out)
	}
	if out := c.mustCLI("node", "list"); !strings.Contains(out, "drain") {
		t.Errorf("node list = %s, want n1 left in drain", out)
	}
}
