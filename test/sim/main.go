// Command corpus-sim runs thousands of simulated nodes against a real
// coordinator group, to show how the control plane holds at a scale no
// test machine has hosts for (test/sim/run starts the group and calls
// it). Each simulated node is what an agent is to the coordinators and
// nothing more: it enrolls with a join token of its own (a CSR, the
// issued certificate), holds the real Watch stream over mutual TLS, and
// sends Report heartbeats that say every guest placed on it runs; its
// driver only pretends. Measured, and printed as a Markdown table:
// enrollments per second, placements per second (guests created through
// the API until every one is on some node's watch stream), the leader's
// CPU, memory and Raft entries per second while the nodes heartbeat,
// the time for every watch stream to be served again after the leader is
// killed, and the time to reschedule the guests of a tenth of the nodes
// dying at once.
package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"corpus/internal/pki"
	"corpus/internal/procfs"
	"corpus/internal/rpc"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

type config struct {
	coordinators []string
	token, ca    string
	nodes        int
	guests       int
	reportEvery  time.Duration
	pids         map[string]int // replica API address -> PID, for the leader kill
}

func main() {
	var c config
	coords := flag.String("coordinators", "127.0.0.1:7400", "coordinator API addresses, comma-separated")
	flag.StringVar(&c.token, "token-file", "", "operator token file")
	flag.StringVar(&c.ca, "ca", "", "cluster CA certificate")
	flag.IntVar(&c.nodes, "nodes", 1000, "simulated nodes")
	flag.IntVar(&c.guests, "guests", 10000, "guests to place")
	flag.DurationVar(&c.reportEvery, "report-every", 5*time.Second, "each node's heartbeat interval")
	pids := flag.String("pids", "", "ADDR=PID of each replica, comma-separated (the leader is killed to measure a leader change)")
	flag.Parse()
	c.coordinators = strings.Split(*coords, ",")
	c.pids = map[string]int{}
	for _, kv := range strings.Split(*pids, ",") {
		var pid int
		if a, p, ok := strings.Cut(kv, "="); ok {
			if _, err := fmt.Sscan(p, &pid); err == nil {
				c.pids[a] = pid
			}
		}
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "corpus-sim:", err)
		os.Exit(1)
	}
}

// simNode is one simulated node.
type simNode struct {
	name string
	id   string
	// addr is the agent address it enrolled with and reports.
	addr string
	// clients reach each coordinator over mTLS with the node's
	// certificate; cur is the one in use, changed when it fails, as an
	// agent moves on.
	clients []corpusv1connect.AgentServiceClient
	cur     atomic.Int32
	// watchOn is the coordinator the watch stream is open on: a report
	// that failed may have moved cur since.
	watchOn atomic.Int32

	mu     sync.Mutex
	guests map[string]bool // guest ids placed here, from the watch stream
	// served counts watch responses; reconnectedAt is when the stream
	// last answered after a break.
	served      atomic.Int64
	streamBreak atomic.Int64 // unix nanos of the last break, 0 when serving
	lastServe   atomic.Int64 // unix nanos of the last response
	reports     atomic.Int64 // heartbeats answered
}

type sim struct {
	cfg   config
	ops   []corpusv1connect.NodeServiceClient
	gsts  []corpusv1connect.GuestServiceClient
	clus  []corpusv1connect.ClusterServiceClient
	pool  *x509.CertPool
	nodes []*simNode
}

func run(c config) error {
	tok, err := os.ReadFile(c.token)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(c.ca)
	if err != nil {
		return err
	}
	ca, err := pki.ParseCert(b)
	if err != nil {
		return err
	}
	s := &sim{cfg: c, pool: x509.NewCertPool()}
	s.pool.AddCert(ca)
	hc := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: pki.ClientConfig(s.pool, nil, pki.RoleCoordinator, "")}}
	// As the CLI does, calls wait out an election.
	auth := connect.WithInterceptors(rpc.Bearer(strings.TrimSpace(string(tok))), rpc.RetryWithoutLeader(30*time.Second))
	for _, a := range c.coordinators {
		s.ops = append(s.ops, corpusv1connect.NewNodeServiceClient(hc, rpc.BaseURL(a), auth))
		s.gsts = append(s.gsts, corpusv1connect.NewGuestServiceClient(hc, rpc.BaseURL(a), auth))
		s.clus = append(s.clus, corpusv1connect.NewClusterServiceClient(hc, rpc.BaseURL(a), auth))
	}
	ctx := context.Background()
	fmt.Printf("| figure | value |\n|---|---:|\n")
	row := func(k string, v any) { fmt.Printf("| %s | %v |\n", k, v) }
	row("simulated nodes", c.nodes)

	changes := s.countLeaderChanges(ctx)
	start := time.Now()
	if err := s.enrollAll(ctx, 32); err != nil {
		return err
	}
	took := time.Since(start)
	row("enrollments/s (token + enroll, 32 at a time)", fmt.Sprintf("%.0f", float64(c.nodes)/took.Seconds()))

	nodeCtx := make([]context.CancelFunc, len(s.nodes))
	for i, n := range s.nodes {
		nctx, cancel := context.WithCancel(ctx)
		nodeCtx[i] = cancel
		go n.watch(nctx)
		go n.heartbeat(nctx, c.reportEvery)
	}
	// Steady state: heartbeats only, for two intervals, once every node
	// reported (a node's first report marks it ready: a write).
	if err := waitFor(5*time.Minute, func() bool {
		for _, n := range s.nodes {
			if n.reports.Load() == 0 {
				return false
			}
		}
		return true
	}); err != nil {
		return fmt.Errorf("first reports: %w", err)
	}
	lead, leadPID := s.leader(ctx)
	cpu0, idx0, t0 := procfs.CPU(leadPID).Seconds(), s.index(ctx, lead), time.Now()
	time.Sleep(2 * c.reportEvery)
	cpu1, idx1, dt := procfs.CPU(leadPID).Seconds(), s.index(ctx, lead), time.Since(t0)
	row("leader CPU while nodes heartbeat (cores)", fmt.Sprintf("%.2f", (cpu1-cpu0)/dt.Seconds()))
	row("leader memory (RSS MiB)", procfs.RSS(leadPID)>>20)
	row("Raft entries/s while nodes heartbeat", fmt.Sprintf("%.1f", float64(idx1-idx0)/dt.Seconds()))

	// Placements.
	start = time.Now()
	if err := s.createGuests(ctx, c.guests, 64); err != nil {
		return err
	}
	created := time.Since(start)
	if err := waitFor(10*time.Minute, func() bool { return s.placed() >= c.guests }); err != nil {
		return fmt.Errorf("placing %d guests: %d on watch streams: %w", c.guests, s.placed(), err)
	}
	took = time.Since(start)
	row("guests", c.guests)
	row("guest creates/s through the API (64 clients)", fmt.Sprintf("%.0f", float64(c.guests)/created.Seconds()))
	row("placements/s (create to the node's watch stream)", fmt.Sprintf("%.0f", float64(c.guests)/took.Seconds()))
	row("leader memory with the guests (RSS MiB)", procfs.RSS(leadPID)>>20)

	row("leader changes so far, under load alone", changes.Load())

	// A leader change: the leader is killed; every stream it served
	// breaks and must be served again elsewhere.
	lead, leadPID = s.leader(ctx)
	if leadPID > 0 {
		onLeader := map[*simNode]bool{}
		for _, n := range s.nodes {
			onLeader[n] = s.cfg.coordinators[n.watchOn.Load()] == lead
		}
		p, _ := os.FindProcess(leadPID)
		killed := time.Now()
		p.Kill()
		// How many streams wait, every second, to see where the time goes.
		var waiting []int
		next := killed
		err := waitFor(5*time.Minute, func() bool {
			left := 0
			for _, n := range s.nodes {
				if n.streamBreak.Load() != 0 || onLeader[n] && n.lastServe.Load() < killed.UnixNano() {
					left++
				}
			}
			if time.Now().After(next) {
				waiting = append(waiting, left)
				next = next.Add(time.Second)
			}
			return left == 0
		})
		if err != nil {
			return fmt.Errorf("watch streams after the leader's kill: %w", err)
		}
		row("every watch stream served again after the leader's kill -9", time.Since(killed).Round(10*time.Millisecond))
		row("streams not yet served again, each second after the kill", strings.Trim(fmt.Sprint(waiting), "[]"))
	}

	// A tenth of the nodes die at once.
	dead := map[*simNode]bool{}
	orphans := map[string]bool{}
	for i := 0; i < len(s.nodes)/10; i++ {
		n := s.nodes[i]
		dead[n] = true
		nodeCtx[i]()
		n.mu.Lock()
		for g := range n.guests {
			orphans[g] = true
		}
		n.mu.Unlock()
	}
	died := time.Now()
	err = waitFor(10*time.Minute, func() bool {
		moved := 0
		for _, n := range s.nodes {
			if dead[n] {
				continue
			}
			n.mu.Lock()
			for g := range n.guests {
				if orphans[g] {
					moved++
				}
			}
			n.mu.Unlock()
		}
		return moved >= len(orphans)
	})
	if err != nil {
		return fmt.Errorf("rescheduling the guests of %d dead nodes: %w", len(dead), err)
	}
	row(fmt.Sprintf("%d nodes die at once: their %d guests on other nodes after", len(dead), len(orphans)), time.Since(died).Round(100*time.Millisecond))
	return nil
}

// countLeaderChanges polls who leads every 200 ms and counts changes.
func (s *sim) countLeaderChanges(ctx context.Context) *atomic.Int64 {
	var n atomic.Int64
	go func() {
		last := ""
		for ctx.Err() == nil {
			if l, _ := s.leader(ctx); l != "" {
				if last != "" && l != last {
					n.Add(1)
				}
				last = l
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	return &n
}

func (s *sim) enrollAll(ctx context.Context, parallel int) error {
	s.nodes = make([]*simNode, s.cfg.nodes)
	return each(s.cfg.nodes, parallel, func(_, i int) error {
		n, err := s.enroll(ctx, i)
		if err != nil {
			return fmt.Errorf("node %d: %w", i, err)
		}
		s.nodes[i] = n
		return nil
	})
}

// each calls f for 0..total-1 from parallel workers (f gets the worker's
// number too); it stops at the first error and returns it.
func each(total, parallel int, f func(w, i int) error) error {
	var (
		next  atomic.Int64
		first atomic.Value
		wg    sync.WaitGroup
	)
	for w := 0; w < parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= total || first.Load() != nil {
					return
				}
				if err := f(w, i); err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := first.Load().(error); err != nil {
		return err
	}
	return nil
}

func (s *sim) enroll(ctx context.Context, i int) (*simNode, error) {
	k := i % len(s.ops)
	tok, err := s.ops[k].CreateJoinToken(ctx, connect.NewRequest(&corpusv1.CreateJoinTokenRequest{}))
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("sim%05d", i)
	keyPEM, csrPEM, err := pki.NewKeyAndCSR("node " + name)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(tok.Msg.Token, ".")
	enroll := corpusv1connect.NewAgentServiceClient(rpc.HTTPClient(pki.PinnedConfig(parts[len(parts)-1])), rpc.BaseURL(s.cfg.coordinators[k]))
	addr := fmt.Sprintf("127.%d.%d.%d:7402", 1+i/62500, 1+i/250%250, 1+i%250)
	res, err := enroll.Enroll(ctx, connect.NewRequest(&corpusv1.EnrollRequest{
		JoinToken: tok.Msg.Token, Name: name, CsrPem: csrPEM,
		Capacity:     capacity,
		Drivers:      drivers,
		AgentAddress: addr,
		AgentVersion: "sim",
	}))
	if err != nil {
		return nil, err
	}
	kp, err := pki.KeyPair(res.Msg.CertificatePem, keyPEM, res.Msg.CaPem)
	if err != nil {
		return nil, err
	}
	tc := pki.ClientConfig(s.pool, pki.NewKeys(kp), pki.RoleCoordinator, "")
	hc := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: tc}}
	n := &simNode{name: name, id: res.Msg.NodeId, addr: addr, guests: map[string]bool{}}
	for _, a := range s.cfg.coordinators {
		n.clients = append(n.clients, corpusv1connect.NewAgentServiceClient(hc, rpc.BaseURL(a)))
	}
	n.cur.Store(int32(k))
	return n, nil
}

// What every simulated node offers: room for 128 guests of 32 MiB,
// and a driver that takes busybox.
var (
	capacity = &corpusv1.Resources{MemoryBytes: 4 << 30, CpuMillis: 8000, DiskBytes: 1 << 40}
	drivers  = []*corpusv1.DriverInfo{{Name: "lxc", Healthy: true, Exec: true, Images: []string{"busybox"}, NoVolumes: true, Detail: "simulated"}}
)

// watch holds the node's watch stream, reconnecting as an agent does.
func (n *simNode) watch(ctx context.Context) {
	for ctx.Err() == nil {
		on := n.cur.Load()
		n.watchOn.Store(on)
		stream, err := n.clients[on].Watch(ctx, connect.NewRequest(&corpusv1.WatchRequest{}))
		if err == nil {
			for stream.Receive() {
				msg := stream.Msg()
				ids := map[string]bool{}
				for _, g := range msg.Guests {
					ids[g.Id] = true
				}
				n.mu.Lock()
				n.guests = ids
				n.mu.Unlock()
				n.served.Add(1)
				n.lastServe.Store(time.Now().UnixNano())
				n.streamBreak.Store(0)
			}
			err = stream.Err()
			stream.Close()
		}
		if ctx.Err() != nil {
			return
		}
		if n.streamBreak.Load() == 0 {
			n.streamBreak.Store(time.Now().UnixNano())
		}
		if connect.CodeOf(err) == connect.CodeUnavailable || connect.CodeOf(err) == connect.CodeUnknown {
			n.next()
		}
		time.Sleep(time.Duration(200+rand.IntN(300)) * time.Millisecond)
	}
}

func (n *simNode) client() corpusv1connect.AgentServiceClient { return n.clients[n.cur.Load()] }

// next moves on to the next coordinator.
func (n *simNode) next() { n.cur.Store((n.cur.Load() + 1) % int32(len(n.clients))) }

// heartbeat reports every interval (jittered) that every guest placed
// here runs.
func (n *simNode) heartbeat(ctx context.Context, every time.Duration) {
	time.Sleep(time.Duration(rand.Int64N(int64(every))))
	for ctx.Err() == nil {
		n.mu.Lock()
		var gs []*corpusv1.ReportedGuest
		for id := range n.guests {
			gs = append(gs, &corpusv1.ReportedGuest{GuestId: id, Observed: &corpusv1.GuestObserved{State: "running"}})
		}
		n.mu.Unlock()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := n.client().Report(rctx, connect.NewRequest(&corpusv1.ReportRequest{Capacity: capacity, Drivers: drivers, Guests: gs, AgentAddress: n.addr, AgentVersion: "sim"}))
		cancel()
		if connect.CodeOf(err) == connect.CodeUnavailable || connect.CodeOf(err) == connect.CodeDeadlineExceeded {
			n.next()
		} else if err == nil {
			n.reports.Add(1)
		}
		select {
		case <-ctx.Done():
		case <-time.After(every):
		}
	}
}

func (s *sim) createGuests(ctx context.Context, total, parallel int) error {
	return each(total, parallel, func(w, i int) error {
		_, err := s.gsts[w%len(s.gsts)].CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: fmt.Sprintf("g%06d", i),
			Spec: &corpusv1.GuestSpec{Image: "busybox", Resources: &corpusv1.Resources{MemoryBytes: 32 << 20, CpuMillis: 10}}}))
		if err != nil {
			return fmt.Errorf("guest %d: %w", i, err)
		}
		return nil
	})
}

// placed counts the guests on the nodes' watch streams.
func (s *sim) placed() int {
	n := 0
	for _, nd := range s.nodes {
		nd.mu.Lock()
		n += len(nd.guests)
		nd.mu.Unlock()
	}
	return n
}

// leader is the leader's API address and PID (0 when not given).
func (s *sim) leader(ctx context.Context) (string, int) {
	for _, c := range s.clus {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := c.Status(ctx, connect.NewRequest(&corpusv1.StatusRequest{}))
		cancel()
		if err == nil && st.Msg.LeaderApi != "" {
			return st.Msg.LeaderApi, s.cfg.pids[st.Msg.LeaderApi]
		}
	}
	return "", 0
}

// index is the state's index as the replica at addr has applied it.
func (s *sim) index(ctx context.Context, addr string) uint64 {
	for i, a := range s.cfg.coordinators {
		if a == addr {
			w, err := s.clus[i].Wait(ctx, connect.NewRequest(&corpusv1.WaitRequest{}))
			if err == nil {
				return w.Msg.Index
			}
		}
	}
	return 0
}

func waitFor(limit time.Duration, ok func() bool) error {
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			return errors.New("not within " + limit.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}
