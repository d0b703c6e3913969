package state_test

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/compat"
	"corpus/coordinator/state"
	"corpus/internal/pki"
	corpusv1 "corpus/proto/corpus/v1"
)

func newCA(t *testing.T) (string, string) {
	t.Helper()
	certPEM, _, err := pki.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	c, err := pki.ParseCert(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return string(certPEM), pki.Pin(c)
}

// TestCARotationEntries: a rotation starts only from the cluster CA, in
// its trust phase, its key sealed with the keyring, one at a time; it is
// aborted only in its trust phase and finished only in its sign phase,
// with the keyring's keys (and no others) wrapped anew; the keyring does
// not change meanwhile; a snapshot carries it.
func TestCARotationEntries(t *testing.T) {
	r := newReplica(t)
	r.must(cluster()...)
	r.must(clusterVersionCmd(compat.Since(compat.CARotation).String()))
	k, kr := testRing(t, "k1")
	r.must(keyringCmd(kr, "", nil, nil))
	oldPEM, _ := newCA(t)
	nextPEM, nextPin := newCA(t)
	sealed, err := k.Seal([]byte("key"), state.CAKeyPlace(nextPin))
	if err != nil {
		t.Fatal(err)
	}
	start := func(old, next string, phase string, key []byte) *corpusv1.Command {
		return &corpusv1.Command{Cmd: &corpusv1.Command_StartCaRotation{StartCaRotation: &corpusv1.StartCaRotation{
			OldCertPem: old, Rotation: &corpusv1.CaRotation{CertPem: next, KeySealed: key, Phase: phase}}}}
	}
	advance := &corpusv1.Command{Cmd: &corpusv1.Command_AdvanceCaRotation{AdvanceCaRotation: &corpusv1.AdvanceCaRotation{Pin: nextPin}}}
	abort := &corpusv1.Command{Cmd: &corpusv1.Command_AbortCaRotation{AbortCaRotation: &corpusv1.AbortCaRotation{Pin: nextPin}}}
	finish := func(kr *corpusv1.Keyring) *corpusv1.Command {
		return &corpusv1.Command{Cmd: &corpusv1.Command_FinishCaRotation{FinishCaRotation: &corpusv1.FinishCaRotation{Pin: nextPin, Keyring: kr}}}
	}
	for _, tc := range []struct {
		name string
		cmd  *corpusv1.Command
		want error
	}{
		{"to the old CA itself", start(oldPEM, oldPEM, corpusv1.CAPhaseTrust, sealed), state.ErrInvalid},
		{"in the sign phase", start(oldPEM, nextPEM, corpusv1.CAPhaseSign, sealed), state.ErrInvalid},
		{"a key not sealed", start(oldPEM, nextPEM, corpusv1.CAPhaseTrust, []byte("clear")), state.ErrStale},
		{"not a certificate", start(oldPEM, "junk", corpusv1.CAPhaseTrust, sealed), state.ErrInvalid},
		{"advanced with none running", advance, state.ErrNotFound},
	} {
		if err := r.apply(tc.cmd); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	r.must(start(oldPEM, nextPEM, corpusv1.CAPhaseTrust, sealed))
	if err := r.apply(start(oldPEM, nextPEM, corpusv1.CAPhaseTrust, sealed)); !errors.Is(err, state.ErrExists) {
		t.Errorf("a second rotation: %v, want ErrExists", err)
	}
	if err := r.apply(keyringCmd(kr, "k1", nil, nil)); !errors.Is(err, state.ErrConflict) {
		t.Errorf("a keyring change during the rotation: %v, want ErrConflict", err)
	}
	if err := r.apply(finish(kr)); !errors.Is(err, state.ErrBadTransition) {
		t.Errorf("finished in its trust phase: %v, want ErrBadTransition", err)
	}
	trusted, signer, _ := r.store.Read().Config().GetCa().Trusted()
	if len(trusted) != 2 || signer != oldPEM {
		t.Errorf("trust phase: %d CAs trusted, the new one signing %t; want both, the old one signing", len(trusted), signer == nextPEM)
	}
	r.must(abort)
	if ca := r.store.Read().Config().GetCa(); ca.GetRotation() != nil || ca.GetCertPem() != oldPEM {
		t.Fatalf("after the abort: %v; want the old CA alone", ca)
	}

	r.must(start(oldPEM, nextPEM, corpusv1.CAPhaseTrust, sealed), advance, advance)
	if _, signer, _ := r.store.Read().Config().GetCa().Trusted(); signer != nextPEM {
		t.Errorf("sign phase: the old CA signs")
	}
	if err := r.apply(abort); !errors.Is(err, state.ErrBadTransition) {
		t.Errorf("aborted in its sign phase: %v, want ErrBadTransition", err)
	}
	other := proto.Clone(kr).(*corpusv1.Keyring)
	other.Keys[0].Id = "k9"
	if err := r.apply(finish(other)); !errors.Is(err, state.ErrStale) {
		t.Errorf("finished with other keys: %v, want ErrStale", err)
	}
	rewrapped := proto.Clone(kr).(*corpusv1.Keyring)
	rewrapped.Keys[0].Wrapped = []byte("wrapped anew")
	if snap := persisted(t, r.fsm); snap.Config.GetCa().GetRotation().GetPhase() != corpusv1.CAPhaseSign {
		t.Errorf("a snapshot during the rotation holds %v", snap.Config.GetCa())
	}
	r.must(finish(rewrapped))
	v := r.store.Read()
	if ca := v.Config().GetCa(); ca.GetRotation() != nil || ca.GetCertPem() != nextPEM {
		t.Errorf("after the end: %v; want the new CA alone", ca)
	}
	if got := string(v.Keyring().Keys[0].Wrapped); got != "wrapped anew" {
		t.Errorf("keyring key wrapped %q after the end, want the rewrapped one", got)
	}
}
