package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator/compat"
	"corpus/internal/rpc"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// stoppedMark marks a write refused because the replica it was sent to
// was stopped meanwhile.
const stoppedMark = "(its replica was being stopped)"

// upgradeFigures are what TestRollingUpgrade measured, logged as one
// line test/bench/upgrade/run picks up.
type upgradeFigures struct {
	duration       time.Duration
	requests       int64
	failedRequests int64
	writes         int64
	refusedWrites  int64
}

// TestRollingUpgrade: a group of three coordinators and two agents (each
// in its own namespace) on the previous release (the last one in
// packaging/releases, built from the repository's history), with a guest
// on each served through its node's proxy under steady HTTP traffic, a
// project, and a stream of writes. Each coordinator in turn, followers first, then the
// leader, is stopped, its binary replaced by this tree's, and started;
// then the agents. No proxied request fails, the guests' inits keep their
// PIDs (nothing restarted them), writes are refused only while a leader is
// elected or by the replica being stopped (each refusal is logged), and the cluster version is this
// binary's server version once every replica runs it. A replica
// downgraded to the previous release before the cluster version moved
// past it rejoins; after, it refuses to start.
//
// While the previous release has this tree's server version (this tree
// is that release, or a patch past it), the cluster version does not
// move and the refusal cannot happen: the test says so in its log.
func TestRollingUpgrade(t *testing.T) {
	requireE2E(t)
	prev := previousRelease(t)
	started := time.Now()
	lab := newNetLab(t)
	ctlSide := fmt.Sprintf("10.%d.1.1", lab.k)
	g := newCoordGroupBin(t, lab, ctlSide, prev.bin)
	c := &cluster{t: t, lab: lab, dir: g.dir, api: g.api["c1"], token: g.token, ca: g.ca, cfgHome: g.dir + "/cfg", agents: map[string]*agentProc{}, bin: prev.bin}
	a := c.addAgent("n1")
	client, nodeAddr := lab.addClient(a.node)
	c.mustCLI("guest", "create", "web", "--image", "busybox", "--memory", "64M", "--cpus", "0.2")
	serveHTTP(t, c, "web", "one")
	c.mustCLI("guest", "expose", "web", "--proxy", "--domain", "web.example.test", "--port", "80")
	hc := httpIn(client)
	eventually(t, 20*time.Second, "the proxy to web", wantBody(hc, "http://"+nodeAddr+"/", "web.example.test", "one"))
	_, initPID, err := a.lxc.info("web")
	if err != nil || initPID == 0 {
		t.Fatalf("web's init: pid %d, %v", initPID, err)
	}
	// A second node with a guest behind its own proxy, and a project.
	b := c.addAgent("n2", "--label", "zone=b")
	client2, nodeAddr2 := lab.addClient(b.node)
	c.mustCLI("guest", "create", "web2", "--image", "busybox", "--memory", "64M", "--cpus", "0.2", "--constraint", "zone=b")
	serveHTTP(t, c, "web2", "two")
	c.mustCLI("guest", "expose", "web2", "--proxy", "--domain", "web2.example.test", "--port", "80")
	hc2 := httpIn(client2)
	eventually(t, 20*time.Second, "the proxy to web2", wantBody(hc2, "http://"+nodeAddr2+"/", "web2.example.test", "two"))
	c.mustCLI("project", "create", "site", "--env", "dev", "--image", "busybox")
	pidOn := func(guest string) (*agentProc, int) {
		t.Helper()
		eventually(t, 60*time.Second, guest+" running", func() error {
			var v struct {
				Status string `json:"status"`
			}
			if err := c.json(&v, "guest", "show", guest); err != nil {
				return err
			}
			if v.Status != "running" {
				return fmt.Errorf("%s is %s", guest, v.Status)
			}
			return nil
		})
		for _, on := range []*agentProc{a, b} {
			if _, pid, err := on.lxc.info(guest); err == nil && pid != 0 {
				return on, pid
			}
		}
		t.Fatalf("%s's init is on neither node", guest)
		return nil, 0
	}
	_, web2PID := pidOn("web2")
	siteOn, sitePID := pidOn("site-dev")
	prevServer := g.serverVersion(t, "c1", "c1")
	t.Logf("previous release %s (%s), server version %s; this tree's server version %s", prev.version, prev.commit[:7], prevServer, compat.Current)

	// Traffic through the proxy and writes through the replicas that
	// are up, until the upgrade is done.
	var fig upgradeFigures
	var failures, refusals []string
	var mu sync.Mutex
	var down atomic.Value // the id of the replica being swapped
	down.Store("")
	// swaps counts each replica's swaps begun: a write in flight when
	// its replica's began was cut by that stop, however late its error
	// comes back (the replica may be up again by then).
	swaps := map[string]*atomic.Int64{}
	for _, id := range g.ids {
		swaps[id] = new(atomic.Int64)
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(3)
	for _, check := range []func() error{
		wantBody(hc, "http://"+nodeAddr+"/", "web.example.test", "one"),
		wantBody(hc2, "http://"+nodeAddr2+"/", "web2.example.test", "two"),
	} {
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				err := check()
				atomic.AddInt64(&fig.requests, 1)
				if err != nil {
					atomic.AddInt64(&fig.failedRequests, 1)
					mu.Lock()
					failures = append(failures, time.Now().Format("15:04:05.000")+" "+err.Error())
					mu.Unlock()
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			id := g.ids[i%len(g.ids)]
			if id == down.Load() {
				continue // the replica being swapped: not a refusal
			}
			before := swaps[id].Load()
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := g.dns(id).AddRecord(wctx, connect.NewRequest(&corpusv1.AddRecordRequest{Name: fmt.Sprintf("upgrade-%d", i), Type: "TXT", Data: "v"}))
			cancel()
			if ctx.Err() != nil {
				return
			}
			atomic.AddInt64(&fig.writes, 1)
			if err != nil {
				atomic.AddInt64(&fig.refusedWrites, 1)
				why := ""
				if down.Load() == id || swaps[id].Load() != before {
					// Sent before its replica was stopped: the stop
					// cancels the call.
					why = " " + stoppedMark
				}
				mu.Lock()
				refusals = append(refusals, fmt.Sprintf("%s through %s: %v%s", time.Now().Format("15:04:05.000"), id, err, why))
				mu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()

	upgradeStart := time.Now()
	lead := g.leader()
	var order []string
	for _, id := range g.ids {
		if id != lead {
			order = append(order, id)
		}
	}
	order = append(order, lead)
	newVersion := binVersion(t, corpusBin)
	for _, id := range order {
		down.Store(id)
		swaps[id].Add(1)
		g.swap(t, id, corpusBin)
		g.waitRegistered(t, id, newVersion)
		down.Store("")
		t.Logf("replica %s upgraded (%s)", id, time.Since(upgradeStart).Round(time.Millisecond))
	}
	eventually(t, 30*time.Second, "the cluster version at "+compat.Current.String(), func() error {
		st, err := g.client(lead).Status(context.Background(), connect.NewRequest(&corpusv1.StatusRequest{}))
		if err != nil {
			return err
		}
		if st.Msg.ClusterVersion != compat.Current.String() {
			return fmt.Errorf("cluster version %q", st.Msg.ClusterVersion)
		}
		return nil
	})

	c.bin = corpusBin
	for _, ag := range []*agentProc{a, b} {
		ag.stop(t)
		c.restartAgent(ag)
		c.waitAgentBack(ag)
		eventually(t, 30*time.Second, ag.name+" reporting the new version", func() error {
			var n struct {
				Node struct {
					Node struct {
						AgentVersion string `json:"agent_version"`
					} `json:"node"`
				} `json:"node"`
			}
			if err := c.json(&n, "node", "show", ag.name); err != nil {
				return err
			}
			if n.Node.Node.AgentVersion != newVersion {
				return fmt.Errorf("agent version %q, want %q", n.Node.Node.AgentVersion, newVersion)
			}
			return nil
		})
	}
	// A few more requests through the new agents' proxies, then stop.
	eventually(t, 10*time.Second, "the proxy to web after the agents' upgrade", wantBody(hc, "http://"+nodeAddr+"/", "web.example.test", "one"))
	eventually(t, 10*time.Second, "the proxy to web2 after the agents' upgrade", wantBody(hc2, "http://"+nodeAddr2+"/", "web2.example.test", "two"))
	fig.duration = time.Since(upgradeStart)
	stop()
	wg.Wait()

	if _, pid, err := a.lxc.info("web"); err != nil || pid != initPID {
		t.Errorf("web's init after the upgrade: pid %d, %v; want %d (not restarted)", pid, err, initPID)
	}
	if _, pid, err := b.lxc.info("web2"); err != nil || pid != web2PID {
		t.Errorf("web2's init after the upgrade: pid %d, %v; want %d (not restarted)", pid, err, web2PID)
	}
	if _, pid, err := siteOn.lxc.info("site-dev"); err != nil || pid != sitePID {
		t.Errorf("the project's guest site-dev after the upgrade: pid %d, %v; want %d (not restarted)", pid, err, sitePID)
	}
	// A feature of this release's entries, usable now that every
	// replica runs it: a rejoin token (a RejoinNode entry follows it).
	if out, errOut, code := c.cli("node", "token", "--node", "n1"); code != 0 {
		t.Errorf("corpus node token --node n1 after the upgrade: exit %d: %s%s", code, out, errOut)
	}
	for _, f := range failures {
		t.Errorf("proxied request failed: %s", f)
	}
	for _, r := range refusals {
		t.Logf("write refused: %s", r)
		if !strings.Contains(r, "unavailable") && !strings.Contains(r, stoppedMark) {
			t.Errorf("a write was refused for another reason than an election or the stop of the replica it was sent to: %s", r)
		}
	}
	t.Logf("upgrade figures: duration_s=%.1f requests=%d failed_requests=%d writes=%d refused_writes=%d (total test %s)",
		fig.duration.Seconds(), fig.requests, fig.failedRequests, fig.writes, fig.refusedWrites, time.Since(started).Round(time.Second))

	// Downgrade one follower.
	id := order[0]
	if prevServer == compat.Current.String() {
		g.swap(t, id, prev.bin)
		g.waitRegistered(t, id, prev.version)
		t.Logf("replica %s downgraded to %s: the cluster version (%s) had not moved past it; the refusal after a move is not exercised until the next minor release", id, prev.version, compat.Current)
		g.swap(t, id, corpusBin)
		g.waitRegistered(t, id, newVersion)
		return
	}
	g.procs[id].stop(t)
	p := startBinIn(t, prev.bin, g.ns, "coordinator "+id+" (downgraded)", nil, g.procs[id].args...)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("replica %s on %s started after the cluster version moved to %s", id, prev.version, compat.Current)
	}
	if want := "a downgrade after the group moved on is not possible"; !strings.Contains(p.log.String(), want) {
		t.Errorf("replica %s on %s stopped saying:\n%s\nwant %q", id, prev.version, p.log.String(), want)
	}
	g.procs[id] = startBinIn(t, corpusBin, g.ns, "coordinator "+id, nil, p.args...)
	g.waitRegistered(t, id, newVersion)
}

// binVersion is what bin says its version is.
func binVersion(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("%s version: %v", bin, err)
	}
	var v struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatal(err)
	}
	return v.Version
}

// swap stops replica id (SIGINT, as systemd would) and starts it again
// on bin with the same arguments and data.
func (g *coordGroup) swap(t *testing.T, id, bin string) {
	t.Helper()
	p := g.procs[id]
	p.stop(t)
	g.procs[id] = startBinIn(t, bin, g.ns, "coordinator "+id, nil, p.args...)
}

// waitRegistered waits until every replica's peers list replica id as
// running version, with a leader.
func (g *coordGroup) waitRegistered(t *testing.T, id, version string) {
	t.Helper()
	eventually(t, 60*time.Second, "replica "+id+" back in the group on "+version, func() error {
		for _, other := range g.ids {
			res, err := g.peers(other)
			if err != nil {
				return fmt.Errorf("%s: %w", other, err)
			}
			leader := false
			for _, p := range res {
				leader = leader || p.Leader
				if p.Id == id && p.Version != version {
					return fmt.Errorf("%s says %s runs %q", other, id, p.Version)
				}
			}
			if !leader {
				return fmt.Errorf("%s knows no leader", other)
			}
		}
		return nil
	})
}

func (g *coordGroup) peers(id string) ([]*corpusv1.RaftPeer, error) {
	c := corpusv1connect.NewClusterServiceClient(tlsIn(g.t, g.ns, g.ca), "https://"+g.api[id], connect.WithInterceptors(rpc.Bearer(g.token)))
	res, err := c.RaftPeers(context.Background(), connect.NewRequest(&corpusv1.RaftPeersRequest{}))
	if err != nil {
		return nil, err
	}
	return res.Msg.Peers, nil
}

// serverVersion is the server version replica asks says replica of
// runs ("" before it registered one).
func (g *coordGroup) serverVersion(t *testing.T, asks, of string) string {
	t.Helper()
	var out string
	eventually(t, 30*time.Second, "the server version of "+of, func() error {
		peers, err := g.peers(asks)
		if err != nil {
			return err
		}
		for _, p := range peers {
			if p.Id == of && p.Version != "" {
				out = p.ServerVersion
				return nil
			}
		}
		return errors.New("not registered yet")
	})
	return out
}
