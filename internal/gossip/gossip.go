// Package gossip runs this process's member of the cluster's gossip pool
// (hashicorp/memberlist, SWIM with Lifeguard): coordinators and agents
// probe each other directly and through peers, and agree within seconds
// that a member stopped answering. Coordinators use it to mark nodes down
// quickly; the heartbeat deadline stays as the fallback.
//
// Members are named by role ("node/ID/RUN", "coordinator/ID"), a node's
// member by its agent process too: a restarted agent joins as a new
// member beside its predecessor, so the predecessor's death, heard a
// moment after the new process is up, is told apart from the node's.
// Traffic is encrypted with a key derived from the cluster's agent key
// and labelled with the cluster id, so members of another cluster cannot
// join or speak into this one.
package gossip

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// Member name prefixes.
const (
	nodePrefix        = "node/"
	coordinatorPrefix = "coordinator/"
)

// NodeMember is the member name of a node's agent process: run is the
// process's own random id (NewRun), new at every start.
func NodeMember(nodeID, run string) string { return nodePrefix + nodeID + "/" + run }

// NewRun returns a random id for an agent process's member name.
func NewRun() string { return rand.Text()[:10] }

// CoordinatorMember is the member name of a coordinator replica.
func CoordinatorMember(replicaID string) string { return coordinatorPrefix + replicaID }

// NodeID returns the node id of an agent's member name. Agents of
// releases before the run was part of it are named "node/ID".
func NodeID(member string) (string, bool) {
	rest, ok := strings.CutPrefix(member, nodePrefix)
	id, _, _ := strings.Cut(rest, "/")
	return id, ok && id != ""
}

// IsCoordinator reports whether a member name is a coordinator's.
func IsCoordinator(member string) bool { return strings.HasPrefix(member, coordinatorPrefix) }

// Config configures a member.
type Config struct {
	// Name is the member's name (NodeMember or CoordinatorMember).
	Name string
	// BindAddr is host:port to listen on, UDP and TCP; port 0 picks one.
	BindAddr string
	// AdvertiseHost is the address peers reach this member at; empty
	// means the bind host, or when that is unspecified, what memberlist
	// finds on the host's interfaces (a private address).
	AdvertiseHost string
	// ClusterID and Secret tie the member to one cluster: packets carry
	// the id as label and are encrypted with a key derived from Secret.
	ClusterID string
	Secret    string
	// OnChange is told when a member joins (alive) or is found dead or
	// gone (not alive). It must not block.
	OnChange func(member string, alive bool)
	Logger   *slog.Logger
}

// Member is a running gossip member.
type Member struct {
	list *memberlist.Memberlist
}

// Failure detection timing. A member that stops answering is suspected
// after a failed direct and indirect probe (within a second or so) and
// declared dead when the suspicion times out: 4 probe intervals (3.2s) in
// a small pool, up to 3 times that in a large one until peers confirm the
// suspicion. A live member refutes a suspicion as soon as it hears of it.
const (
	probeInterval  = 800 * time.Millisecond
	probeTimeout   = 400 * time.Millisecond
	suspicionMult  = 4
	suspicionMaxX  = 3
	reclaimDeadAge = 30 * time.Second
)

// Start binds the member's ports and starts gossiping. It joins nobody:
// call Join.
func Start(cfg Config) (*Member, error) {
	if cfg.Name == "" || cfg.Secret == "" {
		return nil, errors.New("gossip member needs a name and the cluster secret")
	}
	host, portStr, err := net.SplitHostPort(cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("gossip address %q: %w", cfg.BindAddr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("gossip address %q: bad port", cfg.BindAddr)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.BindAddr, mc.BindPort = host, port
	mc.AdvertisePort = port
	switch {
	case cfg.AdvertiseHost != "":
		mc.AdvertiseAddr = cfg.AdvertiseHost
	case !net.ParseIP(host).IsUnspecified():
		mc.AdvertiseAddr = host
	}
	mc.ProbeInterval, mc.ProbeTimeout = probeInterval, probeTimeout
	mc.SuspicionMult, mc.SuspicionMaxTimeoutMult = suspicionMult, suspicionMaxX
	mc.DeadNodeReclaimTime = reclaimDeadAge
	mc.Label = "corpus/" + cfg.ClusterID
	key := sha256.Sum256([]byte("corpus gossip key\x00" + cfg.Secret))
	mc.SecretKey = key[:]
	mc.Logger = log.New(logWriter{logger: logger}, "", 0)
	if cfg.OnChange != nil {
		mc.Events = events(cfg.OnChange)
	}
	list, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("starting gossip on %s: %w", cfg.BindAddr, err)
	}
	return &Member{list: list}, nil
}

// Join contacts the members at addrs (host:port) and merges their view
// of the pool. It succeeds when at least one answered.
func (m *Member) Join(addrs ...string) error {
	_, err := m.list.Join(addrs)
	if err != nil {
		return fmt.Errorf("joining gossip through %s: %w", strings.Join(addrs, ", "), err)
	}
	return nil
}

// Name is the member's name.
func (m *Member) Name() string { return m.list.LocalNode().Name }

// Addr is host:port peers reach this member at.
func (m *Member) Addr() string { return m.list.LocalNode().Address() }

// Alive returns the names of the members this one believes alive,
// itself included.
func (m *Member) Alive() []string {
	var out []string
	for _, n := range m.list.Members() {
		out = append(out, n.Name)
	}
	return out
}

// Close stops the member without announcing a leave: peers find it gone
// as they would a crash. Agents restart without their node being taken
// for one that left on purpose.
func (m *Member) Close() error { return m.list.Shutdown() }

// events adapts OnChange to memberlist's event delegate.
type events func(member string, alive bool)

func (e events) NotifyJoin(n *memberlist.Node)   { e(n.Name, true) }
func (e events) NotifyLeave(n *memberlist.Node)  { e(n.Name, false) }
func (e events) NotifyUpdate(n *memberlist.Node) {}

// logWriter turns memberlist's "[LEVEL] memberlist: ..." lines (one per
// Write, as package log writes them) into structured records. Debug lines
// are dropped; errors about peers are warnings here, as losing a peer is
// what the pool exists to notice.
type logWriter struct{ logger *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	switch {
	case strings.HasPrefix(line, "[DEBUG]"):
		return len(p), nil
	case strings.HasPrefix(line, "[WARN]"), strings.HasPrefix(line, "[ERR]"):
		level = slog.LevelWarn
	}
	if i := strings.Index(line, "memberlist: "); i >= 0 {
		line = line[i+len("memberlist: "):]
	}
	if strings.HasPrefix(line, "Got ping for unexpected node") {
		// A restarted agent, probed for its predecessor at the same
		// address until the pool finds that one dead: expected.
		level = slog.LevelDebug
	}
	w.logger.Log(context.Background(), level, line)
	return len(p), nil
}
