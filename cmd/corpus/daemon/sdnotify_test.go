package daemon

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/client"
	"corpus/cmd/corpus/cli"
	"corpus/coordinator"
	"corpus/internal/rpc"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

// notifySocket is what systemd listens on for sd_notify messages.
type notifySocket struct {
	path string
	msgs chan string
}

func listenNotify(t *testing.T) *notifySocket {
	t.Helper()
	// A short path: sun_path holds 108 bytes.
	dir, err := os.MkdirTemp("", "sdn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s := &notifySocket{path: path, msgs: make(chan string, 1000)}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(s.msgs)
				return
			}
			s.msgs <- string(buf[:n])
		}
	}()
	return s
}

// next returns the next message, failing the test after timeout.
func (s *notifySocket) next(t *testing.T, timeout time.Duration, what string) string {
	t.Helper()
	select {
	case m, ok := <-s.msgs:
		if !ok {
			t.Fatalf("notify socket closed waiting for %s", what)
		}
		return m
	case <-time.After(testrun.D(timeout)):
		t.Fatalf("no sd_notify message within %s, waiting for %s", timeout, what)
		return ""
	}
}

// startDaemon runs `corpus args...` (the test binary as corpus, see
// TestMain) as a daemon under a pretend systemd: its NOTIFY_SOCKET is s,
// its watchdog timeout 1s. It is killed at the end of the test if still
// running.
func startDaemon(t *testing.T, s *notifySocket, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := corpusCmd(context.Background(), t, args...)
	cmd.Env = append(cmd.Env, "NOTIFY_SOCKET="+s.path, "WATCHDOG_USEC=1000000")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, &logs
}

// checkNotifyProtocol reads what the daemon sends: READY=1 first, and
// then, checked by ready (which must find the daemon serving), WATCHDOG=1
// at least every half second; on SIGTERM STOPPING=1 and a clean exit.
func checkNotifyProtocol(t *testing.T, s *notifySocket, cmd *exec.Cmd, logs *bytes.Buffer, startup time.Duration, ready func() error) {
	t.Helper()
	if m := s.next(t, startup, "READY=1"); m != "READY=1" {
		t.Fatalf("first sd_notify message = %q, want READY=1 before anything else\n%s", m, logs)
	}
	if err := ready(); err != nil {
		t.Fatalf("after READY=1: %v\n%s", err, logs)
	}
	for i := range 4 {
		if m := s.next(t, 1500*time.Millisecond, "WATCHDOG=1"); m != "WATCHDOG=1" {
			t.Fatalf("sd_notify message %d after READY=1 = %q, want WATCHDOG=1", i+1, m)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for {
		m := s.next(t, 5*time.Second, "STOPPING=1")
		if m == "STOPPING=1" {
			break
		}
		if m != "WATCHDOG=1" {
			t.Fatalf("sd_notify message after SIGTERM = %q, want STOPPING=1", m)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("daemon exit after SIGTERM = %v, want a clean exit\n%s", err, logs)
	}
}

// TestCoordinatorNotifiesSystemd: `corpus coordinator` says READY=1 only
// once its API answers, keeps the watchdog fed, and says STOPPING=1 on
// SIGTERM.
func TestCoordinatorNotifiesSystemd(t *testing.T) {
	t.Parallel()
	s := listenNotify(t)
	dir := t.TempDir()
	api := testrun.FreeAddr(t)
	cmd, logs := startDaemon(t, s, "coordinator", "--data-dir", dir, "--api-addr", api, "--raft-addr", testrun.FreeAddr(t),
		"--bootstrap", "--dns-addr", "", "--gossip-addr", "", "--metrics-addr", testrun.FreeAddr(t))
	checkNotifyProtocol(t, s, cmd, logs, 30*time.Second, func() error {
		ca, err := os.ReadFile(filepath.Join(dir, coordinator.TLSDir, coordinator.CACertFile))
		if err != nil {
			return err
		}
		tc, err := client.Trust(client.Environment{Address: api, CACert: string(ca)})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), testrun.D(time.Second))
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, rpc.BaseURL(api)+"/healthz", nil)
		res, err := rpc.HTTPClient(tc).Do(req)
		if err != nil {
			return fmt.Errorf("GET /healthz = %w, want an answer", err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /healthz = %s, want 200", res.Status)
		}
		return nil
	})
}

// TestDevNotifiesSystemd: `corpus dev` says READY=1 only once its agent
// has enrolled and gone round, so the node is listed at once.
func TestDevNotifiesSystemd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: corpus dev runs the LXC driver")
	}
	t.Parallel()
	s := listenNotify(t)
	dir := t.TempDir()
	api, cfgFile := testrun.FreeAddr(t), filepath.Join(dir, "cli.yaml")
	cmd, logs := startDaemon(t, s, "dev", "--state-dir", filepath.Join(dir, "state"), "--config-file", cfgFile,
		"--api-addr", api, "--raft-addr", testrun.FreeAddr(t), "--agent-addr", testrun.FreeAddr(t), "--dns-addr", "",
		"--network=false", "--git-addr", "", "--proxy-http-addr", testrun.FreeAddr(t), "--name", "sdnotify-test", "--metrics-addr", testrun.FreeAddr(t))
	checkNotifyProtocol(t, s, cmd, logs, time.Minute, func() error {
		g := &cli.Globals{Target: client.Target{ConfigFile: cfgFile}}
		c, err := g.Clients()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), testrun.D(5*time.Second))
		defer cancel()
		res, err := c.Nodes.ListNodes(ctx, connect.NewRequest(&corpusv1.ListNodesRequest{}))
		if err != nil {
			return fmt.Errorf("ListNodes = %w", err)
		}
		if len(res.Msg.Nodes) != 1 || res.Msg.Nodes[0].Node.Name != "sdnotify-test" {
			return fmt.Errorf("ListNodes = %v, want node sdnotify-test enrolled", res.Msg.Nodes)
		}
		return nil
	})
}
