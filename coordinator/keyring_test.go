package coordinator_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator"
	"corpus/coordinator/keyring"
	"corpus/coordinator/state"
	"corpus/internal/pki"
	"corpus/internal/seal"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestKeyringRotationResealsEverything: with a value of every kind the
// cluster seals in its state (an environment's config, a release's
// config, a service's secrets, an extension's secret, a registry's
// password, the ACME account key, a certificate's key and its
// tls-alpn-01 challenge key), `keyring
// rotate` seals each again under one new key, drops the old key, and
// leaves no value anywhere in the state sealed by it.
func TestKeyringRotationResealsEverything(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := start(t, dir)
	ops := s.ops()
	a := s.enroll("n1")
	a.report(t)

	// An environment's config, and a release that runs with it.
	if _, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: "hello", Env: "dev"})); err != nil {
		t.Fatal(err)
	}
	s.waitFor("hello-dev placed", func(v *state.Snap) bool { return v.GuestByName("hello-dev").GetNodeId() == a.id })
	a.report(t, observed(s.Store().Read().GuestByName("hello-dev").Id, state.ObservedRunning))
	if err := drain(ops.project.SetConfig(ctx, connect.NewRequest(&corpusv1.SetConfigRequest{Project: "hello", Set: map[string]string{"DB_PASSWORD": "hunter2-planted"}, NoRestart: true}))); err != nil {
		t.Fatalf("setting hello's config: %v", err)
	}
	rel, err := a.agent.BeginRelease(ctx, connect.NewRequest(&corpusv1.BeginReleaseRequest{Project: "hello", Env: "dev", Commit: "c0ffee", Author: "ops"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.agent.FinishRelease(ctx, connect.NewRequest(&corpusv1.FinishReleaseRequest{Id: rel.Msg.Release.Id, Status: corpusv1.ReleaseSucceeded})); err != nil {
		t.Fatal(err)
	}
	// A service's secrets and an extension's signing secret.
	if _, err := ops.service.CreateService(ctx, connect.NewRequest(&corpusv1.CreateServiceRequest{Name: "mail", ExternalUrl: "https://mail.example.test", Secrets: map[string]string{"API_KEY": "mail-planted"}})); err != nil {
		t.Fatal(err)
	}
	ext := &corpusv1.Extension{Name: "lint", Url: "https://hooks.example.test/lint", Kind: "validate", On: []string{"guest.create"}}
	if _, err := ops.ext.AddExtension(ctx, connect.NewRequest(&corpusv1.AddExtensionRequest{Extension: ext, Secret: "hook-planted-0123456789"})); err != nil {
		t.Fatal(err)
	}
	// A registry's password.
	if _, err := ops.reg.Login(ctx, connect.NewRequest(&corpusv1.RegistryLoginRequest{Host: "registry.example.test", Username: "puller", Password: "registry-planted"})); err != nil {
		t.Fatal(err)
	}
	// The ACME account key and a certificate's keys, sealed as the
	// leader's orderer seals them, written as it writes them.
	ring := openRing(t, s, dir)
	sealFor := func(value, place string) []byte {
		t.Helper()
		k, err := ring.Open(s.Store().Read())
		if err != nil {
			t.Fatal(err)
		}
		v, err := k.Seal([]byte(value), place)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	//
	// The leader's orderer passes every few seconds: it forgets the
	// pending certificate of a domain no https route asks for, and orders
	// (and on failure rewrites) one that is due. So the domain is routed
	// first, and the certificate's next attempt is an hour away before
	// the ACME account exists.
	const domain = "web.example.test"
	if _, err := ops.ingress.CreateRoute(ctx, connect.NewRequest(&corpusv1.CreateRouteRequest{
		Kind: string(corpusv1.RouteHTTP), Domain: domain, GuestName: "hello-dev", GuestPort: 80, Https: true})); err != nil {
		t.Fatalf("CreateRoute = %v", err)
	}
	for _, cmd := range []*corpusv1.Command{
		{Cmd: &corpusv1.Command_PutCertificate{PutCertificate: &corpusv1.PutCertificate{Certificate: &corpusv1.Certificate{
			Domain: domain, State: state.CertPending, Key: sealFor("cert-planted", state.CertificateKeyPlace(domain)),
			Challenge:     &corpusv1.AcmeChallenge{AlpnKey: sealFor("alpn-planted", state.ChallengeKeyPlace(domain))},
			NextAttemptAt: timestamppb.New(time.Now().Add(time.Hour))}}}},
		{Cmd: &corpusv1.Command_SetAcmeConfig{SetAcmeConfig: &corpusv1.SetAcmeConfig{Config: &corpusv1.AcmeConfig{
			DirectoryUrl: "https://127.0.0.1:1/dir", AccountKey: sealFor("account-planted", state.AcmeKeyPlace)}}}},
	} {
		if _, err := s.Propose(ctx, cmd); err != nil {
			t.Fatalf("Propose(%v) = %v", cmd, err)
		}
	}

	before := s.Store().Read().Keyring()
	rot, err := ops.cluster.RotateKeyring(ctx, connect.NewRequest(&corpusv1.RotateKeyringRequest{}))
	if err != nil {
		t.Fatalf("RotateKeyring = %v", err)
	}
	// env 1, release 1, service 1, extension 1, registry 1, account 1,
	// certificate 2.
	if rot.Msg.Previous != before.Primary || rot.Msg.Primary == before.Primary || rot.Msg.Resealed != 8 {
		t.Errorf("RotateKeyring = %v; want from %s to a new key, 8 values resealed", rot.Msg, before.Primary)
	}
	view := s.Store().Read()
	if kr := view.Keyring(); len(kr.Keys) != 1 || kr.Keys[0].Id != rot.Msg.Primary || kr.Primary != rot.Msg.Primary {
		t.Errorf("keyring after the rotation = %v; want the new key %s alone", kr, rot.Msg.Primary)
	}
	// No value anywhere in the state is still sealed by the old key.
	var fresh int
	var seen []string
	walkBytes(view.Dump().ProtoReflect(), "", func(path string, b []byte) {
		id, err := seal.KeyID(b)
		switch {
		case err != nil:
		case id == before.Primary:
			t.Errorf("%s is still sealed by the retired key %s", path, id)
		case id == rot.Msg.Primary:
			fresh++
		}
		if err == nil {
			seen = append(seen, path+" by "+id)
		}
	})
	// The eight values and the new key's own wrapped form.
	if fresh != 9 {
		t.Errorf("%d values are sealed by the new key %s, want 9; at index %d (rotation at %d) sealed values are %q",
			fresh, rot.Msg.Primary, view.Index(), view.Keyring().GetModifyIndex(), seen)
	}
	// Each opens to what was sealed, with the new keyring alone.
	k, err := ring.Open(view)
	if err != nil {
		t.Fatal(err)
	}
	svc := view.Service("mail")
	e := corpusv1.EnvNamed(view.Project("hello"), "dev")
	crt := view.Certificate(domain)
	for _, c := range []struct {
		what, want, place string
		sealed            []byte
	}{
		{"env config", "hunter2-planted", state.ConfigPlace("hello", "dev", "DB_PASSWORD"), e.Config["DB_PASSWORD"]},
		{"release config", "hunter2-planted", state.ConfigPlace("hello", "dev", "DB_PASSWORD"), view.Release(rel.Msg.Release.Id).Config["DB_PASSWORD"]},
		{"service secret", "mail-planted", state.ServicePlace("mail", "API_KEY"), svc.Secrets["API_KEY"]},
		{"extension secret", "hook-planted-0123456789", state.ExtensionPlace("lint"), view.Extension("lint").GetSecret()},
		{"registry password", "registry-planted", state.RegistryPlace("registry.example.test"), view.RegistryLogin("registry.example.test").GetPassword()},
		{"acme account key", "account-planted", state.AcmeKeyPlace, view.Acme().AccountKey},
		{"certificate key", "cert-planted", state.CertificateKeyPlace(domain), crt.Key},
		{"challenge key", "alpn-planted", state.ChallengeKeyPlace(domain), crt.Challenge.GetAlpnKey()},
	} {
		got, err := k.Open(c.sealed, c.place)
		if err != nil || string(got) != c.want {
			t.Errorf("%s after the rotation opens to %q, %v; want %q", c.what, got, err, c.want)
		}
	}
}

// openRing opens the cluster keyring as a replica does, with the CA key
// in the replica's folder dir.
func openRing(t *testing.T, s *server, dir string) *keyring.Ring {
	t.Helper()
	key, err := os.ReadFile(filepath.Join(dir, coordinator.TLSDir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(s.CACert(), key)
	if err != nil {
		t.Fatal(err)
	}
	return keyring.New(s.Store(), func() []*pki.CA { return []*pki.CA{ca} }, nil)
}

// walkBytes calls f with every bytes value in m (fields, list elements
// and map values, at any depth) and its path.
func walkBytes(m protoreflect.Message, path string, f func(path string, b []byte)) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := path + "." + string(fd.Name())
		visit := func(p string, fd protoreflect.FieldDescriptor, v protoreflect.Value) {
			switch fd.Kind() {
			case protoreflect.BytesKind:
				f(p, v.Bytes())
			case protoreflect.MessageKind, protoreflect.GroupKind:
				walkBytes(v.Message(), p, f)
			}
		}
		switch {
		case fd.IsList():
			for i := range v.List().Len() {
				visit(p, fd, v.List().Get(i))
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				visit(p+"["+k.String()+"]", fd.MapValue(), mv)
				return true
			})
		default:
			visit(p, fd, v)
		}
		return true
	})
}
