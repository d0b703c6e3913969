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
