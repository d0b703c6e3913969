package state_test

import (
	"errors"
	"strings"
	"testing"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

func putExtCmd(name string, after []string, secret []byte, replace bool) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_PutExtension{PutExtension: &corpusv1.PutExtension{Replace: replace, Extension: &corpusv1.Extension{
		Name: name, Url: "https://hooks.test/" + name, Kind: "mutate", On: []string{"guest.create"}, After: after, Secret: secret,
	}}}}
}

// TestExtensionWrites: extensions are checked as the API checks them, a
// cycle in their order is refused naming it, secrets must be sealed with
// the keyring, a rotation reseals them, and a snapshot keeps them.
func TestExtensionWrites(t *testing.T) {
	r := newReplica(t)
	r.must(cluster()...)
	k, kr := testRing(t, "k1")
	r.must(keyringCmd(kr, "", nil, nil))
	r.must(putExtCmd("a", nil, nil, false), putExtCmd("b", []string{"a"}, nil, false))
	if err := r.apply(putExtCmd("a", nil, nil, false)); !errors.Is(err, state.ErrExists) {
		t.Errorf("adding a twice = %v, want ErrExists", err)
	}
	err := r.apply(putExtCmd("a", []string{"b"}, nil, true))
	if !errors.Is(err, state.ErrInvalid) || !strings.Contains(err.Error(), "a -> b -> a") {
		t.Errorf("a cycle = %v", err)
	}
	bad := putExtCmd("c", nil, nil, false)
	bad.GetPutExtension().Extension.Url = "http://plain/"
	if err := r.apply(bad); !errors.Is(err, state.ErrInvalid) {
		t.Errorf("a plain http extension = %v", err)
	}
	if err := r.apply(putExtCmd("c", nil, []byte("clear secret"), false)); !errors.Is(err, state.ErrStale) {
		t.Errorf("an unsealed secret = %v, want refused", err)
	}
	sealed, err := k.Seal([]byte("a-shared-secret-16"), state.ExtensionPlace("c"))
	if err != nil {
		t.Fatal(err)
	}
	r.must(putExtCmd("c", nil, sealed, false))
	if got := r.store.Read().Extension("a"); got.FailurePolicy != "fail" || got.TimeoutMs != 2000 {
		t.Errorf("defaults of a: %v", got)
	}
	// A rotation that leaves the secret under the old key is refused.
	_, kr2 := testRing(t, "k2")
	if err := r.apply(keyringCmd(kr2, "k1", nil, nil)); !errors.Is(err, state.ErrStale) {
		t.Errorf("a rotation leaving c's secret behind = %v, want ErrStale", err)
	}
	snap := r.dump()
	if len(snap.Extensions) != 3 {
		t.Fatalf("snapshot has %d extensions", len(snap.Extensions))
	}
	r2 := newReplica(t)
	if err := r2.fsm.Restore(persistToFile(t, r.fsm, r.index)); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	if got := r2.store.Read().Extension("c"); got == nil || string(got.Secret) != string(sealed) {
		t.Errorf("c after a restore: %v", got)
	}
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_DeleteExtension{DeleteExtension: &corpusv1.DeleteExtension{Name: "b"}}})
	if err := r.apply(&corpusv1.Command{Cmd: &corpusv1.Command_DeleteExtension{DeleteExtension: &corpusv1.DeleteExtension{Name: "b"}}}); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("deleting b twice = %v", err)
	}
}
