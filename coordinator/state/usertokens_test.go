package state_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

func loginCmd(user, id string, expires time.Time) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_UserLogin{UserLogin: &corpusv1.UserLogin{User: user, Method: "ldap", Remote: "127.0.0.1",
		Token: &corpusv1.UserToken{Id: id, User: user, SecretHash: "h" + id, ExpiresAt: timestamppb.New(expires)}}}}
}

func userTokenCmd(user, id string, expires time.Time) *corpusv1.Command {
	t := &corpusv1.UserToken{Id: id, User: user, SecretHash: "h" + id}
	if !expires.IsZero() {
		t.ExpiresAt = timestamppb.New(expires)
	}
	return &corpusv1.Command{Cmd: &corpusv1.Command_CreateUserToken{CreateUserToken: &corpusv1.CreateUserToken{Token: t}}}
}

func ids(ts []*corpusv1.UserToken) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Id)
	}
	return out
}

// TestUserLogin: a login issues a login token; at the per-user limit the
// user's expired tokens, then the oldest login tokens, make way, never
// tokens an operator issued; a refused login changes nothing but the
// audit log.
func TestUserLogin(t *testing.T) {
	r := newReplica(t)
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_CreateUser{CreateUser: &corpusv1.CreateUser{User: &corpusv1.User{Name: "alice", Role: "dev", Auth: "ldap"}}}})
	later := epoch.Add(time.Hour)

	before := r.dump()
	err := r.apply(&corpusv1.Command{Ignorable: true, Cmd: &corpusv1.Command_UserLogin{UserLogin: &corpusv1.UserLogin{User: "alice", Refused: "wrong password"}}})
	if !errors.Is(err, state.ErrLoginRefused) {
		t.Fatalf("refused UserLogin = %v, want %v", err, state.ErrLoginRefused)
	}
	after := r.dump()
	after.Audit, before.Audit = nil, nil
	if !proto.Equal(before, after) {
		t.Errorf("a refused login changed the state:\n%v\n%v", before, after)
	}
	if e := r.store.Read().Audit(); e[len(e)-1].Result != "login refused: wrong password" || e[len(e)-1].Target != "alice" {
		t.Errorf("audit entry of a refused login = %v", e[len(e)-1])
	}

	if err := r.apply(loginCmd("nobody", "x", later)); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("UserLogin(nobody) = %v, want %v", err, state.ErrNotFound)
	}
	// 20 login tokens, 2 expired operator tokens, 28 operator tokens: 50.
	for i := range 20 {
		r.must(loginCmd("alice", fmt.Sprintf("login%02d", i), later))
	}
	r.must(userTokenCmd("alice", "exp0", epoch.Add(-time.Second)), userTokenCmd("alice", "exp1", epoch))
	for i := range 28 {
		r.must(userTokenCmd("alice", fmt.Sprintf("ops%02d", i), time.Time{}))
	}
	if err := r.apply(userTokenCmd("alice", "one-more", later)); !errors.Is(err, state.ErrExhausted) {
		t.Fatalf("CreateUserToken at the limit = %v, want %v", err, state.ErrExhausted)
	}
	r.must(loginCmd("alice", "new0", later))
	got := ids(r.store.Read().UserTokens("alice"))
	if len(got) != 49 || got[0] != "login00" || got[len(got)-1] != "new0" {
		t.Errorf("after a login at the limit tokens = %v, want the 2 expired gone and new0 added", got)
	}
	r.must(loginCmd("alice", "new1", later), loginCmd("alice", "new2", later))
	got = ids(r.store.Read().UserTokens("alice"))
	if len(got) != 50 || got[0] != "login01" || got[len(got)-1] != "new2" {
		t.Errorf("after logins at the limit tokens = %v, want login00 gone", got)
	}
	for _, tok := range r.store.Read().UserTokens("alice") {
		if tok.Login != (tok.Id[0] != 'o') {
			t.Errorf("token %s login = %t", tok.Id, tok.Login)
		}
	}
}

func touchCmd(uses ...*corpusv1.TokenUse) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_TouchUserTokens{TouchUserTokens: &corpusv1.TouchUserTokens{Uses: uses}}}
}

func use(id string, at time.Time, from string) *corpusv1.TokenUse {
	return &corpusv1.TokenUse{Id: id, At: timestamppb.New(at), From: from}
}

// TestTouchUserTokens: a token's last use only moves forward, whatever
// order replicas' batches commit in; a use of a token revoked since is
// skipped; a bad batch is refused whole; the entry kind waits for the
// cluster version that introduced it.
func TestTouchUserTokens(t *testing.T) {
	r := newReplica(t)
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_CreateUser{CreateUser: &corpusv1.CreateUser{User: &corpusv1.User{Name: "alice", Role: "dev"}}}},
		userTokenCmd("alice", "a", time.Time{}), userTokenCmd("alice", "b", time.Time{}))
	if err := r.apply(touchCmd(use("a", epoch, "10.0.0.1"))); !errors.Is(err, state.ErrBadTransition) {
		t.Errorf("TouchUserTokens before the cluster version allows it = %v, want %v", err, state.ErrBadTransition)
	}
	r.must(clusterVersionCmd("v0.2"))
	r.must(touchCmd(use("a", epoch.Add(time.Minute), "10.0.0.1"), use("gone", epoch, "10.0.0.9")))
	r.must(touchCmd(use("a", epoch, "10.0.0.2"))) // older: changes nothing
	a := r.store.Read().UserToken("a")
	if !a.LastUsedAt.AsTime().Equal(epoch.Add(time.Minute)) || a.LastUsedFrom != "10.0.0.1" {
		t.Errorf("a's last use = %v from %q, want %v from 10.0.0.1", a.LastUsedAt.AsTime(), a.LastUsedFrom, epoch.Add(time.Minute))
	}
	if b := r.store.Read().UserToken("b"); b.LastUsedAt != nil || b.LastUsedFrom != "" {
		t.Errorf("b, never used, = %v", b)
	}
	before := r.dump()
	for name, cmd := range map[string]*corpusv1.Command{
		"a use without time": touchCmd(use("b", epoch, "x"), &corpusv1.TokenUse{Id: "a"}),
		"too many uses":      touchCmd(make([]*corpusv1.TokenUse, state.MaxTokenUses+1)...),
	} {
		if err := r.apply(cmd); !errors.Is(err, state.ErrInvalid) {
			t.Errorf("%s = %v, want %v", name, err, state.ErrInvalid)
		}
	}
	after := r.dump()
	after.Audit, before.Audit = nil, nil
	if !proto.Equal(before, after) {
		t.Errorf("a refused TouchUserTokens changed the state")
	}
}

// TestRevokeEndsSessions: revoking a token revokes the session tokens
// made with it, and theirs, not its user's other tokens; a session is
// not made with a token that is gone.
func TestRevokeEndsSessions(t *testing.T) {
	r := newReplica(t)
	session := func(id, parent string) *corpusv1.Command {
		c := userTokenCmd("alice", id, time.Time{})
		c.GetCreateUserToken().Token.Parent = parent
		return c
	}
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_CreateUser{CreateUser: &corpusv1.CreateUser{User: &corpusv1.User{Name: "alice", Role: "dev"}}}},
		userTokenCmd("alice", "api", time.Time{}), userTokenCmd("alice", "other", time.Time{}))
	// Below v0.2 a replica applies as one of v0.1 would: the parent is
	// not checked, a revoke takes no session with it.
	r.must(session("s0", "gone"), session("s1", "api"), userTokenCmd("alice", "x", time.Time{}), session("sx", "x"))
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_RevokeUserToken{RevokeUserToken: &corpusv1.RevokeUserToken{Id: "x"}}})
	if r.store.Read().UserToken("sx") == nil {
		t.Errorf("below v0.2 a revoke took a session with it")
	}
	for _, id := range []string{"s0", "sx"} {
		r.must(&corpusv1.Command{Cmd: &corpusv1.Command_RevokeUserToken{RevokeUserToken: &corpusv1.RevokeUserToken{Id: id}}})
	}
	r.must(clusterVersionCmd("v0.2"))
	r.must(session("s2", "s1"), session("s3", "other"))
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_RevokeUserToken{RevokeUserToken: &corpusv1.RevokeUserToken{Id: "api"}}})
	if got := fmt.Sprint(ids(r.store.Read().UserTokens("alice"))); got != "[other s3]" {
		t.Errorf("tokens after revoking api = %s, want [other s3]", got)
	}
	if err := r.apply(session("s4", "api")); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("a session of a revoked token = %v, want %v", err, state.ErrNotFound)
	}
}

// TestTouchSSHKeys: an SSH key's last use only moves forward and does
// not count as a change of its user; a use of a key removed since is
// skipped; key and token uses share the entry's bound.
func TestTouchSSHKeys(t *testing.T) {
	r := newReplica(t)
	key := func(fp string) *corpusv1.Command {
		return &corpusv1.Command{Cmd: &corpusv1.Command_AddSshKey{AddSshKey: &corpusv1.AddSshKey{User: "alice", Key: &corpusv1.SshKey{Fingerprint: fp, PublicKey: "ssh-ed25519 " + fp}}}}
	}
	keyUses := func(uses ...*corpusv1.TokenUse) *corpusv1.Command {
		return &corpusv1.Command{Cmd: &corpusv1.Command_TouchUserTokens{TouchUserTokens: &corpusv1.TouchUserTokens{KeyUses: uses}}}
	}
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_CreateUser{CreateUser: &corpusv1.CreateUser{User: &corpusv1.User{Name: "alice", Role: "dev"}}}},
		key("SHA256:a"), key("SHA256:b"), clusterVersionCmd("v0.2"))
	modified := r.store.Read().User("alice").ModifyIndex
	r.must(keyUses(use("SHA256:a", epoch.Add(time.Minute), "10.0.0.1"), use("SHA256:gone", epoch, "10.0.0.9")))
	r.must(keyUses(use("SHA256:a", epoch, "10.0.0.2"))) // older: changes nothing
	alice := r.store.Read().User("alice")
	if alice.ModifyIndex != modified {
		t.Errorf("a key's use moved its user's modify index from %d to %d", modified, alice.ModifyIndex)
	}
	for _, k := range alice.Keys {
		switch k.Fingerprint {
		case "SHA256:a":
			if !k.LastUsedAt.AsTime().Equal(epoch.Add(time.Minute)) || k.LastUsedFrom != "10.0.0.1" {
				t.Errorf("a's last use = %v from %q, want %v from 10.0.0.1", k.LastUsedAt.AsTime(), k.LastUsedFrom, epoch.Add(time.Minute))
			}
		case "SHA256:b":
			if k.LastUsedAt != nil || k.LastUsedFrom != "" {
				t.Errorf("b, never used, = %v", k)
			}
		}
	}
	over := touchCmd(make([]*corpusv1.TokenUse, state.MaxTokenUses/2)...)
	over.GetTouchUserTokens().KeyUses = make([]*corpusv1.TokenUse, state.MaxTokenUses/2+1)
	if err := r.apply(over); !errors.Is(err, state.ErrInvalid) {
		t.Errorf("%d token and %d key uses = %v, want %v", state.MaxTokenUses/2, state.MaxTokenUses/2+1, err, state.ErrInvalid)
	}
}
