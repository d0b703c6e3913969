package robustness

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/anishathalye/porcupine"

	"corpus/internal/rpc"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/test/linearizable"
)

// workload is several clients calling the public API, each on a replica
// of its choice per call, recording what they saw.
type workload struct {
	g       *group
	start   time.Time
	keys    int
	clients int

	mu      sync.Mutex
	history []porcupine.Operation
	// acked are the keys of adds the API acknowledged.
	acked map[string]bool
	// refused counts calls a replica refused before doing anything (no
	// leader yet, connection refused): not in the history.
	refused int
	// seq numbers the values config writes write.
	seq int
	// node is the lab's node (nil before it enrolled); begun are the
	// BeginRelease calls of its deploys that were answered.
	node  *labNode
	begun []begun
	// lastBeat is when the node's last acknowledged heartbeat was sent;
	// beatGap the longest time from one's sending to the next one's
	// acknowledgement.
	lastBeat time.Time
	beatGap  time.Duration

	stop chan struct{}
	wg   sync.WaitGroup
}

const callTimeout = 3 * time.Second

func newWorkload(g *group, clients, keys int) *workload {
	return &workload{g: g, start: time.Now(), keys: keys, clients: clients, acked: map[string]bool{}, stop: make(chan struct{})}
}

// run starts the clients; each has its own random source from seed.
func (w *workload) run(seed uint64) {
	for c := 0; c < w.clients; c++ {
		w.loop(seed, c, func(rng *rand.Rand, _ int) {
			r := w.g.reps[rng.IntN(len(w.g.reps))]
			in := w.next(rng, c)
			w.do(c, r, in, callTimeout, func(ctx context.Context) (string, error) { return w.call(ctx, r, in) })
		})
	}
}

// loop runs step (with the step's number) until the workload halts, in
// a goroutine of client c, with its own random source from seed.
func (w *workload) loop(seed uint64, c int, step func(rng *rand.Rand, i int)) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		rng := rand.New(rand.NewPCG(seed, uint64(c)))
		for i := 0; !w.stopped(); i++ {
			step(rng, i)
		}
	}()
}

func (w *workload) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// next is a client's next operation: on DNS records and guests that are
// only added (each acknowledged add is read back from every replica at
// the end), on guests added and deleted again, or on an environment's
// config keys, written and read; keys drawn from a few, so clients
// contend.
func (w *workload) next(rng *rand.Rand, c int) linearizable.Input {
	w.mu.Lock()
	w.seq++
	n := w.seq
	w.mu.Unlock()
	switch x := rng.IntN(10); {
	case x < 6:
		kind := []string{"dns", "guest"}[rng.IntN(2)]
		in := linearizable.Input{Kind: linearizable.Add, Key: fmt.Sprintf("%s/k%d", kind, rng.IntN(w.keys))}
		if rng.IntN(10) < 4 {
			in.Kind = linearizable.Read
		}
		return in
	case x < 8:
		kinds := []string{linearizable.Add, linearizable.Delete, linearizable.Read}
		return linearizable.Input{Kind: kinds[rng.IntN(len(kinds))], Key: fmt.Sprintf("gdel/k%d", rng.IntN(8))}
	case x < 9 || w.node == nil:
		in := linearizable.Input{Kind: linearizable.Get, Key: fmt.Sprintf("config/K%d", rng.IntN(4))}
		if rng.IntN(2) == 0 {
			in.Kind, in.Value = linearizable.Set, fmt.Sprintf("c%d-%d", c, n)
		}
		return in
	default:
		// What the lab's node wrote: its guest's observed state, the
		// current release, and a release begun lately (or about to be).
		w.mu.Lock()
		last := len(w.begun)
		w.mu.Unlock()
		switch rng.IntN(3) {
		case 0:
			return linearizable.Input{Kind: linearizable.Get, Key: keyObserved}
		case 1:
			return linearizable.Input{Kind: linearizable.Get, Key: keyCurrent}
		default:
			return linearizable.Input{Kind: linearizable.Read, Key: releaseKey(fmt.Sprintf("%016x", max(1, last-rng.IntN(3)+1)))}
		}
	}
}

// proberID is the first client id of the probers: one per replica,
// each adding a record of its own every probeEvery with a short
// timeout, so that when the group takes writes again one is there to
// see it, whatever the workload's clients are stuck on.
const (
	proberID     = 1000
	probeEvery   = 20 * time.Millisecond
	probeTimeout = time.Second
)

func (w *workload) probe() {
	for i, r := range w.g.reps {
		w.loop(0, proberID+i, func(_ *rand.Rand, n int) {
			time.Sleep(probeEvery)
			in := linearizable.Input{Kind: linearizable.Add, Key: fmt.Sprintf("dns/p%d-%d", i, n)}
			w.do(proberID+i, r, in, probeTimeout, func(ctx context.Context) (string, error) { return w.call(ctx, r, in) })
		})
	}
}

func (w *workload) halt() {
	close(w.stop)
	w.wg.Wait()
}

func (w *workload) now() int64 { return time.Since(w.start).Nanoseconds() }

// do calls the API once (through replica r, by call) and records the
// outcome.
func (w *workload) do(c int, r *replica, in linearizable.Input, timeout time.Duration, call func(context.Context) (string, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(timeout))
	defer cancel()
	in.Via = r.id
	start := w.now()
	out, err := call(ctx)
	ret := w.now()
	if err != nil {
		if in.Kind == linearizable.Read || in.Kind == linearizable.Get || notSent(err) {
			// A failed read changed nothing; a refused add never left.
			w.mu.Lock()
			w.refused++
			w.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			return
		}
		out, ret = linearizable.Unknown, linearizable.Never
	}
	w.mu.Lock()
	w.history = append(w.history, porcupine.Operation{ClientId: c, Input: in, Call: start, Output: out, Return: ret})
	if kind, _, _ := strings.Cut(in.Key, "/"); (kind == "dns" || kind == "guest" || kind == "release") &&
		(out == linearizable.Created || out == linearizable.Existed || out == linearizable.Made) {
		w.acked[in.Key] = true
	}
	w.mu.Unlock()
}

// notSent says whether err proves the call had no effect: the replica
// refused it before proposing anything, or was never reached.
func notSent(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "no leader is elected yet") || strings.Contains(msg, "connection refused") ||
		strings.Contains(msg, "has not said where it answers yet")
}

func (w *workload) call(ctx context.Context, r *replica, in linearizable.Input) (string, error) {
	kind, name, _ := strings.Cut(in.Key, "/")
	switch {
	case kind == "dns" && in.Kind == linearizable.Add:
		res, err := w.g.dns(r).AddRecord(ctx, connect.NewRequest(&corpusv1.AddRecordRequest{Name: name, Type: "TXT", Data: "v"}))
		if err != nil {
			return "", err
		}
		return createdOr(res.Msg.Created), nil
	case kind == "guest" && in.Kind == linearizable.Add:
		res, err := w.g.guests(r).CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: name,
			Spec: &corpusv1.GuestSpec{Image: "busybox"}}))
		if err != nil {
			return "", err
		}
		return createdOr(res.Msg.Created), nil
	case kind == "gdel" && in.Kind == linearizable.Add:
		res, err := w.g.guests(r).CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "d-" + name,
			Spec: &corpusv1.GuestSpec{Image: "busybox"}}))
		if err != nil {
			return "", err
		}
		return createdOr(res.Msg.Created), nil
	case kind == "gdel" && in.Kind == linearizable.Delete:
		// Guests on no node (the lab has none) go at once.
		_, err := w.g.guests(r).DeleteGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: "d-" + name}))
		if connect.CodeOf(err) == connect.CodeNotFound {
			return linearizable.NotFound, nil
		}
		if err != nil {
			return "", err
		}
		return linearizable.Deleted, nil
	case kind == "gdel":
		return w.guestRead(ctx, r, "d-"+name)
	case kind == "config" && in.Kind == linearizable.Set:
		stream, err := w.g.projects(r).SetConfig(ctx, connect.NewRequest(&corpusv1.SetConfigRequest{
			Project: labProject, Env: corpusv1.EnvDev, Set: map[string]string{name: in.Value}, NoRestart: true}))
		if err != nil {
			return "", err
		}
		defer stream.Close()
		for stream.Receive() {
		}
		if err := stream.Err(); err != nil {
			return "", err
		}
		return linearizable.Written, nil
	case kind == "config":
		res, err := w.g.projects(r, rpc.Linearizable()).GetConfig(ctx, connect.NewRequest(&corpusv1.GetConfigRequest{
			Project: labProject, Env: corpusv1.EnvDev, Reveal: true}))
		if err != nil {
			return "", err
		}
		for _, v := range res.Msg.Vars {
			if v.Key == name {
				return v.Value, nil
			}
		}
		return "", nil
	case kind == "release":
		return w.releaseRead(ctx, r, name)
	case kind == "current":
		return w.releaseRead(ctx, r, "")
	case kind == "observed":
		res, err := w.g.guests(r, rpc.Linearizable()).GetGuest(ctx, connect.NewRequest(&corpusv1.GetGuestRequest{Name: name}))
		if err != nil {
			return "", err
		}
		return res.Msg.GetGuest().GetObserved().GetMessage(), nil
	case kind == "dns":
		res, err := w.g.dns(r, rpc.Linearizable()).ListRecords(ctx, connect.NewRequest(&corpusv1.ListRecordsRequest{}))
		if err != nil {
			return "", err
		}
		return presentOr(hasRecord(res.Msg, name)), nil
	default:
		return w.guestRead(ctx, r, name)
	}
}

// guestRead says whether guest name exists, by a linearizable read.
func (w *workload) guestRead(ctx context.Context, r *replica, name string) (string, error) {
	_, err := w.g.guests(r, rpc.Linearizable()).GetGuest(ctx, connect.NewRequest(&corpusv1.GetGuestRequest{Name: name}))
	if connect.CodeOf(err) == connect.CodeNotFound {
		return linearizable.Absent, nil
	}
	if err != nil {
		return "", err
	}
	return linearizable.Present, nil
}

func hasRecord(res *corpusv1.ListRecordsResponse, name string) bool {
	for _, rec := range res.Records {
		if rec.Name == name+"."+res.Zone || strings.HasPrefix(rec.Name, name+".") && rec.Type == "TXT" {
			return true
		}
	}
	return false
}

func createdOr(created bool) string {
	if created {
		return linearizable.Created
	}
	return linearizable.Existed
}

func presentOr(present bool) string {
	if present {
		return linearizable.Present
	}
	return linearizable.Absent
}

// nodeTimeout is the replicas' --node-timeout: a node whose reports all
// fail for that long is marked down. It is 4 s scaled: on a loaded
// machine a report the lab's node saw acknowledged 3.6 s after the one
// before reached the leader's liveness check later than that, and the
// node was marked down though it never stopped reporting (TestSeed9104
// beside the other test groups, load 12).
var nodeTimeout = testrun.D(4 * time.Second)

// lostEventually is lost, asked again while the replica answers that it
// cannot answer now (an election under way: a loaded machine has them
// after the last heal too) or its linearizable read outlasted its 10 s
// (a replica the faults left far behind catches up from a snapshot
// first), for up to 60 s (scaled): a replica that never catches up
// still fails the run.
func (w *workload) lostEventually(r *replica) ([]string, error) {
	deadline := time.Now().Add(testrun.D(60 * time.Second))
	for {
		lost, err := w.lost(r)
		code := connect.CodeOf(err)
		if err == nil || (code != connect.CodeUnavailable && code != connect.CodeDeadlineExceeded) || time.Now().After(deadline) {
			return lost, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// lost returns the acknowledged keys (DNS records, guests, releases)
// replica r does not have, by a linearizable read there.
func (w *workload) lost(r *replica) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(10*time.Second))
	defer cancel()
	recs, err := w.g.dns(r, rpc.Linearizable()).ListRecords(ctx, connect.NewRequest(&corpusv1.ListRecordsRequest{}))
	if err != nil {
		return nil, err
	}
	guests, err := w.g.guests(r, rpc.Linearizable()).ListGuests(ctx, connect.NewRequest(&corpusv1.ListGuestsRequest{}))
	if err != nil {
		return nil, err
	}
	rels, err := w.g.projects(r, rpc.Linearizable()).ListReleases(ctx, connect.NewRequest(&corpusv1.ListReleasesRequest{Project: labProject, Env: corpusv1.EnvDev}))
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, g := range guests.Msg.Guests {
		have["guest/"+g.GetGuest().GetName()] = true
	}
	for _, rel := range rels.Msg.Releases {
		have[releaseKey(rel.Id)] = true
	}
	if err := datedInOrder(guests.Msg.Guests); err != nil {
		return nil, err
	}
	var lost []string
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range w.acked {
		kind, name, _ := strings.Cut(k, "/")
		if kind == "dns" && !hasRecord(recs.Msg, name) || kind != "dns" && !have[k] {
			lost = append(lost, k)
		}
	}
	return lost, nil
}

// datedInOrder checks that the cluster's time never went back: a guest
// created later (by Raft index) is not dated earlier, whatever the clock
// of the leader that wrote it said. Guests created in one batch entry
// share its index; the state machine dates them in their order within
// it, which a guest does not record, so they are compared only with
// guests of earlier entries.
func datedInOrder(views []*corpusv1.GetGuestResponse) error {
	gs := make([]*corpusv1.Guest, 0, len(views))
	for _, v := range views {
		gs = append(gs, v.GetGuest())
	}
	slices.SortFunc(gs, func(a, b *corpusv1.Guest) int { return cmp.Compare(a.GetCreateIndex(), b.GetCreateIndex()) })
	// latest is the latest-dated guest of the entries before the
	// current one; entry the latest-dated of the current entry so far.
	var latest, entry *corpusv1.Guest
	for _, g := range gs {
		if entry != nil && entry.GetCreateIndex() != g.GetCreateIndex() {
			if latest == nil || entry.GetCreatedAt().AsTime().After(latest.GetCreatedAt().AsTime()) {
				latest = entry
			}
			entry = nil
		}
		if latest != nil && g.GetCreatedAt().AsTime().Before(latest.GetCreatedAt().AsTime()) {
			return fmt.Errorf("the cluster's time went back: guest %s (index %d) is dated %s, before guest %s (index %d, %s)",
				g.GetName(), g.GetCreateIndex(), g.GetCreatedAt().AsTime(), latest.GetName(), latest.GetCreateIndex(), latest.GetCreatedAt().AsTime())
		}
		if entry == nil || g.GetCreatedAt().AsTime().After(entry.GetCreatedAt().AsTime()) {
			entry = g
		}
	}
	return nil
}
