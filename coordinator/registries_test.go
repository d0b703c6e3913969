package coordinator_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestRegistryLogins: a registry's credentials are set, listed without
// the password, set again unchanged, given opened to the agent of a
// node whose guest pulls from that registry (and refused to a node that
// runs none), and logged out of idempotently. The password is never in
// clear in the replica's files.
func TestRegistryLogins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := start(t, dir, func(c *coordinator.Config) { c.NodeTimeout = time.Hour })
	ops := s.ops()
	const host, password = "registry.example.test:5000", "registry-pw-planted"

	login := func(req *corpusv1.RegistryLoginRequest) (*corpusv1.RegistryLoginResponse, error) {
		res, err := ops.reg.Login(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	for _, bad := range []*corpusv1.RegistryLoginRequest{
		{Host: "https://" + host, Username: "u", Password: "p"},
		{Host: host + "/team", Username: "u", Password: "p"},
		{Host: host, Username: "", Password: "p"},
		{Host: host, Username: "u", Password: ""},
		{Host: host, Username: "u", Password: "p\nq"},
	} {
		if _, err := login(bad); codeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("Login(%q, %q) = %v, want InvalidArgument", bad.Host, bad.Username, err)
		}
	}
	if n := len(s.Store().Read().RegistryLogins()); n != 0 {
		t.Fatalf("refused logins left %d registries", n)
	}
	res, err := login(&corpusv1.RegistryLoginRequest{Host: host, Username: "puller", Password: password})
	if err != nil || !res.Changed || res.Registry.Host != host || res.Registry.Username != "puller" || res.Registry.SetBy == "" || res.Registry.SetAt == nil {
		t.Fatalf("Login = %v, %v; want it set, by whom and when", res, err)
	}
	idx := s.Store().Read().RegistryLogin(host).ModifyIndex
	if again, err := login(&corpusv1.RegistryLoginRequest{Host: host, Username: "puller", Password: password}); err != nil || again.Changed {
		t.Errorf("the same Login again = %v, %v; want it unchanged", again, err)
	}
	if got := s.Store().Read().RegistryLogin(host).ModifyIndex; got != idx {
		t.Errorf("the same Login again wrote (index %d, was %d)", got, idx)
	}
	// docker.io is kept as pulls reach it.
	if res, err := login(&corpusv1.RegistryLoginRequest{Host: "docker.io", Username: "hub", Password: "hub-pw"}); err != nil || res.Registry.Host != "index.docker.io" {
		t.Errorf("Login(docker.io) = %v, %v; want index.docker.io", res, err)
	}
	list, err := ops.reg.ListRegistries(ctx, connect.NewRequest(&corpusv1.ListRegistriesRequest{}))
	if err != nil || len(list.Msg.Registries) != 2 || list.Msg.Registries[1].Host != host {
		t.Fatalf("ListRegistries = %v, %v; want index.docker.io and %s", list, err, host)
	}
	if strings.Contains(list.Msg.String(), password) {
		t.Errorf("ListRegistries shows the password: %v", list.Msg)
	}

	// The agents: a node whose guest pulls from the registry gets the
	// credentials opened; another node, with no such guest, is refused.
	puller, other := s.enroll("puller"), s.enroll("other")
	puller.report(t)
	other.report(t)
	if _, err := ops.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "app", Spec: &corpusv1.GuestSpec{
		Driver: "lxc", Image: host + "/team/app:1"}})); err != nil {
		t.Fatal(err)
	}
	s.waitFor("app placed", func(v *state.Snap) bool { return v.GuestByName("app").GetNodeId() != "" })
	on := s.Store().Read().GuestByName("app").NodeId
	pulling, idle := puller, other
	if on != puller.id {
		pulling, idle = other, puller
	}
	creds, err := pulling.agent.RegistryCredentials(ctx, connect.NewRequest(&corpusv1.RegistryCredentialsRequest{Host: host}))
	if err != nil || !creds.Msg.Found || creds.Msg.Username != "puller" || creds.Msg.Password != password {
		t.Errorf("RegistryCredentials by the guest's node = %v, %v; want the credentials opened", creds, err)
	}
	if _, err := idle.agent.RegistryCredentials(ctx, connect.NewRequest(&corpusv1.RegistryCredentialsRequest{Host: host})); codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("RegistryCredentials by a node with no guest from %s = %v, want PermissionDenied", host, err)
	}

	// A node of the kubernetes driver (no list of images it builds)
	// pulls Docker Hub's short names too: index.docker.io's credentials
	// are its for a guest of nginx:1.25; an LXC guest of busybox, an
	// image its node builds, gives none.
	kube := s.enroll("kube")
	if _, err := kube.agent.Report(ctx, connect.NewRequest(&corpusv1.ReportRequest{
		Capacity: capacity(), AgentAddress: kube.address, AgentVersion: "test",
		Drivers: []*corpusv1.DriverInfo{{Name: "kubernetes", Healthy: true, Exec: true, OwnNetwork: true, Converge: true}},
	})); err != nil {
		t.Fatal(err)
	}
	hubCreds := func(a *agent) error {
		_, err := a.agent.RegistryCredentials(ctx, connect.NewRequest(&corpusv1.RegistryCredentialsRequest{Host: "docker.io"}))
		return err
	}
	if err := hubCreds(kube); codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("index.docker.io's credentials for a node with no guest = %v, want PermissionDenied", err)
	}
	if _, err := ops.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "web", Spec: &corpusv1.GuestSpec{
		Driver: "kubernetes", Image: "nginx:1.25"}})); err != nil {
		t.Fatal(err)
	}
	s.waitFor("web placed", func(v *state.Snap) bool { return v.GuestByName("web").GetNodeId() == kube.id })
	if err := hubCreds(kube); err != nil {
		t.Errorf("index.docker.io's credentials for the node of a kubernetes guest of nginx:1.25 = %v", err)
	}
	// The LXC nodes say which images they build, as the real driver does.
	for _, a := range []*agent{puller, other} {
		if _, err := a.agent.Report(ctx, connect.NewRequest(&corpusv1.ReportRequest{
			Capacity: capacity(), AgentAddress: a.address, AgentVersion: "test",
			Drivers: []*corpusv1.DriverInfo{{Name: "lxc", Healthy: true, Exec: true, Images: []string{"busybox", "debian/bookworm"}, OciImages: true}},
		})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ops.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "bb", Spec: &corpusv1.GuestSpec{
		Driver: "lxc", Image: "busybox"}})); err != nil {
		t.Fatal(err)
	}
	s.waitFor("bb placed", func(v *state.Snap) bool { return v.GuestByName("bb").GetNodeId() != "" })
	bbNode := puller
	if s.Store().Read().GuestByName("bb").NodeId == other.id {
		bbNode = other
	}
	if err := hubCreds(bbNode); codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("index.docker.io's credentials for the node of an LXC guest of busybox = %v, want PermissionDenied", err)
	}

	// Logout removes them, and again is no error.
	out, err := ops.reg.Logout(ctx, connect.NewRequest(&corpusv1.RegistryLogoutRequest{Host: host}))
	if err != nil || !out.Msg.Removed {
		t.Errorf("Logout = %v, %v; want removed", out, err)
	}
	out, err = ops.reg.Logout(ctx, connect.NewRequest(&corpusv1.RegistryLogoutRequest{Host: host}))
	if err != nil || out.Msg.Removed {
		t.Errorf("Logout again = %v, %v; want nothing removed, no error", out, err)
	}
	creds, err = pulling.agent.RegistryCredentials(ctx, connect.NewRequest(&corpusv1.RegistryCredentialsRequest{Host: host}))
	if err != nil || creds.Msg.Found {
		t.Errorf("RegistryCredentials after the logout = %v, %v; want none found", creds, err)
	}

	// The audit log names the registry of each login and logout.
	var audited []string
	for _, e := range s.Store().Read().Audit() {
		if strings.Contains(e.Action, "registry_login") {
			audited = append(audited, e.Action+" "+e.Target+" "+e.Result)
		}
	}
	if want := []string{"put_registry_login " + host + " ok", "put_registry_login index.docker.io ok", "delete_registry_login " + host + " ok"}; !slices.Equal(audited, want) {
		t.Errorf("audited %q, want %q", audited, want)
	}
	// Nothing the replica wrote holds the password in clear: the Raft
	// log carries it sealed.
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err == nil && bytes.Contains(b, []byte(password)) {
			t.Errorf("%s holds the registry password in clear", path)
		}
		return nil
	})
}
