package state

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state/statedb"
	"corpus/internal/pki"
	corpusv1 "corpus/proto/corpus/v1"
)

// Rotations of the cluster CA (package coordinator/carotation drives
// them): the state holds the CA certificates and the new CA's key sealed
// with the keyring; each replica keeps the keys it opened in its tls
// folder, and moves its own trust and certificate as the phase says.

// CAKeyPlace is what a rotation's new CA key is sealed for.
func CAKeyPlace(pin string) string { return "ca-key/" + pin }

// putCA replaces the config's CA record.
func (a *applier) putCA(ca *corpusv1.ClusterCa) error {
	cfg := a.view().Config()
	if cfg == nil {
		return ErrNotBootstrap
	}
	cfg = proto.Clone(cfg).(*corpusv1.ClusterConfig)
	cfg.Ca = ca
	a.put(statedb.TableMeta, &statedb.Meta{Key: statedb.MetaConfig, Value: cfg})
	return nil
}

// rotation is the rotation to the CA of pin, in progress.
func (a *applier) rotation(pin string) (*corpusv1.ClusterCa, error) {
	ca := a.view().Config().GetCa()
	r := ca.GetRotation()
	if r == nil {
		return nil, fmt.Errorf("no CA rotation is in progress: %w", ErrNotFound)
	}
	if got, err := pki.PinOf([]byte(r.CertPem)); err != nil || got != pin {
		return nil, fmt.Errorf("the CA rotation in progress is to another CA than %.16s: %w", pin, ErrStale)
	}
	return proto.Clone(ca).(*corpusv1.ClusterCa), nil
}

func (a *applier) startCaRotation(c *corpusv1.StartCaRotation) error {
	cur := a.view().Config().GetCa()
	if cur.GetRotation() != nil {
		return fmt.Errorf("a CA rotation is in progress: %w", ErrExists)
	}
	oldPin, err := pki.PinOf([]byte(c.OldCertPem))
	if err != nil {
		return fmt.Errorf("the old CA certificate: %v: %w", err, ErrInvalid)
	}
	if cur != nil {
		if p, _ := pki.PinOf([]byte(cur.CertPem)); p != oldPin {
			return fmt.Errorf("the cluster CA is no longer the one the rotation starts from: %w", ErrStale)
		}
	}
	r := c.GetRotation()
	next, err := pki.ParseCert([]byte(r.GetCertPem()))
	switch {
	case err != nil || !next.IsCA:
		return fmt.Errorf("the new CA certificate is not a CA certificate: %w", ErrInvalid)
	case pki.Pin(next) == oldPin:
		return fmt.Errorf("the new CA has the old one's key: %w", ErrInvalid)
	case r.Phase != corpusv1.CAPhaseTrust:
		return fmt.Errorf("a CA rotation starts in its trust phase, not %q: %w", r.Phase, ErrInvalid)
	}
	if err := a.checkSealed("the new CA's", map[string][]byte{"key": r.KeySealed}); err != nil {
		return err
	}
	r = proto.Clone(r).(*corpusv1.CaRotation)
	r.StartedAt = a.now
	return a.putCA(&corpusv1.ClusterCa{CertPem: c.OldCertPem, Rotation: r})
}

func (a *applier) advanceCaRotation(c *corpusv1.AdvanceCaRotation) error {
	ca, err := a.rotation(c.Pin)
	if err != nil {
		return err
	}
	if ca.Rotation.Phase == corpusv1.CAPhaseSign {
		return nil
	}
	ca.Rotation.Phase = corpusv1.CAPhaseSign
	return a.putCA(ca)
}

func (a *applier) abortCaRotation(c *corpusv1.AbortCaRotation) error {
	ca, err := a.rotation(c.Pin)
	if err != nil {
		return err
	}
	if ca.Rotation.Phase != corpusv1.CAPhaseTrust {
		return fmt.Errorf("the new CA signs already (the rotation is in its %s phase); finish the rotation instead: %w", ca.Rotation.Phase, ErrBadTransition)
	}
	ca.Rotation = nil
	return a.putCA(ca)
}

// finishCaRotation makes the new CA the only one, its key-encryption key
// the keyring's.
func (a *applier) finishCaRotation(c *corpusv1.FinishCaRotation) error {
	ca, err := a.rotation(c.Pin)
	if err != nil {
		return err
	}
	if ca.Rotation.Phase != corpusv1.CAPhaseSign {
		return fmt.Errorf("the new CA does not sign yet (the rotation is in its %s phase): %w", ca.Rotation.Phase, ErrBadTransition)
	}
	if cur := a.view().Keyring(); cur != nil {
		kr := c.GetKeyring()
		ids := func(k *corpusv1.Keyring) []string {
			var out []string
			for _, key := range k.GetKeys() {
				out = append(out, key.Id)
			}
			slices.Sort(out)
			return out
		}
		if kr.GetPrimary() != cur.Primary || !slices.Equal(ids(kr), ids(cur)) {
			return fmt.Errorf("the keyring changed since it was wrapped for the new CA: %w", ErrStale)
		}
		next := proto.Clone(cur).(*corpusv1.Keyring)
		for _, k := range next.Keys {
			for _, w := range kr.Keys {
				if w.Id == k.Id {
					k.Wrapped = w.Wrapped
				}
			}
		}
		next.ModifyIndex = a.index
		a.put(statedb.TableMeta, &statedb.Meta{Key: statedb.MetaKeyring, Value: next})
	}
	return a.putCA(&corpusv1.ClusterCa{CertPem: ca.Rotation.CertPem})
}
