package coordinator_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"golang.org/x/crypto/ssh"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// newKey returns an authorized_keys line and its fingerprint.
func newKey(t *testing.T) (line, fp string) {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))) + " someone@laptop", ssh.FingerprintSHA256(k)
}

// TestGitAccess: who may push to or fetch from a project environment, as
// the node hosting it asks.
func TestGitAccess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t, t.TempDir())
	n1, n2 := s.enroll("n1"), s.enroll("n2")
	n1.report(t)
	ops := s.ops()
	keys := map[string]string{}
	for _, u := range []struct{ name, role string }{{"root", "ops"}, {"alice", "dev"}, {"bob", "dev"}, {"val", "viewer"}} {
		if _, err := ops.users.CreateUser(ctx, connect.NewRequest(&corpusv1.CreateUserRequest{Name: u.name, Role: u.role})); err != nil {
			t.Fatal(err)
		}
		line, fp := newKey(t)
		if _, err := ops.users.AddKey(ctx, connect.NewRequest(&corpusv1.AddKeyRequest{User: u.name, PublicKey: line})); err != nil {
			t.Fatal(err)
		}
		keys[u.name] = fp
	}
	// A key belongs to one user only.
	line, _ := newKey(t)
	if _, err := ops.users.AddKey(ctx, connect.NewRequest(&corpusv1.AddKeyRequest{User: "alice", PublicKey: line})); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.users.AddKey(ctx, connect.NewRequest(&corpusv1.AddKeyRequest{User: "bob", PublicKey: line})); codeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("adding alice's key to bob = %v, want AlreadyExists", err)
	}
	for _, bad := range []string{"", "ssh-ed25519 !!!", "-----BEGIN OPENSSH PRIVATE KEY-----", `command="sh" ` + line} {
		if _, err := ops.users.AddKey(ctx, connect.NewRequest(&corpusv1.AddKeyRequest{User: "bob", PublicKey: bad})); codeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("AddKey(%q) = %v, want InvalidArgument", bad, err)
		}
	}
	if _, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: "hello", Env: "dev"})); err != nil {
		t.Fatal(err)
	}
	s.waitFor("hello-dev placed", func(v *state.Snap) bool { return v.GuestByName("hello-dev").GetNodeId() == n1.id })
	for _, u := range []string{"alice", "val"} {
		if _, err := ops.project.GrantProject(ctx, connect.NewRequest(&corpusv1.GrantProjectRequest{Name: "hello", User: u})); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		node    *agent
		key     string
		project string
		write   bool
		allowed bool
		reason  string
	}{
		{"ops pushes anywhere", n1, keys["root"], "hello", true, true, ""},
		{"granted dev pushes", n1, keys["alice"], "hello", true, true, ""},
		{"dev without grant", n1, keys["bob"], "hello", true, false, "may not use project hello"},
		{"viewer fetches", n1, keys["val"], "hello", false, true, ""},
		{"viewer pushes", n1, keys["val"], "hello", true, false, "viewer"},
		{"unknown key", n1, "SHA256:nobody", "hello", false, false, "belongs to no user"},
		{"unknown project", n1, keys["root"], "nope", true, false, "no project"},
		{"a name that is none", n1, keys["root"], "../Etc", true, false, `"../Etc" is not a project[/env] name`},
		{"node without the env", n2, keys["root"], "hello", true, false, "no environment on this node"},
	} {
		res, err := tc.node.agent.GitAccess(ctx, connect.NewRequest(&corpusv1.GitAccessRequest{Fingerprint: tc.key, Project: tc.project, Write: tc.write}))
		if err != nil {
			t.Errorf("%s: GitAccess = %v", tc.name, err)
			continue
		}
		m := res.Msg
		if m.Allowed != tc.allowed || !strings.Contains(m.Reason, tc.reason) {
			t.Errorf("%s: allowed %v (%q), want %v (%q)", tc.name, m.Allowed, m.Reason, tc.allowed, tc.reason)
		}
		if m.Allowed && (m.Env.GetName() != "dev" || m.Env.GetBranch() != "main") {
			t.Errorf("%s: env = %v", tc.name, m.Env)
		}
	}
	// The refusals are in the audit log as the API's are: who, what and
	// which project; a key checked alone (an SSH client trying its keys
	// in turn) is not.
	if res, err := n1.agent.GitAccess(ctx, connect.NewRequest(&corpusv1.GitAccessRequest{Fingerprint: keys["bob"], Project: "hello", Env: "dev", Shell: true})); err != nil || res.Msg.Allowed {
		t.Errorf("bob's shell in hello/dev = %v, %v; want refused", res, err)
	}
	if res, err := n1.agent.GitAccess(ctx, connect.NewRequest(&corpusv1.GitAccessRequest{Fingerprint: "SHA256:stranger"})); err != nil || res.Msg.Allowed {
		t.Errorf("a stranger's key = %v, %v; want refused", res, err)
	}
	for _, want := range []struct{ action, actor, target, why string }{
		{"refused git push", "user:bob", "hello", "may not use project hello"},
		{"refused git push", "user:val", "hello", "viewer and may not push"},
		{"refused git fetch", "anonymous", "hello", "belongs to no user"},
		{"refused git push", "user:root", "nope", `no project named "nope"`},
		{"refused git push", "user:root", "hello", "no environment on this node"},
		{"refused ssh shell", "user:bob", "hello/dev", "may not use project hello"},
		{"refused git push", "user:root", "", "is not a project[/env] name"},
	} {
		found := false
		for _, e := range audit(t, s, want.action) {
			if e.Actor == want.actor && e.Target == want.target && strings.Contains(e.Result, want.why) && strings.Contains(e.Result, "over ssh, node n") {
				found = true
			}
		}
		if !found {
			t.Errorf("no %q entry of %s on %s saying %q over ssh in %v", want.action, want.actor, want.target, want.why, audit(t, s, want.action))
		}
	}
	for _, e := range audit(t, s, "refused git fetch") {
		if strings.Contains(e.Result, "stranger") {
			t.Errorf("a key checked alone was audited: %v", e)
		}
	}

	// Revoking takes effect at once; deleting a user removes their grants.
	if _, err := ops.project.GrantProject(ctx, connect.NewRequest(&corpusv1.GrantProjectRequest{Name: "hello", User: "alice", Revoke: true})); err != nil {
		t.Fatal(err)
	}
	if res, _ := n1.agent.GitAccess(ctx, connect.NewRequest(&corpusv1.GitAccessRequest{Fingerprint: keys["alice"], Project: "hello", Write: true})); res.Msg.Allowed {
		t.Errorf("alice may still push after the revoke")
	}
	if _, err := ops.users.DeleteUser(ctx, connect.NewRequest(&corpusv1.DeleteUserRequest{Name: "val"})); err != nil {
		t.Fatal(err)
	}
	if p := s.Store().Read().Project("hello"); len(p.Members) != 0 {
		t.Errorf("members after revoking alice and deleting val = %v", p.Members)
	}
}
