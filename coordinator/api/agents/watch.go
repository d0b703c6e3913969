package agents

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/auth"
	"corpus/coordinator/state"
	"corpus/internal/rpc"
	corpusv1 "corpus/proto/corpus/v1"
)

// watchRefresh is how often Watch resends the desired state even when
// nothing changed: a keepalive, and a level-based safety net.
const watchRefresh = 30 * time.Second

// peerEvery is the most often a stream looks at the peer list again
// after nodes changed: routes to other nodes' guest subnets may follow a
// second late, and a fleet enrolling does not wake every stream per node.
const peerEvery = time.Second

// Watch streams a node's desired state. Two things wake a stream: what
// its node's own message reads (its record, guests, routes, ...), and
// the table of nodes, from which the peers a node routes guest subnets
// to come. The second changes with every node's report that says
// something new, so it must not cost nodes² per change: the peer list is
// built once per change of the table for all streams, with a version
// that moves only when the list does; a stream woken by the table alone
// compares that version, at most every peerEvery, and rebuilds nothing
// of its own. A stream sends only what differs from what it sent last
// (or everything again after watchRefresh). It begins once this replica
// has caught up with the group.
func (s *Service) Watch(ctx context.Context, _ *connect.Request[corpusv1.WatchRequest], stream *connect.ServerStream[corpusv1.WatchResponse]) error {
	p := auth.FromContext(ctx)
	// A replica that just started serves the state it has applied while
	// it replays its log, and a follower may lag: a node told that older
	// state would remove the guests it lacks. The stream begins once this
	// replica holds every write acknowledged before it was opened (or
	// answers why it cannot, and the agent tries again, its guests
	// running as last told).
	if _, err := s.b.Current(ctx); err != nil {
		return err
	}
	var (
		last     *corpusv1.WatchResponse
		lastPeer uint64 // the peer list's version in last
		sentAt   time.Time
	)
	send := func(msg *corpusv1.WatchResponse, version uint64) error {
		if err := stream.Send(msg); err != nil {
			return err
		}
		last, lastPeer, sentAt = msg, version, time.Now()
		return nil
	}
	for {
		view := s.b.Store.Read()
		n := view.Node(p.NodeID)
		if n == nil {
			return connect.NewError(connect.CodeNotFound, fmt.Errorf("node %s is no longer enrolled", p.NodeName))
		}
		// A stream opened with a certificate that went out of use (two
		// renewals since) ends: the agent reconnects with its current one.
		if p.CertSerial != "" && p.CertSerial != n.CertSerial && p.CertSerial != n.PrevCertSerial {
			return connect.NewError(connect.CodeUnauthenticated, errors.New("the certificate this stream was opened with is no longer in use: reconnect with the current one"))
		}
		msg := s.watchMessage(view, p.NodeID, n)
		peers, version, nodesCh := s.peers.of(s.b.Store.Read())
		if last != nil && version == lastPeer {
			msg.Peers = last.Peers // the same list, filtered already
		} else {
			msg.Peers = without(peers, p.NodeID)
		}
		if last == nil || version != lastPeer || time.Since(sentAt) >= watchRefresh || !sameWatch(last, msg) {
			if err := send(msg, version); err != nil {
				return err
			}
		}
		wctx, cancel := context.WithTimeout(ctx, watchRefresh-time.Since(sentAt))
		own := view.WatchCh(wctx)
		err := s.watchPeers(wctx, own, nodesCh, func(peers []peer, version uint64) error {
			if version == lastPeer {
				return nil
			}
			msg := proto.CloneOf(last)
			msg.Peers = without(peers, p.NodeID)
			return send(msg, version)
		})
		cancel()
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil // the agent went away
		}
	}
}

// watchPeers waits until own fires (the stream's own part changed, or
// ctx ended), handing the peer list to changed whenever the table of
// nodes changes meanwhile, at most every peerEvery.
func (s *Service) watchPeers(ctx context.Context, own <-chan error, nodesCh <-chan struct{}, changed func([]peer, uint64) error) error {
	for {
		select {
		case <-own:
			return nil
		case <-nodesCh:
		}
		select {
		case <-own:
			return nil // the full pass reads the peers too
		case <-time.After(peerEvery):
		}
		peers, version, ch := s.peers.of(s.b.Store.Read())
		nodesCh = ch
		if err := changed(peers, version); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// watchMessage is a node's desired state in view, but for its peers.
func (s *Service) watchMessage(view *state.Snap, nodeID string, n *corpusv1.Node) *corpusv1.WatchResponse {
	n = proto.Clone(n).(*corpusv1.Node)
	msg := &corpusv1.WatchResponse{Index: view.Index(), Node: n, Guests: desiredOn(view, nodeID), Routes: view.RoutesOnNode(nodeID)}
	msg.Volumes = append(view.VolumesOnNode(nodeID), view.VolumesLeftOnNode(nodeID)...)
	msg.GuestProjects = guestProjects(view, msg.Guests)
	msg.Instances = instanceAssignments(view, msg.Guests)
	msg.GuestServices, msg.ServiceReach = guestServices(view, msg.Guests), serviceReach(view, msg.Guests)
	msg.Backups = view.BackupsOnNode(nodeID)
	msg.GuestWaiting = guestWaiting(view, msg.Guests)
	msg.Certificates = nodeCertificates(view, msg.Routes)
	msg.Restore = view.Config().GetRestore()
	if s.b.CA != nil {
		// Left out while this replica lags behind a CA rotation's step.
		msg.Trust, _ = s.b.NodeTrust(view)
	}
	s.dnsInfo(msg)
	for _, c := range view.Coordinators() {
		// One listening on every address without an advertised one
		// says so; the agent reaches it at the address it dialled.
		if _, ok := rpc.SpecificHost(c.ApiAddress); ok {
			msg.Coordinators = append(msg.Coordinators, c.ApiAddress)
		}
	}
	if s.b.Agents != nil {
		msg.GossipAddr = s.b.GossipAddr()
	}
	return msg
}

// sameWatch reports whether two messages say the same but for their
// index and their peers (whose version the caller compares).
func sameWatch(a, b *corpusv1.WatchResponse) bool {
	ai, ap, bi, bp := a.Index, a.Peers, b.Index, b.Peers
	a.Index, a.Peers, b.Index, b.Peers = 0, nil, 0, nil
	same := proto.Equal(a, b)
	a.Index, a.Peers, b.Index, b.Peers = ai, ap, bi, bp
	return same
}

// peerList is the nodes that have a guest subnet and an address to
// route it to, built once for every Watch stream each time the table of
// nodes changes, with a version that moves only when the list does.
type peerList struct {
	mu      sync.Mutex
	table   <-chan struct{} // the nodes table's watch channel when built
	version uint64
	peers   []peer
}

type peer struct {
	nodeID string
	p      *corpusv1.PeerNode
}

// of returns the list in view, its version, and the channel that closes
// when the table of nodes changes after view.
func (l *peerList) of(view *state.Snap) ([]peer, uint64, <-chan struct{}) {
	table := view.WatchNodes()
	l.mu.Lock()
	defer l.mu.Unlock()
	if table == l.table {
		return l.peers, l.version, table
	}
	// A stream on an older view may rebuild from it after a newer one
	// did: the version moves back and forth with the content, and its
	// watch wakes it for the newer state.
	var peers []peer
	for _, n := range view.Nodes() {
		if n.GuestSubnet != "" && n.Address != "" {
			peers = append(peers, peer{n.Id, &corpusv1.PeerNode{Name: n.Name, Address: n.Address, GuestSubnet: n.GuestSubnet}})
		}
	}
	if l.version == 0 || !samePeers(l.peers, peers) {
		l.peers = peers
		l.version++
	}
	l.table = table
	return l.peers, l.version, table
}

func samePeers(a, b []peer) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].nodeID != b[i].nodeID || !proto.Equal(a[i].p, b[i].p) {
			return false
		}
	}
	return true
}

// without is peers but self, as a node routes to the others.
func without(peers []peer, self string) []*corpusv1.PeerNode {
	out := make([]*corpusv1.PeerNode, 0, len(peers))
	for _, p := range peers {
		if p.nodeID != self {
			out = append(out, p.p)
		}
	}
	return out
}
