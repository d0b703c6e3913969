package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"corpus/agent/cache"
	"corpus/internal/clock"
	"corpus/internal/pki"
	"corpus/internal/rpc"
	"corpus/internal/version"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// enroll loads the agent's identity, or trades the join token for one and
// stores it; an enrolled node given a rejoin token whose certificate
// cannot serve (expired, or of a CA the cluster rotated out) trades the
// token for a new one. A refused token is final; an unreachable
// coordinator is retried until ctx ends.
func (a *Agent) enroll(ctx context.Context) error {
	id, err := a.cache.Identity()
	if err == nil {
		if len(id.CertPEM) == 0 {
			return errors.New("this agent enrolled before nodes had certificates: remove the node (corpus node remove), delete the agent's state folder and enroll again")
		}
		a.id = id
		if a.cfg.Name != "" && id.NodeName != a.cfg.Name {
			a.logger.Warn("node name differs from enrolled name; keeping the enrolled one", "enrolled", id.NodeName, "configured", a.cfg.Name)
		}
		why := a.cannotServe(id)
		if why == "" {
			return nil
		}
		tokID, _, _ := strings.Cut(a.cfg.JoinToken, ".")
		if a.cfg.JoinToken == "" || tokID == id.JoinTokenID {
			a.logger.Warn("the node's certificate cannot serve; make a rejoin token with `corpus node token --node "+id.NodeName+"` and start the agent with it", "why", why)
			return nil
		}
		// A rejoin that fails leaves the node as it was: its guests run
		// on, and it tries its certificate.
		a.logger.Info("rejoining with the join token given", "why", why)
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := a.trade(rctx, &id); err != nil {
			a.logger.Error("rejoining failed; going on with the node's certificate", "error", err)
		}
		return nil
	}
	if !errors.Is(err, cache.ErrNoIdentity) {
		return fmt.Errorf("reading identity: %w", err)
	}
	if a.cfg.JoinToken == "" {
		return errors.New("this agent is not enrolled: pass --join-token (create one with `corpus node token`)")
	}
	return a.trade(ctx, nil)
}

// cannotServe says why the node's certificate cannot serve it any more
// ("" when it can): expired, or not of a CA the join token given names
// (the cluster CA was rotated while the node was away).
func (a *Agent) cannotServe(id cache.Identity) string {
	leaf, err := pki.ParseCert(id.CertPEM)
	if err != nil {
		return err.Error()
	}
	if now := clock.System.Now(); now.After(leaf.NotAfter) {
		return "it expired at " + leaf.NotAfter.UTC().Format(time.RFC3339)
	}
	if pin := tokenPin(a.cfg.JoinToken); pin != "" {
		cas, err := pki.ParseCerts(id.CAPEM)
		if err == nil && !slices.Contains(pki.Pins(cas), pin) {
			return "the join token names a CA the node does not trust (the cluster CA was rotated)"
		}
	}
	return ""
}

// tokenPin is the CA pin of a join token, "" if it has none.
func tokenPin(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || len(parts[2]) != 64 {
		return ""
	}
	return parts[2]
}

// trade trades the join token for a certificate: a new node's, or, with
// was, the enrolled node's again (a rejoin token, which keeps the node
// and its guests).
func (a *Agent) trade(ctx context.Context, was *cache.Identity) error {
	// A join token reads ID.SECRET.PIN: the pin is the cluster CA's
	// fingerprint, the one thing this host trusts before it has a
	// certificate of its own.
	pin := tokenPin(a.cfg.JoinToken)
	if pin == "" {
		return errors.New("join token is not of the form ID.SECRET.PIN: copy it whole from `corpus node token`")
	}
	name := a.cfg.Name
	if was != nil {
		name = was.NodeName
	}
	keyPEM, csrPEM, err := pki.NewKeyAndCSR("node " + name)
	if err != nil {
		return fmt.Errorf("making the node key: %w", err)
	}
	req := &corpusv1.EnrollRequest{
		CsrPem:       csrPEM,
		JoinToken:    a.cfg.JoinToken,
		Name:         name,
		Labels:       a.cfg.Labels,
		Capacity:     a.capacity(ctx),
		Drivers:      a.driverInfo(ctx),
		AgentAddress: a.advertise(),
		AgentVersion: version.Version,
	}
	backoff := 500 * time.Millisecond
	for {
		for _, addr := range a.cfg.Coordinators {
			c := corpusv1connect.NewAgentServiceClient(rpc.HTTPClient(pki.PinnedConfig(pin)), rpc.BaseURL(addr))
			res, err := c.Enroll(ctx, connect.NewRequest(req))
			if err == nil {
				return a.enrolled(addr, pin, keyPEM, res.Msg, was)
			}
			if errors.Is(err, pki.ErrPinMismatch) {
				return fmt.Errorf("enrolling with %s: %w", addr, pki.ErrPinMismatch)
			}
			switch connect.CodeOf(err) {
			case connect.CodeAlreadyExists:
				if was != nil {
					return fmt.Errorf("enrolling with %s: %w: node %s is enrolled; its certificate needs a rejoin token, made with `corpus node token --node %s`", addr, err, name, name)
				}
				return fmt.Errorf("enrolling with %s: %w", addr, err)
			case connect.CodePermissionDenied, connect.CodeInvalidArgument, connect.CodeUnauthenticated:
				return fmt.Errorf("enrolling with %s: %w", addr, err)
			}
			a.logger.Warn("coordinator unreachable for enrollment", "coordinator", addr, "error", err, "retry_in", backoff)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// enrolled checks and stores what enrollment (or a rejoin, with was)
// returned.
func (a *Agent) enrolled(addr, pin string, keyPEM []byte, res *corpusv1.EnrollResponse, was *cache.Identity) error {
	id := cache.Identity{
		NodeID: res.NodeId, NodeName: a.cfg.Name,
		ClusterID: res.ClusterId, AgentKey: res.AgentKey, Coordinator: addr, EnrolledAt: clock.System.Now(),
	}
	if was != nil {
		if res.NodeId != was.NodeID || res.ClusterId != was.ClusterID {
			return fmt.Errorf("rejoining with %s: the token made node %s of cluster %s, not this node (%s of %s)", addr, res.NodeId, res.ClusterId, was.NodeID, was.ClusterID)
		}
		id = *was
	}
	id.KeyPEM, id.CertPEM, id.CAPEM = keyPEM, res.CertificatePem, res.CaPem
	id.JoinTokenID, _, _ = strings.Cut(a.cfg.JoinToken, ".")
	if err := checkIssued(id, pin); err != nil {
		return fmt.Errorf("enrolling with %s: %w", addr, err)
	}
	if err := a.cache.SetIdentity(id); err != nil {
		return fmt.Errorf("storing identity: %w", err)
	}
	a.id = id
	verb := "enrolled"
	if was != nil {
		verb = "rejoined"
	}
	a.logger.Info(verb, "node", id.NodeName, "node_id", id.NodeID, "cluster_id", id.ClusterID)
	return nil
}

// checkIssued checks what enrollment or a renewal returned: trusted CAs
// among which the one with the pinned fingerprint (when pin is given),
// and a certificate from one of them for this node's key and id.
func checkIssued(id cache.Identity, pin string) error {
	cas, err := pki.ParseCerts(id.CAPEM)
	if err != nil {
		return fmt.Errorf("cluster CA: %w", err)
	}
	if pin != "" && !slices.Contains(pki.Pins(cas), pin) {
		return errors.New("the coordinator answered with a CA other than the join token's")
	}
	kp, err := keyPair(id)
	if err != nil {
		return fmt.Errorf("node certificate: %w", err)
	}
	who, ok := pki.IdentityOf(kp.Leaf)
	if !ok || who.Role != pki.RoleNode || who.ID != id.NodeID {
		return errors.New("node certificate does not name this node")
	}
	return nil
}

// keyPair is the node's certificate for mutual TLS, presented with the
// CA that issued it, which must be one of those trusted.
func keyPair(id cache.Identity) (*tls.Certificate, error) {
	cas, err := pki.ParseCerts(id.CAPEM)
	if err != nil {
		return nil, fmt.Errorf("cluster CA: %w", err)
	}
	return pki.TrustedKeyPair(id.CertPEM, id.KeyPEM, cas)
}

// tlsKeys loads the node's certificate for mutual TLS and the CAs it
// trusts.
func (a *Agent) tlsKeys() (*pki.Keys, *pki.Trust, error) {
	kp, err := keyPair(a.id)
	if err != nil {
		return nil, nil, fmt.Errorf("node certificate: %w", err)
	}
	cas, err := pki.ParseCerts(a.id.CAPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster CA: %w", err)
	}
	return pki.NewKeys(kp), pki.NewTrust(cas...), nil
}

// coordinatorHTTP is a client of the coordinators presenting the node's
// certificate and trusting only the cluster CA.
func (a *Agent) coordinatorHTTP() *http.Client {
	return rpc.HTTPClient(pki.TrustClientConfig(a.trust, a.keys, pki.RoleCoordinator, ""))
}

// renewLoop renews the node's certificate after two thirds of its life,
// or at once when the cluster's CA changed (see checkTrust): a new key,
// a request signed with the current certificate, the new one stored,
// then used for new connections. Open ones (the watch stream) carry on:
// the coordinator accepts the replaced certificate until it expires.
func (a *Agent) renewLoop(ctx context.Context) {
	for {
		life := pki.Lifetime(a.keys.Get().Leaf)
		wait := min(max(life/20, time.Second), time.Minute)
		now := false
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		case <-a.renewNow:
			now = true
		}
		if !now && !a.keys.RenewDue(clock.System.Now()) {
			continue
		}
		if err := a.renewCert(ctx); err != nil {
			a.logger.Warn("renewing the node certificate", "error", err, "expires", a.keys.NotAfter())
			if now {
				// Asked again by the next desired state; not at once.
				select {
				case <-ctx.Done():
					return
				case <-time.After(2 * time.Second):
				}
			}
		}
	}
}

// checkTrust asks for a renewal when the cluster's CAs (a rotation of
// the cluster CA in progress) are not what the node holds: other CAs
// trusted, or another CA signing.
func (a *Agent) checkTrust(t *corpusv1.ClusterTrust) {
	if t == nil || a.trust == nil {
		return
	}
	cas, err := pki.ParseCerts(t.CaPem)
	if err != nil {
		return
	}
	issuer := pki.IssuerOf(a.keys.Get().Leaf, a.trust.Certs())
	if slices.Equal(pki.Pins(cas), a.trust.Pins()) && issuer != nil && pki.Pin(issuer) == t.SignerPin {
		return
	}
	select {
	case a.renewNow <- struct{}{}:
	default:
	}
}

func (a *Agent) renewCert(ctx context.Context) error {
	keyPEM, csrPEM, err := pki.NewKeyAndCSR("node " + a.id.NodeName)
	if err != nil {
		return err
	}
	addr, c := a.coords.current()
	res, err := c.RenewCertificate(ctx, connect.NewRequest(&corpusv1.RenewCertificateRequest{CsrPem: csrPEM}))
	if err != nil {
		a.coords.failed(addr, err)
		return err
	}
	id := a.id
	id.KeyPEM, id.CertPEM, id.CAPEM = keyPEM, res.Msg.CertificatePem, a.trust.PEM()
	// The CAs to trust come with the certificate, over the mutual TLS
	// of the CAs trusted so far (a rotation of the cluster CA adds one,
	// then retires the old one).
	if len(res.Msg.CaPem) > 0 {
		id.CAPEM = res.Msg.CaPem
	}
	if err := checkIssued(id, ""); err != nil {
		return err
	}
	kp, err := keyPair(id)
	if err != nil {
		return err
	}
	cas, err := pki.ParseCerts(id.CAPEM)
	if err != nil {
		return err
	}
	if err := a.cache.SetIdentity(id); err != nil {
		return fmt.Errorf("storing the renewed certificate: %w", err)
	}
	// a.id keeps what other goroutines read (ids, names, keys), which a
	// renewal does not change; the certificate lives in a.keys, the CAs
	// in a.trust.
	a.trust.Set(cas)
	a.keys.Set(kp)
	a.tlsCerts.Store(&nodeCerts{keys: a.keys, ca: pki.IssuerOf(kp.Leaf, cas)})
	a.coords.reset(a.coordinatorHTTP())
	// The watch stream goes on with the replaced certificate, until the
	// next renewal ends it (a CA rotation renews twice in a row): a new
	// one with this certificate now.
	a.restartWatch()
	a.logger.Info("node certificate renewed", "expires", kp.Leaf.NotAfter, "ca", pki.Pin(pki.IssuerOf(kp.Leaf, cas))[:16], "trusted", len(cas))
	return nil
}
