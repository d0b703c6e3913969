package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"corpus/internal/clock"
)

// Keys holds the certificate a component presents. It can be replaced at
// any time (renewal): new handshakes use the new one, established
// connections go on with the old one until they close.
type Keys struct {
	cur atomic.Pointer[tls.Certificate]
}

// NewKeys returns Keys holding c.
func NewKeys(c *tls.Certificate) *Keys {
	k := &Keys{}
	k.cur.Store(c)
	return k
}

// Set replaces the certificate.
func (k *Keys) Set(c *tls.Certificate) { k.cur.Store(c) }

// Get returns the current certificate.
func (k *Keys) Get() *tls.Certificate { return k.cur.Load() }

// NotAfter is when the current certificate expires.
func (k *Keys) NotAfter() time.Time { return k.Get().Leaf.NotAfter }

// RenewDue reports whether two thirds of the current certificate's
// lifetime have passed, the point where it is renewed.
func (k *Keys) RenewDue(now time.Time) bool { return RenewDue(k.Get().Leaf, now) }

// RenewDue reports whether two thirds of c's lifetime have passed.
func RenewDue(c *x509.Certificate, now time.Time) bool {
	issued := IssuedAt(c)
	return now.After(issued.Add(c.NotAfter.Sub(issued) * 2 / 3))
}

// IssuedAt is when c was issued: Backdate after its NotBefore (a
// certificate valid for less than that was issued before this CA
// backdated by so much: its NotBefore).
func IssuedAt(c *x509.Certificate) time.Time {
	if c.NotAfter.Sub(c.NotBefore) > Backdate {
		return c.NotBefore.Add(Backdate)
	}
	return c.NotBefore
}

// Lifetime is how long c was issued for (from IssuedAt to NotAfter).
func Lifetime(c *x509.Certificate) time.Duration { return c.NotAfter.Sub(IssuedAt(c)) }

// now is the time certificates are checked at: the process's clock.
func now() time.Time { return clock.System.Now() }

// ServerConfig is the TLS configuration of a corpus listener: it presents
// keys and verifies client certificates against the CA. With
// requireClient every client must present one (agent API, Raft); else
// clients without one (users with tokens) are let in and identified by
// their token, and a certificate from another CA is refused.
func ServerConfig(pool *x509.CertPool, keys *Keys, requireClient bool) *tls.Config {
	return serverConfig(poolTrust(pool), keys, requireClient)
}

// TrustServerConfig is ServerConfig trusting trust's CAs of the moment.
func TrustServerConfig(trust *Trust, keys *Keys, requireClient bool) *tls.Config {
	return serverConfig(trust, keys, requireClient)
}

// ClientConfig is the TLS configuration of a client of a corpus component:
// it trusts only the cluster CA, wants the server to hold a certificate of
// role (and of id, when not empty), and presents keys when given.
func ClientConfig(pool *x509.CertPool, keys *Keys, role, id string) *tls.Config {
	return clientConfig(poolTrust(pool), keys, role, id)
}

// TrustClientConfig is ClientConfig trusting trust's CAs of the moment.
func TrustClientConfig(trust *Trust, keys *Keys, role, id string) *tls.Config {
	return clientConfig(trust, keys, role, id)
}

// ErrPinMismatch is a coordinator whose CA is not the one pinned.
var ErrPinMismatch = errors.New("coordinator's certificate is not from the CA the join token names (wrong cluster, or an impostor)")

// PinnedConfig is the TLS configuration of a host enrolling with only a
// join token: it trusts a coordinator whose chain contains the CA whose
// public key has the given pin, and nothing else.
func PinnedConfig(pin string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The chain is verified below against the pinned CA instead of
		// a system pool, which knows nothing of the cluster.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("coordinator sent no certificate")
			}
			var ca *x509.Certificate
			for _, c := range cs.PeerCertificates[1:] {
				if c.IsCA && Pin(c) == pin {
					ca = c
				}
			}
			if ca == nil {
				return ErrPinMismatch
			}
			pool := x509.NewCertPool()
			pool.AddCert(ca)
			chains, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
				Roots: pool, DNSName: ServerName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, CurrentTime: now(),
			})
			if err != nil {
				return fmt.Errorf("coordinator certificate: %w", err)
			}
			return expectPeer(tls.ConnectionState{VerifiedChains: chains}, RoleCoordinator, "")
		},
	}
}

func expectPeer(cs tls.ConnectionState, role, id string) error {
	p, ok := PeerIdentity(&cs)
	if !ok {
		return errors.New("peer certificate names no corpus identity")
	}
	if p.Role != role || (id != "" && p.ID != id) {
		want := role
		if id != "" {
			want += " " + id
		}
		return fmt.Errorf("peer certificate is for %s %s, want %s", p.Role, p.ID, want)
	}
	return nil
}

// PeerIdentity returns who the peer's verified certificate names.
func PeerIdentity(cs *tls.ConnectionState) (Identity, bool) {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return Identity{}, false
	}
	return IdentityOf(cs.VerifiedChains[0][0])
}
