package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/internal/rpc"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// TestTokenRevokeEndsStreams: a user's token holds blocking reads of the
// index (the dashboard's live view) and `guest logs -f` streams open on
// the leader and on a follower of a three-replica group; revoking the
// token ends every one of them within a second of the revoke's
// acknowledgement with a "token revoked" error, and every replica then
// refuses the token. Each call's authorization is seen before the revoke
// through the token's recorded last use (--token-use-interval 200ms),
// which `user token list` shows with the client's address.
func TestTokenRevokeEndsStreams(t *testing.T) {
	g := newCoordGroupBin(t, newNetLab(t), "", corpusBin, "--token-use-interval", "200ms")
	lead := g.leader()
	follower := g.ids[0]
	if follower == lead {
		follower = g.ids[1]
	}
	ctx := context.Background()
	hc := &http.Client{Transport: tlsTransport(t, g.ns, g.ca)}
	as := func(tok string) connect.ClientOption { return connect.WithInterceptors(rpc.Bearer(tok)) }
	url := func(id string) string { return "https://" + g.api[id] }
	users := corpusv1connect.NewUserServiceClient(hc, url(follower), as(g.token))
	if _, err := users.CreateUser(ctx, connect.NewRequest(&corpusv1.CreateUserRequest{Name: "alice", Role: "ops"})); err != nil {
		t.Fatal(err)
	}
	var toks [2]*corpusv1.CreateTokenResponse
	for i := range toks {
		res, err := users.CreateToken(ctx, connect.NewRequest(&corpusv1.CreateTokenRequest{User: "alice", TtlSeconds: 3600}))
		if err != nil {
			t.Fatal(err)
		}
		toks[i] = res.Msg
	}
	tok, id := toks[0].Token, toks[0].Info.Id
	if _, err := corpusv1connect.NewGuestServiceClient(hc, url(lead), as(g.token)).CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{
		Name: "w1", Spec: &corpusv1.GuestSpec{Image: "busybox"}})); err != nil {
		t.Fatal(err)
	}

	// cli runs the client in the group's namespace.
	cli := func(token string, args ...string) *exec.Cmd {
		cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + g.ns, corpusBin, "--address", g.api[follower], "--token", token, "--ca-cert", g.ca}, args...)...)
		cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir(), "CORPUS_ENV=", "CORPUS_ADDR=", "CORPUS_TOKEN=", "CORPUS_CA_CERT=")
		return cmd
	}
	lastUse := func() (time.Time, error) {
		res, err := users.ListTokens(ctx, connect.NewRequest(&corpusv1.ListTokensRequest{User: "alice"}))
		if err != nil {
			return time.Time{}, err
		}
		for _, tk := range res.Msg.Tokens {
			if tk.Id == id && tk.LastUsedAt != nil {
				return tk.LastUsedAt.AsTime(), nil
			}
		}
		return time.Time{}, nil
	}

	// The calls: each opens once the one before is authorized.
	type call struct {
		name  string
		done  chan error
		ended time.Time
	}
	var calls []*call
	open := func(name string, run func(ctx context.Context) error) {
		c := &call{name: name, done: make(chan error, 1)}
		calls = append(calls, c)
		cctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		opened := time.Now()
		go func() {
			err := run(cctx)
			c.ended = time.Now()
			c.done <- err
		}()
		eventually(t, 30*time.Second, name+" authorized", func() error {
			select {
			case err := <-c.done:
				c.done <- err
				t.Fatalf("%s ended before the revoke: %v", name, err)
			default:
			}
			if at, err := lastUse(); err != nil || at.Before(opened) {
				return fmt.Errorf("the token's last use %s is before %s opened (%v)", at.Format(time.RFC3339Nano), name, err)
			}
			return nil
		})
	}
	wait := func(on string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := corpusv1connect.NewClusterServiceClient(hc, url(on), as(tok)).Wait(ctx, connect.NewRequest(&corpusv1.WaitRequest{AfterIndex: 1 << 60, WaitSeconds: 300}))
			return err
		}
	}
	logs := func(on string) func(context.Context) error {
		return func(ctx context.Context) error {
			s, err := corpusv1connect.NewGuestServiceClient(hc, url(on), as(tok)).GuestLogs(ctx, connect.NewRequest(&corpusv1.GuestLogsRequest{Name: "w1", Follow: true}))
			if err != nil {
				return err
			}
			for s.Receive() {
			}
			return s.Err()
		}
	}
	open("index wait on the leader", wait(lead))
	open("log stream on the leader", logs(lead))
	open("index wait on a follower", wait(follower))
	open("log stream on a follower", logs(follower))
	var stderr bytes.Buffer
	open("corpus guest logs -f on a follower", func(ctx context.Context) error {
		cmd := cli(tok, "guest", "logs", "w1", "-f")
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		stop := context.AfterFunc(ctx, func() { cmd.Process.Kill() })
		defer stop()
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
		}
		return nil
	})

	// `user token list` shows the last use, and "never" for the token
	// that has none; --json carries it.
	out, err := cli(g.token, "user", "token", "list", "alice").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "LAST USED") || !strings.Contains(string(out), "from 127.0.0.1") || !strings.Contains(string(out), "never") {
		t.Errorf("corpus user token list = %v\n%s", err, out)
	}
	out, err = cli(g.token, "--json", "user", "token", "list", "alice").Output()
	var listed struct {
		Tokens []struct {
			ID           string `json:"id"`
			LastUsedAt   string `json:"last_used_at"`
			LastUsedFrom string `json:"last_used_from"`
		} `json:"tokens"`
	}
	if jerr := json.Unmarshal(out, &listed); err != nil || jerr != nil || len(listed.Tokens) != 2 {
		t.Fatalf("corpus --json user token list = %v, %v\n%s", err, jerr, out)
	}
	for _, tk := range listed.Tokens {
		if used := tk.ID == id; used != (tk.LastUsedAt != "" && tk.LastUsedFrom == "127.0.0.1") {
			t.Errorf("--json token %s: last used %q from %q", tk.ID, tk.LastUsedAt, tk.LastUsedFrom)
		}
	}

	// The revoke, through the follower (passed to the leader).
	if _, err := users.RevokeToken(ctx, connect.NewRequest(&corpusv1.RevokeTokenRequest{Id: id})); err != nil {
		t.Fatal(err)
	}
	acked := time.Now()
	for _, c := range calls {
		var err error
		select {
		case err = <-c.done:
		case <-time.After(testrun.D(30 * time.Second)):
			t.Fatalf("%s still open %s after the revoke", c.name, time.Since(acked))
		}
		took := c.ended.Sub(acked)
		t.Logf("%s ended %s after the revoke was acknowledged: %v", c.name, took.Round(time.Millisecond), err)
		if err == nil || !strings.Contains(err.Error(), "token revoked") {
			t.Errorf("%s ended with %v, want a token revoked error", c.name, err)
		}
		if connect.CodeOf(err) != connect.CodeUnauthenticated && !strings.Contains(c.name, "corpus ") {
			t.Errorf("%s ended with code %s, want unauthenticated", c.name, connect.CodeOf(err))
		}
		if took > testrun.D(time.Second) {
			t.Errorf("%s ended %s after the revoke, want within %s", c.name, took, testrun.D(time.Second))
		}
	}
	for _, r := range g.ids {
		_, err := corpusv1connect.NewClusterServiceClient(hc, url(r), as(tok)).Status(ctx, connect.NewRequest(&corpusv1.StatusRequest{}))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("a new call with the revoked token on %s = %v, want unauthenticated", r, err)
		}
	}
}

// TestTokenRevokeEndsShell: an interactive `guest exec -it` session
// opened with a user's token ends within a second of the revoke's
// acknowledgement, its client saying the token was revoked, and the
// shell it ran in the guest is gone; a session opened with the user's
// other token goes on answering.
func TestTokenRevokeEndsShell(t *testing.T) {
	c := newCluster(t)
	c.addAgent("n1")
	c.mustCLI("guest", "create", "sh1", "--image", "busybox", "--memory", "64M", "--cpus", "0.1")
	c.mustCLI("user", "add", "alice", "--role", "ops")
	var toks [2]struct {
		Token string `json:"token"`
		Info  struct {
			ID string `json:"id"`
		} `json:"info"`
	}
	for i := range toks {
		if err := c.json(&toks[i], "user", "token", "create", "alice", "--ttl", "1h"); err != nil {
			t.Fatal(err)
		}
	}
	open := func(tok, mark, sleep string) *termSession {
		s := c.startTerminal(tok, 24, 80, "guest", "exec", "-it", "sh1", "--", "sh")
		s.send("sleep " + sleep + " & echo " + mark + "=$((40+2))\r")
		s.expect(0, mark+"=42")
		return s
	}
	revoked := open(toks[0].Token, "revoked", "4711")
	kept := open(toks[1].Token, "kept", "4712")

	c.mustCLI("user", "token", "revoke", toks[0].Info.ID)
	acked := time.Now()
	select {
	case <-revoked.done:
	case <-time.After(testrun.D(30 * time.Second)):
		revoked.mu.Lock()
		defer revoked.mu.Unlock()
		t.Fatalf("the session of the revoked token is still open %s after the revoke; terminal: %q", time.Since(acked), revoked.out.String())
	}
	took := time.Since(acked)
	t.Logf("the session of the revoked token ended %s after the revoke was acknowledged", took.Round(time.Millisecond))
	if took > testrun.D(time.Second) {
		t.Errorf("the session ended %s after the revoke, want within %s", took, testrun.D(time.Second))
	}
	if revoked.code == 0 {
		t.Errorf("the session of the revoked token exited 0")
	}
	revoked.expect(0, "token revoked")

	m := kept.expect(0, "kept=42")
	kept.send("echo still=$((50+5))\r")
	kept.expect(m, "still=55")
	kept.send("exit 3\r")
	if code := kept.exited(t); code != 3 {
		t.Errorf("the session of the other token exited %d, want 3", code)
	}
	// What the revoked session ran is gone from the guest.
	eventually(t, 15*time.Second, "the revoked session's job gone from the guest", func() error {
		if out := c.mustCLI("guest", "exec", "sh1", "--", "ps"); strings.Contains(out, "sleep 4711") {
			return fmt.Errorf("still running in the guest:\n%s", out)
		}
		return nil
	})
}
