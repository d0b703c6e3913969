package groupcommit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/groupcommit"
	"corpus/coordinator/state"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

// group is one real Raft replica (log and stable store on bbolt, fsync
// and all, as a coordinator has them) electing itself, with the real
// state machine and a committer over it.
type group struct {
	t      testing.TB
	raft   *raft.Raft
	logs   *raftboltdb.BoltStore
	store  *state.Store
	commit *groupcommit.Committer
}

// newGroup starts a replica whose cluster version is version, its
// committer bounded by maxCommands and maxBytes (0: the defaults).
func newGroup(t testing.TB, version string, maxCommands, maxBytes int) *group {
	t.Helper()
	dir := t.TempDir()
	logs, err := raftboltdb.NewBoltStore(filepath.Join(dir, "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := raft.NewFileSnapshotStore(dir, 1, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	addr, transport := raft.NewInmemTransport("")
	rc := raft.DefaultConfig()
	rc.LocalID = "c1"
	rc.Logger = nil
	rc.LogOutput = io.Discard
	store := state.NewStore()
	r, err := raft.NewRaft(rc, state.NewFSM(store, slog.New(slog.DiscardHandler)), logs, logs, snaps, transport)
	if err != nil {
		t.Fatal(err)
	}
	g := &group{t: t, raft: r, logs: logs, store: store}
	g.commit = groupcommit.New(groupcommit.Config{
		Raft:        r,
		Store:       store,
		MaxCommands: maxCommands,
		MaxBytes:    maxBytes,
	})
	t.Cleanup(func() {
		shutdown := r.Shutdown()
		g.commit.Close()
		if err := shutdown.Error(); err != nil {
			t.Errorf("Shutdown() = %v", err)
		}
		logs.Close()
		transport.Close()
	})
	if err := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: addr}}}).Error(); err != nil {
		t.Fatal(err)
	}
	testrun.Wait(t, testrun.D(10*time.Second), "the replica to lead", func() error {
		if s := r.State(); s != raft.Leader {
			return fmt.Errorf("state %s", s)
		}
		return nil
	})
	if version != "" {
		g.must(&corpusv1.Command{Cmd: &corpusv1.Command_SetClusterVersion{SetClusterVersion: &corpusv1.SetClusterVersion{Version: version}}})
	}
	return g
}

// propose commits cmd through the committer, as the leader's propose
// does, and returns its result or error.
func (g *group) propose(ctx context.Context, cmd *corpusv1.Command) (*state.Result, error) {
	data, err := state.Encode(cmd, time.Now())
	if err != nil {
		return nil, err
	}
	return g.commit.Propose(ctx, cmd, data)
}

func (g *group) must(cmd *corpusv1.Command) {
	g.t.Helper()
	res, err := g.propose(context.Background(), cmd)
	if err != nil || res.Err != nil {
		g.t.Fatalf("Propose(%v) = %v, %v; want success", cmd, res, err)
	}
}

// entries are the commands of each command entry in the log after
// index from: one for a plain entry, several for a batch.
func (g *group) entries(from uint64) [][]*corpusv1.Command {
	g.t.Helper()
	last, err := g.logs.LastIndex()
	if err != nil {
		g.t.Fatal(err)
	}
	var out [][]*corpusv1.Command
	for i := from + 1; i <= last; i++ {
		var l raft.Log
		if err := g.logs.GetLog(i, &l); err != nil {
			g.t.Fatalf("GetLog(%d) = %v", i, err)
		}
		if l.Type != raft.LogCommand {
			continue
		}
		var cmd corpusv1.Command
		if err := proto.Unmarshal(l.Data, &cmd); err != nil {
			g.t.Fatalf("entry %d does not decode: %v", i, err)
		}
		if b := cmd.GetBatch(); b != nil {
			out = append(out, b.Commands)
		} else {
			out = append(out, []*corpusv1.Command{&cmd})
		}
	}
	return out
}

func record(name string) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_AddDnsRecord{AddDnsRecord: &corpusv1.AddDnsRecord{Record: &corpusv1.DnsRecord{
		Id: name, Name: name, Type: "TXT", Data: "v", Key: name + " TXT v",
	}}}}
}

// writeConcurrently has clients proposers each write perClient records
// one after the other, the fourth of each a repeat of its first (refused
// with ErrExists). Every answer must be the write's own, and a write
// answered must be applied already.
func (g *group) writeConcurrently(clients, perClient int) {
	g.t.Helper()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range perClient {
				name := fmt.Sprintf("c%d-w%d", c, i)
				if i == 3 {
					name = fmt.Sprintf("c%d-w0", c)
				}
				cmd := record(name)
				cmd.Actor = fmt.Sprintf("node:c%d", c)
				res, err := g.propose(context.Background(), cmd)
				switch {
				case err != nil:
					g.t.Errorf("Propose(%s) = %v, want it committed", name, err)
				case i == 3 && !errors.Is(res.Err, state.ErrExists):
					g.t.Errorf("Propose(%s again) = %v, want ErrExists", name, res.Err)
				case i != 3 && res.Err != nil:
					g.t.Errorf("Propose(%s) = %v, want success", name, res.Err)
				case i != 3 && g.store.Read().DNSRecord(name) == nil:
					g.t.Errorf("Propose(%s) answered before the record was applied", name)
				case g.store.Applied() < res.Index:
					g.t.Errorf("Propose(%s) answered at index %d, applied only %d", name, res.Index, g.store.Applied())
				}
			}
		})
	}
	wg.Wait()
}

// TestConcurrentProposals: writes proposed together are gathered into
// batch entries; every one is acknowledged with its own answer, applied,
// and in the order its proposer sent it.
func TestConcurrentProposals(t *testing.T) {
	t.Parallel()
	g := newGroup(t, "v0.2", 0, 0)
	from, _ := g.logs.LastIndex()
	const clients, perClient = 32, 10
	g.writeConcurrently(clients, perClient)

	entries := g.entries(from)
	writes, batches := 0, 0
	for _, e := range entries {
		writes += len(e)
		if len(e) > 1 {
			batches++
		}
	}
	if writes != clients*perClient {
		t.Fatalf("the log holds %d writes, want %d", writes, clients*perClient)
	}
	if batches == 0 {
		t.Errorf("%d writes from %d proposers went in %d entries and no batch: nothing was gathered", writes, clients, len(entries))
	}
	t.Logf("%d writes in %d entries, %d of them batches", writes, len(entries), batches)

	// The audit log is in the order of application: each proposer's
	// writes, in the order it sent them.
	seen := map[string]int{}
	for _, e := range g.store.Read().Audit() {
		if e.Action != "add_dns_record" {
			continue
		}
		var c, i int
		if _, err := fmt.Sscanf(e.Target, "c%d-w%d", &c, &i); err != nil {
			t.Fatalf("audit target %q: %v", e.Target, err)
		}
		n := seen[e.Actor]
		want := n
		if n == 3 {
			want = 0
		}
		if i != want || e.Actor != fmt.Sprintf("node:c%d", c) {
			t.Errorf("audit entry %d.%d: %s wrote %s as its write %d; want c%d-w%d", e.Index, e.Position, e.Actor, e.Target, n, c, want)
		}
		seen[e.Actor]++
	}
	if len(seen) != clients {
		t.Errorf("the audit log names %d proposers, want %d", len(seen), clients)
	}
}

// TestGateFallsBackToSingleEntries: in a group whose cluster version does
// not allow batch entries, concurrent writes go one entry each, all
// acknowledged.
func TestGateFallsBackToSingleEntries(t *testing.T) {
	t.Parallel()
	g := newGroup(t, "v0.1", 0, 0)
	from, _ := g.logs.LastIndex()
	g.writeConcurrently(16, 6)
	entries := g.entries(from)
	if len(entries) != 16*6 {
		t.Errorf("16×6 writes went in %d entries, want one each", len(entries))
	}
	for _, e := range entries {
		if len(e) != 1 {
			t.Fatalf("an entry holds %d writes in a group at v0.1", len(e))
		}
	}
}

// TestBounds: no batch entry holds more commands or bytes than the
// committer's bounds.
func TestBounds(t *testing.T) {
	t.Parallel()
	const maxCommands, maxBytes = 5, 200
	g := newGroup(t, "v0.2", maxCommands, maxBytes)
	from, _ := g.logs.LastIndex()
	g.writeConcurrently(24, 6)
	batches := 0
	for _, e := range g.entries(from) {
		size := 0
		for _, c := range e {
			size += proto.Size(c)
		}
		if len(e) > maxCommands || (len(e) > 1 && size > maxBytes) {
			t.Errorf("a batch entry holds %d commands of %d bytes, over the bounds %d and %d", len(e), size, maxCommands, maxBytes)
		}
		if len(e) > 1 {
			batches++
		}
	}
	if batches == 0 {
		t.Error("no batch entry: the bounds were not exercised")
	}
}

// TestLoneWrite: a write proposed while nothing is in flight goes out at
// once, as a plain entry; one whose caller gave up first is not taken.
func TestLoneWrite(t *testing.T) {
	t.Parallel()
	g := newGroup(t, "v0.2", 0, 0)
	from, _ := g.logs.LastIndex()
	g.must(record("lone"))
	if e := g.entries(from); len(e) != 1 || len(e[0]) != 1 || e[0][0].GetAddDnsRecord() == nil {
		t.Errorf("a lone write went into the log as %v, want one plain entry", e)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.propose(ctx, record("gone")); !errors.Is(err, context.Canceled) {
		t.Errorf("Propose(cancelled) = %v, want context.Canceled", err)
	}
	g.must(record("after"))
	if g.store.Read().DNSRecord("gone") != nil {
		t.Error("a write whose caller gave up before it was taken was applied")
	}
}
