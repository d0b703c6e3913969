package githook

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"corpus/internal/testrun"
)

// TestHookSocketIsOwnersOnly: the hook socket's folder is 0700 even when
// it existed with looser bits, the socket is 0600, the agent's own user
// is answered, and another user can neither reach the socket nor, with
// the modes loosened by hand, get an answer from it.
func TestHookSocketIsOwnersOnly(t *testing.T) {
	t.Parallel()
	base, err := os.MkdirTemp("", "corpus-hook-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "git")
	if err := os.Mkdir(dir, 0o755); err != nil { // as an older agent left it
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "hook.sock")
	h, err := Listen(sock)
	if err != nil {
		t.Fatalf("Listen = %v", err)
	}
	defer h.Close()
	go h.Serve(context.Background(), func(ctx context.Context, req *Request, out io.Writer) int {
		fmt.Fprintln(out, "corpus: unknown push session")
		return 1
	})
	for path, want := range map[string]os.FileMode{dir: 0o700, sock: 0o600} {
		if fi, err := os.Lstat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("mode of %s = %v, %v; want %v", path, fi.Mode().Perm(), err, want)
		}
	}
	if got := askHook(sock); got != "answered: corpus: unknown push session" {
		t.Errorf("the owner asking = %q, want an answer", got)
	}

	if os.Geteuid() != 0 {
		t.Skip("trying as another user needs root")
	}
	if got := asNobody(t, sock); !strings.Contains(got, "permission denied") {
		t.Errorf("nobody dialing the hook socket = %q, want permission denied", got)
	}
	// Modes loosened by hand: the peer check still refuses.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	if got := asNobody(t, sock); got != "closed" {
		t.Errorf("nobody asking through loosened modes = %q, want the connection closed unanswered", got)
	}
	if got := askHook(sock); got != "answered: corpus: unknown push session" {
		t.Errorf("the owner asking after = %q, want an answer", got)
	}
}

// askHook sends a push request for an unknown session and says what came
// back: "answered: OUTPUT", "closed", or the dial error.
func askHook(sock string) string {
	conn, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(testrun.D(10 * time.Second)))
	raw, _ := json.Marshal(Request{Session: "nope"})
	if err := WriteFrame(conn, 'r', raw); err != nil {
		if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			return "closed" // before the request was even read
		}
		return "send: " + err.Error()
	}
	r := bufio.NewReader(conn)
	var out strings.Builder
	for {
		kind, data, err := ReadFrame(r, MaxRequest)
		if err == io.EOF || errors.Is(err, syscall.ECONNRESET) {
			if out.Len() == 0 {
				return "closed"
			}
			return "answered: " + strings.TrimSpace(out.String()) + " (no exit)"
		}
		if err != nil {
			return "read: " + err.Error()
		}
		switch kind {
		case 'o':
			out.Write(data)
		case 'x':
			return "answered: " + strings.TrimSpace(out.String())
		}
	}
}

// asNobody runs askHook in a copy of this test binary as user nobody.
func asNobody(t *testing.T, sock string) string {
	t.Helper()
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	// In the test's own folder (open to the user nobody, unlike the
	// socket's folder), removed with it: not in the machine's /tmp.
	bin := filepath.Join(filepath.Dir(filepath.Dir(sock)), "githook.test")
	if err := testrun.WriteExecutable(bin, self); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestHookAskHelper$")
	cmd.Env = append(os.Environ(), "CORPUS_TEST_HOOK_SOCKET="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper as nobody: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if s, ok := strings.CutPrefix(line, "hook: "); ok {
			return s
		}
	}
	t.Fatalf("helper as nobody said nothing: %s", out)
	return ""
}

// TestHookAskHelper is askHook in a child process (see asNobody).
func TestHookAskHelper(t *testing.T) {
	sock := os.Getenv("CORPUS_TEST_HOOK_SOCKET")
	if sock == "" {
		t.Skip("a helper of TestHookSocketIsOwnersOnly")
	}
	fmt.Printf("hook: %s\n", askHook(sock))
}
