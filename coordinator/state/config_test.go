package state_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state"
	"corpus/internal/seal"
	corpusv1 "corpus/proto/corpus/v1"
)

// testRing is a keyring of one key and its replicated form (the wrapped
// key is opaque to the state machine: any bytes do).
func testRing(t *testing.T, id string) (*seal.Keyring, *corpusv1.Keyring) {
	t.Helper()
	k, err := seal.NewKeyring(id, map[string][]byte{id: seal.NewKey()})
	if err != nil {
		t.Fatal(err)
	}
	return k, &corpusv1.Keyring{Primary: id, Keys: []*corpusv1.SealKey{{Id: id, Wrapped: []byte("wrapped " + id)}}}
}

func keyringCmd(kr *corpusv1.Keyring, expect string, envs, rels []*corpusv1.ResealedConfig) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_SetKeyring{SetKeyring: &corpusv1.SetKeyring{Keyring: kr, ExpectPrimary: expect, Envs: envs, Releases: rels}}}
}

func setConfigCmd(set map[string][]byte, unset ...string) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_SetConfig{SetConfig: &corpusv1.SetConfig{Project: "hello", Env: "dev", Set: set, Unset: unset}}}
}

func sealed(t *testing.T, k *seal.Keyring, key, value string) []byte {
	t.Helper()
	s, err := k.Seal([]byte(value), state.ConfigPlace("hello", "dev", key))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func envConfig(t *testing.T, r *replica, k *seal.Keyring) map[string]string {
	t.Helper()
	e := corpusv1.EnvNamed(r.store.Read().Project("hello"), "dev")
	return openAll(t, k, e.Config)
}

func openAll(t *testing.T, k *seal.Keyring, cfg map[string][]byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	for key, v := range cfg {
		p, err := k.Open(v, state.ConfigPlace("hello", "dev", key))
		if err != nil {
			t.Fatalf("config %s: %v", key, err)
		}
		out[key] = string(p)
	}
	return out
}

func TestConfig(t *testing.T) {
	r := newReplica(t)
	r.must(cluster()...)
	r.must(projectCmd("dev", "g-dev", "hello.dev.example.test"))
	g := r.store.Read().GuestByName("hello-dev")
	r.must(placeCmd(g.Id, nodeID, "", g.ModifyIndex))
	k, kr := testRing(t, "k1")

	if err := r.apply(setConfigCmd(map[string][]byte{"A": []byte("x")})); !errors.Is(err, state.ErrStale) {
		t.Fatalf("config before any keyring: err = %v, want ErrStale", err)
	}
	r.must(keyringCmd(kr, "", nil, nil))
	if err := r.apply(keyringCmd(kr, "", nil, nil)); !errors.Is(err, state.ErrStale) {
		t.Fatalf("a second first keyring: err = %v, want ErrStale", err)
	}

	for _, tc := range []struct {
		name string
		cmd  *corpusv1.Command
		want error
	}{
		{"unsealed value", setConfigCmd(map[string][]byte{"A": []byte("in clear")}), state.ErrStale},
		{"reserved PORT", setConfigCmd(map[string][]byte{"PORT": sealed(t, k, "PORT", "1")}), state.ErrInvalid},
		{"reserved CORPUS_", setConfigCmd(map[string][]byte{"CORPUS_X": sealed(t, k, "CORPUS_X", "1")}), state.ErrInvalid},
		{"not a name", setConfigCmd(map[string][]byte{"1A": sealed(t, k, "1A", "1")}), state.ErrInvalid},
		{"set and unset", setConfigCmd(map[string][]byte{"A": sealed(t, k, "A", "1")}, "A"), state.ErrInvalid},
		{"nothing", setConfigCmd(nil), state.ErrInvalid},
		{"all or nothing", setConfigCmd(map[string][]byte{"GOOD": sealed(t, k, "GOOD", "1"), "bad-key": sealed(t, k, "bad-key", "1")}), state.ErrInvalid},
	} {
		before := r.dump()
		if err := r.apply(tc.cmd); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
		after := r.dump()
		before.Index, after.Index = 0, 0
		after.Audit, before.Audit = nil, nil
		if !proto.Equal(before, after) {
			t.Errorf("%s changed the state", tc.name)
		}
	}

	r.must(setConfigCmd(map[string][]byte{"DB": sealed(t, k, "DB", "postgres://one"), "MODE": sealed(t, k, "MODE", "a")}))
	r.must(beginCmd("rel1", nodeID), finishCmd("rel1", nodeID, corpusv1.ReleaseSucceeded))
	r1 := r.store.Read().Release("rel1")
	if got := openAll(t, k, r1.Config); got["DB"] != "postgres://one" || got["MODE"] != "a" || r1.Trigger != corpusv1.TriggerPush {
		t.Fatalf("r1 runs with %v (trigger %q)", got, r1.Trigger)
	}
	// Nothing of a value is in the state in clear: not in the snapshot,
	// not in the audit log, which names the keys.
	var raw bytes.Buffer
	sink := &memSink{}
	s, _ := r.fsm.Snapshot()
	if err := s.Persist(sink); err != nil {
		t.Fatal(err)
	}
	raw.ReadFrom(sink.reader())
	if bytes.Contains(raw.Bytes(), []byte("postgres://one")) {
		t.Fatal("the snapshot holds a config value in clear")
	}
	var audited bool
	for _, e := range r.store.Read().Audit() {
		if e.Action == "set_config" && strings.Contains(e.Target, "set DB, MODE") {
			audited = true
		}
	}
	if !audited {
		t.Fatal("the config change is not in the audit log with its keys")
	}

	// A config change with its release failed is undone.
	r.must(setConfigCmd(map[string][]byte{"MODE": sealed(t, k, "MODE", "b")}, "DB"))
	cfgRel := beginCmd("rel2", nodeID)
	cfgRel.GetBeginRelease().Release.Trigger = corpusv1.TriggerConfig
	r.must(cfgRel, finishCmd("rel2", nodeID, corpusv1.ReleaseFailed))
	if got := envConfig(t, r, k); got["MODE"] != "a" || got["DB"] != "postgres://one" {
		t.Fatalf("after a failed config release the config is %v, want r1's", got)
	}
	// One that succeeds stays; rolling back restores r1's config.
	r.must(setConfigCmd(map[string][]byte{"MODE": sealed(t, k, "MODE", "c")}))
	cfgRel = beginCmd("rel3", nodeID)
	cfgRel.GetBeginRelease().Release.Trigger = corpusv1.TriggerConfig
	r.must(cfgRel, finishCmd("rel3", nodeID, corpusv1.ReleaseSucceeded))
	if got := envConfig(t, r, k); got["MODE"] != "c" {
		t.Fatalf("config after r3 = %v", got)
	}
	r.must(currentCmd(1))
	if got := envConfig(t, r, k); got["MODE"] != "a" || len(got) != 2 {
		t.Fatalf("config after rolling back to r1 = %v, want r1's", got)
	}

	// Rotation: every value resealed, or nothing changes.
	k2, kr2 := testRing(t, "k2")
	reseal := func(cfg map[string][]byte) map[string][]byte {
		out := map[string][]byte{}
		for key, v := range openAll(t, k, cfg) {
			out[key] = sealed(t, k2, key, v)
		}
		return out
	}
	v := r.store.Read()
	envs := []*corpusv1.ResealedConfig{{Project: "hello", Env: "dev", Config: reseal(corpusv1.EnvNamed(v.Project("hello"), "dev").Config)}}
	var rels []*corpusv1.ResealedConfig
	for _, rel := range v.Releases("hello", "dev") {
		if len(rel.Config) > 0 {
			rels = append(rels, &corpusv1.ResealedConfig{Project: "hello", Env: "dev", ReleaseId: rel.Id, Config: reseal(rel.Config)})
		}
	}
	if err := r.apply(keyringCmd(kr2, "k1", envs, rels[1:])); !errors.Is(err, state.ErrStale) {
		t.Fatalf("a rotation that leaves a value out: err = %v, want ErrStale", err)
	}
	if err := r.apply(keyringCmd(kr2, "k0", envs, rels)); !errors.Is(err, state.ErrStale) {
		t.Fatalf("a rotation from another primary: err = %v, want ErrStale", err)
	}
	if got := r.store.Read().Keyring().Primary; got != "k1" {
		t.Fatalf("a refused rotation changed the primary to %s", got)
	}
	r.must(keyringCmd(kr2, "k1", envs, rels))
	if got := envConfig(t, r, k2); got["MODE"] != "a" {
		t.Fatalf("config under the new key = %v", got)
	}
	for _, rel := range r.store.Read().Releases("hello", "dev") {
		openAll(t, k2, rel.Config)
	}
}

func TestWebPort(t *testing.T) {
	r := newReplica(t)
	r.must(cluster()...)
	r.must(projectCmd("dev", "g-dev", "hello.dev.example.test"))
	g := r.store.Read().GuestByName("hello-dev")
	r.must(placeCmd(g.Id, nodeID, "", g.ModifyIndex))
	cmd := func(node string, port int32) *corpusv1.Command {
		return &corpusv1.Command{Cmd: &corpusv1.Command_SetWebPort{SetWebPort: &corpusv1.SetWebPort{Project: "hello", Env: "dev", NodeId: node, Port: port}}}
	}
	if err := r.apply(cmd("elsewhere", 81)); !errors.Is(err, state.ErrBadTransition) {
		t.Fatalf("from another node: err = %v", err)
	}
	if err := r.apply(cmd(nodeID, 0)); !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("port 0: err = %v", err)
	}
	r.must(cmd(nodeID, 81))
	v := r.store.Read()
	if e := corpusv1.EnvNamed(v.Project("hello"), "dev"); state.WebPort(e) != 81 || e.HttpPort != 80 {
		t.Fatalf("env web port %d, http port %d", e.WebPort, e.HttpPort)
	}
	for _, rt := range v.Routes() {
		if rt.Domain == "hello.dev.example.test" && rt.GuestPort != 81 {
			t.Fatalf("route still to port %d", rt.GuestPort)
		}
	}
}
