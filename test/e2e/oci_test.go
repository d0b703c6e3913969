package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"corpus/images/oci/ocitest"
)

// registryIn serves a test registry on loopback inside namespace ns and
// returns its address and a transport that reaches it (and the node's
// guests) from the test.
func registryIn(t *testing.T, ns string) (string, *http.Transport) {
	t.Helper()
	reg := ocitest.Serve(t, listenIn(t, ns))
	tr := &http.Transport{DialContext: dialIn(ns)}
	t.Cleanup(tr.CloseIdleConnections)
	return reg, tr
}

// TestGuestFromOCIImage: a guest made from an OCI image that a registry
// on the node's loopback serves (an agent pulls from loopback over plain
// HTTP without being told) runs the image's command as the image's user
// with its env, answers on its exposed port, which a route by domain
// made without a port takes, and shows the digest it runs; a guest
// given words after -- runs them as the image's cmd, and a built image
// refuses them; an image the registry lacks fails the guest with the
// reason.
func TestGuestFromOCIImage(t *testing.T) {
	c := newCluster(t)
	a := c.addAgent("n1")
	reg, tr := registryIn(t, a.node.ns)
	digest := ocitest.Push(t, reg+"/team/web:1", ocitest.Image(t, v1.Config{
		Entrypoint:   []string{"/bin/sh", "-c"},
		Cmd:          []string{`echo "uid $(id -u) $GREETING" > index.html && exec httpd -f -p 8080 -h .`},
		Env:          []string{"PATH=/bin", "GREETING=hello from the image"},
		WorkingDir:   "/home/app",
		User:         "app",
		ExposedPorts: map[string]struct{}{"8080/tcp": {}},
	}, ocitest.BusyboxLayer(t)), remote.WithTransport(tr))

	c.mustCLI("guest", "create", "web", "--image", reg+"/team/web:1")
	var v struct {
		Guest struct {
			Address  string `json:"address"`
			Observed struct {
				ImageDigest string `json:"image_digest"`
			} `json:"observed"`
		} `json:"guest"`
		Status string `json:"status"`
	}
	if err := c.json(&v, "guest", "show", "web"); err != nil {
		t.Fatal(err)
	}
	if v.Status != "running" || v.Guest.Observed.ImageDigest != digest {
		t.Errorf("guest show web = %s, digest %q; want running, %s", v.Status, v.Guest.Observed.ImageDigest, digest)
	}
	if out := c.mustCLI("guest", "show", "web"); !strings.Contains(out, digest) || !regexp.MustCompile(`Image ports:\s+8080/tcp\n`).MatchString(out) {
		t.Errorf("guest show web does not print the digest %s and the image's port 8080/tcp:\n%s", digest, out)
	}
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	url := "http://" + net.JoinHostPort(strings.Split(v.Guest.Address, "/")[0], "8080") + "/"
	var body string
	eventually(t, 30*time.Second, "the image's server answers on "+url, func() error {
		res, err := client.Get(url)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil || res.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s, %v", url, res.Status, err)
		}
		body = string(b)
		return nil
	})
	if want := "uid 1000 hello from the image\n"; body != want {
		t.Errorf("GET %s = %q, want %q", url, body, want)
	}
	// Exposed by domain without a port, the route takes the one the
	// image exposes.
	if out := c.mustCLI("guest", "expose", "web", "--domain", "web.example.test"); !strings.Contains(out, "port 8080") {
		t.Errorf("guest expose web --domain web.example.test said %q; want a route to port 8080", out)
	}
	outside, nodeAddr := c.lab.addClient(a.node)
	eventually(t, 15*time.Second, "the proxy to web's image port", wantBody(httpIn(outside), "http://"+nodeAddr+"/", "web.example.test", strings.TrimSpace(body)))
	// Exec reaches the guest as for other guests.
	if out := c.mustCLI("guest", "exec", "web", "--", "cat", "/home/app/index.html"); out != body {
		t.Errorf("guest exec cat index.html = %q, want %q", out, body)
	}

	// Words after -- replace the image's cmd (its entrypoint, sh -c, stays).
	c.mustCLI("guest", "create", "web2", "--image", reg+"/team/web:1", "--",
		`echo "args: $GREETING" > index.html && exec httpd -f -p 8080 -h .`)
	if err := c.json(&v, "guest", "show", "web2"); err != nil {
		t.Fatal(err)
	}
	url2 := "http://" + net.JoinHostPort(strings.Split(v.Guest.Address, "/")[0], "8080") + "/"
	eventually(t, 30*time.Second, "web2's own command answers on "+url2, wantBody(client, url2, "", "args: hello from the image"))
	// An image the node builds has no cmd to replace.
	if _, errOut, code := c.cli("guest", "create", "bb", "--image", "busybox", "--", "x"); code == 0 || !strings.Contains(errOut, "builds image busybox itself") {
		t.Errorf("guest create busybox with args = exit %d, %q; want a refusal", code, errOut)
	}
	c.mustCLI("guest", "delete", "web2")

	_, errOut, code := c.cli("guest", "create", "missing", "--image", reg+"/team/missing:1")
	if code == 0 || !strings.Contains(errOut, "NAME_UNKNOWN") {
		t.Errorf("guest create from a missing image = exit %d, %q; want a failure naming NAME_UNKNOWN", code, errOut)
	}
	c.mustCLI("guest", "delete", "missing")
	c.mustCLI("guest", "delete", "web")
}
