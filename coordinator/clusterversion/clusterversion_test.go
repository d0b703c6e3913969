package clusterversion_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"corpus/coordinator/clusterversion"
	"corpus/coordinator/compat"
	"corpus/coordinator/state/statetest"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

// group is a replica of the state; commit applies a command to it as
// Raft would once the entry committed, noting its kind.
type group struct {
	*statetest.Replica
	mu    sync.Mutex
	kinds []string
}

func newGroup() *group {
	return &group{Replica: statetest.NewReplica(func() time.Time { return time.Unix(1_800_000_000, 0) })}
}

func (g *group) commit(ctx context.Context, cmd *corpusv1.Command) (uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.kinds = append(g.kinds, compat.Kind(cmd))
	return g.Propose(ctx, cmd)
}

func (g *group) register(t *testing.T, id, serverVersion string) {
	t.Helper()
	_, err := g.commit(context.Background(), &corpusv1.Command{Cmd: &corpusv1.Command_UpsertCoordinator{UpsertCoordinator: &corpusv1.UpsertCoordinator{
		Coordinator: &corpusv1.Coordinator{Id: id, RaftAddress: id + ":1", ServerVersion: serverVersion},
	}}})
	if err != nil {
		t.Fatalf("registering %s: %v", id, err)
	}
}

func (g *group) proposals() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, k := range g.kinds {
		if k == "set_cluster_version" {
			out = append(out, k)
		}
	}
	return out
}

// TestLoopRaisesToLowestVoter: the cluster version rises to the lowest
// server version of the voters (a record of no voter holds nothing
// back), and follows it up as voters are upgraded, one
// entry per step. Not parallel: it plays releases up to v0.3 by raising
// compat.Current, which the state machine reads.
func TestLoopRaisesToLowestVoter(t *testing.T) {
	release := compat.Current
	compat.Current = compat.Version{Major: 0, Minor: 3}
	t.Cleanup(func() { compat.Current = release })
	g := newGroup()
	loop := &clusterversion.Loop{
		Store:   g.Store,
		Voters:  func() ([]string, error) { return []string{"c1", "c2", "c3"}, nil },
		Propose: g.commit,
		Logger:  slog.New(slog.DiscardHandler),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { loop.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	want := func(v string) {
		t.Helper()
		testrun.Wait(t, 10*time.Second, "cluster version "+v, func() error {
			if got := g.Store.Read().ClusterVersion().String(); got != v {
				return fmt.Errorf("cluster version %s", got)
			}
			return nil
		})
	}
	g.register(t, "gone", "") // a removed replica's record, of no voter
	g.register(t, "c1", "v0.2")
	g.register(t, "c2", "v0.2")
	g.register(t, "c3", "v0.1")
	want("v0.1")
	g.register(t, "c3", "v0.3")
	g.register(t, "c2", "v0.3")
	want("v0.2")
	g.register(t, "c1", "v0.3")
	want("v0.3")
	if got := g.proposals(); len(got) != 3 {
		t.Errorf("proposed %d SetClusterVersion entries, want 3 (one per rise)", len(got))
	}
}

// TestLowest: the lowest server version of the voters, unknown while a
// voter has none (not registered since it joined, or a release before
// server versions): that voter is named.
func TestLowest(t *testing.T) {
	t.Parallel()
	g := newGroup()
	g.register(t, "c1", "v0.1")
	g.register(t, "c2", "v0.1")
	g.register(t, "c3", "")
	g.register(t, "c4", "garbage")
	v := g.Store.Read()
	for _, tt := range []struct {
		voters      []string
		want        compat.Version
		wantWaiting string
	}{
		{[]string{"c1", "c2"}, compat.Version{Major: 0, Minor: 1}, ""},
		{[]string{"c1"}, compat.Version{Major: 0, Minor: 1}, ""},
		{[]string{"c1", "c3"}, compat.Version{}, "c3"},
		{[]string{"c1", "c4"}, compat.Version{}, "c4"},
		{[]string{"c1", "c9"}, compat.Version{}, "c9"},
	} {
		got, waiting := clusterversion.Lowest(v, tt.voters)
		if got != tt.want || waiting != tt.wantWaiting {
			t.Errorf("Lowest(%v) = %v, %q; want %v, %q", tt.voters, got, waiting, tt.want, tt.wantWaiting)
		}
	}
}
