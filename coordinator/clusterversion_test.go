package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"corpus/coordinator"
	"corpus/coordinator/compat"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestClusterVersionAcrossRestarts: a replica registers its server
// version and the group's cluster version follows it; restarted on a
// newer release (the next minor, played by raising compat.Current) the
// cluster version moves on; restarted on the older release again, the
// replica refuses to start and says what to run. Not parallel: it
// changes compat.Current, which every replica of this process reads.
func TestClusterVersionAcrossRestarts(t *testing.T) {
	release := compat.Current
	t.Cleanup(func() { compat.Current = release })
	next := compat.Version{Major: release.Major, Minor: release.Minor + 1}
	dir := t.TempDir()

	waitVersions := func(s *server, want compat.Version) {
		t.Helper()
		testrun.Wait(t, waitTimeout, "cluster version "+want.String()+" in Status and RaftPeers", func() error {
			ctx := context.Background()
			st, err := s.ops().cluster.Status(ctx, connect.NewRequest(&corpusv1.StatusRequest{}))
			if err != nil {
				return err
			}
			peers, err := s.ops().cluster.RaftPeers(ctx, connect.NewRequest(&corpusv1.RaftPeersRequest{}))
			if err != nil {
				return err
			}
			if st.Msg.ClusterVersion != want.String() || len(peers.Msg.Peers) != 1 || peers.Msg.Peers[0].ServerVersion != want.String() {
				return fmt.Errorf("status says cluster version %q, peers %v", st.Msg.ClusterVersion, peers.Msg.Peers)
			}
			return nil
		})
	}

	s := start(t, dir)
	waitVersions(s, release)
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}

	compat.Current = next
	s = start(t, dir)
	waitVersions(s, next)
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}

	compat.Current = release
	cfg := coordinator.Default()
	cfg.DataDir, cfg.APIAddr, cfg.RaftAddr, cfg.DNS.Addr, cfg.GossipAddr = dir, "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Logger = testLogger(t)
	srv, err := coordinator.New(cfg)
	want := compat.TooOld(next)
	if err == nil || !strings.Contains(err.Error(), want) {
		if srv != nil {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = srv.Serve(ctx) // releases what New opened
		}
		t.Fatalf("New() on the older release after the group moved on = %v, want an error saying %q", err, want)
	}
}
