package e2e

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/anishathalye/porcupine"

	"corpus/coordinator/compat"
	"corpus/internal/rpc"
	"corpus/internal/testrun"
	"corpus/internal/version"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
	"corpus/test/linearizable"
)

// coordGroup is three coordinator processes in one namespace, formed with
// --bootstrap-expect.
type coordGroup struct {
	t     *testing.T
	ns    string
	dir   string
	ids   []string
	api   map[string]string
	procs map[string]*proc
	token string
	// ca is the group's CA certificate file (made by `corpus tls ca-create`).
	ca string
}

func newCoordGroup(t *testing.T) *coordGroup {
	t.Helper()
	return newCoordGroupIn(t, newNetLab(t), "")
}

// newCoordGroupIn starts the group in lab's ctl namespace. With
// advertiseHost set, replicas listen on every address and tell the group
// (and agents) to reach them there.
func newCoordGroupIn(t *testing.T, lab *netLab, advertiseHost string) *coordGroup {
	t.Helper()
	return newCoordGroupBin(t, lab, advertiseHost, corpusBin)
}

// newCoordGroupBin is newCoordGroupIn with the replicas running bin,
// each given the extra arguments.
func newCoordGroupBin(t *testing.T, lab *netLab, advertiseHost, bin string, extra ...string) *coordGroup {
	t.Helper()
	g := &coordGroup{t: t, ns: lab.ctl, dir: tempDir(t), api: map[string]string{}, procs: map[string]*proc{}}
	caDir := filepath.Join(g.dir, "ca")
	if out, err := exec.Command(corpusBin, "tls", "ca-create", "--dir", caDir).CombinedOutput(); err != nil {
		t.Fatalf("corpus tls ca-create: %v\n%s", err, out)
	}
	g.ca = filepath.Join(caDir, "ca.crt")
	for i := 0; i < 3; i++ {
		id := fmt.Sprintf("c%d", i+1)
		g.ids = append(g.ids, id)
		g.api[id] = fmt.Sprintf("127.0.0.1:%d", 7400+10*i)
	}
	for i, id := range g.ids {
		var join []string
		for _, other := range g.ids {
			if other != id {
				join = append(join, g.api[other])
			}
		}
		args := []string{"coordinator", "--id", id,
			"--data-dir", filepath.Join(g.dir, id), "--api-addr", g.api[id], "--raft-addr", fmt.Sprintf("127.0.0.1:%d", 7401+10*i),
			"--dns-addr", fmt.Sprintf("127.0.0.1:%d", 8600+10*i), "--bootstrap-expect", "3", "--join", strings.Join(join, ","),
			"--raft-snapshot-threshold", "64", "--raft-trailing-logs", "16", "--node-timeout", "4s",
			"--gossip-addr", fmt.Sprintf("127.0.0.1:%d", 7403+10*i), "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", 9464+10*i),
			"--cluster-ca", g.ca, "--cluster-ca-key", filepath.Join(caDir, "ca.key")}
		if advertiseHost != "" {
			port := strings.TrimPrefix(g.api[id], "127.0.0.1:")
			args = append(args, "--api-addr", "0.0.0.0:"+port, "--advertise-addr", advertiseHost+":"+port,
				"--gossip-addr", fmt.Sprintf("%s:%d", advertiseHost, 7403+10*i))
		}
		g.procs[id] = startBinIn(t, bin, g.ns, "coordinator "+id, nil, append(args, extra...)...)
	}
	eventually(t, 30*time.Second, "the group bootstrapped", func() error {
		b, err := os.ReadFile(filepath.Join(g.dir, "c1", "ops-token"))
		if err != nil {
			return err
		}
		g.token = strings.TrimSpace(string(b))
		for _, id := range g.ids {
			st, err := g.client(id).Status(context.Background(), connect.NewRequest(&corpusv1.StatusRequest{}))
			if err != nil {
				return err
			}
			if st.Msg.ClusterId == "" || st.Msg.LeaderApi == "" {
				return fmt.Errorf("%s: %v", id, st.Msg)
			}
		}
		return nil
	})
	return g
}

func (g *coordGroup) client(id string) corpusv1connect.ClusterServiceClient {
	return corpusv1connect.NewClusterServiceClient(tlsIn(g.t, g.ns, g.ca), "https://"+g.api[id], connect.WithInterceptors(rpc.Bearer(g.token)))
}

func (g *coordGroup) dns(id string) corpusv1connect.DnsServiceClient {
	return corpusv1connect.NewDnsServiceClient(tlsIn(g.t, g.ns, g.ca), "https://"+g.api[id], connect.WithInterceptors(rpc.Bearer(g.token)))
}

// leader is the replica that says it leads (its own word, not a
// follower's possibly stale view).
func (g *coordGroup) leader() string {
	g.t.Helper()
	var lead string
	eventually(g.t, 15*time.Second, "a leader", func() error {
		for _, id := range g.ids {
			if g.procs[id] == nil {
				continue
			}
			p, err := g.client(id).Peer(context.Background(), connect.NewRequest(&corpusv1.PeerRequest{}))
			if err == nil && p.Msg.Leader == id {
				lead = id
				return nil
			}
		}
		return errors.New("no live leader")
	})
	return lead
}

// TestCoordinatorGroup: three coordinator processes form a group by
// themselves; under a concurrent write load the leader is killed (-9),
// a follower is paused (SIGSTOP) and killed, over several rounds. Writes
// resume after each leader kill (within 10 s, a bound loose enough for a
// loaded CI machine; the time it takes is logged, not asserted: speed is
// for benchmarks), the client history checks as linearizable
// (porcupine), and no acknowledged write is lost.
func TestCoordinatorGroup(t *testing.T) {
	g := newCoordGroup(t)
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		acked   = map[string]bool{}
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		// firstCreated is when the first record created by a write sent
		// after faultAt was acknowledged.
		firstCreated, faultAt time.Time
		start                 = time.Now()
		keySet                = 400
		clients               = 4
	)
	round := 0
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				k := fmt.Sprintf("k%d-%d", round, rand.IntN(keySet))
				mu.Unlock()
				id := g.ids[rand.IntN(len(g.ids))]
				sent := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), testrun.D(3*time.Second))
				call := time.Since(start).Nanoseconds()
				res, err := g.dns(id).AddRecord(ctx, connect.NewRequest(&corpusv1.AddRecordRequest{Name: k, Type: "TXT", Data: "v"}))
				cancel()
				ret := time.Since(start).Nanoseconds()
				out := linearizable.Unknown
				switch {
				case err == nil && res.Msg.Created:
					out = linearizable.Created
				case err == nil:
					out = linearizable.Existed
				case strings.Contains(err.Error(), "no leader is elected yet"), strings.Contains(err.Error(), "connection refused"):
					// Refused before anything was sent on: it did not happen.
					time.Sleep(50 * time.Millisecond)
					continue
				}
				mu.Lock()
				op := porcupine.Operation{ClientId: c, Input: linearizable.Input{Kind: linearizable.Add, Key: k}, Call: call, Output: out, Return: ret}
				if out == linearizable.Unknown {
					op.Return = linearizable.Never // may take effect any time later
				} else {
					acked[k] = true
				}
				if out == linearizable.Created && firstCreated.IsZero() && sent.After(faultAt) {
					// A write sent after the fault and committed.
					firstCreated = time.Now()
				}
				history = append(history, op)
				mu.Unlock()
				if err != nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}(c)
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	created := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return firstCreated
	}
	restart := func(id string) {
		g.procs[id] = g.procs[id].restart(t)
	}
	var worst time.Duration
	for r := 0; r < 3; r++ {
		time.Sleep(1500 * time.Millisecond)
		mu.Lock()
		round = r
		mu.Unlock()
		// Kill the leader; writes resume on the others.
		lead := g.leader()
		p := g.procs[lead]
		g.procs[lead] = nil
		p.kill()
		killed := time.Now()
		mu.Lock()
		firstCreated, faultAt = time.Time{}, killed // only writes sent from now count
		mu.Unlock()
		eventually(t, 10*time.Second, "writes after the leader died", func() error {
			if created().IsZero() {
				return errors.New("no new write acknowledged yet")
			}
			return nil
		})
		took := created().Sub(killed)
		worst = max(worst, took)
		t.Logf("round %d: leader %s killed; writes resumed after %s", r, lead, took)
		g.procs[lead] = p
		restart(lead)
		// Pause a follower, then kill it while paused, then bring it back.
		time.Sleep(time.Second)
		lead = g.leader()
		var f string
		for _, id := range g.ids {
			if id != lead {
				f = id
			}
		}
		g.procs[f].cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(1500 * time.Millisecond)
		if rand.IntN(2) == 0 {
			g.procs[f].cmd.Process.Signal(syscall.SIGCONT)
		} else {
			g.procs[f].kill()
			restart(f)
		}
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	t.Logf("writes resumed at worst %s after a leader kill", worst)

	// Linearizable.
	mu.Lock()
	defer mu.Unlock()
	res, info := linearizable.Check(history, time.Minute)
	if res != porcupine.Ok {
		file := filepath.Join(cmp.Or(os.Getenv("CORPUS_TEST_LOGS"), os.TempDir()), "corpus-linearizability.html")
		if err := porcupine.VisualizePath(linearizable.Model, info, file); err == nil {
			t.Logf("visualization: %s", file)
		}
		t.Fatalf("the client history (%d operations) is not linearizable: %v", len(history), res)
	}
	t.Logf("%d operations checked linearizable; %d keys acknowledged", len(history), len(acked))

	// Nothing acknowledged is lost, on any replica.
	for _, id := range g.ids {
		eventually(t, 20*time.Second, "replica "+id+" has every acknowledged record", func() error {
			recs, err := g.dns(id).ListRecords(context.Background(), connect.NewRequest(&corpusv1.ListRecordsRequest{}))
			if err != nil {
				return err
			}
			have := map[string]bool{}
			for _, r := range recs.Msg.Records {
				have[strings.TrimSuffix(strings.Split(r.Name, ".")[0], ".")] = true
			}
			for k := range acked {
				if !have[k] {
					return fmt.Errorf("%s lacks %s", id, k)
				}
			}
			return nil
		})
	}
	// The operator view of the group, with the version each replica
	// registered (the binary is built as this test is: version.Version).
	eventually(t, 10*time.Second, "list-peers shows every replica's version", func() error {
		out, errOut, code := cliAt(g, "operator", "raft", "list-peers")
		if code != 0 || strings.Count(out, "\n") != 4 || !strings.Contains(out, "leader") {
			return fmt.Errorf("operator raft list-peers = %d\n%s%s", code, out, errOut)
		}
		// The columns end with each replica's build version and the
		// server version it registered (compat.Current).
		lines := strings.Split(strings.TrimSpace(out), "\n")
		for _, line := range lines[1:] {
			if f := strings.Fields(line); len(f) < 2 || f[len(f)-2] != version.Version || f[len(f)-1] != compat.Current.String() {
				return fmt.Errorf("operator raft list-peers printed:\n%s\nwant version %s and server version %s on every replica", out, version.Version, compat.Current)
			}
		}
		return nil
	})
}

// cliAt runs the CLI against the group's first replica.
func cliAt(g *coordGroup, args ...string) (string, string, int) {
	c := &cluster{t: g.t, lab: &netLab{ctl: g.ns}, api: g.api["c1"], token: g.token, ca: g.ca, cfgHome: filepath.Join(g.dir, "cfg")}
	return c.cli(args...)
}

// TestAgentWithCoordinatorGroup: an agent told of one replica learns the
// others from the group, keeps its node ready while it reports to a
// follower, and fails over when its replica dies; guests created through
// any replica run.
func TestAgentWithCoordinatorGroup(t *testing.T) {
	lab := newNetLab(t)
	// The first node's link to ctl is 10.K.1.x: replicas advertise ctl's end.
	ctlSide := fmt.Sprintf("10.%d.1.1", lab.k)
	g := newCoordGroupIn(t, lab, ctlSide)
	c := &cluster{t: t, lab: lab, dir: g.dir, api: g.api["c1"], token: g.token, ca: g.ca, cfgHome: filepath.Join(g.dir, "cfg"), agents: map[string]*agentProc{}}
	a := c.addAgent("n1")
	eventually(t, 15*time.Second, "the agent learned every replica", func() error {
		if n := strings.Count(a.log.String(), "learned coordinator addresses"); n == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	at := func(id string) *cluster {
		cc := *c
		cc.api = g.api[id]
		return &cc
	}
	at("c2").mustCLI("guest", "create", "g1", "--image", "busybox", "--memory", "32M", "--cpus", "0.05")
	// The replica the agent started with dies; it goes on with the others.
	g.procs["c1"].kill()
	g.procs["c1"] = nil
	at("c3").mustCLI("guest", "create", "g2", "--image", "busybox", "--memory", "32M", "--cpus", "0.05")
	for _, name := range []string{"g1", "g2"} {
		if st, _, err := a.lxc.info(name); err != nil || st != "RUNNING" {
			t.Errorf("guest %s = %s, %v; want RUNNING on n1", name, st, err)
		}
	}
	// Several node timeouts later the node is still ready: its reports
	// reach the leader's deadlines whichever replica takes them.
	time.Sleep(6 * time.Second)
	var n struct {
		Node struct {
			Node struct{ Status string } `json:"node"`
		} `json:"node"`
	}
	if err := at("c2").json(&n, "node", "show", "n1"); err != nil || n.Node.Node.Status != "ready" {
		t.Errorf("node n1 = %+v, %v; want ready", n, err)
	}
}
