package coordinator

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state"
	"corpus/internal/atomicfile"
	"corpus/internal/pki"
	corpusv1 "corpus/proto/corpus/v1"
)

// A replica's side of a rotation of the cluster CA (package
// coordinator/carotation): it takes the new CA's key from the state into
// its tls folder (ca-next.*), trusts both CAs, issues itself a
// certificate of the new one when it signs, and when the rotation ends
// makes it the replica's CA (ca.*) and the only one trusted.

// loadNext reads the CA of a rotation in progress, nil if none.
func (c *certs) loadNext() (*pki.CA, error) {
	certPEM, err1 := os.ReadFile(filepath.Join(c.dir, nextCertFile))
	keyPEM, err2 := os.ReadFile(filepath.Join(c.dir, nextKeyFile))
	switch {
	case errors.Is(err1, os.ErrNotExist) && errors.Is(err2, os.ErrNotExist):
		return nil, nil
	case err1 != nil || err2 != nil:
		// Written key first, certificate second: a lone key is a write
		// cut short, taken again from the state.
		if errors.Is(err1, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the next cluster CA: %w", errors.Join(err1, err2))
	}
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the next cluster CA in %s: %w", c.dir, err)
	}
	ca.Clock = c.clock
	return ca, nil
}

// adopt makes the replica's CAs what the state's record says (nil: a
// cluster never rotated, nothing to do). open opens a value sealed with
// the cluster keyring. It reports whether anything changed.
func (c *certs) adopt(rec *corpusv1.ClusterCa, open func(sealed []byte, place string) ([]byte, error), logger *slog.Logger) (bool, error) {
	trustedPEM, signerPEM, ok := rec.Trusted()
	if !ok {
		return false, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	held := c.Held()
	find := func(certPEM string) *pki.CA { return pki.FindCA(held, certPEM) }
	if r := rec.Rotation; r != nil && find(r.CertPem) == nil {
		next, err := c.takeNext(r, open)
		if err != nil {
			return false, err
		}
		held = append(held, next)
		logger.Info("took the new cluster CA of the rotation in progress", "ca", next.Pin()[:16])
	}
	var trusted []*pki.CA
	for _, p := range trustedPEM {
		ca := find(p)
		if ca == nil {
			return false, fmt.Errorf("this replica does not hold the key of a cluster CA the state names: copy %s and %s from a replica of the group into %s", CACertFile, caKeyFile, c.dir)
		}
		trusted = append(trusted, ca)
	}
	signer := find(signerPEM)
	// The signer first, then the others trusted; a CA no longer trusted
	// is dropped (its key too: the keyring is wrapped for the new one).
	now := []*pki.CA{signer}
	for _, ca := range trusted {
		if ca != signer {
			now = append(now, ca)
		}
	}
	if err := c.writeCAs(rec, trusted[0]); err != nil {
		return false, err
	}
	changed := !slices.Equal(pinsOf(now), pinsOf(c.Held())) || !slices.Equal(pinsOf(trusted), c.trust.Pins())
	if changed {
		c.setHeld(now, trusted)
	}
	if pki.IssuerOf(c.keys.Get().Leaf, []*x509.Certificate{signer.Cert}) == nil {
		kp, err := c.issueOwn()
		if err != nil {
			return changed, err
		}
		c.keys.Set(kp)
		logger.Info("issued this replica a certificate of the cluster CA that signs now", "ca", signer.Pin()[:16], "expires", kp.Leaf.NotAfter)
		changed = true
	}
	return changed, nil
}

// Took says whether this replica has taken the CAs rec names (adopt):
// it signs with rec's signer, presents a certificate of it, and trusts
// rec's CAs alone. A cluster never rotated (rec nil) has none to take.
func (c *certs) Took(rec *corpusv1.ClusterCa) bool {
	trustedPEM, signerPEM, ok := rec.Trusted()
	if !ok {
		return true
	}
	trusted := make([]string, len(trustedPEM))
	for i, p := range trustedPEM {
		pin, err := pki.PinOf([]byte(p))
		if err != nil {
			return false
		}
		trusted[i] = pin
	}
	signer := c.Signer()
	return pki.FindCA([]*pki.CA{signer}, signerPEM) != nil &&
		pki.IssuerOf(c.keys.Get().Leaf, []*x509.Certificate{signer.Cert}) != nil &&
		slices.Equal(trusted, c.trustedPins())
}

// trustedPins are the pins of the CAs the replica trusts (pins' second
// answer).
func (c *certs) trustedPins() []string {
	_, trusted := c.pins()
	return trusted
}

func pinsOf(cas []*pki.CA) []string {
	out := make([]string, len(cas))
	for i, ca := range cas {
		out[i] = ca.Pin()
	}
	return out
}

// takeNext opens the rotation's new CA key and keeps the CA in the tls
// folder.
func (c *certs) takeNext(r *corpusv1.CaRotation, open func(sealed []byte, place string) ([]byte, error)) (*pki.CA, error) {
	cert, err := pki.ParseCert([]byte(r.CertPem))
	if err != nil {
		return nil, fmt.Errorf("the new cluster CA: %w", err)
	}
	keyPEM, err := open(r.KeySealed, state.CAKeyPlace(pki.Pin(cert)))
	if err != nil {
		return nil, fmt.Errorf("opening the new cluster CA's key: %w", err)
	}
	ca, err := pki.LoadCA([]byte(r.CertPem), keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the new cluster CA: %w", err)
	}
	ca.Clock = c.clock
	if err := atomicfile.Write(filepath.Join(c.dir, nextKeyFile), keyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(filepath.Join(c.dir, nextCertFile), []byte(r.CertPem), 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

// writeCAs keeps the tls folder as the record says: ca.* the cluster CA,
// ca-next.* the CA of a rotation in progress, none when none runs. The
// cluster CA changes at the end of a rotation: its key is written before
// its certificate (loadCerts completes a change cut short between them).
func (c *certs) writeCAs(rec *corpusv1.ClusterCa, cluster *pki.CA) error {
	onDisk, err := os.ReadFile(filepath.Join(c.dir, CACertFile))
	if err != nil {
		return err
	}
	if cur, perr := pki.ParseCert(onDisk); perr != nil || pki.Pin(cur) != cluster.Pin() {
		keyPEM, err := cluster.KeyPEM()
		if err != nil {
			return err
		}
		if perr == nil {
			// The replica's configuration may still name the CA it
			// started with (--cluster-ca): loadCerts lets that be.
			f, err := os.OpenFile(filepath.Join(c.dir, retiredFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(f, pki.Pin(cur))
			if err := errors.Join(err, f.Sync(), f.Close()); err != nil {
				return err
			}
		}
		if err := atomicfile.Write(filepath.Join(c.dir, caKeyFile), keyPEM, 0o600); err != nil {
			return err
		}
		if err := atomicfile.Write(filepath.Join(c.dir, CACertFile), cluster.CertPEM, 0o644); err != nil {
			return err
		}
	}
	if rec.Rotation == nil {
		for _, f := range []string{nextCertFile, nextKeyFile} {
			if err := os.Remove(filepath.Join(c.dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// caLoop keeps the replica's CAs as the replicated state says, while the
// replica runs.
func (s *Server) caLoop(ctx context.Context) {
	logger := s.logger.With("component", "tls")
	var done *corpusv1.ClusterCa
	failing := ""
	for ctx.Err() == nil {
		v := s.store.Read()
		v.WatchIndex()
		rec := v.Config().GetCa()
		if rec != nil && (done == nil || !proto.Equal(rec, done)) {
			open := func(sealed []byte, place string) ([]byte, error) {
				k, err := s.api.Keyring().Open(v)
				if err != nil {
					return nil, err
				}
				if k == nil {
					return nil, errors.New("the cluster has no keyring")
				}
				return k.Open(sealed, place)
			}
			changed, err := s.certs.adopt(rec, open, logger)
			switch {
			case err != nil && err.Error() != failing:
				logger.Error("taking the cluster CA the state names", "error", err)
				failing = err.Error()
			case err == nil:
				done, failing = rec, ""
				if changed {
					logger.Info("cluster CAs", "signer", s.certs.Signer().Pin()[:16], "trusted", len(s.certs.trust.Certs()))
				}
			}
		}
		wait := 30 * time.Second
		if failing != "" {
			wait = 5 * time.Second
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		_ = v.Wait(wctx)
		cancel()
	}
}

// clusterCA is the cluster CA as of view, which this replica signs with
// and the keyring is wrapped for: not while a rotation of it runs
// (FailedPrecondition), nor while this replica has not taken the end of
// one (Unavailable).
func (s *Server) clusterCA(view *state.Snap) (*pki.CA, error) {
	rec := view.Config().GetCa()
	if r := rec.GetRotation(); r != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("a rotation of the cluster CA is in progress (%s phase); finish it first (corpus operator ca status)", r.Phase))
	}
	signer := s.certs.Signer()
	if rec != nil {
		if cert, err := pki.ParseCert([]byte(rec.CertPem)); err != nil || pki.Pin(cert) != signer.Pin() {
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("this coordinator has not taken the cluster CA's change yet; try again"))
		}
	}
	return signer, nil
}

// pins are the pin of the CA of the replica's own certificate and those
// of the CAs it trusts, as it registers them. The registration compares
// them on every change of the state; finding the issuer checks
// signatures, so the answer is kept until the certificate or the trusted
// CAs change.
func (c *certs) pins() (own string, trusted []string) {
	leaf, cas := c.keys.Get().Leaf, c.trust.Certs()
	if m := c.pinMemo.Load(); m != nil && m.leaf == leaf && slices.Equal(m.cas, cas) {
		return m.own, m.trusted
	}
	if issuer := pki.IssuerOf(leaf, cas); issuer != nil {
		own = pki.Pin(issuer)
	}
	trusted = pki.Pins(cas)
	c.pinMemo.Store(&pinMemo{leaf: leaf, cas: cas, own: own, trusted: trusted})
	return own, trusted
}

// pinMemo is what pins answered for one certificate and set of CAs.
type pinMemo struct {
	leaf    *x509.Certificate
	cas     []*x509.Certificate
	own     string
	trusted []string
}

// retiredFile lists the pins of the CAs rotated out of this replica.
const retiredFile = "retired-cas"

// retired says whether certPEM is a CA rotated out of this replica.
func retired(dir string, certPEM []byte) bool {
	cert, err := pki.ParseCert(certPEM)
	if err != nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join(dir, retiredFile))
	return err == nil && slices.Contains(strings.Fields(string(b)), pki.Pin(cert))
}
