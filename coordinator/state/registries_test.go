package state_test

import (
	"errors"
	"testing"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

func putRegistryCmd(host, user string, password []byte) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_PutRegistryLogin{PutRegistryLogin: &corpusv1.PutRegistryLogin{Login: &corpusv1.RegistryLogin{
		Host: host, Username: user, Password: password,
	}}}}
}

// TestRegistryLoginWrites: a registry login's host is as pulls name it,
// its password sealed with the keyring's primary key; it is replaced
// keeping its creation, resealed by a rotation (which is refused while
// it would leave it under the old key), kept by a snapshot and deleted
// once.
func TestRegistryLoginWrites(t *testing.T) {
	r := newReplica(t)
	r.must(cluster()...)
	k, kr := testRing(t, "k1")
	r.must(keyringCmd(kr, "", nil, nil))
	const host = "registry.example.test:5000"
	k1 := func(v string) []byte {
		t.Helper()
		s, err := k.Seal([]byte(v), state.RegistryPlace(host))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if err := r.apply(putRegistryCmd(host, "u", k1("p"))); !errors.Is(err, state.ErrBadTransition) {
		t.Errorf("a login before the cluster version allows it = %v, want %v", err, state.ErrBadTransition)
	}
	r.must(clusterVersionCmd("v0.2"))
	for what, cmd := range map[string]*corpusv1.Command{
		"a password in clear":    putRegistryCmd(host, "u", []byte("clear")),
		"no password":            putRegistryCmd(host, "u", nil),
		"docker.io, not as kept": putRegistryCmd("docker.io", "u", k1("p")),
		"a scheme":               putRegistryCmd("https://"+host, "u", k1("p")),
	} {
		if err := r.apply(cmd); err == nil {
			t.Errorf("a login with %s was applied", what)
		}
	}
	r.must(putRegistryCmd(host, "u1", k1("p1")))
	created := r.store.Read().RegistryLogin(host).CreateIndex
	r.must(putRegistryCmd(host, "u2", k1("p2")))
	got := r.store.Read().RegistryLogin(host)
	if got.Username != "u2" || got.CreateIndex != created || got.ModifyIndex == created {
		t.Errorf("the login replaced = %v; want u2, created at %d", got, created)
	}
	k2, kr2 := testRing(t, "k2")
	if err := r.apply(keyringCmd(kr2, "k1", nil, nil)); !errors.Is(err, state.ErrStale) {
		t.Errorf("a rotation leaving the password behind = %v, want ErrStale", err)
	}
	resealed, err := k2.Seal([]byte("p2"), state.RegistryPlace(host))
	if err != nil {
		t.Fatal(err)
	}
	r.must(keyringCmd(kr2, "k1", []*corpusv1.ResealedConfig{{Registry: host, Config: map[string][]byte{"password": resealed}}}, nil))
	if p, err := k2.Open(r.store.Read().RegistryLogin(host).Password, state.RegistryPlace(host)); err != nil || string(p) != "p2" {
		t.Errorf("the password after the rotation opens to %q, %v; want p2", p, err)
	}
	r2 := newReplica(t)
	if err := r2.fsm.Restore(persistToFile(t, r.fsm, r.index)); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	if got := r2.store.Read().RegistryLogin(host); got == nil || got.Username != "u2" {
		t.Errorf("the login after a restore: %v", got)
	}
	del := &corpusv1.Command{Cmd: &corpusv1.Command_DeleteRegistryLogin{DeleteRegistryLogin: &corpusv1.DeleteRegistryLogin{Host: host}}}
	r.must(del)
	if err := r.apply(del); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("deleting it twice = %v, want ErrNotFound", err)
	}
}
