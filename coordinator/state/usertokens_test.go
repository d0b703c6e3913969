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
