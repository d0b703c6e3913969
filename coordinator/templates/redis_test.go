package templates

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"corpus/internal/testrun"
)

// TestRedisLinkURL: the URL a redis link gives a project is one Debian's
// own client (redis-cli 7.0) connects and authenticates with, against a
// real redis-server with the password the service is made with.
func TestRedisLinkURL(t *testing.T) {
	server, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("needs redis-server and redis-cli (apt-get install redis-server redis-tools; scripts/setup --test)")
	}
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Skip("needs redis-cli (apt-get install redis-tools; scripts/setup --test)")
	}
	set, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	port := testrun.FreePort(t)
	const password = "0123456789abcdef0123456789abcdef" // secret.Hex(16), as services get
	srv := exec.Command(server, "--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--requirepass", password,
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Process.Kill()
		srv.Wait()
	})
	env := LinkEnv(set["redis"], "REDIS", map[string]string{"host": "127.0.0.1", "port": fmt.Sprint(port), "PASSWORD": password})
	url := env["REDIS_URL"]
	var out []byte
	testrun.Wait(t, 10*time.Second, "redis-cli -u "+url+" ping", func() error {
		ctx, cancel := context.WithTimeout(t.Context(), testrun.D(5*time.Second))
		defer cancel()
		// redis-cli says what went wrong on its output and exits 0.
		out, _ = exec.CommandContext(ctx, "redis-cli", "--no-auth-warning", "-u", url, "ping").CombinedOutput()
		if strings.Contains(string(out), "Connection refused") {
			return fmt.Errorf("%s", out)
		}
		return nil
	})
	if strings.TrimSpace(string(out)) != "PONG" {
		t.Errorf("redis-cli -u %s ping = %q, want PONG", url, out)
	}
}
