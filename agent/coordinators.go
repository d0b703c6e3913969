package agent

import (
	"net/http"
	"slices"
	"sync"

	"connectrpc.com/connect"

	"corpus/internal/rpc"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// coordinators are the coordinator addresses an agent knows, and the one
// it talks to now. When a call to the current one fails for want of an
// answer, the agent moves on to the next; any replica answers agents
// (reads locally, writes through the leader).
type coordinators struct {
	mu      sync.Mutex
	addrs   []string
	cur     int
	clients map[string]corpusv1connect.AgentServiceClient
	hc      *http.Client // mutual TLS with the node's certificate
}

func newCoordinators(addrs []string, hc *http.Client) *coordinators {
	return &coordinators{addrs: addrs, clients: map[string]corpusv1connect.AgentServiceClient{}, hc: hc}
}

// all returns every address known.
func (c *coordinators) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.addrs)
}

// current returns the address in use and its client.
func (c *coordinators) current() (string, corpusv1connect.AgentServiceClient) {
	c.mu.Lock()
	defer c.mu.Unlock()
	addr := c.addrs[c.cur]
	cl, ok := c.clients[addr]
	if !ok {
		cl = corpusv1connect.NewAgentServiceClient(c.hc, rpc.BaseURL(addr))
		c.clients[addr] = cl
	}
	return addr, cl
}

// reset makes later calls use hc (new connections, after the node's
// certificate was renewed): connections pooled by the old client carry
// the old certificate, which goes out of use after the next renewal.
func (c *coordinators) reset(hc *http.Client) {
	c.mu.Lock()
	old := c.hc
	c.hc = hc
	c.clients = map[string]corpusv1connect.AgentServiceClient{}
	c.mu.Unlock()
	if old != nil {
		old.CloseIdleConnections()
	}
}

// failed moves on from addr when a call to it got no answer; it returns
// the address to use next. Concurrent callers that saw the same failure
// move on once.
func (c *coordinators) failed(addr string, err error) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if connect.CodeOf(err) == connect.CodeUnavailable && c.addrs[c.cur] == addr && len(c.addrs) > 1 {
		c.cur = (c.cur + 1) % len(c.addrs)
	}
	return c.addrs[c.cur]
}

// learn adds coordinator addresses the cluster announced; known ones and
// the order (the current one) stay. An address on an unspecified host (a
// coordinator listening on every address without --advertise-addr, or
// an older one announcing it) names this node to a dialer here, not the
// coordinator: it is left out.
func (c *coordinators) learn(addrs []string) (added []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range addrs {
		if _, ok := rpc.SpecificHost(a); ok && !slices.Contains(c.addrs, a) {
			c.addrs = append(c.addrs, a)
			added = append(added, a)
		}
	}
	return added
}

// coordinatorList is the configured coordinators, the enrolled one added
// when it is not among them.
func coordinatorList(configured []string, enrolled string) []string {
	var out []string
	seen := map[string]bool{}
	for _, a := range append(append([]string(nil), configured...), enrolled) {
		if a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

// callCoordinator runs f against the current coordinator and, when that
// one gave no answer, once more against the next; it returns f's last
// error.
func (a *Agent) callCoordinator(f func(corpusv1connect.AgentServiceClient) error) error {
	addr, c := a.coords.current()
	err := f(c)
	if err != nil && connect.CodeOf(err) == connect.CodeUnavailable {
		if next := a.coords.failed(addr, err); next != addr {
			_, c = a.coords.current()
			err = f(c)
		}
	}
	return err
}
