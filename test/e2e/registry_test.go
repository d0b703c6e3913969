package e2e

import (
	"bytes"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"corpus/images/oci/ocitest"
)

// TestGuestFromPrivateRegistry: a registry on the node's loopback serves
// an image behind basic authentication. Without credentials, and with
// wrong ones, a guest of it fails saying which registry refused what;
// after corpus registry login it runs, and still pulls once its agent
// restarted. The password is in no log and no file of the cluster's.
func TestGuestFromPrivateRegistry(t *testing.T) {
	c := newCluster(t)
	a := c.addAgent("n1")
	const user, password = "puller", "registry-pw-planted-e2e"
	reg := ocitest.ServePrivate(t, listenIn(t, a.node.ns), user, password)
	tr := &http.Transport{DialContext: dialIn(a.node.ns)}
	t.Cleanup(tr.CloseIdleConnections)
	img := ocitest.Image(t, v1.Config{Entrypoint: []string{"/bin/sleep", "3600"}, Env: []string{"PATH=/bin"}}, ocitest.BusyboxLayer(t))
	for _, tag := range []string{"1", "2"} {
		ocitest.Push(t, reg+"/team/private:"+tag, img, remote.WithTransport(tr), remote.WithAuth(&authn.Basic{Username: user, Password: password}))
	}
	ref := reg + "/team/private:1"

	createFails := func(name, want string) {
		t.Helper()
		_, errOut, code := c.cli("guest", "create", name, "--image", ref)
		if code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("guest create %s = exit %d, %q; want a failure saying %q", name, code, errOut, want)
		}
		if g := c.guest(name); g.Status == "running" {
			t.Errorf("guest %s runs without the registry's credentials", name)
		}
		c.mustCLI("guest", "delete", name)
	}
	createFails("anon", "registry "+reg+" wants credentials for team/private (corpus registry login "+reg+")")

	login := func(pw string) {
		t.Helper()
		if out, errOut, code := c.cliStdin(pw+"\n", "registry", "login", reg, "--username", user, "--password-stdin"); code != 0 {
			t.Fatalf("registry login = exit %d\n%s%s", code, out, errOut)
		}
	}
	login("not-the-password")
	createFails("wrong", "registry "+reg+" refused the credentials for team/private")

	login(password)
	c.mustCLI("guest", "create", "web", "--image", ref)
	if g := c.guest("web"); g.Status != "running" {
		t.Fatalf("guest web from the private image = %s, want running", g.Status)
	}
	if out := c.mustCLI("registry", "list"); !strings.Contains(out, reg) || !strings.Contains(out, user) || strings.Contains(out, password) {
		t.Errorf("registry list = %q; want %s and %s, never the password", out, reg, user)
	}

	// A restarted agent keeps nothing, and asks again.
	logs := a.log.String()
	a.kill()
	c.restartAgent(a)
	c.waitAgentBack(a)
	c.mustCLI("guest", "create", "web2", "--image", reg+"/team/private:2")
	if g := c.guest("web2"); g.Status != "running" {
		t.Fatalf("guest web2 after the agent's restart = %s, want running", g.Status)
	}

	logs += a.log.String() + c.coord.log.String()
	if strings.Contains(logs, password) {
		t.Errorf("a log of the cluster holds the registry password")
	}
	filepath.WalkDir(c.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		// Guests' disks and image layers are large and hold what the
		// guests and images wrote; the agent writes its own files.
		if info, err := d.Info(); err != nil || info.Size() > 64<<20 {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte(password)) {
			t.Errorf("%s holds the registry password in clear", path)
		}
		return nil
	})
	c.mustCLI("guest", "delete", "web")
	c.mustCLI("guest", "delete", "web2")
	c.mustCLI("registry", "logout", reg)
}
