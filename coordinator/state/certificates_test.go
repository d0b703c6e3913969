package state_test

import (
	"errors"
	"testing"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

func putCertCmd(c *corpusv1.Certificate, expect uint64) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_PutCertificate{PutCertificate: &corpusv1.PutCertificate{Certificate: c, ExpectModifyIndex: expect}}}
}

// TestCertificateWritesAreConditional: a certificate is written only at
// the index its writer read, so a deposed orderer's late write is
// refused; keys must be sealed with the keyring's primary key; a
// snapshot carries certificates and the ACME account.
func TestCertificateWritesAreConditional(t *testing.T) {
	r := newReplica(t)
	r.must(cluster()...)
	k, kr := testRing(t, "k1")
	r.must(keyringCmd(kr, "", nil, nil))
	key, err := k.Seal([]byte("der"), state.CertificateKeyPlace("a.test"))
	if err != nil {
		t.Fatal(err)
	}
	crt := &corpusv1.Certificate{Domain: "a.test", State: state.CertPending}
	r.must(putCertCmd(crt, 0))
	if err := r.apply(putCertCmd(crt, 0)); !errors.Is(err, state.ErrStale) {
		t.Errorf("a second write expecting no certificate = %v, want ErrStale", err)
	}
	idx := r.store.Read().Certificate("a.test").ModifyIndex
	valid := &corpusv1.Certificate{Domain: "a.test", State: state.CertValid, ChainPem: "chain", Key: key}
	r.must(putCertCmd(valid, idx))
	if err := r.apply(putCertCmd(&corpusv1.Certificate{Domain: "a.test", State: state.CertFailed}, idx)); !errors.Is(err, state.ErrStale) {
		t.Errorf("a write at an older index = %v, want ErrStale (a deposed orderer's)", err)
	}
	if got := r.store.Read().Certificate("a.test"); got.State != state.CertValid {
		t.Errorf("certificate state = %s, want the valid one kept", got.State)
	}
	cur := r.store.Read().Certificate("a.test").ModifyIndex
	if err := r.apply(putCertCmd(&corpusv1.Certificate{Domain: "a.test", State: state.CertValid, Key: []byte("clear key")}, cur)); !errors.Is(err, state.ErrStale) {
		t.Errorf("a key not sealed with the keyring = %v, want refused", err)
	}
	if err := r.apply(putCertCmd(&corpusv1.Certificate{Domain: "a.test", State: "bogus"}, cur)); !errors.Is(err, state.ErrInvalid) {
		t.Errorf("an unknown state = %v, want ErrInvalid", err)
	}
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_SetAcmeConfig{SetAcmeConfig: &corpusv1.SetAcmeConfig{
		Config: &corpusv1.AcmeConfig{DirectoryUrl: "https://ca.test/dir", Challenges: []string{state.ChallengeTLSALPN01}}}}})
	if err := r.apply(&corpusv1.Command{Cmd: &corpusv1.Command_SetAcmeConfig{SetAcmeConfig: &corpusv1.SetAcmeConfig{
		Config: &corpusv1.AcmeConfig{DirectoryUrl: "https://ca.test/dir", Challenges: []string{"dns-01"}}}}}); !errors.Is(err, state.ErrInvalid) {
		t.Errorf("an unanswered challenge type = %v, want ErrInvalid", err)
	}

	// A snapshot restores both.
	snap := r.dump()
	if len(snap.Certificates) != 1 || snap.Acme.GetDirectoryUrl() != "https://ca.test/dir" {
		t.Fatalf("snapshot has %d certificates and acme %v", len(snap.Certificates), snap.Acme)
	}
	other := newReplica(t)
	if err := other.fsm.Restore(persistToFile(t, r.fsm, r.index)); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	if got := other.store.Read().Certificate("a.test"); got.GetState() != state.CertValid || other.store.Read().Acme() == nil {
		t.Errorf("restored certificate %v, acme %v", got, other.store.Read().Acme())
	}
}
