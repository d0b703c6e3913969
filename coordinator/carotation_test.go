package coordinator_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator"
	"corpus/coordinator/state"
	"corpus/internal/pki"
	"corpus/internal/rpc"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

// rotatingNode is a node as the agent keeps itself through a rotation of
// the cluster CA: it watches, and renews its certificate when the watch
// says the cluster's CAs are not what it holds.
type rotatingNode struct {
	t     *testing.T
	name  string
	url   string
	trust *pki.Trust
	keys  *pki.Keys
	c     clients
	// renewals counts certificate renewals; msgs watch messages.
	renewals, msgs atomic.Int64
	// watchErrs are the watch streams' ends other than the test's.
	mu        sync.Mutex
	watchErrs []string
}

func enrollRotating(t *testing.T, s *server, name string) *rotatingNode {
	t.Helper()
	keyPEM, csrPEM, err := pki.NewKeyAndCSR(name)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.clients("").agent.Enroll(context.Background(), connect.NewRequest(&corpusv1.EnrollRequest{
		JoinToken: s.joinToken(), Name: name, Capacity: capacity(), Drivers: drivers(), AgentAddress: "127.0.0.1:1", AgentVersion: "test", CsrPem: csrPEM,
	}))
	if err != nil {
		t.Fatalf("Enroll(%s) = %v", name, err)
	}
	n := &rotatingNode{t: t, name: name, url: s.url()}
	if err := n.take(res.Msg.CertificatePem, keyPEM, res.Msg.CaPem); err != nil {
		t.Fatal(err)
	}
	return n
}

// take makes a certificate and the CAs that came with it the node's.
func (n *rotatingNode) take(certPEM, keyPEM, caPEM []byte) error {
	cas, err := pki.ParseCerts(caPEM)
	if err != nil {
		return err
	}
	kp, err := pki.TrustedKeyPair(certPEM, keyPEM, cas)
	if err != nil {
		return err
	}
	if n.trust == nil {
		n.trust, n.keys = pki.NewTrust(cas...), pki.NewKeys(kp)
	} else {
		n.trust.Set(cas)
		n.keys.Set(kp)
	}
	// New connections, as the agent's after a renewal: those open
	// authenticated with the replaced certificate.
	n.c = clientsAt(rpc.HTTPClient(pki.TrustClientConfig(n.trust, n.keys, pki.RoleCoordinator, "")), n.url, "")
	return nil
}

// saveErr takes a snapshot through c and returns its error.
func saveErr(c clients) error {
	stream, err := c.snap.SaveSnapshot(context.Background(), connect.NewRequest(&corpusv1.SaveSnapshotRequest{Key: make([]byte, 32)}))
	if err != nil {
		return err
	}
	defer stream.Close()
	for stream.Receive() {
	}
	return stream.Err()
}

// watch follows the node's desired state until ctx ends, renewing as the
// agent does; a renewal opens a new stream, as the agent's does.
func (n *rotatingNode) watch(ctx context.Context) {
	for ctx.Err() == nil {
		sctx, cancel := context.WithCancel(ctx)
		stream, err := n.c.agent.Watch(sctx, connect.NewRequest(&corpusv1.WatchRequest{}))
		renewed := false
		if err == nil {
			for stream.Receive() {
				n.msgs.Add(1)
				if t := stream.Msg().Trust; t != nil && n.stale(t) {
					if err := n.renew(ctx); err != nil {
						n.note("renewing: " + err.Error())
						continue
					}
					renewed = true
					break
				}
			}
			err = stream.Err()
		}
		cancel()
		if ctx.Err() == nil && !renewed {
			n.note(fmt.Sprint("watch ended: ", err))
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func (n *rotatingNode) note(s string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.watchErrs = append(n.watchErrs, s)
}

func (n *rotatingNode) stale(t *corpusv1.ClusterTrust) bool {
	cas, err := pki.ParseCerts(t.CaPem)
	if err != nil {
		return false
	}
	issuer := pki.IssuerOf(n.keys.Get().Leaf, n.trust.Certs())
	return !slices.Equal(pki.Pins(cas), n.trust.Pins()) || issuer == nil || pki.Pin(issuer) != t.SignerPin
}

func (n *rotatingNode) renew(ctx context.Context) error {
	keyPEM, csrPEM, err := pki.NewKeyAndCSR(n.name)
	if err != nil {
		return err
	}
	res, err := n.c.agent.RenewCertificate(ctx, connect.NewRequest(&corpusv1.RenewCertificateRequest{CsrPem: csrPEM}))
	if err != nil {
		return err
	}
	n.renewals.Add(1)
	return n.take(res.Msg.CertificatePem, keyPEM, res.Msg.CaPem)
}

// TestCARotation: a three-replica group with a node watching, a project
// config value sealed, and a client writing all along, rotates its CA:
// the rotation goes through its phases by itself; no write fails, the
// leader stays, the node's watch keeps receiving; at the end every
// replica and the node hold certificates of the new CA only, the old CA
// is refused, the sealed value still opens (on a replica restarted from
// its folder too), and the keyring and snapshots work again.
func TestCARotation(t *testing.T) {
	// A short trust period: the rotation's phases still take a few
	// round trips, with writes during each.
	rs := startGroupNamed(t, "c", 3, func(c *coordinator.Config) { c.CATrustPeriod = time.Second })
	lead := rs.leader()
	ops := rs.ops(lead)
	ctx := context.Background()
	oldCA, err := pki.ParseCert(rs.reps[lead].CACert())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ops.service.CreateService(ctx, connect.NewRequest(&corpusv1.CreateServiceRequest{Name: "mail", ExternalUrl: "https://mail.example.test", Secrets: map[string]string{"API_KEY": "s3cr3t"}})); err != nil {
		t.Fatal(err)
	}
	node := enrollRotating(t, rs.reps[lead], "n1")
	wctx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); node.watch(wctx) }()

	// A client trusting what the cluster trusts as it goes (as the CLI's
	// `ca rotate` does), writing to a follower all along.
	follower := rs.follower()
	clientTrust := pki.NewTrust(oldCA)
	writer := clientsAt(rpc.HTTPClient(pki.TrustClientConfig(clientTrust, nil, pki.RoleCoordinator, "")), rs.reps[follower].url(), rs.token)
	var writes, failed atomic.Int64
	var firstFail atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		for wctx.Err() == nil {
			_, err := writer.nodes.CreateJoinToken(wctx, connect.NewRequest(&corpusv1.CreateJoinTokenRequest{}))
			switch {
			case wctx.Err() != nil:
			case err != nil:
				failed.Add(1)
				firstFail.CompareAndSwap(nil, err.Error())
			default:
				writes.Add(1)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	stop := func() { stopWatch(); wg.Wait() }
	defer stop()

	// Snapshots and keyring rotations wait while it runs.
	began := time.Now()
	res, err := ops.cluster.RotateCa(ctx, connect.NewRequest(&corpusv1.RotateCaRequest{}))
	if err != nil {
		t.Fatalf("RotateCa() = %v", err)
	}
	next := res.Msg.Status.GetNext().GetPin()
	if next == "" || res.Msg.Status.Current.Pin != pki.Pin(oldCA) {
		t.Fatalf("RotateCa() status = %v; want a rotation from %.16s", res.Msg.Status, pki.Pin(oldCA))
	}
	if _, err := ops.cluster.RotateCa(ctx, connect.NewRequest(&corpusv1.RotateCaRequest{})); codeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("a second RotateCa() = %v; want AlreadyExists", err)
	}
	if _, err := ops.cluster.RotateKeyring(ctx, connect.NewRequest(&corpusv1.RotateKeyringRequest{})); err == nil {
		t.Errorf("RotateKeyring() during a CA rotation = nil; want it refused")
	}
	phases := map[string]bool{}
	eventuallyT(t, "the rotation ends", func() error {
		st, err := writer.cluster.CaStatus(ctx, connect.NewRequest(&corpusv1.CaStatusRequest{}))
		if err != nil {
			return err
		}
		s := st.Msg.Status
		if cas, err := pki.ParseCerts([]byte(s.TrustedPem)); err == nil {
			clientTrust.Set(cas)
		}
		if s.Next != nil {
			phases[s.Phase] = true
			return fmt.Errorf("%s phase: replicas %v, nodes %v", s.Phase, s.Replicas, s.Nodes)
		}
		if s.Current.Pin != next {
			return fmt.Errorf("the cluster CA is %.16s, want %.16s", s.Current.Pin, next)
		}
		return nil
	})
	took := time.Since(began)
	// The node renews once more on the end (its trust narrows).
	eventuallyT(t, "the node trusts the new CA only", func() error {
		if got := node.trust.Pins(); !slices.Equal(got, []string{next}) {
			node.mu.Lock()
			defer node.mu.Unlock()
			return fmt.Errorf("the node trusts %v (renewed %d times; %v)", got, node.renewals.Load(), node.watchErrs)
		}
		return nil
	})
	// Writes go on with the new CA trusted alone.
	after := writes.Load()
	eventuallyT(t, "writes after the rotation", func() error {
		if n := writes.Load() - after; n < 20 {
			return fmt.Errorf("%d writes since", n)
		}
		return nil
	})
	msgsBefore := node.msgs.Load()
	if _, err := ops.nodes.SetNodeMode(ctx, connect.NewRequest(&corpusv1.SetNodeModeRequest{Name: "n1", Mode: "staging"})); err != nil {
		t.Fatalf("SetNodeMode after the rotation = %v", err)
	}
	eventuallyT(t, "the node's watch tells of its new mode", func() error {
		if node.msgs.Load() == msgsBefore {
			return errors.New("no watch message since")
		}
		return nil
	})
	stop()
	t.Logf("rotation took %s; phases seen %v; %d writes, %d failed; node renewed %d times, %d watch messages; watch ends: %v", took, phases, writes.Load(), failed.Load(), node.renewals.Load(), node.msgs.Load(), node.watchErrs)
	if failed.Load() > 0 {
		t.Errorf("%d of %d writes failed during the rotation; first: %v", failed.Load(), writes.Load()+failed.Load(), firstFail.Load())
	}
	if len(node.watchErrs) > 0 {
		t.Errorf("the node's watch broke during the rotation: %v", node.watchErrs)
	}
	if now := rs.leader(); now != lead {
		t.Errorf("the leader changed during the rotation: %s, then %s", lead, now)
	}

	// Every replica holds the new CA alone, in its folder too.
	for id, r := range rs.reps {
		b, err := os.ReadFile(filepath.Join(r.dir, coordinator.TLSDir, coordinator.CACertFile))
		if err != nil {
			t.Fatal(err)
		}
		if c, err := pki.ParseCert(b); err != nil || pki.Pin(c) != next {
			t.Errorf("%s: %s is not the new CA", id, coordinator.CACertFile)
		}
		if _, err := os.Stat(filepath.Join(r.dir, coordinator.TLSDir, "ca-next.crt")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: ca-next.crt left after the rotation (%v)", id, err)
		}
		co := r.Store().Read().Coordinator(id)
		if co.GetCaPin() != next || !slices.Equal(co.GetTrustedCaPins(), []string{next}) {
			t.Errorf("%s registered CA %.16s, trusting %v; want the new one alone", id, co.GetCaPin(), co.GetTrustedCaPins())
		}
	}
	// The old CA is refused both ways: a client trusting it alone, and
	// a certificate of it.
	oldOnly := clientsAt(rpc.HTTPClient(pki.ClientConfig(poolOf(oldCA), nil, pki.RoleCoordinator, "")), rs.reps[lead].url(), rs.token)
	if _, err := oldOnly.cluster.CaStatus(ctx, connect.NewRequest(&corpusv1.CaStatusRequest{})); err == nil {
		t.Errorf("a client trusting the old CA alone reached a replica after the rotation")
	}
	// The sealed value opens with the new CA's key from a replica's
	// folder, and the keyring rotates again.
	opens := func(s *server) error {
		k, err := openRing(t, s, s.dir).Open(s.Store().Read())
		if err != nil {
			return err
		}
		v, err := k.Open(s.Store().Read().Service("mail").GetSecrets()["API_KEY"], state.ServicePlace("mail", "API_KEY"))
		if err != nil || string(v) != "s3cr3t" {
			return fmt.Errorf("the service's secret opens to %q, %v", v, err)
		}
		return nil
	}
	if err := opens(rs.reps[lead]); err != nil {
		t.Error(err)
	}
	if _, err := ops.cluster.RotateKeyring(ctx, connect.NewRequest(&corpusv1.RotateKeyringRequest{})); err != nil {
		t.Errorf("RotateKeyring after the rotation = %v", err)
	}
	// A replica restarted from its folder takes the new CA from there.
	f := rs.follower()
	r := rs.reps[f]
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	rs.reps[f] = newReplica(t, f, r.dir, rs.api[f], rs.raft[f], compaction)
	eventuallyT(t, "the restarted replica serves and opens the sealed value", func() error {
		if _, err := rs.ops(f).cluster.CaStatus(ctx, connect.NewRequest(&corpusv1.CaStatusRequest{})); err != nil {
			return err
		}
		return opens(rs.reps[f])
	})
	if err := saveErr(rs.ops(rs.leader())); err != nil {
		t.Errorf("SaveSnapshot after the rotation = %v", err)
	}
}

func poolOf(cas ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range cas {
		p.AddCert(c)
	}
	return p
}

// TestCARotationWaitsAbortsAndForces: a node that does not renew holds a
// rotation in its trust phase; it can be aborted there (the old CA stays),
// and a second one forced to its end (the node is left out: refused,
// until a rejoin token for it, and it alone, gives it a certificate of
// the new CA as the same node).
func TestCARotationWaitsAbortsAndForces(t *testing.T) {
	s := start(t, t.TempDir())
	ops := s.ops()
	ctx := context.Background()
	oldCA, err := pki.ParseCert(s.CACert())
	if err != nil {
		t.Fatal(err)
	}
	asleep := s.enroll("asleep")
	if _, err := ops.cluster.RotateCa(ctx, connect.NewRequest(&corpusv1.RotateCaRequest{Abort: true})); codeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("RotateCa(abort) with none in progress = %v; want FailedPrecondition", err)
	}
	if _, err := ops.cluster.RotateCa(ctx, connect.NewRequest(&corpusv1.RotateCaRequest{})); err != nil {
		t.Fatal(err)
	}
	time.Sleep(testrun.D(time.Second))
	st, err := ops.cluster.CaStatus(ctx, connect.NewRequest(&corpusv1.CaStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if st.Msg.Status.Phase != "trust" || len(st.Msg.Status.Nodes) != 1 || st.Msg.Status.Nodes[0].Trusts {
		t.Fatalf("status with a node that never renews = %v; want the trust phase, waiting for it", st.Msg.Status)
	}
	if err := saveErr(ops); codeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("a snapshot during the rotation = %v; want FailedPrecondition", err)
	}
	if _, err := ops.cluster.RotateCa(ctx, connect.NewRequest(&corpusv1.RotateCaRequest{Abort: true})); err != nil {
		t.Fatalf("RotateCa(abort) = %v", err)
	}
	eventuallyT(t, "the replica trusts the old CA alone again", func() error {
		if cas, _ := pki.ParseCerts(s.CACert()); len(cas) != 1 || pki.Pin(cas[0]) != pki.Pin(oldCA) {
			return fmt.Errorf("it trusts %d CAs", len(cas))
		}
		return nil
	})

	if _, err := ops.cluster.RotateCa(ctx, connect.NewRequest(&corpusv1.RotateCaRequest{})); err != nil {
		t.Fatal(err)
	}
	res, err := ops.cluster.RotateCa(ctx, connect.NewRequest(&corpusv1.RotateCaRequest{Finish: true}))
	if err != nil {
		t.Fatalf("RotateCa(finish) = %v", err)
	}
	if st := res.Msg.Status; st.Next != nil || st.Current.Pin == pki.Pin(oldCA) {
		t.Errorf("status after a forced end = %v; want the new CA alone", st)
	}

	// The node left out holds a certificate of the retired CA: refused.
	// A rejoin token for it gives it one of the new CA, as the same node.
	eventuallyT(t, "the replica trusts the new CA alone", func() error {
		if cas, _ := pki.ParseCerts(s.CACert()); len(cas) != 1 || pki.Pin(cas[0]) == pki.Pin(oldCA) {
			return fmt.Errorf("it trusts %d CAs", len(cas))
		}
		return nil
	})
	if _, err := asleep.agent.Report(ctx, connect.NewRequest(&corpusv1.ReportRequest{Capacity: capacity(), Drivers: drivers()})); err == nil {
		t.Errorf("a node on the retired CA reported after the rotation")
	}
	tok, err := ops.nodes.CreateJoinToken(ctx, connect.NewRequest(&corpusv1.CreateJoinTokenRequest{Node: "asleep"}))
	if err != nil {
		t.Fatalf("CreateJoinToken(node asleep) = %v", err)
	}
	if _, err := ops.nodes.CreateJoinToken(ctx, connect.NewRequest(&corpusv1.CreateJoinTokenRequest{Node: "nobody"})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("a rejoin token for no node = %v, want NotFound", err)
	}
	enroll := func(token, name string) (*connect.Response[corpusv1.EnrollResponse], []byte, error) {
		keyPEM, csrPEM, err := pki.NewKeyAndCSR(name)
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.clients("").agent.Enroll(ctx, connect.NewRequest(&corpusv1.EnrollRequest{
			JoinToken: token, Name: name, Capacity: capacity(), Drivers: drivers(), AgentAddress: "127.0.0.1:1", AgentVersion: "test", CsrPem: csrPEM,
		}))
		return res, keyPEM, err
	}
	if _, _, err := enroll(tok.Msg.Token, "other"); codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("a rejoin token used by another name = %v, want PermissionDenied", err)
	}
	if _, _, err := enroll(s.joinToken(), "asleep"); codeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("a plain join token for an enrolled name = %v, want AlreadyExists", err)
	}
	back, keyPEM, err := enroll(tok.Msg.Token, "asleep")
	if err != nil {
		t.Fatalf("rejoining = %v", err)
	}
	if back.Msg.NodeId != asleep.id || len(s.Store().Read().Nodes()) != 1 {
		t.Errorf("rejoined as node %s (of %d); want the same node, %s", back.Msg.NodeId, len(s.Store().Read().Nodes()), asleep.id)
	}
	cas, err := pki.ParseCerts(back.Msg.CaPem)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := pki.TrustedKeyPair(back.Msg.CertificatePem, keyPEM, cas)
	if err != nil {
		t.Fatalf("the rejoined node's certificate: %v", err)
	}
	if _, err := s.clientsAs(kp, "").agent.Report(ctx, connect.NewRequest(&corpusv1.ReportRequest{Capacity: capacity(), Drivers: drivers(), AgentAddress: "127.0.0.1:1"})); err != nil {
		t.Errorf("the rejoined node's report = %v", err)
	}
	if _, _, err := enroll(tok.Msg.Token, "asleep"); codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("a rejoin token used twice = %v, want PermissionDenied", err)
	}
}

// TestCARotationForcedEndServesTheNewCA: a forced end answers once the
// replica serves on what it answers. A client that trusts the CA it
// names, alone, as the CLI does at once (it saves it), reaches the
// replica right away, and a rejoin token made there pins that CA.
func TestCARotationForcedEndServesTheNewCA(t *testing.T) {
	s := start(t, t.TempDir())
	s.enroll("away")
	ops := s.ops()
	ctx := context.Background()
	for i := range 5 {
		if _, err := ops.cluster.RotateCa(ctx, connect.NewRequest(&corpusv1.RotateCaRequest{})); err != nil {
			t.Fatalf("rotation %d: RotateCa() = %v", i+1, err)
		}
		res, err := ops.cluster.RotateCa(ctx, connect.NewRequest(&corpusv1.RotateCaRequest{Finish: true}))
		if err != nil {
			t.Fatalf("rotation %d: RotateCa(finish) = %v", i+1, err)
		}
		st := res.Msg.Status
		cas, err := pki.ParseCerts([]byte(st.TrustedPem))
		if err != nil {
			t.Fatal(err)
		}
		ops = clientsAt(rpc.HTTPClient(pki.TrustClientConfig(pki.NewTrust(cas...), nil, pki.RoleCoordinator, "")), s.url(), s.OpsToken())
		tok, err := ops.nodes.CreateJoinToken(ctx, connect.NewRequest(&corpusv1.CreateJoinTokenRequest{Node: "away"}))
		if err != nil {
			t.Fatalf("rotation %d: CreateJoinToken(node away) trusting the CA RotateCa(finish) answered = %v", i+1, err)
		}
		if pin := tok.Msg.Token[strings.LastIndex(tok.Msg.Token, ".")+1:]; pin != st.Current.Pin {
			t.Errorf("rotation %d: the rejoin token pins CA %.16s; want the new one, %.16s", i+1, pin, st.Current.Pin)
		}
	}
}
