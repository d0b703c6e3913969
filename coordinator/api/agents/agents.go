// Package agents serves the node agents' own calls of AgentService:
// enrollment and certificate renewal, the watch of a node's desired
// state, reports of what it observes, the TLS material of its proxies
// and the shells opened over its SSH endpoint. The agents' calls about
// projects and services are served by those packages.
package agents

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"corpus/coordinator/api"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/auth"
	"corpus/coordinator/compat"
	"corpus/coordinator/state"
	"corpus/internal/names"
	"corpus/internal/pki"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
)

// Service is the part of AgentService about the agents themselves; the
// packages per noun serve theirs (package serve joins them).
type Service struct {
	b     *api.Backend
	peers peerList
}

// New returns the part of AgentService about the agents themselves.
func New(b *api.Backend) *Service { return &Service{b: b} }

func (s *Service) Enroll(ctx context.Context, req *connect.Request[corpusv1.EnrollRequest]) (*connect.Response[corpusv1.EnrollResponse], error) {
	m := req.Msg
	if err := names.Validate("node", m.Name); err != nil {
		return nil, api.ToConnect(err)
	}
	for k, v := range m.Labels {
		if err := api.ValidLabel(k, v); err != nil {
			return nil, api.ToConnect(err)
		}
	}
	if err := validAgentAddrs(m.AgentAddress, m.Address); err != nil {
		return nil, api.ToConnect(err)
	}
	// A token reads ID.SECRET.PIN; the pin (the CA's fingerprint) is for
	// the host, which may send it along.
	tokID, tokSecret, ok := strings.Cut(m.JoinToken, ".")
	tokSecret, _, _ = strings.Cut(tokSecret, ".")
	if !ok || tokID == "" || tokSecret == "" {
		return nil, connect.NewError(connect.CodePermissionDenied, state.ErrInvalidToken)
	}
	if len(m.CsrPem) == 0 {
		return nil, api.ToConnect(api.Invalidf("enrollment needs a certificate request (csr_pem): upgrade the agent"))
	}
	view := s.b.Store.Read()
	cfg := view.Config()
	if cfg == nil {
		return nil, connect.NewError(connect.CodeUnavailable, state.ErrNotBootstrap)
	}
	trust, err := s.b.NodeTrust(view)
	if err != nil {
		return nil, err
	}
	if tok := view.Token(tokID); tok.GetNodeId() != "" {
		return s.rejoin(ctx, view, tok, tokSecret, m, trust)
	}
	mode := m.Labels["mode"]
	labels := map[string]string{}
	for k, v := range m.Labels {
		if k != "mode" {
			labels[k] = v
		}
	}
	if mode == "" {
		mode = "dev"
	}
	switch mode {
	case "dev", "staging", "prod", "drain":
	default:
		return nil, api.ToConnect(api.Invalidf("node mode %q: use dev, staging, prod or drain", mode))
	}
	nodeID := secret.Hex(8)
	// The certificate names the id chosen here, whatever the request says;
	// it is worth nothing unless the write below consumes the token.
	cert, err := s.b.CA.Signer().Sign(m.CsrPem, pki.Request{Role: pki.RoleNode, ID: nodeID, TTL: s.b.CertTTL})
	if err != nil {
		return nil, api.ToConnect(api.Invalidf("%v", err))
	}
	node := &corpusv1.Node{
		Id:            nodeID,
		Name:          m.Name,
		Status:        state.NodeInitializing,
		Mode:          mode,
		Labels:        labels,
		Capacity:      m.Capacity,
		Drivers:       m.Drivers,
		AgentAddress:  m.AgentAddress,
		AgentVersion:  m.AgentVersion,
		Address:       m.Address,
		CertSerial:    cert.Serial,
		CertExpiresAt: timestamppb.New(cert.NotAfter),
		CertCaPin:     trust.SignerPin,
		TrustedCaPins: trustedPins(trust),
	}
	_, err = s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_EnrollNode{EnrollNode: &corpusv1.EnrollNode{
		TokenId: tokID, TokenSecretHash: secret.Hash(tokSecret), Node: node,
	}}})
	if err != nil {
		return nil, err
	}
	s.b.Logger.Info("node enrolled", "node", node.Name, "node_id", node.Id)
	return connect.NewResponse(&corpusv1.EnrollResponse{
		NodeId:         node.Id,
		ClusterId:      cfg.ClusterId,
		AgentKey:       cfg.AgentKey,
		CertificatePem: cert.CertPEM,
		CaPem:          trust.CaPem,
	}), nil
}

// rejoin trades a rejoin token for a new certificate of the node it was
// made for, named as the request names it: the node keeps its id, its
// subnet and its guests; its former certificate is no longer accepted.
func (s *Service) rejoin(ctx context.Context, view *state.Snap, tok *corpusv1.JoinToken, tokSecret string, m *corpusv1.EnrollRequest, trust *corpusv1.ClusterTrust) (*connect.Response[corpusv1.EnrollResponse], error) {
	n := view.Node(tok.NodeId)
	if n == nil || n.Name != m.Name {
		// The token says for which node; a host naming another is
		// refused as any wrong token is.
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%w (a rejoin token is for one node, by its name)", state.ErrInvalidToken))
	}
	cert, err := s.b.CA.Signer().Sign(m.CsrPem, pki.Request{Role: pki.RoleNode, ID: n.Id, TTL: s.b.CertTTL})
	if err != nil {
		return nil, api.ToConnect(api.Invalidf("%v", err))
	}
	_, err = s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_RejoinNode{RejoinNode: &corpusv1.RejoinNode{
		TokenId: tok.Id, TokenSecretHash: secret.Hash(tokSecret), NodeId: n.Id, Serial: cert.Serial, ExpiresAt: timestamppb.New(cert.NotAfter),
		CaPin: trust.SignerPin, TrustedCaPins: trustedPins(trust),
	}}})
	if err != nil {
		return nil, err
	}
	s.b.Logger.Info("node rejoined with a new certificate", "node", n.Name, "node_id", n.Id, "serial", cert.Serial)
	cfg := view.Config()
	return connect.NewResponse(&corpusv1.EnrollResponse{NodeId: n.Id, ClusterId: cfg.ClusterId, AgentKey: cfg.AgentKey, CertificatePem: cert.CertPEM, CaPem: trust.CaPem}), nil
}

// RenewCertificate signs a new certificate for the calling node and makes
// it the node's current one.
func (s *Service) RenewCertificate(ctx context.Context, req *connect.Request[corpusv1.RenewCertificateRequest]) (*connect.Response[corpusv1.RenewCertificateResponse], error) {
	p := auth.FromContext(ctx)
	trust, err := s.b.NodeTrust(s.b.Store.Read())
	if err != nil {
		return nil, err
	}
	cert, err := s.b.CA.Signer().Sign(req.Msg.CsrPem, pki.Request{Role: pki.RoleNode, ID: p.NodeID, TTL: s.b.CertTTL})
	if err != nil {
		return nil, api.ToConnect(api.Invalidf("%v", err))
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_RenewNodeCertificate{RenewNodeCertificate: &corpusv1.RenewNodeCertificate{
		NodeId: p.NodeID, Serial: cert.Serial, ExpiresAt: timestamppb.New(cert.NotAfter), CaPin: trust.SignerPin, TrustedCaPins: trustedPins(trust),
	}}}); err != nil {
		return nil, err
	}
	s.b.Logger.Info("node certificate renewed", "node", p.NodeName, "serial", cert.Serial, "expires", cert.NotAfter, "ca", trust.SignerPin[:16])
	return connect.NewResponse(&corpusv1.RenewCertificateResponse{CertificatePem: cert.CertPEM, CaPem: trust.CaPem}), nil
}

// desiredOn is the desired state of a node's guests: those placed on it,
// and the old copies of guests migrating away from it, as they were
// before the move (its address and id range, this node), so they run on
// untouched until the new copy runs and they leave the list.
func desiredOn(view *state.Snap, nodeID string) []*corpusv1.Guest {
	guests := view.GuestsOnNode(nodeID)
	for _, g := range view.GuestsLeaving(nodeID) {
		old := proto.Clone(g).(*corpusv1.Guest)
		old.NodeId, old.Address, old.IdRange = nodeID, g.PreviousAddress, g.PreviousIdRange
		old.PreviousNodeId, old.PreviousAddress, old.PreviousIdRange = "", "", 0
		old.Observed = nil
		guests = append(guests, old)
	}
	return guests
}

func (s *Service) Report(ctx context.Context, req *connect.Request[corpusv1.ReportRequest]) (*connect.Response[corpusv1.ReportResponse], error) {
	p := auth.FromContext(ctx)
	m := req.Msg
	if err := validAgentAddrs(m.AgentAddress, m.Address); err != nil {
		return nil, api.ToConnect(err)
	}
	if s.b.Agents != nil {
		s.b.NodeSeen(p.NodeID)
	}
	view := s.b.Store.Read()
	if unplaced(view, p.NodeID, m) {
		// A guest this replica does not know on the node: a placement it
		// has not applied yet, most likely (the node learnt it from a
		// replica ahead of this one). Catch up before deciding, or the
		// report would be acknowledged without what it said.
		v, err := s.b.Current(ctx)
		if err != nil {
			return nil, err
		}
		view = v
	}
	n := view.Node(p.NodeID)
	if n == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("node %s is no longer enrolled", p.NodeName))
	}
	var idx uint64
	if n.Status != state.NodeReady || n.AgentAddress != m.AgentAddress || n.AgentVersion != m.AgentVersion ||
		n.Address != m.Address || n.MinHostPort != m.MinHostPort || n.GitPort != m.GitPort || !slices.Equal(n.ReservedPorts, m.ReservedPorts) ||
		!proto.Equal(n.Capacity, m.Capacity) || !sameDrivers(n.Drivers, m.Drivers) {
		i, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_UpdateNode{UpdateNode: &corpusv1.UpdateNode{
			NodeId: p.NodeID, Capacity: m.Capacity, Drivers: m.Drivers, AgentAddress: m.AgentAddress, AgentVersion: m.AgentVersion,
			Address: m.Address, MinHostPort: m.MinHostPort, ReservedPorts: m.ReservedPorts, GitPort: m.GitPort,
		}}})
		if err != nil {
			return nil, err
		}
		idx = i
	}
	// The guests the node keeps that the cluster does not know, once
	// every coordinator can store them.
	if !state.SameOrphans(n.Orphans, m.Orphans) && compat.Allows(view.ClusterVersion(), compat.NodeOrphans) {
		i, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_ReportOrphans{ReportOrphans: &corpusv1.ReportOrphans{
			NodeId: p.NodeID, Orphans: m.Orphans,
		}}})
		if err != nil {
			return nil, err
		}
		idx = i
	}
	// Only changed observations become a Raft write.
	var changed []*corpusv1.ObservedGuest
	for _, r := range m.Guests {
		g := view.Guest(r.GuestId)
		if g == nil || g.NodeId != p.NodeID || r.Observed == nil {
			continue
		}
		deleted := g.DesiredState == state.DesiredDeleted && r.Observed.State == state.ObservedDeleted
		if deleted || !corpusv1.SameObserved(g.Observed, r.Observed) {
			changed = append(changed, &corpusv1.ObservedGuest{GuestId: r.GuestId, Observed: r.Observed})
		}
	}
	if len(changed) > 0 {
		i, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_ReportGuests{ReportGuests: &corpusv1.ReportGuests{
			NodeId: p.NodeID, Guests: changed,
		}}})
		if err != nil {
			return nil, err
		}
		idx = i
	}
	var vols []*corpusv1.ObservedVolume
	for _, r := range m.Volumes {
		v := view.VolumeByID(r.VolumeId)
		if v != nil && r.OldCopyRemoved && v.PreviousNodeId == p.NodeID {
			vols = append(vols, &corpusv1.ObservedVolume{VolumeId: r.VolumeId, OldCopyRemoved: true})
			continue
		}
		if v == nil || v.NodeId != p.NodeID || r.Observed == nil {
			continue
		}
		gone := v.DesiredState == state.VolumeDeleted && r.Observed.State == state.ObservedDeleted
		if gone || !proto.Equal(v.Observed, r.Observed) {
			vols = append(vols, &corpusv1.ObservedVolume{VolumeId: r.VolumeId, Observed: r.Observed})
		}
	}
	if len(vols) > 0 {
		i, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_ReportVolumes{ReportVolumes: &corpusv1.ReportVolumes{
			NodeId: p.NodeID, Volumes: vols,
		}}})
		if err != nil {
			return nil, err
		}
		idx = i
	}
	if i, err := s.reportServices(ctx, view, p.NodeID, m.Services); err != nil {
		return nil, err
	} else if i > 0 {
		idx = i
	}
	if idx == 0 {
		idx = view.Index()
	}
	return connect.NewResponse(&corpusv1.ReportResponse{Index: idx}), nil
}

// unplaced says whether a report names a guest that view has neither on
// the node nor leaving it.
func unplaced(view *state.Snap, nodeID string, m *corpusv1.ReportRequest) bool {
	for _, r := range m.Guests {
		if g := view.Guest(r.GuestId); r.Observed != nil && (g == nil || g.NodeId != nodeID && g.PreviousNodeId != nodeID) {
			return true
		}
	}
	return false
}

func sameDrivers(a, b []*corpusv1.DriverInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// dnsInfo tells the agent where this replica answers the cluster zone.
func (s *Service) dnsInfo(msg *corpusv1.WatchResponse) {
	if s.b.Zones == nil {
		return
	}
	z := s.b.Zone()
	_, port, err := net.SplitHostPort(s.b.DNSAddr())
	if z == nil || err != nil {
		return
	}
	p, _ := strconv.Atoi(port)
	msg.DnsPort, msg.DnsZone = uint32(p), z.Origin()
}

// guestProjects maps those of guests that run a project environment to
// the project's name.
func guestProjects(view *state.Snap, guests []*corpusv1.Guest) map[string]string {
	if len(guests) == 0 {
		return nil
	}
	on := make(map[string]bool, len(guests))
	for _, g := range guests {
		on[g.Id] = true
	}
	out := map[string]string{}
	for _, p := range view.Projects() {
		for _, e := range p.GetEnvs() {
			for _, in := range state.Instances(e) {
				if on[in.GuestID] {
					out[in.GuestID] = p.Name
				}
			}
		}
	}
	return out
}

// instanceAssignments say what each of guests that is a project instance
// past the first should serve.
func instanceAssignments(view *state.Snap, guests []*corpusv1.Guest) []*corpusv1.InstanceAssignment {
	on := make(map[string]bool, len(guests))
	for _, g := range guests {
		on[g.Id] = true
	}
	var out []*corpusv1.InstanceAssignment
	for _, p := range view.Projects() {
		for _, e := range p.GetEnvs() {
			if on[e.GuestId] && e.StandbyRelease != 0 {
				// The first instance follows a switch (back) and retires
				// the standby once it expires; its deploys are its own.
				out = append(out, &corpusv1.InstanceAssignment{GuestId: e.GuestId, Project: p.Name, Env: e.Name, Index: 1, Release: e.CurrentRelease, Scale: e.Scale,
					StandbyRelease: e.StandbyRelease, StandbyUntil: e.StandbyUntil})
			}
			for _, in := range e.Instances {
				if on[in.GuestId] {
					out = append(out, &corpusv1.InstanceAssignment{GuestId: in.GuestId, Project: p.Name, Env: e.Name, Index: in.Index, Release: in.Release, Scale: e.Scale,
						StagedRelease: in.StagedRelease, StandbyRelease: e.StandbyRelease, StandbyUntil: e.StandbyUntil})
				}
			}
		}
	}
	return out
}

// validAgentAddrs checks what an agent says of itself: the host:port
// coordinators dial its API at, and the node address outside traffic
// reaches (an IP address or a DNS name). Either may be empty.
func validAgentAddrs(agentAddr, addr string) error {
	if agentAddr != "" {
		if err := api.ValidHostPort(agentAddr); err != nil {
			return api.Invalidf("agent address %.80q: %v", agentAddr, err)
		}
	}
	if addr != "" && net.ParseIP(addr) == nil {
		if err := api.ValidDNSName("node address", addr); err != nil || strings.Contains(addr, "_") {
			return api.Invalidf("node address %.80q is neither an IP address nor a DNS name", addr)
		}
	}
	return nil
}

// trustedPins are the pins of the CAs trust names.
func trustedPins(t *corpusv1.ClusterTrust) []string {
	cas, err := pki.ParseCerts(t.CaPem)
	if err != nil {
		return nil
	}
	return pki.Pins(cas)
}
