package coordinator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator"
	"corpus/coordinator/ldapauth"
	"corpus/internal/slapdtest"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestLDAPLogin logs users in against a real slapd over StartTLS: a right
// password gets an expiring token that works; every refusal (wrong
// password, no corpus user, a user without ldap auth, the directory
// down) issues nothing, answers a clear code and is audited; repeated
// failures lock the user out for a while.
func TestLDAPLogin(t *testing.T) {
	t.Parallel()
	dir := slapdtest.Start(t, map[string]string{
		"alice": "wonderland", "bob": "builder", "carol": "carol-pw", "dave": "dave-pw",
	})
	const ttl = time.Hour
	s := start(t, t.TempDir(), func(c *coordinator.Config) {
		c.LDAP = ldapauth.Config{URL: dir.URL, UserDN: slapdtest.UserDN, StartTLS: true, CAFile: dir.CAFile}
		c.LoginTokenTTL = ttl
	})
	ctx := context.Background()
	ops := s.ops()
	for _, u := range []*corpusv1.CreateUserRequest{
		{Name: "alice", Role: "dev", Auth: "ldap"},
		{Name: "bob", Role: "viewer", Auth: "ldap"},
		{Name: "dave", Role: "dev"}, // API tokens only
	} {
		if _, err := ops.users.CreateUser(ctx, connect.NewRequest(u)); err != nil {
			t.Fatalf("CreateUser(%v) = %v", u, err)
		}
	}
	anon := s.clients("")
	login := func(user, pw string, ttl time.Duration) (*corpusv1.LoginResponse, error) {
		res, err := anon.users.Login(ctx, connect.NewRequest(&corpusv1.LoginRequest{User: user, Password: pw, TtlSeconds: int64(ttl / time.Second)}))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}

	res, err := login("alice", "wonderland", 0)
	if err != nil {
		t.Fatalf("Login(alice) = %v", err)
	}
	if !res.Info.Login || res.Info.User != "alice" || res.Info.SecretHash != "" {
		t.Errorf("Login(alice) info = %v, want a login token of alice without its hash", res.Info)
	}
	if left := time.Until(res.Info.ExpiresAt.AsTime()); left > ttl || left < ttl-time.Minute {
		t.Errorf("Login(alice) token expires in %s, want about %s", left, ttl)
	}
	st, err := s.clients(res.Token).cluster.Status(ctx, connect.NewRequest(&corpusv1.StatusRequest{}))
	if err != nil || st.Msg.Who != "user:alice" {
		t.Fatalf("Status with alice's login token = %v, %v; want it to name user:alice", st, err)
	}
	if _, err := s.clients(res.Token).users.CreateUser(ctx, connect.NewRequest(&corpusv1.CreateUserRequest{Name: "mallory", Role: "ops"})); codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("CreateUser with a dev's login token = %v, want %v", err, connect.CodePermissionDenied)
	}
	if res, err := login("alice", "wonderland", 10*time.Minute); err != nil || time.Until(res.Info.ExpiresAt.AsTime()) > 10*time.Minute {
		t.Errorf("Login(alice, ttl 10m) = %v, %v; want a token expiring within 10m", res, err)
	}

	refused := []struct {
		name, user, password string
		ttl                  time.Duration
		code                 connect.Code
		audit                string // the audit result names the reason ("" for no entry)
	}{
		{"wrong password", "alice", "builder", 0, connect.CodeUnauthenticated, "wrong password"},
		{"empty password", "alice", "", 0, connect.CodeUnauthenticated, "wrong password"},
		{"in the directory, not in corpus", "carol", "carol-pw", 0, connect.CodeUnauthenticated, "no such user"},
		{"not an ldap user", "dave", "dave-pw", 0, connect.CodeUnauthenticated, "does not log in with ldap"},
		{"bad name", "Alice,ou=people", "wonderland", 0, connect.CodeInvalidArgument, ""},
		{"ttl over the limit", "alice", "wonderland", 2 * ttl, connect.CodeInvalidArgument, ""},
	}
	for _, c := range refused {
		before := s.Store().Read()
		_, err := login(c.user, c.password, c.ttl)
		if codeOf(err) != c.code {
			t.Errorf("Login(%s: %q, %q) = %v, want %v", c.name, c.user, c.password, err, c.code)
		}
		after := s.Store().Read()
		if !proto.Equal(&corpusv1.ListTokensResponse{Tokens: before.UserTokens("")}, &corpusv1.ListTokensResponse{Tokens: after.UserTokens("")}) {
			t.Errorf("Login(%s) changed the tokens", c.name)
		}
		if c.audit != "" {
			if e := lastAudit(t, s, "user_login"); e.Target != c.user || !strings.HasPrefix(e.Result, "login refused: ") || !strings.Contains(e.Result, c.audit) {
				t.Errorf("after Login(%s) the last user_login audit entry is %v, want target %s and a result naming %q", c.name, e, c.user, c.audit)
			}
		}
	}

	// Five wrong passwords lock bob out, the right one included.
	for i := range 5 {
		if _, err := login("bob", "wrong", 0); codeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("Login(bob, wrong) #%d = %v, want %v", i+1, err, connect.CodeUnauthenticated)
		}
	}
	if _, err := login("bob", "builder", 0); codeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "too many failed logins") {
		t.Errorf("Login(bob) after 5 failures = %v, want %v naming too many failed logins", err, connect.CodeResourceExhausted)
	}
	if _, err := login("alice", "wonderland", 0); err != nil {
		t.Errorf("Login(alice) while bob is locked out = %v, want nil", err)
	}

	// The directory down: Unavailable, audited, nothing issued.
	dir.Stop()
	before := len(s.Store().Read().UserTokens(""))
	if _, err := login("alice", "wonderland", 0); codeOf(err) != connect.CodeUnavailable {
		t.Errorf("Login(alice) with the directory down = %v, want %v", err, connect.CodeUnavailable)
	}
	if after := len(s.Store().Read().UserTokens("")); after != before {
		t.Errorf("Login with the directory down changed the tokens: %d -> %d", before, after)
	}
	if e := lastAudit(t, s, "user_login"); !strings.Contains(e.Result, "directory unavailable") {
		t.Errorf("last user_login audit entry = %v, want it to say the directory was unavailable", e)
	}
	ok := 0
	for _, e := range audit(t, s, "user_login") {
		if e.Result == "ok" && e.Actor == "user:alice" {
			ok++
		}
	}
	if ok != 3 {
		t.Errorf("audit holds %d successful logins of alice, want 3", ok)
	}
}

// TestLoginOff: without a directory, Login says how to turn it on.
func TestLoginOff(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	_, err := s.clients("").users.Login(context.Background(), connect.NewRequest(&corpusv1.LoginRequest{User: "alice", Password: "x"}))
	if codeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "--ldap-url") {
		t.Errorf("Login without LDAP = %v, want %v naming --ldap-url", err, connect.CodeFailedPrecondition)
	}
}

func audit(t *testing.T, s *server, action string) []*corpusv1.AuditEntry {
	t.Helper()
	res, err := s.ops().audit.ListAudit(context.Background(), connect.NewRequest(&corpusv1.ListAuditRequest{Action: action, Limit: 1000}))
	if err != nil {
		t.Fatalf("ListAudit(%s) = %v", action, err)
	}
	return res.Msg.Entries
}

func lastAudit(t *testing.T, s *server, action string) *corpusv1.AuditEntry {
	t.Helper()
	all := audit(t, s, action)
	if len(all) == 0 {
		t.Fatalf("no %s entry in the audit log", action)
	}
	return all[len(all)-1]
}
