package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"corpus/internal/testrun"
)

// pyApp is a small real web application: Python's standard library
// server, from Debian's python3 package, on $PORT, answering / with its
// version and /greeting with a config value it read from its
// environment.
const pyApp = `import http.server, os

VERSION = open("version.txt").read().strip()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/greeting":
            body = "greeting=" + os.environ.get("GREETING", "")
        else:
            body = "version " + VERSION
        data = (body + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt, *args):
        print(self.address_string(), fmt % args, flush=True)


print("listening on", os.environ["PORT"], flush=True)
http.server.ThreadingHTTPServer(("", int(os.environ["PORT"])), Handler).serve_forever()
`

func (l *deployLab) commitPyApp(version string) {
	l.t.Helper()
	l.write("app.py", pyApp, 0o644)
	l.write("version.txt", version+"\n", 0o644)
	l.write("Procfile", "web: exec python3 app.py\n", 0o644)
	l.git("add", "-A")
	l.git("commit", "-q", "-m", "python app "+version)
}

// TestProcessesPython runs a Python web application from Debian's
// packages on the debian/bookworm image, the image built with the
// project's packages (python3) by the node: a crash is restarted within
// a second; a push, a config change and a rollback under load answer
// every request with 200; the config reaches the app, and a rollback
// restores the release's config.
func TestProcessesPython(t *testing.T) {
	if os.Getenv("CORPUS_TEST_DEBIAN") == "" {
		t.Skip("slow: builds the debian/bookworm image with python3 (debootstrap, apt); set CORPUS_TEST_DEBIAN=1 (CI does)")
	}
	c := newCluster(t)
	a := c.addAgent("n1")
	client, nodeAddr := c.lab.addClient(a.node)
	a.kill()
	// The node's agent lives in a network namespace without a route to
	// the Debian mirror: the image is built from the host beforehand,
	// as an operator of such a node does.
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(15*time.Minute))
	defer cancel()
	start := time.Now()
	if out, err := exec.CommandContext(ctx, corpusBin, "image", "build", "debian/bookworm", "--driver", "lxc",
		"--packages", "python3", "--state-dir", a.stateDir).CombinedOutput(); err != nil {
		t.Fatalf("image build: %v\n%s", err, out)
	}
	t.Logf("debian/bookworm +python3 built in %s", time.Since(start).Round(time.Second))
	c.waitNodeDown(a.name)
	a.proc = c.startAgent(a, "--address", nodeAddr)
	c.waitNodeReady(a.name)
	l := deployLabOn(t, c, a, client, nodeAddr, []string{"--image", "debian/bookworm", "--packages", "python3", "--memory", "256M", "--cpus", "0.5"})

	var show struct {
		Guest struct {
			Spec struct {
				Packages []string `json:"packages"`
			} `json:"spec"`
		} `json:"guest"`
	}
	if err := c.json(&show, "guest", "show", "hello-dev"); err != nil || strings.Join(show.Guest.Spec.Packages, ",") != "python3" {
		t.Errorf("guest show: %v, packages %q", err, show.Guest.Spec.Packages)
	}

	l.commitPyApp("one")
	l.mustPush()
	l.wantPage("version one")
	web := l.proc("web")
	if web.State != "running" || web.Port != 81 {
		t.Fatalf("web = %+v", web)
	}
	if got := l.guestSh("dpkg-query -W -f '${db:Status-Status}' python3"); got != "installed" {
		t.Errorf("python3 in the guest: %q", got)
	}

	// A crash: restarted within a second (ps polled every few ms).
	l.guestSh(fmt.Sprintf("kill -9 %d", web.Pid))
	crashed := time.Now()
	eventually(t, 5*time.Second, "web restarted", func() error {
		if w := l.proc("web"); w.Pid == web.Pid || w.State != "running" {
			return fmt.Errorf("web = %+v", w)
		}
		return nil
	})
	if took := time.Since(crashed); took > testrun.D(2*time.Second) {
		t.Errorf("web took %s to come back after a crash", took)
	}
	l.wantPage("version one")

	// Config under load: a new release, the value seen by the app.
	ld := l.startLoad(4)
	out := c.mustCLI("config", "set", "hello", "GREETING=bonjour")
	ld.end(t, "config set")
	if !strings.Contains(out, "r2 is live") {
		t.Errorf("config set output:\n%s", out)
	}
	if got := l.pageAt("/greeting"); got != "200 greeting=bonjour" {
		t.Errorf("greeting = %q", got)
	}

	// A push under load.
	l.commitPyApp("two")
	ld = l.startLoad(4)
	l.mustPush()
	ld.end(t, "push")
	l.wantPage("version two")
	if got := l.pageAt("/greeting"); got != "200 greeting=bonjour" {
		t.Errorf("greeting after a push = %q", got)
	}

	// Rollback to r1 under load: its code and its (empty) config.
	ld = l.startLoad(4)
	c.mustCLI("rollback", "hello", "--to", "r1")
	ld.end(t, "rollback")
	l.wantPage("version one")
	if got := l.pageAt("/greeting"); got != "200 greeting=" {
		t.Errorf("greeting after rolling back to r1 = %q", got)
	}
}
