package api

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
	corpusv1 "corpus/proto/corpus/v1"
)

// watchRefresh is how often Watch resends the desired state even when
// nothing changed: a keepalive, and a level-based safety net.
const watchRefresh = 30 * time.Second

// Watch streams a node's desired state. Every stream wakes on every
// change to what it read, and part of that is the table of nodes (the
// peers a node routes guest subnets to), so one node's change wakes all
// of them. What keeps that from costing nodes² per change: the peer
// list is built once per state index for all streams, and a stream
// sends only when its node's message differs from the one it sent last
// (or watchRefresh passed), so a change elsewhere costs each stream a
// comparison of its own part, not an encoding and a send.
func (s *agentService) Watch(ctx context.Context, _ *connect.Request[corpusv1.WatchRequest], stream *connect.ServerStream[corpusv1.WatchResponse]) error {
	p := auth.FromContext(ctx)
	var (
		last     *corpusv1.WatchResponse
		lastPeer uint64 // the peer list's version in last
		sentAt   time.Time
	)
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
		peers, version := s.peers.of(view)
		if last != nil && version == lastPeer {
			msg.Peers = last.Peers // the same list, filtered already
		} else {
			msg.Peers = without(peers, p.NodeID)
		}
		if last == nil || version != lastPeer || time.Since(sentAt) >= watchRefresh || !sameWatch(last, msg) {
			if err := stream.Send(msg); err != nil {
				return err
			}
			last, lastPeer, sentAt = msg, version, time.Now()
		}
		wctx, cancel := context.WithTimeout(ctx, watchRefresh-time.Since(sentAt))
		err := view.Wait(wctx)
		cancel()
		if err != nil && ctx.Err() != nil {
			return nil // the agent went away
		}
	}
}

// watchMessage is a node's desired state in view, but for its peers.
func (s *agentService) watchMessage(view *state.Snap, nodeID string, n *corpusv1.Node) *corpusv1.WatchResponse {
	n = proto.Clone(n).(*corpusv1.Node)
	msg := &corpusv1.WatchResponse{Index: view.Index(), Node: n, Guests: desiredOn(view, nodeID), Routes: view.RoutesOnNode(nodeID)}
	msg.Volumes = append(view.VolumesOnNode(nodeID), view.VolumesLeftOnNode(nodeID)...)
	msg.GuestProjects = guestProjects(view, msg.Guests)
	msg.Instances = instanceAssignments(view, msg.Guests)
	msg.GuestServices, msg.ServiceReach = guestServices(view, msg.Guests), serviceReach(view, msg.Guests)
	msg.Backups = view.BackupsOnNode(nodeID)
	msg.GuestWaiting = guestWaiting(view, msg.Guests)
	msg.Certificates = nodeCertificates(view, msg.Routes)
	s.dnsInfo(msg)
	for _, c := range view.Coordinators() {
		if c.ApiAddress != "" {
			msg.Coordinators = append(msg.Coordinators, c.ApiAddress)
		}
	}
	if s.b.GossipAddr != nil {
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
// route it to, built once per state index for every Watch stream, with
// a version that moves only when the list does.
type peerList struct {
	mu      sync.Mutex
	index   uint64
	version uint64
	peers   []peer
}

type peer struct {
	nodeID string
	p      *corpusv1.PeerNode
}

// of returns the list for view and its version. view keeps watching the
// nodes, as a read of them would.
func (l *peerList) of(view *state.Snap) ([]peer, uint64) {
	idx := view.WatchNodes()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.version != 0 && idx <= l.index {
		// Built at this index or after: a stream on an older view gets
		// the newer list, and its watch wakes it for the rest.
		return l.peers, l.version
	}
	var peers []peer
	for _, n := range view.Nodes() {
		if n.GuestSubnet != "" && n.Address != "" {
			peers = append(peers, peer{n.Id, &corpusv1.PeerNode{Name: n.Name, Address: n.Address, GuestSubnet: n.GuestSubnet}})
		}
	}
	if l.version == 0 || !samePeers(l.peers, peers) {
		l.peers = peers
		l.version = idx
	}
	l.index = idx
	return l.peers, l.version
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
