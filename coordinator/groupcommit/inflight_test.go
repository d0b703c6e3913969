package groupcommit_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"corpus/coordinator/groupcommit"
	"corpus/coordinator/state"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

// heldRaft is a fake of Raft (the test must hold entries between being
// taken and being applied, which a real replica does not let it do): it
// takes every entry at once and applies it to a real state machine only
// when the test releases it, in order.
type heldRaft struct {
	fsm *state.FSM
	mu  sync.Mutex
	// taken are the entries handed over, released how many were applied.
	taken    []*heldFuture
	released int
	// most is the most entries taken and not applied at once.
	most int
}

type heldFuture struct {
	raft.ApplyFuture // not called beyond the methods below
	log              raft.Log
	done             chan struct{}
	resp             any
}

func (f *heldFuture) Error() error  { <-f.done; return nil }
func (f *heldFuture) Response() any { <-f.done; return f.resp }
func (f *heldFuture) Index() uint64 { return f.log.Index }

func (r *heldRaft) Apply(cmd []byte, _ time.Duration) raft.ApplyFuture {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := &heldFuture{log: raft.Log{Index: uint64(len(r.taken) + 1), Type: raft.LogCommand, Data: cmd}, done: make(chan struct{})}
	r.taken = append(r.taken, f)
	r.most = max(r.most, len(r.taken)-r.released)
	return f
}

// release applies the entries taken up to n.
func (r *heldRaft) release(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for ; r.released < n && r.released < len(r.taken); r.released++ {
		f := r.taken[r.released]
		f.resp = r.fsm.Apply(&f.log)
		close(f.done)
	}
}

func (r *heldRaft) outstanding() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.most
}

func (r *heldRaft) applied() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.released
}

func (r *heldRaft) entries() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.taken)
}

// TestEntriesOverlapInFlight: the committer hands Raft the next entry
// while the one before is still being committed, up to MaxInFlight, so
// the leader writes one while the followers write another; writes that
// arrive with every slot taken wait for room, and all are answered.
func TestEntriesOverlapInFlight(t *testing.T) {
	t.Parallel()
	store := state.NewStore()
	r := &heldRaft{fsm: state.NewFSM(store, slog.New(slog.DiscardHandler))}
	const inFlight = 3
	c := groupcommit.New(groupcommit.Config{Raft: r, Store: store, MaxInFlight: inFlight})
	t.Cleanup(func() {
		r.release(1 << 30)
		c.Close()
	})
	propose := func(cmd *corpusv1.Command) chan error {
		done := make(chan error, 1)
		go func() {
			data, err := state.Encode(cmd, time.Now())
			if err == nil {
				var res *state.Result
				res, err = c.Propose(context.Background(), cmd, data)
				if err == nil {
					err = res.Err
				}
			}
			done <- err
		}()
		return done
	}
	wait := func(what string, n int) {
		t.Helper()
		testrun.Wait(t, testrun.D(10*time.Second), what, func() error {
			if got := r.entries(); got != n {
				return fmt.Errorf("raft took %d entries, want %d", got, n)
			}
			return nil
		})
	}
	version := propose(&corpusv1.Command{Cmd: &corpusv1.Command_SetClusterVersion{SetClusterVersion: &corpusv1.SetClusterVersion{Version: "v0.2"}}})
	wait("the cluster version's entry", 1)
	r.release(1)
	if err := <-version; err != nil {
		t.Fatalf("setting the cluster version: %v", err)
	}

	// One write after another, none applied: each goes to Raft at once.
	var answers []chan error
	for i := range inFlight {
		answers = append(answers, propose(record(fmt.Sprintf("w%d", i))))
		wait(fmt.Sprintf("write %d to be taken while %d before it are not applied", i, i), 2+i)
	}
	// Every slot taken: later writes wait for room, then all commit.
	for i := range 5 {
		answers = append(answers, propose(record(fmt.Sprintf("late%d", i))))
	}
	for i, a := range answers {
		testrun.Wait(t, testrun.D(10*time.Second), fmt.Sprintf("write %d to be answered", i), func() error {
			r.release(r.entries())
			select {
			case err := <-a:
				if err != nil {
					t.Errorf("write %d = %v, want success", i, err)
				}
				return nil
			default:
				return fmt.Errorf("raft took %d entries, applied %d", r.entries(), r.applied())
			}
		})
	}
	if most := r.outstanding(); most > inFlight {
		t.Errorf("%d entries were in Raft at once, over MaxInFlight %d", most, inFlight)
	}
	for i := range 5 {
		if store.Read().DNSRecord(fmt.Sprintf("late%d", i)) == nil {
			t.Errorf("late write %d answered but not applied", i)
		}
	}
}

// TestHold: Hold waits for the entries in flight to be applied, hands
// Raft nothing while held, and the writes proposed meanwhile commit once
// released.
func TestHold(t *testing.T) {
	t.Parallel()
	store := state.NewStore()
	r := &heldRaft{fsm: state.NewFSM(store, slog.New(slog.DiscardHandler))}
	c := groupcommit.New(groupcommit.Config{Raft: r, Store: store, MaxInFlight: 2})
	t.Cleanup(func() {
		r.release(1 << 30)
		c.Close()
	})
	propose := func(name string) chan error {
		done := make(chan error, 1)
		go func() {
			cmd := record(name)
			data, err := state.Encode(cmd, time.Now())
			if err == nil {
				var res *state.Result
				if res, err = c.Propose(context.Background(), cmd, data); err == nil {
					err = res.Err
				}
			}
			done <- err
		}()
		return done
	}
	taken := func(what string, n int) {
		t.Helper()
		testrun.Wait(t, 10*time.Second, what, func() error {
			if got := r.entries(); got != n {
				return fmt.Errorf("raft took %d entries, want %d", got, n)
			}
			return nil
		})
	}
	first := propose("before")
	taken("the write before the hold", 1)

	held := make(chan func(), 1)
	go func() {
		release, err := c.Hold(context.Background())
		if err != nil {
			t.Errorf("Hold = %v", err)
			release = func() {}
		}
		held <- release
	}()
	select {
	case <-held:
		t.Fatal("Hold returned while an entry was in flight")
	case <-time.After(100 * time.Millisecond):
	}
	r.release(1)
	if err := <-first; err != nil {
		t.Fatalf("the write before the hold = %v", err)
	}
	var release func()
	select {
	case release = <-held:
	case <-time.After(testrun.D(10 * time.Second)):
		t.Fatal("Hold did not return once the entry in flight was applied")
	}

	during := propose("during")
	time.Sleep(100 * time.Millisecond)
	if got := r.entries(); got != 1 {
		t.Fatalf("raft took %d entries while held, want 1", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Hold(ctx); err == nil {
		t.Error("a second Hold while held succeeded")
	}
	release()
	taken("the write proposed while held", 2)
	r.release(2)
	if err := <-during; err != nil {
		t.Fatalf("the write proposed while held = %v", err)
	}
	if store.Read().DNSRecord("during") == nil {
		t.Error("the write proposed while held was answered but not applied")
	}
}
