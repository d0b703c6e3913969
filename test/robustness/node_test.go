package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/internal/pki"
	"corpus/internal/rpc"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
	"corpus/test/linearizable"
)

// labNode is a node enrolled in the lab with no agent behind it: the
// workload speaks for it over the agent API, with the certificate it
// enrolled for, as its agent would: heartbeats that report its guest,
// and deploys of the lab project recorded as releases.
type labNode struct {
	id     string
	agents []corpusv1connect.AgentServiceClient // one per replica
	// guest is the lab project's guest, placed on this node.
	guest string
}

// What the lab's node offers: room for the lab project's guest, of an
// image no other guest of the workload has. Its agent address answers
// nothing (nothing listens there in the replicas' namespaces).
var (
	labCapacity = &corpusv1.Resources{MemoryBytes: 4 << 30, CpuMillis: 8000, DiskBytes: 1 << 40}
	labDrivers  = []*corpusv1.DriverInfo{{Name: "lxc", Healthy: true, Exec: true, Images: []string{labImage}, Detail: "the robustness lab's node"}}
)

const labAgentAddr = "127.0.0.2:7402"

// enrollNode enrolls the lab's node with a join token and a CSR, and
// waits until the lab project's guest is placed on it.
func (g *group) enrollNode() *labNode {
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(60*time.Second))
	defer cancel()
	retry := rpc.RetryWithoutLeader(testrun.D(20 * time.Second))
	r := g.reps[0]
	nodes := corpusv1connect.NewNodeServiceClient(g.http, "https://"+r.api, connect.WithInterceptors(rpc.Bearer(g.token), retry))
	tok, err := nodes.CreateJoinToken(ctx, connect.NewRequest(&corpusv1.CreateJoinTokenRequest{}))
	if err != nil {
		g.t.Fatalf("join token: %v", err)
	}
	keyPEM, csrPEM, err := pki.NewKeyAndCSR("node lab")
	if err != nil {
		g.t.Fatal(err)
	}
	parts := strings.Split(tok.Msg.Token, ".")
	enroll := corpusv1connect.NewAgentServiceClient(rpc.HTTPClient(pki.PinnedConfig(parts[len(parts)-1])), "https://"+r.api, connect.WithInterceptors(retry))
	res, err := enroll.Enroll(ctx, connect.NewRequest(&corpusv1.EnrollRequest{JoinToken: tok.Msg.Token, Name: "lab",
		CsrPem: csrPEM, Capacity: labCapacity, Drivers: labDrivers, AgentAddress: labAgentAddr, AgentVersion: "lab"}))
	if err != nil {
		g.t.Fatalf("enrolling the lab's node: %v", err)
	}
	kp, err := pki.KeyPair(res.Msg.CertificatePem, keyPEM, res.Msg.CaPem)
	if err != nil {
		g.t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 8,
		TLSClientConfig: pki.ClientConfig(g.pool, pki.NewKeys(kp), pki.RoleCoordinator, "")}}
	n := &labNode{id: res.Msg.NodeId}
	for _, r := range g.reps {
		n.agents = append(n.agents, corpusv1connect.NewAgentServiceClient(hc, "https://"+r.api))
	}
	for {
		// Its first report makes it ready, as an agent's does.
		if _, err := n.agents[0].Report(ctx, connect.NewRequest(&corpusv1.ReportRequest{Capacity: labCapacity, Drivers: labDrivers,
			AgentAddress: labAgentAddr, AgentVersion: "lab"})); err != nil {
			g.t.Logf("the lab's node's report: %v", err)
		}
		v, err := g.guests(r, rpc.Linearizable(), retry).GetGuest(ctx, connect.NewRequest(&corpusv1.GetGuestRequest{Name: labProject + "-" + corpusv1.EnvDev}))
		if err != nil {
			g.t.Fatalf("the lab project's guest: %v", err)
		}
		if gu := v.Msg.GetGuest(); gu.GetNodeId() == n.id {
			n.guest = gu.GetId()
			return n
		}
		select {
		case <-ctx.Done():
			g.t.Fatalf("the lab project's guest was not placed on the lab's node within 60s: %v", v.Msg)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Keys of the node's operations in the history: the guest's observed
// state its heartbeats write (a register), the releases its deploys
// begin (objects), and the environment's current release its deploys
// set when they finish (a register).
const (
	keyObserved = "observed/" + labProject + "-" + corpusv1.EnvDev
	keyCurrent  = "current/" + labProject + "-" + corpusv1.EnvDev
)

func releaseKey(id string) string { return "release/" + id }

// Client ids of the node's two loops.
const (
	heartbeatID = 2000
	deployerID  = 2001
)

// heartbeats reports the node's guest running, every 100 ms through a
// replica drawn at random, each report with a message of its own: each
// is a write of the guest's observed state, read back by the clients.
// A report gives up after a second, as an agent's gives up well within
// the node timeout (10 s of 15 by default; here 1 s of 4 or more, time
// left for followers to pass heartbeats on to the leader).
func (w *workload) heartbeats(n *labNode, seed uint64) {
	w.loop(seed, heartbeatID, func(rng *rand.Rand, i int) {
		r := rng.IntN(len(w.g.reps))
		in := linearizable.Input{Kind: linearizable.Set, Key: keyObserved, Value: fmt.Sprintf("hb%d", i)}
		w.do(heartbeatID, w.g.reps[r], in, time.Second, func(ctx context.Context) (string, error) {
			sent := time.Now()
			_, err := n.agents[r].Report(ctx, connect.NewRequest(&corpusv1.ReportRequest{
				Capacity: labCapacity, Drivers: labDrivers, AgentAddress: labAgentAddr, AgentVersion: "lab",
				Guests: []*corpusv1.ReportedGuest{{GuestId: n.guest, Observed: &corpusv1.GuestObserved{State: "running", Message: in.Value}}},
			}))
			if err == nil {
				w.beat(sent, time.Now())
			}
			return linearizable.Written, err
		})
		time.Sleep(100 * time.Millisecond)
	})
}

// beat records a heartbeat sent at sent and acknowledged at acked. The
// cluster saw the one before no earlier than it was sent, and this one
// no later than it was acknowledged: the longest the cluster may have
// gone without a report is from the last acknowledged one's sending to
// this one's acknowledgement (a report slowed by a fault takes up to
// its second between the two).
func (w *workload) beat(sent, acked time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.lastBeat.IsZero() {
		w.beatGap = max(w.beatGap, acked.Sub(w.lastBeat))
	}
	w.lastBeat = sent
}

// begun is a BeginRelease the API answered: the release's id, the
// number it was given, and when the call was made and answered.
type begun struct {
	id        string
	number    uint32
	call, ret int64
}

// deploys records deploys of the lab project as its node's agent does,
// one at a time: BeginRelease with an id it chose (asked again until
// answered: the same request answers the release it made), then
// FinishRelease succeeded (asked again until answered), which makes
// the release current.
func (w *workload) deploys(n *labNode, seed uint64) {
	const commit = "0123456789abcdef0123456789abcdef01234567"
	w.loop(seed, deployerID, func(rng *rand.Rand, i int) {
		id := fmt.Sprintf("%016x", i+1)
		var number uint32
		for tries := 0; number == 0; tries++ {
			r := rng.IntN(len(w.g.reps))
			in := linearizable.Input{Kind: linearizable.Add, Key: releaseKey(id)}
			var b begun
			w.do(deployerID, w.g.reps[r], in, callTimeout, func(ctx context.Context) (string, error) {
				b.call = w.now()
				res, err := n.agents[r].BeginRelease(ctx, connect.NewRequest(&corpusv1.BeginReleaseRequest{
					Project: labProject, Env: corpusv1.EnvDev, Commit: commit, Subject: "lab deploy", ReleaseId: id}))
				b.ret = w.now()
				if err != nil {
					return "", err
				}
				b.id, b.number = id, res.Msg.GetRelease().GetNumber()
				if tries == 0 {
					return linearizable.Created, nil
				}
				return linearizable.Made, nil
			})
			if b.number != 0 {
				number = b.number
				w.mu.Lock()
				w.begun = append(w.begun, b)
				w.mu.Unlock()
			}
			if w.stopped() {
				return
			}
			if number == 0 {
				time.Sleep(50 * time.Millisecond)
			}
		}
		for done := false; !done && !w.stopped(); {
			r := rng.IntN(len(w.g.reps))
			in := linearizable.Input{Kind: linearizable.Set, Key: keyCurrent, Value: strconv.Itoa(int(number))}
			w.do(deployerID, w.g.reps[r], in, callTimeout, func(ctx context.Context) (string, error) {
				_, err := n.agents[r].FinishRelease(ctx, connect.NewRequest(&corpusv1.FinishReleaseRequest{Id: id, Status: corpusv1.ReleaseSucceeded}))
				done = err == nil
				return linearizable.Written, err
			})
			if !done {
				time.Sleep(50 * time.Millisecond)
			}
		}
	})
}

// releaseRead reads the lab environment's releases linearizably: whether
// release id is there, or (id "") which one is current ("" for none).
func (w *workload) releaseRead(ctx context.Context, r *replica, id string) (string, error) {
	res, err := w.g.projects(r, rpc.Linearizable()).ListReleases(ctx, connect.NewRequest(&corpusv1.ListReleasesRequest{
		Project: labProject, Env: corpusv1.EnvDev}))
	if err != nil {
		return "", err
	}
	if id == "" {
		if res.Msg.Current == 0 {
			return "", nil
		}
		return strconv.Itoa(int(res.Msg.Current)), nil
	}
	for _, rel := range res.Msg.Releases {
		if rel.Id == id {
			return linearizable.Present, nil
		}
	}
	return linearizable.Absent, nil
}

// numberedInOrder checks what the per-key model cannot: every release
// has one number, no two releases the same, and a release begun after
// another's BeginRelease was answered has a higher number.
func numberedInOrder(bs []begun) error {
	byID := map[string]uint32{}
	byNumber := map[uint32]string{}
	for _, b := range bs {
		if n, ok := byID[b.id]; ok && n != b.number {
			return fmt.Errorf("release %s was answered as number %d and as %d", b.id, n, b.number)
		}
		if id, ok := byNumber[b.number]; ok && id != b.id {
			return fmt.Errorf("releases %s and %s both have number %d", id, b.id, b.number)
		}
		byID[b.id], byNumber[b.number] = b.number, b.id
	}
	for _, a := range bs {
		for _, b := range bs {
			if a.id != b.id && a.ret < b.call && a.number > b.number {
				return fmt.Errorf("release %s (number %d) was begun after release %s was answered, with a lower number (%d)", b.id, b.number, a.id, a.number)
			}
		}
	}
	return nil
}

// TestNumberedInOrder: the release-number check fails on each anomaly it
// is for, and passes retries and concurrent begins.
func TestNumberedInOrder(t *testing.T) {
	b := func(id string, n uint32, call, ret int64) begun {
		return begun{id: id, number: n, call: call, ret: ret}
	}
	for _, tc := range []struct {
		name string
		bs   []begun
		ok   bool
	}{
		{"in order", []begun{b("a", 1, 0, 1), b("b", 2, 2, 3)}, true},
		{"asked again, same number", []begun{b("a", 1, 0, 1), b("a", 1, 2, 3), b("b", 2, 4, 5)}, true},
		{"concurrent, either order", []begun{b("a", 2, 0, 5), b("b", 1, 1, 4)}, true},
		{"asked again, another number", []begun{b("a", 1, 0, 1), b("a", 2, 2, 3)}, false},
		{"one number twice", []begun{b("a", 1, 0, 1), b("b", 1, 2, 3)}, false},
		{"a later release numbered lower", []begun{b("a", 2, 0, 1), b("b", 1, 2, 3)}, false},
	} {
		if err := numberedInOrder(tc.bs); (err == nil) != tc.ok {
			t.Errorf("%s: numberedInOrder = %v, want ok %t", tc.name, err, tc.ok)
		}
	}
}
