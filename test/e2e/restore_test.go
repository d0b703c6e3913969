package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestDisasterRecovery: a group of three replicas with a node, guests, a
// project and traffic through the node's proxy saves a snapshot; a guest
// is created after it; then every replica is killed and its data folder
// deleted. A new replica restores the snapshot onto a fresh folder at
// another address, the agent is pointed at it (restarted with the new
// address, without enrolling again), and every object is back, DNS
// answers, no guest restarted, no proxied request failed during the
// whole outage, and the guest the snapshot predates is kept running, not
// destroyed. A second replica joins the restored one as any replica
// joins a group.
func TestDisasterRecovery(t *testing.T) {
	lab := newNetLab(t)
	g := newCoordGroupIn(t, lab, lab.lan)
	c := &cluster{t: t, lab: lab, dir: g.dir, api: g.api["c1"], token: g.token, ca: g.ca, cfgHome: filepath.Join(g.dir, "cfg"), agents: map[string]*agentProc{}}
	a := c.addAgent("n1", "--coordinator", lab.lan+":7400")
	client, nodeAddr := lab.addClient(a.node)
	a.kill()
	a.proc = c.startAgent(a, "--coordinator", lab.lan+":7400", "--address", nodeAddr)
	c.waitNodeReady("n1")

	c.mustCLI("project", "create", "site", "--env", "dev", "--image", "busybox", "--memory", "32M", "--cpus", "0.1")
	_, stopLoad := webUnderLoad(t, c, client, nodeAddr)
	defer stopLoad()
	keyFile := snapshotKey(t, g.dir)
	snap := filepath.Join(g.dir, "cluster.snap")
	var header struct {
		ClusterID string            `json:"cluster_id"`
		RaftIndex string            `json:"raft_index"`
		Counts    map[string]string `json:"counts"`
	}
	if err := c.json(&header, "operator", "snapshot", "save", snap, "--key-file", keyFile); err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot of cluster %s at index %s: %v", header.ClusterID, header.RaftIndex, header.Counts)
	if out := c.mustCLI("operator", "snapshot", "inspect", snap); !strings.Contains(out, header.ClusterID) || !strings.Contains(out, "(checked)") {
		t.Errorf("snapshot inspect =\n%s", out)
	}

	// After the snapshot: a guest it will not know.
	c.mustCLI("guest", "create", "late", "--image", "busybox", "--memory", "32M", "--cpus", "0.05")
	pids := map[string]int{}
	eventually(t, 30*time.Second, "every guest running", func() error {
		for _, name := range []string{"web", "site-dev", "late"} {
			st, pid, err := a.lxc.info(name)
			if err != nil || st != "RUNNING" || pid == 0 {
				return fmt.Errorf("%s: %s %d %v", name, st, pid, err)
			}
			pids[name] = pid
		}
		return nil
	})

	// The whole control plane is lost.
	outage := time.Now()
	for _, id := range g.ids {
		g.procs[id].kill()
		if err := os.RemoveAll(filepath.Join(g.dir, id)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "the agent noticed", func() error {
		if !strings.Contains(a.log.String(), "watch stream ended") {
			return errors.New("no watch failure logged yet")
		}
		return nil
	})

	// A new host: another address on ctl, other ports, a fresh folder.
	newHost := strings.TrimSuffix(lab.lan, ".1") + ".2"
	lab.ip("-n", lab.ctl, "addr", "add", newHost+"/32", "dev", "lo")
	restored := filepath.Join(g.dir, "restored")
	startIn(t, g.ns, "coordinator r1", nil, "coordinator", "--id", "r1", "--data-dir", restored,
		"--restore", snap, "--restore-key-file", keyFile,
		"--api-addr", "0.0.0.0:7450", "--advertise-addr", newHost+":7450", "--raft-addr", "127.0.0.1:7451",
		"--dns-addr", "127.0.0.1:8650", "--gossip-addr", newHost+":7453", "--metrics-addr", "127.0.0.1:9494",
		"--node-timeout", "4s")
	c.api = "127.0.0.1:7450"
	eventually(t, 30*time.Second, "the restored group serving", func() error {
		if id := c.clusterID(); id != header.ClusterID {
			return fmt.Errorf("cluster id %q, want %s", id, header.ClusterID)
		}
		return nil
	})
	served := time.Since(outage)
	// The agent is told the new address; it keeps its identity.
	a.kill()
	a.proc = c.startAgent(a, "--coordinator", newHost+":7450", "--address", nodeAddr)
	c.waitNodeReady("n1")
	t.Logf("control plane away for %s; the restored replica served %s after the outage began", time.Since(outage).Round(time.Millisecond), served.Round(time.Millisecond))

	for _, name := range []string{"web", "site-dev"} {
		if v := c.guest(name); v.Guest.ID == "" || v.NodeName != "n1" {
			t.Errorf("guest %s not back: %+v", name, v)
		}
	}
	if out := c.mustCLI("project", "list"); !strings.Contains(out, "site") {
		t.Errorf("project list after the restore =\n%s", out)
	}
	if out := c.mustCLI("ingress", "list"); !strings.Contains(out, "web.example.test") {
		t.Errorf("ingress list after the restore =\n%s", out)
	}
	eventually(t, 20*time.Second, "DNS answering for web", func() error {
		out, err := exec.Command("nsenter", "--net=/run/netns/"+lab.ctl, "dig", "@127.0.0.1", "-p", "8650", "+short", "web.guest.corpus.test", "A").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) == "" {
			return fmt.Errorf("dig = %q, %v", out, err)
		}
		return nil
	})
	// Another replica joins the restored one as usual, with the CA the
	// restore wrote into its data folder, and answers from the same state.
	tlsDir := filepath.Join(restored, "tls")
	startIn(t, g.ns, "coordinator r2", nil, "coordinator", "--id", "r2", "--bootstrap=false", "--data-dir", filepath.Join(g.dir, "restored2"),
		"--cluster-ca", filepath.Join(tlsDir, "ca.crt"), "--cluster-ca-key", filepath.Join(tlsDir, "ca.key"),
		"--api-addr", "127.0.0.1:7460", "--raft-addr", "127.0.0.1:7461", "--dns-addr", "127.0.0.1:8660",
		"--gossip-addr", newHost+":7463", "--metrics-addr", "127.0.0.1:9504", "--node-timeout", "4s")
	eventually(t, 30*time.Second, "r2 added to the restored group", func() error {
		_, errOut, code := c.cli("operator", "raft", "add-peer", "--id", "r2", "--raft-address", "127.0.0.1:7461", "--api-address", "127.0.0.1:7460")
		if code != 0 {
			return errors.New(errOut)
		}
		return nil
	})
	eventually(t, 30*time.Second, "r2's DNS answering for web", func() error {
		out, err := exec.Command("nsenter", "--net=/run/netns/"+lab.ctl, "dig", "@127.0.0.1", "-p", "8660", "+short", "web.guest.corpus.test", "A").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) == "" {
			return fmt.Errorf("dig = %q, %v", out, err)
		}
		return nil
	})
	// Writes work; the guest created after the snapshot is reported and
	// kept, not destroyed.
	c.mustCLI("guest", "create", "after", "--image", "busybox", "--memory", "32M", "--cpus", "0.05")
	eventually(t, 30*time.Second, "a guest created after the restore running", func() error {
		if st, _, err := a.lxc.info("after"); err != nil || st != "RUNNING" {
			return fmt.Errorf("after: %s %v", st, err)
		}
		return nil
	})
	if !strings.Contains(a.log.String(), "guest unknown to the cluster") {
		t.Error("the agent did not log the guest the snapshot predates")
	}
	waitOrphan(t, c, "n1", "late")
	time.Sleep(5 * time.Second) // several reconcile passes (--resync-interval 2s)
	for name, pid := range pids {
		if st, p, err := a.lxc.info(name); err != nil || st != "RUNNING" || p != pid {
			t.Errorf("guest %s after the restore = %s pid %d, %v; want RUNNING pid %d (not restarted, not destroyed)", name, st, p, err, pid)
		}
	}
	ok, failed := stopLoad()
	t.Logf("proxied requests during the outage and restore: %d ok, %d failed", ok, len(failed))
	if len(failed) > 0 {
		t.Errorf("%d proxied requests failed, first: %s", len(failed), failed[0])
	}
}

// TestLiveRestoreWithAgent: a snapshot restored into the running cluster
// (operator snapshot restore) while a node serves guests and proxied
// traffic: the agent goes on without enrolling again, the guests of the
// snapshot keep running without a restart, a guest created after the
// snapshot is kept running and listed as an orphan (not destroyed), a
// route added after the snapshot is gone and its traffic ends, the
// snapshot's routes serve throughout (no failed request), and writes
// work after.
func TestLiveRestoreWithAgent(t *testing.T) {
	c := newCluster(t)
	a := c.addAgent("n1")
	client, nodeAddr := c.lab.addClient(a.node)
	a.kill()
	a.proc = c.startAgent(a, "--address", nodeAddr)
	c.waitAgentBack(a)
	hc, stopLoad := webUnderLoad(t, c, client, nodeAddr)
	defer stopLoad()
	keyFile := snapshotKey(t, c.dir)
	snap := filepath.Join(c.dir, "cluster.snap")
	c.mustCLI("operator", "snapshot", "save", snap, "--key-file", keyFile)

	// After the snapshot: a guest, and a route to it, it does not know.
	c.mustCLI("guest", "create", "late", "--image", "busybox", "--memory", "32M", "--cpus", "0.05")
	serveHTTP(t, c, "late", "late")
	c.mustCLI("guest", "expose", "late", "--proxy", "--domain", "late.example.test", "--port", "80")
	eventually(t, 20*time.Second, "proxy to late", wantBody(hc, "http://"+nodeAddr+"/", "late.example.test", "late"))
	pids := map[string]int{}
	for _, name := range []string{"web", "late"} {
		st, pid, err := a.lxc.info(name)
		if err != nil || st != "RUNNING" || pid == 0 {
			t.Fatalf("%s before the restore: %s %d %v", name, st, pid, err)
		}
		pids[name] = pid
	}

	var res struct {
		RaftIndex string `json:"raft_index"`
		Objects   string `json:"objects"`
	}
	enrolled := strings.Count(a.log.String(), "msg=enrolled")
	began := time.Now()
	if err := c.json(&res, "operator", "snapshot", "restore", snap, "--key-file", keyFile, "--yes"); err != nil {
		t.Fatal(err)
	}
	t.Logf("restored %s objects at index %s in %s", res.Objects, res.RaftIndex, time.Since(began).Round(time.Millisecond))

	if _, _, code := c.cli("guest", "show", "late"); code == 0 {
		t.Error("guest late, created after the snapshot, is still a guest of the cluster after the restore")
	}
	waitOrphan(t, c, "n1", "late")
	eventually(t, 20*time.Second, "the route added after the snapshot gone from the node", func() error {
		code, _, err := get(hc, "http://"+nodeAddr+"/", "late.example.test")
		if err != nil || code != 404 {
			return fmt.Errorf("late.example.test = %d, %v; want 404", code, err)
		}
		return nil
	})
	// Writes work, and the node takes them without enrolling again.
	c.mustCLI("guest", "create", "after", "--image", "busybox", "--memory", "32M", "--cpus", "0.05")
	eventually(t, 30*time.Second, "a guest created after the restore running", func() error {
		if st, _, err := a.lxc.info("after"); err != nil || st != "RUNNING" {
			return fmt.Errorf("after: %s %v", st, err)
		}
		return nil
	})
	time.Sleep(5 * time.Second) // several reconcile passes (--resync-interval 2s)
	for name, pid := range pids {
		if st, p, err := a.lxc.info(name); err != nil || st != "RUNNING" || p != pid {
			t.Errorf("guest %s after the restore = %s pid %d, %v; want RUNNING pid %d (not restarted, not destroyed)", name, st, p, err, pid)
		}
	}
	if strings.Count(a.log.String(), "msg=enrolled") != enrolled {
		t.Error("the agent enrolled again after the restore")
	}
	ok, failed := stopLoad()
	t.Logf("proxied requests to web during the restore: %d ok, %d failed", ok, len(failed))
	if len(failed) > 0 {
		t.Errorf("%d proxied requests failed, first: %s", len(failed), failed[0])
	}
}

// webUnderLoad makes guest web serve "one" through the node's proxy at
// web.example.test and sends it requests from client until stop, which
// says how many answered and which failed (and may be called again).
func webUnderLoad(t *testing.T, c *cluster, client, nodeAddr string) (hc *http.Client, stop func() (int, []string)) {
	t.Helper()
	c.mustCLI("guest", "create", "web", "--image", "busybox", "--memory", "64M", "--cpus", "0.2")
	serveHTTP(t, c, "web", "one")
	c.mustCLI("guest", "expose", "web", "--proxy", "--domain", "web.example.test", "--port", "80")
	hc = httpIn(client)
	eventually(t, 20*time.Second, "proxy to web", wantBody(hc, "http://"+nodeAddr+"/", "web.example.test", "one"))
	load := proxyLoad(client, "http://"+nodeAddr+"/", "web.example.test")
	var once sync.Once
	var ok int
	var failed []string
	return hc, func() (int, []string) {
		once.Do(func() { ok, failed = load.stop() })
		return ok, failed
	}
}

// snapshotKey writes a snapshot key file in dir and returns its path.
func snapshotKey(t *testing.T, dir string) string {
	t.Helper()
	keyFile := filepath.Join(dir, "snapshot.key")
	if err := os.WriteFile(keyFile, []byte("a passphrase kept away from the snapshots\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return keyFile
}

// waitOrphan waits until guest list --orphans lists name, alone, on node.
func waitOrphan(t *testing.T, c *cluster, node, name string) {
	t.Helper()
	eventually(t, 30*time.Second, name+" listed as an orphan of "+node, func() error {
		var got struct {
			Orphans []struct{ Node, Name string } `json:"orphans"`
		}
		if err := c.json(&got, "guest", "list", "--orphans"); err != nil {
			return err
		}
		if len(got.Orphans) != 1 || got.Orphans[0].Node != node || got.Orphans[0].Name != name {
			return fmt.Errorf("guest list --orphans: %+v", got.Orphans)
		}
		return nil
	})
}
