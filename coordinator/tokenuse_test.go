package coordinator_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestTokenLastUsed: a token's last use (time and client address) is
// recorded on every replica without a write per call: a thousand calls
// through a follower make at most one touch_user_tokens entry per
// interval; a token never used has none; the record survives the
// leader's loss, and uses after it are recorded through the new leader.
func TestTokenLastUsed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const interval = 300 * time.Millisecond
	rs := startGroupNamed(t, "u", 3, func(c *coordinator.Config) { c.TokenUseInterval = interval })
	follower := rs.follower()
	ops := rs.ops(follower)
	if _, err := ops.users.CreateUser(ctx, connect.NewRequest(&corpusv1.CreateUserRequest{Name: "alice", Role: "dev"})); err != nil {
		t.Fatal(err)
	}
	var toks [2]*corpusv1.CreateTokenResponse
	for i := range toks {
		res, err := ops.users.CreateToken(ctx, connect.NewRequest(&corpusv1.CreateTokenRequest{User: "alice", TtlSeconds: 3600}))
		if err != nil {
			t.Fatal(err)
		}
		toks[i] = res.Msg
	}
	used, unused := toks[0], toks[1]
	lastUse := func(id, on string) (*corpusv1.UserToken, error) {
		res, err := rs.ops(on).users.ListTokens(ctx, connect.NewRequest(&corpusv1.ListTokensRequest{User: "alice"}))
		if err != nil {
			return nil, err
		}
		for _, tk := range res.Msg.Tokens {
			if tk.Id == id {
				return tk, nil
			}
		}
		return nil, fmt.Errorf("token %s not listed on %s", id, on)
	}

	const calls = 1000
	alice := rs.reps[follower].clients(used.Token)
	began := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < calls/8; i++ {
				if _, err := alice.cluster.Status(ctx, connect.NewRequest(&corpusv1.StatusRequest{})); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Status with alice's token = %v", err)
	}
	callsDone := time.Now()
	for id := range rs.reps {
		eventuallyT(t, "the last use recorded on "+id, func() error {
			tk, err := lastUse(used.Info.Id, id)
			if err != nil {
				return err
			}
			if tk.LastUsedAt == nil || tk.LastUsedFrom != "127.0.0.1" || tk.LastUsedAt.AsTime().Before(began.Add(-time.Second)) {
				return fmt.Errorf("last used %v from %q", tk.LastUsedAt, tk.LastUsedFrom)
			}
			return nil
		})
	}
	elapsed := time.Since(began)
	audit, err := ops.audit.ListAudit(ctx, connect.NewRequest(&corpusv1.ListAuditRequest{Action: "touch_user_tokens", IncludeSystem: true, Limit: 10000}))
	if err != nil {
		t.Fatal(err)
	}
	writes := len(audit.Msg.Entries)
	// One flush per interval, and a tick may fall on each end.
	most := int(elapsed/interval) + 2
	t.Logf("%d calls in %s, recorded in %d writes over %s (interval %s)", calls, callsDone.Sub(began), writes, elapsed, interval)
	if writes < 1 || writes > most {
		t.Errorf("%d calls made %d touch_user_tokens writes in %s; want 1 to %d (one per %s)", calls, writes, elapsed, most, interval)
	}
	if tk, err := lastUse(unused.Info.Id, follower); err != nil || tk.LastUsedAt != nil || tk.LastUsedFrom != "" {
		t.Errorf("a token never used = %v, %v; want no last use", tk, err)
	}
	before, err := lastUse(used.Info.Id, follower)
	if err != nil {
		t.Fatal(err)
	}

	// The leader goes: the record stays, and new uses are recorded
	// through the next leader (a batch refused during the election is
	// tried again).
	lead := rs.leader()
	rs.reps[lead].stop()
	delete(rs.reps, lead)
	// The record was committed, so it is on the survivor that served the
	// calls; the other may have lagged behind the leader, and holds it
	// once the next leader (the one with the longer log) replicates.
	for id := range rs.reps {
		eventuallyT(t, "the record on "+id+" after the leader left", func() error {
			if tk, err := lastUse(used.Info.Id, id); err != nil || tk.LastUsedAt.AsTime().Before(before.LastUsedAt.AsTime()) {
				return fmt.Errorf("last use = %v, %v; want %v or later", tk, err, before.LastUsedAt.AsTime())
			}
			return nil
		})
	}
	var survivor string
	for id := range rs.reps {
		survivor = id
	}
	// Calls go on until one an interval past the record is recorded.
	eventuallyT(t, "a use after the leader change recorded", func() error {
		if _, err := rs.reps[survivor].clients(used.Token).cluster.Status(ctx, connect.NewRequest(&corpusv1.StatusRequest{})); err != nil {
			return err
		}
		for id := range rs.reps {
			tk, err := lastUse(used.Info.Id, id)
			if err != nil {
				return err
			}
			if !tk.LastUsedAt.AsTime().After(before.LastUsedAt.AsTime()) {
				return fmt.Errorf("%s: last used %v, not after %v", id, tk.LastUsedAt.AsTime(), before.LastUsedAt.AsTime())
			}
		}
		return nil
	})
}

// TestKeyLastUsed: an SSH key's last use is recorded, with the client's
// address as the node saw it, when a session's command (a push, a fetch,
// a shell) is checked, whether or not the project allows it; the
// handshake's check of the key alone (an SSH client offers its keys in
// turn, before proving it holds one) records nothing, nor does a key of
// no user.
func TestKeyLastUsed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t, t.TempDir(), func(c *coordinator.Config) { c.TokenUseInterval = 200 * time.Millisecond })
	n1 := s.enroll("n1")
	n1.report(t)
	ops := s.ops()
	if _, err := ops.users.CreateUser(ctx, connect.NewRequest(&corpusv1.CreateUserRequest{Name: "alice", Role: "dev"})); err != nil {
		t.Fatal(err)
	}
	fps := map[string]string{}
	for _, which := range []string{"pushed", "offered", "refused"} {
		line, fp := newKey(t)
		if _, err := ops.users.AddKey(ctx, connect.NewRequest(&corpusv1.AddKeyRequest{User: "alice", PublicKey: line})); err != nil {
			t.Fatal(err)
		}
		fps[which] = fp
	}
	if _, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: "hello", Env: "dev"})); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.project.GrantProject(ctx, connect.NewRequest(&corpusv1.GrantProjectRequest{Name: "hello", User: "alice"})); err != nil {
		t.Fatal(err)
	}
	s.waitFor("hello-dev placed", func(v *state.Snap) bool { return v.GuestByName("hello-dev").GetNodeId() == n1.id })
	for _, req := range []*corpusv1.GitAccessRequest{
		{Fingerprint: fps["offered"]},
		{Fingerprint: fps["pushed"], Project: "hello", Write: true, From: "192.0.2.7:51234"},
		{Fingerprint: fps["refused"], Project: "nope", Write: true, From: "192.0.2.8:40000"},
		{Fingerprint: "SHA256:nobody", Project: "hello", From: "192.0.2.9:1"},
	} {
		if _, err := n1.agent.GitAccess(ctx, connect.NewRequest(req)); err != nil {
			t.Fatal(err)
		}
	}
	keys := func() (map[string]*corpusv1.SshKey, error) {
		res, err := ops.users.ListUsers(ctx, connect.NewRequest(&corpusv1.ListUsersRequest{}))
		if err != nil {
			return nil, err
		}
		out := map[string]*corpusv1.SshKey{}
		for _, u := range res.Msg.Users {
			for _, k := range u.Keys {
				out[k.Fingerprint] = k
			}
		}
		return out, nil
	}
	eventuallyT(t, "the keys' last uses recorded", func() error {
		ks, err := keys()
		if err != nil {
			return err
		}
		for which, from := range map[string]string{"pushed": "192.0.2.7", "refused": "192.0.2.8"} {
			if k := ks[fps[which]]; k.GetLastUsedAt() == nil || k.LastUsedFrom != from {
				return fmt.Errorf("the %s key's last use: %v from %q, want from %s", which, k.GetLastUsedAt(), k.GetLastUsedFrom(), from)
			}
		}
		return nil
	})
	// Had the offered key's check been noted, it would have gone in the
	// same batch as the pushed key's, noted after it.
	ks, err := keys()
	if err != nil {
		t.Fatal(err)
	}
	if k := ks[fps["offered"]]; k.GetLastUsedAt() != nil || k.GetLastUsedFrom() != "" {
		t.Errorf("a key only offered at a handshake: last used %v from %q, want never", k.GetLastUsedAt(), k.GetLastUsedFrom())
	}
}
