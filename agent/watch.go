package agent

import (
	"context"
	"net"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"corpus/agent/network"
	corpusv1 "corpus/proto/corpus/v1"
)

// watchIdle is how long a watch stream may stay silent before the agent
// takes it for dead and opens another: coordinators resend the desired
// state every 30s, and a stream cut by a network partition may otherwise
// hang until TCP gives up, long after the network is back.
const watchIdle = 75 * time.Second

// watchLoop holds one watch stream to the coordinator, reconnecting with
// backoff. Each message is the full desired state of this node's guests.
func (a *Agent) watchLoop(ctx context.Context) {
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		addr, client := a.coords.current()
		sctx, cancel := context.WithCancel(ctx)
		a.mu.Lock()
		a.rewatch = cancel
		a.mu.Unlock()
		idle := time.AfterFunc(watchIdle, cancel)
		stream, err := client.Watch(sctx, connect.NewRequest(&corpusv1.WatchRequest{}))
		if err == nil {
			first := true
			for stream.Receive() {
				idle.Reset(watchIdle)
				backoff = 250 * time.Millisecond
				msg := stream.Msg()
				if a.staleDesired(msg, addr) {
					continue
				}
				a.noteRestore(msg)
				if err := a.cache.SetDesired(msg); err != nil {
					a.logger.Warn("caching desired state", "error", err)
				}
				a.setDesired(msg)
				a.checkTrust(msg.Trust)
				if added := a.coords.learn(msg.Coordinators); len(added) > 0 {
					a.logger.Info("learned coordinator addresses", "added", added)
				}
				if first {
					a.poke(a.gossipKick) // the coordinator may not know this node's member
					first = false
				}
			}
			err = stream.Err()
			stream.Close()
		}
		idle.Stop()
		restarted := sctx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return
		}
		if restarted {
			// Ended on purpose (see restartWatch) or idle: open a new
			// stream at once.
			a.logger.Info("watch stream restarted", "coordinator", addr)
			continue
		}
		next := a.coords.failed(addr, err)
		a.logger.Warn("watch stream ended; guests keep running as last told", "coordinator", addr, "error", err, "next", next, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// restartWatch ends the current watch stream; the watch loop opens a new
// one at once. Reports that succeed again after failing call it: the
// network came back, and the old stream may be stuck on a connection that
// died meanwhile.
func (a *Agent) restartWatch() {
	a.mu.Lock()
	cancel := a.rewatch
	a.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// staleDesired reports whether msg is older than the desired state the
// agent holds, and says so: within one history of the cluster (the same
// last restore) the state's index only grows, and a coordinator replica
// that still replays its log, or a follower that lags, must not make
// the agent remove the guests its older state lacks. The agent keeps
// what it holds; the stream sends the newer state once the replica has
// it. (Coordinators hold the stream until they have caught up, so this
// is the second guard, for replicas older than that.)
func (a *Agent) staleDesired(msg *corpusv1.WatchResponse, from string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.known || msg.GetRestore().GetId() != a.restore || msg.Index >= a.index {
		return false
	}
	a.logger.Warn("ignoring a desired state older than the one held", "coordinator", from, "index", msg.Index, "held_index", a.index)
	return true
}

// setDesired replaces the desired state and wakes the reconcile loop.
func (a *Agent) setDesired(msg *corpusv1.WatchResponse) {
	m := make(map[string]*corpusv1.Guest, len(msg.Guests))
	for _, g := range msg.Guests {
		m[g.Id] = g
	}
	// The volumes first: one bound to a guest not known yet is left
	// unmounted on the host (in case the guest is a VM).
	a.vols.Set(msg.Volumes)
	a.mu.Lock()
	a.desired = m
	a.index = msg.Index
	a.restore = msg.GetRestore().GetId()
	if msg.Node != nil {
		a.node = msg.Node
	}
	a.routes = msg.Routes
	a.httpsCerts = msg.Certificates
	a.guestProjects = msg.GuestProjects
	a.instances = msg.Instances
	a.guestServices = msg.GuestServices
	a.guestWaiting = msg.GuestWaiting
	a.peers = msg.Peers
	a.serviceReach = make(map[string]*corpusv1.ServiceReach, len(msg.ServiceReach))
	for _, r := range msg.ServiceReach {
		a.serviceReach[r.GuestId] = r
	}
	a.heldBackups = msg.Backups
	if a.heldBackups == nil {
		a.heldBackups = []*corpusv1.Backup{}
	}
	if msg.GossipAddr != "" {
		a.gossipPeer = msg.GossipAddr
	}
	a.cdns = network.ClusterDNS{}
	if host, _, err := net.SplitHostPort(a.coordinator()); err == nil && msg.DnsPort != 0 {
		a.cdns = network.ClusterDNS{Zone: msg.DnsZone, Server: net.JoinHostPort(host, strconv.Itoa(int(msg.DnsPort)))}
	}
	a.known = true
	a.mu.Unlock()
	a.poke(a.kick)
}
