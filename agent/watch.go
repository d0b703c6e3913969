package agent

import (
	"context"
	"net"
	"strconv"
	"time"

	"connectrpc.com/connect"

	corpusv1 "corpus/proto/corpus/v1"
)

// watchLoop holds one watch stream to the coordinator, reconnecting with
// backoff. Each message is the full desired state of this node's guests.
func (a *Agent) watchLoop(ctx context.Context) {
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		addr, client := a.coords.current()
		stream, err := client.Watch(ctx, connect.NewRequest(&corpusv1.WatchRequest{}))
		if err == nil {
			for stream.Receive() {
				backoff = 250 * time.Millisecond
				msg := stream.Msg()
				if err := a.cache.SetDesired(msg); err != nil {
					a.logger.Warn("caching desired state", "error", err)
				}
				a.setDesired(msg)
				if added := a.coords.learn(msg.Coordinators); len(added) > 0 {
					a.logger.Info("learned coordinator addresses", "added", added)
				}
			}
			err = stream.Err()
			stream.Close()
		}
		if ctx.Err() != nil {
			return
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

// setDesired replaces the desired state and wakes the reconcile loop.
func (a *Agent) setDesired(msg *corpusv1.WatchResponse) {
	m := make(map[string]*corpusv1.Guest, len(msg.Guests))
	for _, g := range msg.Guests {
		m[g.Id] = g
	}
	a.mu.Lock()
	a.desired = m
	if msg.Node != nil {
		a.node = msg.Node
	}
	a.routes = msg.Routes
	a.volumes = msg.Volumes
	a.cdns = clusterDNS{}
	if host, _, err := net.SplitHostPort(a.coordinator()); err == nil && msg.DnsPort != 0 {
		a.cdns = clusterDNS{zone: msg.DnsZone, server: net.JoinHostPort(host, strconv.Itoa(int(msg.DnsPort)))}
	}
	a.known = true
	a.mu.Unlock()
	a.poke(a.kick)
}
