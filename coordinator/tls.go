package coordinator

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"golang.org/x/net/netutil"

	"corpus/internal/atomicfile"
	"corpus/internal/clock"
	"corpus/internal/pki"
)

// Files in DataDir/tls. ca-next.* is the CA a rotation of the cluster
// CA moves to, until it ends (catrust.go).
const (
	TLSDir       = "tls"
	CACertFile   = "ca.crt"
	caKeyFile    = "ca.key"
	nextCertFile = "ca-next.crt"
	nextKeyFile  = "ca-next.key"
	ownCertFile  = "coordinator.crt"
	ownKeyFile   = "coordinator.key"
)

// DefaultCertTTL is the lifetime of the certificates the CA issues;
// they are renewed after two thirds of it.
const DefaultCertTTL = 30 * 24 * time.Hour

// certs are a replica's TLS material: the cluster CA and its own
// certificate, which it renews itself. A rotation of the cluster CA
// changes the CAs held, trusted and signing while the replica runs
// (catrust.go).
type certs struct {
	// mu serialises changes: renewals, and a rotation's steps.
	mu sync.Mutex
	// held are the CAs whose keys the replica holds, the signer first.
	held  atomic.Pointer[[]*pki.CA]
	trust *pki.Trust
	keys  *pki.Keys
	clock clock.Clock
	dir   string
	id    string
	ttl   time.Duration
	// ips and dnsNames are the addresses and names its own certificate
	// covers beside pki.ServerName (see sanNames).
	ips      []net.IP
	dnsNames []string
	// pinMemo keeps pins' last answer.
	pinMemo atomic.Pointer[pinMemo]
}

// loadCerts reads (or creates) the cluster CA and this replica's
// certificate. The CA comes from DataDir/tls, else from the files the
// configuration names (copied there), else a replica bootstrapping alone
// creates one. Replicas of a group share one CA: give each the same files.
func loadCerts(cfg Config, alone bool) (*certs, error) {
	dir := filepath.Join(cfg.DataDir, TLSDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating tls folder: %w", err)
	}
	caPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, caKeyFile)
	certPEM, err1 := os.ReadFile(caPath)
	keyPEM, err2 := os.ReadFile(keyPath)
	switch {
	case (err1 == nil) != (err2 == nil):
		// Never replace half a CA: certificates of the old one would
		// stop working without anyone deciding so.
		return nil, fmt.Errorf("the cluster CA in %s is incomplete (%s and %s must both be there): restore the missing file", dir, CACertFile, caKeyFile)
	case err1 == nil && err2 == nil:
		if cfg.CACertFile != "" {
			given, err := os.ReadFile(cfg.CACertFile)
			if err != nil {
				return nil, fmt.Errorf("reading --ca-cert: %w", err)
			}
			if string(given) != string(certPEM) && !retired(dir, given) {
				return nil, fmt.Errorf("--ca-cert %s is not the CA this replica already uses (%s); a replica's CA cannot change", cfg.CACertFile, caPath)
			}
		}
	case !errors.Is(err1, os.ErrNotExist) || !errors.Is(err2, os.ErrNotExist):
		return nil, fmt.Errorf("reading the cluster CA: %w", errors.Join(err1, err2))
	case cfg.CACertFile != "" || cfg.CAKeyFile != "":
		if cfg.CACertFile == "" || cfg.CAKeyFile == "" {
			return nil, errors.New("give both --ca-cert and --ca-key")
		}
		if certPEM, err1 = os.ReadFile(cfg.CACertFile); err1 != nil {
			return nil, fmt.Errorf("reading --ca-cert: %w", err1)
		}
		if keyPEM, err2 = os.ReadFile(cfg.CAKeyFile); err2 != nil {
			return nil, fmt.Errorf("reading --ca-key: %w", err2)
		}
		if err := writeCA(dir, certPEM, keyPEM); err != nil {
			return nil, err
		}
	case alone:
		if certPEM, keyPEM, err1 = pki.NewCA(cfg.ReplicaID); err1 != nil {
			return nil, fmt.Errorf("creating the cluster CA: %w", err1)
		}
		if err := writeCA(dir, certPEM, keyPEM); err != nil {
			return nil, err
		}
		cfg.Logger.Info("created the cluster CA", "cert", caPath)
	default:
		return nil, fmt.Errorf("no cluster CA in %s: replicas of a group share one; create it with `corpus tls ca-create --dir DIR` and pass --cluster-ca and --cluster-ca-key to every replica", dir)
	}
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		// The end of a CA rotation cut short between the key and the
		// certificate (writeCAs): the certificate is ca-next's.
		next, _ := os.ReadFile(filepath.Join(dir, nextCertFile))
		nextKey, _ := os.ReadFile(filepath.Join(dir, nextKeyFile))
		if len(next) == 0 || string(nextKey) != string(keyPEM) {
			return nil, err
		}
		if ca, err = pki.LoadCA(next, keyPEM); err != nil {
			return nil, err
		}
		if err := atomicfile.Write(caPath, next, 0o644); err != nil {
			return nil, err
		}
	}
	ttl := cfg.CertTTL
	if ttl == 0 {
		ttl = DefaultCertTTL
	}
	ca.Clock = cfg.Clock
	c := &certs{clock: cfg.Clock, dir: dir, id: cfg.ReplicaID, ttl: ttl}
	held := []*pki.CA{ca}
	// A rotation of the cluster CA in progress when the replica stopped:
	// both CAs trusted until the log, replayed, says which signs.
	if next, err := c.loadNext(); err != nil {
		return nil, err
	} else if next != nil {
		held = append(held, next)
	}
	c.setHeld(held, held)
	c.ips, c.dnsNames = sanNames(cfg, net.InterfaceAddrs)
	own, err := c.loadOwn()
	switch {
	case err == nil && !pki.Covers(own.Leaf, c.ips, c.dnsNames):
		// Issued before these addresses were asked for (or listened on).
		cfg.Logger.Info("issuing this replica's certificate again: it lacks addresses it serves on", "ips", c.ips, "dns_names", c.dnsNames)
		fallthrough
	case err != nil || pki.RenewDue(own.Leaf, c.now()):
		if own, err = c.issueOwn(); err != nil {
			return nil, err
		}
	}
	c.keys = pki.NewKeys(own)
	return c, nil
}

func writeCA(dir string, certPEM, keyPEM []byte) error {
	if _, err := pki.LoadCA(certPEM, keyPEM); err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, caKeyFile), keyPEM, 0o600); err != nil {
		return fmt.Errorf("writing the CA key: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, CACertFile), certPEM, 0o644); err != nil {
		return fmt.Errorf("writing the CA certificate: %w", err)
	}
	return nil
}

// now is the time of day by the replica's clock (the CA's).
func (c *certs) now() time.Time { return clock.Or(c.clock).Now() }

// Signer is the CA that issues certificates now.
func (c *certs) Signer() *pki.CA { return (*c.held.Load())[0] }

// Held are the CAs whose keys this replica holds, the signer first.
func (c *certs) Held() []*pki.CA { return *c.held.Load() }

// setHeld makes held the CAs held (its first the signer) and trusted the
// CAs trusted.
func (c *certs) setHeld(held, trusted []*pki.CA) {
	c.held.Store(&held)
	cas := make([]*x509.Certificate, len(trusted))
	for i, ca := range trusted {
		cas[i] = ca.Cert
	}
	if c.trust == nil {
		c.trust = pki.NewTrust(cas...)
	} else {
		c.trust.Set(cas)
	}
}

// keyPair makes a certificate and key a TLS certificate, presented with
// the trusted CA that issued it.
func (c *certs) keyPair(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	return pki.TrustedKeyPair(certPEM, keyPEM, c.trust.Certs())
}

// loadOwn reads this replica's certificate, checking it is from the CA
// and names this replica.
func (c *certs) loadOwn() (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(filepath.Join(c.dir, ownCertFile))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(c.dir, ownKeyFile))
	if err != nil {
		return nil, err
	}
	kp, err := c.keyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	if _, err := kp.Leaf.Verify(x509.VerifyOptions{Roots: c.trust.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}, CurrentTime: c.now()}); err != nil {
		return nil, err
	}
	if id, ok := pki.IdentityOf(kp.Leaf); !ok || id.Role != pki.RoleCoordinator || id.ID != c.id {
		return nil, errors.New("certificate names another replica")
	}
	return kp, nil
}

// sanNames are the addresses and names a replica's certificate covers
// beside pki.ServerName, which corpus's own clients check: those a
// browser or curl dials it by. They are every address it listens on
// (its API and Raft; on a wildcard, every address of the host, as
// hostAddrs lists them) with localhost for a loopback one, and the host
// of AdvertiseAPI.
func sanNames(cfg Config, hostAddrs func() ([]net.Addr, error)) (ips []net.IP, dnsNames []string) {
	addIP := func(ip net.IP) {
		if !slices.ContainsFunc(ips, ip.Equal) {
			ips = append(ips, ip)
		}
		if ip.IsLoopback() && !slices.Contains(dnsNames, "localhost") {
			dnsNames = append(dnsNames, "localhost")
		}
	}
	for _, hostport := range []string{cfg.APIAddr, cfg.RaftAddr, cfg.AdvertiseAPI} {
		host, _, err := net.SplitHostPort(hostport)
		if err != nil {
			continue
		}
		ip := net.ParseIP(host)
		switch {
		case host == "" || ip != nil && ip.IsUnspecified():
			addrs, _ := hostAddrs()
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok {
					addIP(n.IP)
				}
			}
		case ip != nil:
			addIP(ip)
		case !slices.Contains(dnsNames, host):
			dnsNames = append(dnsNames, host)
		}
	}
	return ips, dnsNames
}

func (c *certs) issueOwn() (*tls.Certificate, error) {
	certPEM, keyPEM, _, err := c.Signer().IssueKeyPair(pki.Request{Role: pki.RoleCoordinator, ID: c.id, TTL: c.ttl, IPs: c.ips, DNSNames: c.dnsNames})
	if err != nil {
		return nil, fmt.Errorf("issuing this replica's certificate: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(c.dir, ownKeyFile), keyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(filepath.Join(c.dir, ownCertFile), certPEM, 0o644); err != nil {
		return nil, err
	}
	return c.keyPair(certPEM, keyPEM)
}

// renewLoop renews this replica's certificate after two thirds of its
// life. New handshakes use the new one; open connections keep theirs.
func (c *certs) renewLoop(ctx context.Context, logger *slog.Logger) {
	every := min(c.ttl/20, time.Minute)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		if !c.keys.RenewDue(c.now()) {
			continue
		}
		c.mu.Lock()
		kp, err := c.issueOwn()
		if err == nil {
			c.keys.Set(kp)
		}
		c.mu.Unlock()
		if err != nil {
			logger.Error("renewing this replica's certificate", "error", err)
			continue
		}
		logger.Info("renewed this replica's certificate", "expires", kp.Leaf.NotAfter)
	}
}

// server is the TLS configuration of the API listener: agents and
// replicas present certificates, users come with tokens only.
func (c *certs) server() *tls.Config { return pki.TrustServerConfig(c.trust, c.keys, false) }

// peerClient dials other replicas, presenting this replica's certificate.
func (c *certs) peerClient() *tls.Config {
	return pki.TrustClientConfig(c.trust, c.keys, pki.RoleCoordinator, "")
}

// agentClient dials the agent of node id.
func (c *certs) agentClient(id string) *tls.Config {
	return pki.TrustClientConfig(c.trust, c.keys, pki.RoleNode, id)
}

// raftLayer carries Raft over mutual TLS: both ends present coordinator
// certificates of the cluster CA, so no one else can join the log or
// read it off the wire.
type raftLayer struct {
	ln        net.Listener
	advertise net.Addr
	certs     *certs
}

// maxRaftConns bounds the Raft listener's connections (a group has a
// handful of peers, each with a small pool).
const maxRaftConns = 256

func newRaftLayer(bind string, advertise net.Addr, c *certs) (*raftLayer, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	sc := pki.TrustServerConfig(c.trust, c.keys, true)
	sc.VerifyConnection = func(cs tls.ConnectionState) error {
		if id, ok := pki.PeerIdentity(&cs); !ok || id.Role != pki.RoleCoordinator {
			return errors.New("raft: peer is not a coordinator")
		}
		return nil
	}
	return &raftLayer{ln: tls.NewListener(netutil.LimitListener(ln, maxRaftConns), sc), advertise: advertise, certs: c}, nil
}

func (l *raftLayer) Accept() (net.Conn, error) {
	conn, err := l.ln.Accept()
	if err != nil {
		return nil, err
	}
	return &handshakeOnRead{Conn: conn.(*tls.Conn)}, nil
}

func (l *raftLayer) Close() error { return l.ln.Close() }

func (l *raftLayer) Addr() net.Addr {
	if l.advertise != nil {
		return l.advertise
	}
	return l.ln.Addr()
}

func (l *raftLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: l.certs.peerClient()}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, "tcp", string(addr))
}

// raftHandshakeTimeout bounds an incoming Raft connection's handshake, so
// a peer that connects and says nothing does not hold it open.
const raftHandshakeTimeout = 10 * time.Second

// handshakeOnRead completes the TLS handshake of an accepted connection,
// under a deadline, before its first read or write.
type handshakeOnRead struct {
	*tls.Conn
	once sync.Once
	err  error
}

func (c *handshakeOnRead) handshake() error {
	c.once.Do(func() {
		c.Conn.SetDeadline(time.Now().Add(raftHandshakeTimeout))
		c.err = c.Conn.Handshake()
		c.Conn.SetDeadline(time.Time{})
	})
	return c.err
}

func (c *handshakeOnRead) Read(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *handshakeOnRead) Write(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}
