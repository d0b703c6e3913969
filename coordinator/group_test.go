package coordinator_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"corpus/coordinator"
	"corpus/coordinator/api"
	"corpus/coordinator/state"
	"corpus/internal/pki"
	"corpus/internal/rpc"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

// replicaSet is a group of coordinators in this process.
type replicaSet struct {
	t     *testing.T
	reps  map[string]*server
	api   map[string]string
	raft  map[string]string
	token string
	// ca gives a replica the group's CA files.
	ca func(*coordinator.Config)
}

// groupCA writes a cluster CA into dir, as `corpus tls ca-create` does,
// and returns the option that hands it to a replica.
func groupCA(t *testing.T, dir string) func(*coordinator.Config) {
	t.Helper()
	certPEM, keyPEM, err := pki.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cert, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if err := os.WriteFile(cert, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return func(c *coordinator.Config) { c.CACertFile, c.CAKeyFile = cert, key }
}

func newReplica(t *testing.T, id, dir, apiAddr, raftAddr string, opts ...func(*coordinator.Config)) *server {
	t.Helper()
	return launch(t, dir, append([]func(*coordinator.Config){func(c *coordinator.Config) {
		c.ReplicaID = id
		c.APIAddr, c.RaftAddr = apiAddr, raftAddr
		c.RaftMultiplier = raftMultiplier()
	}}, opts...)...)
}

// raftMultiplier is the --raft-multiplier a group's replicas run with
// here: the machine's slowness, as an operator sets it on a busy host (1
// on a quiet one). With the default on a loaded machine (load 47 on two
// cores, a CI run beside QEMU guests), leaders missed their 250 ms lease
// again and again and a group went over half a minute without one.
func raftMultiplier() int { return min(10, int(math.Ceil(testrun.Scale()))) }

func compaction(c *coordinator.Config) {
	c.RaftSnapshotThreshold = 32
	c.RaftTrailingLogs = 8
}

// startGroup starts n replicas with --bootstrap-expect n, joined to each
// other, and waits until the group leads with a bootstrapped cluster.
func startGroup(t *testing.T, n int) *replicaSet {
	t.Helper()
	return startGroupNamed(t, "c", n)
}

// startGroupNamed is startGroup with replica ids prefix1, prefix2, ...
// and opts applied to each replica's configuration.
func startGroupNamed(t *testing.T, prefix string, n int, opts ...func(*coordinator.Config)) *replicaSet {
	t.Helper()
	rs := &replicaSet{t: t, reps: map[string]*server{}, api: map[string]string{}, raft: map[string]string{}}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("%s%d", prefix, i)
		rs.api[id], rs.raft[id] = testrun.FreeAddr(t), testrun.FreeAddr(t)
	}
	base := t.TempDir()
	rs.ca = groupCA(t, filepath.Join(base, "ca"))
	// The token holder (the lowest id) starts last: its first look finds
	// the others up and not yet in a group.
	for i := n; i >= 1; i-- {
		id := fmt.Sprintf("%s%d", prefix, i)
		var join []string
		for other, a := range rs.api {
			if other != id {
				join = append(join, a)
			}
		}
		rs.reps[id] = newReplica(t, id, filepath.Join(base, id), rs.api[id], rs.raft[id], append([]func(*coordinator.Config){compaction, rs.ca, func(c *coordinator.Config) {
			c.BootstrapExpect = n
			c.Join = join
		}}, opts...)...)
	}
	// The lowest id holds the operator token.
	eventuallyT(t, "bootstrap token", func() error {
		b, err := os.ReadFile(filepath.Join(base, prefix+"1", coordinator.OpsTokenFile))
		if err != nil {
			return err
		}
		rs.token = strings.TrimSpace(string(b))
		return nil
	})
	for id := range rs.reps {
		if id != prefix+"1" {
			if _, err := os.Stat(filepath.Join(base, id, coordinator.OpsTokenFile)); err == nil {
				t.Errorf("replica %s also wrote a bootstrap token", id)
			}
		}
	}
	eventuallyT(t, "cluster bootstrapped on every replica", func() error {
		for id, r := range rs.reps {
			if r.Store().Read().Config() == nil {
				return fmt.Errorf("%s has no cluster config", id)
			}
			if n := len(r.Store().Read().Coordinators()); n != len(rs.api) {
				return fmt.Errorf("%s knows where %d replicas answer", id, n)
			}
		}
		return nil
	})
	return rs
}

func eventuallyT(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(testrun.D(waitTimeout))
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// leader returns the id of the replica that leads now.
// follower is a replica that does not lead.
func (rs *replicaSet) follower() string {
	lead := rs.leader()
	for id := range rs.reps {
		if id != lead {
			return id
		}
	}
	rs.t.Fatal("no follower")
	return ""
}

func (rs *replicaSet) leader() string {
	rs.t.Helper()
	var id string
	eventuallyT(rs.t, "a leader", func() error {
		for rid, r := range rs.reps {
			if _, self := r.Leader(); self {
				id = rid
				return nil
			}
		}
		return fmt.Errorf("no leader")
	})
	return id
}

func (rs *replicaSet) ops(id string) clients { return rs.reps[id].clients(rs.token) }

// TestTokenHolderThatVotedFirst: the replica with the lowest id voted in a
// peer's election before it could bootstrap (it holds a term but no log),
// so the group forms without it; it still takes the operator token once
// the leader sends it the configuration, and the cluster bootstraps. CI
// saw this order under load: the group led on, with no config, for good.
func TestTokenHolderThatVotedFirst(t *testing.T) {
	t.Parallel()
	voted := func(c *coordinator.Config) {
		if c.ReplicaID != "voted1" {
			return
		}
		dir := filepath.Join(c.DataDir, "raft")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		logs, err := raftboltdb.NewBoltStore(filepath.Join(dir, "raft.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer logs.Close()
		// hashicorp/raft keeps the replica's term under this key.
		if err := logs.SetUint64([]byte("CurrentTerm"), 1); err != nil {
			t.Fatal(err)
		}
	}
	rs := startGroupNamed(t, "voted", 3, voted)
	if _, err := rs.ops(rs.leader()).guests.CreateGuest(context.Background(), connect.NewRequest(&corpusv1.CreateGuestRequest{
		Name: "after", Spec: &corpusv1.GuestSpec{Image: "busybox"},
	})); err != nil {
		t.Fatalf("CreateGuest with the token of voted1 = %v", err)
	}
}

// TestGroup: three replicas form a group by themselves; any replica takes
// writes (followers pass them to the leader) and answers reads; the group
// survives the leader's loss; a dead replica is replaced without
// downtime and the new one catches up from a snapshot.
func TestGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := startGroup(t, 3)
	follower := rs.follower()
	// A write through a follower, read back there at once.
	f := rs.ops(follower)
	res, err := f.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "web", Spec: &corpusv1.GuestSpec{Image: "busybox"}}))
	if err != nil || !res.Msg.Created {
		t.Fatalf("CreateGuest through follower %s = %v, %v", follower, res, err)
	}
	again, err := f.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "web", Spec: &corpusv1.GuestSpec{Image: "busybox"}}))
	if err != nil || again.Msg.Created {
		t.Errorf("the same create again through a follower = %v, %v; want created=false (the leader's business error travels back)", again, err)
	}
	if _, err := f.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "web", Spec: &corpusv1.GuestSpec{Image: "debian/bookworm"}})); codeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("a conflicting create through a follower = %v, want AlreadyExists", err)
	}
	// The audit log, on every replica, names who asked, forwarded or not.
	for id := range rs.reps {
		audit, err := rs.ops(id).audit.ListAudit(ctx, connect.NewRequest(&corpusv1.ListAuditRequest{Action: "create_guest"}))
		if err != nil || len(audit.Msg.Entries) < 2 {
			t.Fatalf("ListAudit on %s = %v, %v", id, audit, err)
		}
		first, refused := audit.Msg.Entries[0], audit.Msg.Entries[len(audit.Msg.Entries)-1]
		if first.Actor != "ops" || first.Target != "web" || first.Result != "ok" || refused.Result == "ok" {
			t.Errorf("audit on %s = %v", id, audit.Msg.Entries)
		}
	}
	// Status and the peers name the leader of the moment (on a loaded
	// machine an election may have moved it since the start).
	eventuallyT(t, "Status and RaftPeers from "+follower+" naming the leader", func() error {
		now := rs.leader()
		st, err := f.cluster.Status(ctx, connect.NewRequest(&corpusv1.StatusRequest{}))
		if err != nil || st.Msg.Replica != follower || st.Msg.LeaderApi != rs.api[now] {
			return fmt.Errorf("Status = %v, %v; want replica %s, leader api %s", st, err, follower, rs.api[now])
		}
		peers, err := f.cluster.RaftPeers(ctx, connect.NewRequest(&corpusv1.RaftPeersRequest{}))
		if err != nil || len(peers.Msg.Peers) != 3 {
			return fmt.Errorf("RaftPeers = %v, %v", peers, err)
		}
		for _, p := range peers.Msg.Peers {
			if p.ApiAddress != rs.api[p.Id] || p.Leader != (p.Id == now) || !p.Voter {
				return fmt.Errorf("peer %+v, with %s leading", p, now)
			}
		}
		return nil
	})
	// Many writes: the log compacts into snapshots.
	for i := 0; i < 100; i++ {
		if _, err := f.dns.AddRecord(ctx, connect.NewRequest(&corpusv1.AddRecordRequest{Name: fmt.Sprintf("r%d", i), Type: "TXT", Data: "x"})); err != nil {
			t.Fatalf("AddRecord %d: %v", i, err)
		}
	}

	// The leader dies: the others elect a new one and take writes.
	lead := rs.leader()
	killed := time.Now()
	stopped := make(chan struct{})
	go func(r *server) { r.stop(); close(stopped) }(rs.reps[lead])
	dead := lead
	delete(rs.reps, lead)
	var resumed time.Duration
	eventuallyT(t, "writes after the leader died", func() error {
		for id := range rs.reps {
			if _, err := rs.ops(id).dns.AddRecord(ctx, connect.NewRequest(&corpusv1.AddRecordRequest{Name: "after", Type: "TXT", Data: "x"})); err != nil && codeOf(err) != connect.CodeAlreadyExists {
				t.Logf("%s after %s: %v", id, time.Since(killed), err)
				return err
			}
		}
		resumed = time.Since(killed)
		return nil
	})
	t.Logf("writes resumed %s after the leader began to stop", resumed)
	<-stopped
	lead = rs.leader()

	// Replace the dead replica: remove it, add a fresh one; it catches up.
	// A leader change during the removal makes the client ask again;
	// the second try finds it done (rpc.Gone), as the CLI takes it.
	if _, err := rs.ops(lead).cluster.RemoveRaftPeer(ctx, connect.NewRequest(&corpusv1.RemoveRaftPeerRequest{Id: dead})); err != nil && !rpc.Gone(err) {
		t.Fatalf("RemoveRaftPeer(%s) = %v", dead, err)
	}
	apiAddr, raftAddr := testrun.FreeAddr(t), testrun.FreeAddr(t)
	c4 := newReplica(t, "c4", filepath.Join(t.TempDir(), "c4"), apiAddr, raftAddr, compaction, rs.ca, func(c *coordinator.Config) { c.Bootstrap = false })
	var other string
	for id := range rs.reps {
		if id != lead {
			other = id
		}
	}
	// Through a follower, which passes it to the leader.
	if _, err := rs.ops(other).cluster.AddRaftPeer(ctx, connect.NewRequest(&corpusv1.AddRaftPeerRequest{Id: "c4", RaftAddress: raftAddr, ApiAddress: apiAddr})); err != nil {
		t.Fatalf("AddRaftPeer(c4) = %v", err)
	}
	c4.waitFor("c4 caught up", func(v *state.Snap) bool {
		return v.GuestByName("web") != nil && len(v.DNSRecords()) == 101
	})
	peers, err := rs.ops(other).cluster.RaftPeers(ctx, connect.NewRequest(&corpusv1.RaftPeersRequest{}))
	if err != nil || len(peers.Msg.Peers) != 3 {
		t.Fatalf("RaftPeers after the replacement = %v, %v", peers, err)
	}
	for _, p := range peers.Msg.Peers {
		if p.Id == dead {
			t.Errorf("the removed replica %s is still a peer", dead)
		}
	}
	// c4 takes writes too.
	rs.reps["c4"] = c4
	if _, err := rs.ops("c4").dns.AddRecord(ctx, connect.NewRequest(&corpusv1.AddRecordRequest{Name: "from-c4", Type: "TXT", Data: "x"})); err != nil {
		t.Errorf("a write through the new replica = %v", err)
	}
	if _, err := rs.ops("c4").cluster.RemoveRaftPeer(ctx, connect.NewRequest(&corpusv1.RemoveRaftPeerRequest{Id: "nope"})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("removing an unknown replica = %v, want NotFound", err)
	}
}

// TestLinearizableReads: with Corpus-Consistency: linearizable, a read on
// a follower sees every write the leader acknowledged before it, however
// far behind the follower applies; a consistency the API does not serve
// is refused.
func TestLinearizableReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := startGroup(t, 3)
	lead, follower := rs.leader(), rs.follower()
	consistent := func(name string) (*connect.Response[corpusv1.GetGuestResponse], error) {
		req := connect.NewRequest(&corpusv1.GetGuestRequest{Name: name})
		req.Header().Set(api.ConsistencyHeader, "linearizable")
		return rs.ops(follower).guests.GetGuest(ctx, req)
	}
	for i := 0; i < 40; i++ {
		name := fmt.Sprintf("g%d", i)
		if _, err := rs.ops(lead).guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: name, Spec: &corpusv1.GuestSpec{Image: "busybox"}})); err != nil {
			t.Fatalf("CreateGuest %s on the leader: %v", name, err)
		}
		if _, err := consistent(name); err != nil {
			t.Fatalf("a linearizable read of %s on follower %s right after the leader acknowledged it: %v", name, follower, err)
		}
	}
	req := connect.NewRequest(&corpusv1.GetGuestRequest{Name: "g0"})
	req.Header().Set(api.ConsistencyHeader, "eventual-ish")
	if _, err := rs.ops(follower).guests.GetGuest(ctx, req); codeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "linearizable") {
		t.Errorf("an unknown consistency = %v, want InvalidArgument naming what is served", err)
	}
	req = connect.NewRequest(&corpusv1.GetGuestRequest{Name: "g0"})
	req.Header().Set(api.ConsistencyHeader, "linearizable")
	if _, err := rs.ops(lead).guests.GetGuest(ctx, req); err != nil {
		t.Errorf("a linearizable read on the leader: %v", err)
	}
}

// TestWritesSeeAcknowledgedWrites: a follower that takes a write naming
// something the leader has just acknowledged creating does not answer
// NotFound, however far behind it applies (robustness seeds 8108 and
// 9102 found it did).
func TestWritesSeeAcknowledgedWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := startGroup(t, 3)
	lead, follower := rs.leader(), rs.follower()
	for i := 0; i < 40; i++ {
		name := fmt.Sprintf("g%d", i)
		if _, err := rs.ops(lead).guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: name, Spec: &corpusv1.GuestSpec{Image: "busybox"}})); err != nil {
			t.Fatalf("CreateGuest %s on the leader: %v", name, err)
		}
		// Stop, not delete: the clients retry calls an election
		// interrupted, and a stop done twice still succeeds.
		if _, err := rs.ops(follower).guests.StopGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: name})); err != nil {
			t.Fatalf("StopGuest %s on follower %s right after the leader acknowledged its create: %v", name, follower, err)
		}
	}
}

// TestReportsSeePlacements: a report through a follower naming a guest
// the leader has just placed on the node is recorded, however far behind
// the follower applies (robustness seed 42001 found it acknowledged and
// dropped: the follower did not know the guest was on the node yet).
func TestReportsSeePlacements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := startGroup(t, 3)
	lead, follower := rs.leader(), rs.follower()
	a := rs.reps[lead].enrollAs(rs.token, "n1") // the leader need not hold the token
	a.report(t)
	viaFollower := rs.reps[follower].clientsAs(a.cert, "")
	for i := 0; i < 40; i++ {
		name := fmt.Sprintf("g%d", i)
		res, err := rs.ops(lead).guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: name,
			Spec: &corpusv1.GuestSpec{Image: "busybox", Resources: &corpusv1.Resources{CpuMillis: 50, MemoryBytes: 64 << 20}}}))
		if err != nil {
			t.Fatalf("CreateGuest %s on the leader: %v", name, err)
		}
		id := res.Msg.Guest.Id
		eventuallyT(t, name+" placed on n1, by the leader", func() error {
			v, err := rs.ops(lead).guests.GetGuest(ctx, connect.NewRequest(&corpusv1.GetGuestRequest{Name: name}))
			if err != nil || v.Msg.Guest.NodeId != a.id {
				return fmt.Errorf("%v, on %q", err, v.Msg.GetGuest().GetNodeId())
			}
			return nil
		})
		if _, err := viaFollower.agent.Report(ctx, connect.NewRequest(&corpusv1.ReportRequest{Capacity: capacity(), Drivers: drivers(),
			AgentAddress: a.address, AgentVersion: "test", Guests: []*corpusv1.ReportedGuest{observed(id, "running")}})); err != nil {
			t.Fatalf("Report through follower %s: %v", follower, err)
		}
		// A linearizable read: under load an election may have moved the
		// leadership since, and the old leader's own state can lag. The
		// report is the only one: were it dropped, the guest would never
		// show running, so waiting out an election proves the same.
		eventuallyT(t, name+" observed running after a report through follower "+follower, func() error {
			get := connect.NewRequest(&corpusv1.GetGuestRequest{Name: name})
			get.Header().Set(api.ConsistencyHeader, "linearizable")
			v, err := rs.ops(lead).guests.GetGuest(ctx, get)
			if err != nil {
				return err
			}
			if o := v.Msg.Guest.GetObserved(); o.GetState() != "running" {
				return fmt.Errorf("observed %v", o)
			}
			return nil
		})
	}
}

// TestPassOnWhenElected: a write a replica passes on to the leader, when
// that replica was elected meanwhile, is proposed there and applied, not
// refused (seen under load: "internal: this replica leads").
func TestPassOnWhenElected(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	rec := &corpusv1.DnsRecord{Id: "r1", Name: "www.cluster.corpus.", Type: "A", Ttl: 60, Data: "10.0.0.5", Key: "www.cluster.corpus. A 10.0.0.5"}
	cmd := &corpusv1.Command{Cmd: &corpusv1.Command_AddDnsRecord{AddDnsRecord: &corpusv1.AddDnsRecord{Record: rec}}}
	if _, err := coordinator.PassOn(s.Server, t.Context(), cmd); err != nil {
		t.Fatalf("PassOn on the leader = %v, want the write applied", err)
	}
	if got := s.Store().Read().DNSRecordByKey(rec.Key); got == nil {
		t.Errorf("record %s not in the state after PassOn", rec.Key)
	}
}

// TestWatchWaitsForTheGroup: a replica serves a node's desired state only
// once it has caught up with the group. One left alone (the others
// stopped) answers Unavailable, however much state it holds: it cannot
// tell that state is current, and a node told an older one would remove
// the guests it lacks (seen: a coordinator restarted under load served
// its state while it replayed its log, and its node destroyed a running
// guest and its volume, then made it again).
func TestWatchWaitsForTheGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := startGroup(t, 3)
	lead := rs.leader()
	a := rs.reps[lead].enrollAs(rs.token, "n1") // the leader need not hold the token
	a.report(t)
	if _, err := rs.ops(lead).guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "keep",
		Spec: &corpusv1.GuestSpec{Image: "busybox", Resources: &corpusv1.Resources{CpuMillis: 50, MemoryBytes: 64 << 20}}})); err != nil {
		t.Fatal(err)
	}
	left := rs.follower()
	rs.reps[left].waitFor("keep placed on n1", func(v *state.Snap) bool {
		g := v.GuestByName("keep")
		return g != nil && g.NodeId == a.id
	})
	via := rs.reps[left].clientsAs(a.cert, "")
	if err := firstMessage(via.agent.Watch(ctx, connect.NewRequest(&corpusv1.WatchRequest{}))); err != nil {
		t.Fatalf("Watch through follower %s while the group stands = %v", left, err)
	}
	for id, r := range rs.reps {
		if id != left {
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
		}
	}
	wctx, cancel := context.WithTimeout(ctx, testrun.D(30*time.Second))
	defer cancel()
	err := firstMessage(via.agent.Watch(wctx, connect.NewRequest(&corpusv1.WatchRequest{})))
	if code := connect.CodeOf(err); err == nil || (code != connect.CodeUnavailable && code != connect.CodeDeadlineExceeded) {
		t.Errorf("Watch through %s, alone = %v; want no desired state, unavailable", left, err)
	}
}
