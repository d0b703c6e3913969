package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"corpus/images/oci/ocitest"
)

// siteImage is a busybox image whose entrypoint writes a page of its
// version, its user and the GREETING it sees, host.txt with its guest's
// name and status.txt with its /proc/self/status and whether /dev/null
// takes a write, then serves them with httpd on $PORT, as the app user
// in /www. Its stop signal is SIGUSR1, which ends httpd and which its
// shell traps: it writes "stopped by USR1" in /www/stopped and ends.
func siteImage(t *testing.T, version string) v1.Image {
	t.Helper()
	return ocitest.Image(t, v1.Config{
		Entrypoint: []string{"/bin/sh", "-c"},
		Cmd: []string{`echo "$(cat version) uid $(id -u) $GREETING" > index.html && busybox hostname > host.txt || exit 1
{ cat /proc/self/status; echo x > /dev/null && echo devnull ok; } > status.txt 2>&1
trap 'echo stopped by USR1 > stopped; exit 0' USR1
httpd -f -p "$PORT" -h .`},
		Env:        []string{"PATH=/bin", "GREETING=from the image"},
		WorkingDir: "/www",
		User:       "app",
		StopSignal: "SIGUSR1",
	}, ocitest.BusyboxLayer(t), ocitest.Layer(t,
		ocitest.File{Name: "www/", UID: 1000, GID: 1000},
		ocitest.File{Name: "www/version", Body: "version " + version + "\n"}))
}

// TestProjectFromOCIImage: a project deployed by a push is then deployed
// from image tags a registry on its node's loopback serves (corpus deploy
// --image), v1 then v2, rolled back, changed by config, and pushed to
// again, under load with no failed request; each release records the
// digest its tag resolved to, a rollback and a config change deploy that
// digest even after the tag moved; scaled to two instances, both run
// the same digest through a deploy and a rollback; the image's process
// has /proc and /dev in its tree (mounts the guest never sees) and is
// stopped by its own stop signal; a malformed reference changes
// nothing, an image that cannot be pulled leaves a failed release and
// the one before serving.
func TestProjectFromOCIImage(t *testing.T) {
	l := newDeployLab(t)
	reg, tr := registryIn(t, l.a.node.ns)
	push := func(tag string, img v1.Image) string {
		return ocitest.Push(t, reg+"/team/site:"+tag, img, remote.WithTransport(tr))
	}
	v1Digest, v2Digest := push("v1", siteImage(t, "v1")), push("v2", siteImage(t, "v2"))

	// A pushed release first, with config.
	l.commitProcSite("one")
	l.mustPush()
	l.wantPage("version one")
	l.c.mustCLI("config", "set", "hello", "GREETING=hi")

	// Bad input is refused before anything changes.
	for _, bad := range []string{"busybox", reg + "/team/Site:v1", reg + "/team/site:bad tag", reg + "/team/site@sha256:12"} {
		_, stderr, code := l.c.cli("deploy", "hello", "--image", bad)
		if code == 0 || !strings.Contains(stderr, "image") {
			t.Errorf("deploy --image %q = exit %d, %q; want a refusal naming the image", bad, code, stderr)
		}
	}
	if cur, rels := l.releases(); cur != 2 || len(rels) != 2 {
		t.Fatalf("refused deploys made releases: current r%d, %+v", cur, rels)
	}

	// v1, then v2 under load.
	ld := l.startLoad(4)
	start := time.Now()
	out := l.c.mustCLI("deploy", "hello", "--image", reg+"/team/site:v1")
	t.Logf("corpus deploy --image v1 (pull, unpack, sync, start, switch) took %s", time.Since(start).Round(time.Millisecond))
	ld.end(t, "deploy of image v1")
	if !strings.Contains(out, v1Digest) || !strings.Contains(out, "r3 is live") {
		t.Errorf("deploy --image v1 output lacks the digest %s or r3 going live:\n%s", v1Digest, out)
	}
	l.wantPage("version v1 uid 1000 hi")
	// Its layers are in the node's one store, which the LXC driver's
	// guests pull into too.
	v1Layers, err := siteImage(t, "v1").Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, layer := range v1Layers {
		h, _ := layer.Digest()
		if _, err := os.Stat(filepath.Join(l.a.stateDir, "lxc", ".oci", "blobs", "sha256", h.Hex)); err != nil {
			t.Errorf("layer %s of v1 is not in the node's layer store: %v", h, err)
		}
	}
	if _, err := os.Stat(filepath.Join(l.a.stateDir, "images", "oci")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("deploys keep a layer store of their own: %v", err)
	}
	// The image's process has /proc (its own status) and /dev; the
	// mounts are its own: the guest has none of them.
	if st := l.pageAt("/status.txt"); !strings.Contains(st, "Uid:\t1000\t") || !strings.Contains(st, "devnull ok") {
		t.Errorf("the image's process read /proc/self/status and wrote /dev/null so:\n%s", st)
	}
	noImageMounts := func(when string) {
		t.Helper()
		out := l.guestSh("cat /proc/self/mountinfo")
		if strings.Contains(out, "/srv/projects/hello/releases/") {
			t.Errorf("%s, the guest has mounts in a release's tree:\n%s", when, out)
		}
	}
	noImageMounts("while r3 runs")
	// Only the agent's own trees count: the run may be building an image
	// beside this test (debootstrap mounts /proc in its rootfs).
	t.Cleanup(func() {
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Errorf("reading the host's mounts: %v", err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, l.a.stateDir) && strings.Contains(line, "/rootfs/proc") {
				t.Errorf("mount of an image's tree left on the host: %s", line)
			}
		}
	})
	ld = l.startLoad(4)
	l.c.mustCLI("deploy", "hello", "--image", reg+"/team/site:v2")
	ld.end(t, "deploy of image v2")
	l.wantPage("version v2 uid 1000 hi")
	noImageMounts("with r3 stopped")
	// r3's web was stopped by the image's stop signal, which it trapped.
	eventually(t, 30*time.Second, "r3's web stopped by SIGUSR1", func() error {
		out, _, _ := l.c.cli("guest", "exec", "hello-dev", "--", "cat", "/srv/projects/hello/releases/r3/rootfs/www/stopped")
		if strings.TrimSpace(out) != "stopped by USR1" {
			return fmt.Errorf("r3's www/stopped = %q", out)
		}
		return nil
	})
	cur, rels := l.releases()
	if cur != 4 || rels[0].ImageDigest != v2Digest || rels[1].ImageDigest != v1Digest || rels[0].Image != reg+"/team/site:v2" || rels[0].Commit != "" {
		t.Errorf("after v1 and v2: current r%d, releases %+v", cur, rels)
	}
	if out := l.c.mustCLI("release", "show", "hello", "r4"); !strings.Contains(out, v2Digest) || !strings.Contains(out, reg+"/team/site:v2") {
		t.Errorf("release show r4 lacks the image and its digest:\n%s", out)
	}
	if out := l.c.mustCLI("release", "list", "hello"); !strings.Contains(out, "sha256:"+strings.TrimPrefix(v1Digest, "sha256:")[:12]) {
		t.Errorf("release list lacks r3's digest:\n%s", out)
	}

	// The tag v1 moves; a rollback goes back to r3's digest all the same,
	// and a config change deploys the digest it serves.
	moved := push("v1", siteImage(t, "moved"))
	ld = l.startLoad(4)
	start = time.Now()
	l.c.mustCLI("rollback", "hello")
	t.Logf("corpus rollback to the image release r3 took %s", time.Since(start).Round(time.Millisecond))
	ld.end(t, "rollback to image v1")
	l.wantPage("version v1 uid 1000 hi")
	ld = l.startLoad(4)
	l.c.mustCLI("config", "set", "hello", "GREETING=again")
	ld.end(t, "config change of an image release")
	l.wantPage("version v1 uid 1000 again")
	if cur, rels := l.releases(); cur != 5 || rels[0].ImageDigest != v1Digest || rels[0].ImageDigest == moved {
		t.Errorf("the config change of r3's image: current r%d, newest %+v; want r5 of %s", cur, rels[0], v1Digest)
	}

	// Two instances: the second pulls r5's image by its digest (the tag
	// v1 moved), a deploy of v2 rolls through both and a rollback brings
	// both back, under load with no failed request.
	ld = l.startLoad(4)
	start = time.Now()
	l.c.mustCLI("scale", "hello", "web=2", "--shared-nothing")
	l.waitInstances(2, 5, 3*time.Minute)
	ld.end(t, "scale of an image release to two instances")
	t.Logf("scale of an image release 1->2: both serving r5 after %s", time.Since(start).Round(100*time.Millisecond))
	l.wantImageOnAll(2, "r5", v1Digest)
	ld = l.startLoad(4)
	start = time.Now()
	l.c.mustCLI("deploy", "hello", "--image", reg+"/team/site:v2")
	ld.end(t, "deploy of image v2 on two instances")
	t.Logf("corpus deploy --image v2 on two instances took %s", time.Since(start).Round(time.Millisecond))
	l.waitInstances(2, 6, time.Minute)
	l.wantImageOnAll(2, "r6", v2Digest)
	ld = l.startLoad(4)
	l.c.mustCLI("rollback", "hello")
	ld.end(t, "rollback of two instances to an image release")
	l.waitInstances(2, 5, time.Minute)
	l.wantImageOnAll(2, "r5", v1Digest)
	l.wantPage("version v1 uid 1000 again")

	// An image the registry lacks: a failed release, r5 serving.
	if _, stderr, code := l.c.cli("deploy", "hello", "--image", reg+"/team/missing:1"); code == 0 || !strings.Contains(stderr, "r5 still serves") {
		t.Errorf("deploy of a missing image = exit %d, %q; want a failure saying r5 still serves", code, stderr)
	}
	if cur, rels := l.releases(); cur != 5 || rels[0].Status != "failed" || rels[0].FailedStep != "pull" || !strings.Contains(rels[0].Message, "UNKNOWN") {
		t.Errorf("after a missing image: current r%d, newest %+v; want r5, and a release failed at pull with the registry's reason", cur, rels[0])
	}
	l.wantPage("version v1 uid 1000 again")

	// A push after the images.
	l.commitProcSite("two")
	ld = l.startLoad(4)
	l.mustPush()
	ld.end(t, "push after image releases")
	l.wantPage("version two")

	l.ownPortImages(reg, tr)

	// A project whose first release is an image (project create --image),
	// with the image's own env.
	out = l.c.mustCLI("project", "create", "site", "--image", reg+"/team/site:v2", "--memory", "64M", "--cpus", "0.2", "--domain", "site.dev.example.test")
	if !strings.Contains(out, v2Digest) || !strings.Contains(out, "r1 is live") {
		t.Errorf("project create --image output lacks the digest %s or r1 going live:\n%s", v2Digest, out)
	}
	eventually(t, 15*time.Second, "site's page", func() error {
		code, body, err := get(l.hc, "http://"+l.nodeAddr+"/", "site.dev.example.test")
		if want := "version v2 uid 1000 from the image"; err != nil || code != 200 || strings.TrimSpace(body) != want {
			return fmt.Errorf("site's page = %d %q, %v; want 200 %q", code, body, err, want)
		}
		return nil
	})
	l.c.mustCLI("project", "delete", "site", "--yes")
}

// ownPortImage is a busybox image whose web ignores $PORT and listens
// on the port it exposes, 8080, as most images built for Docker do; its
// page names its version, the PORT it sees and what it fetched from
// $UPSTREAM when it started.
func ownPortImage(t *testing.T, version string) v1.Image {
	t.Helper()
	return ocitest.Image(t, v1.Config{
		Entrypoint: []string{"/bin/sh", "-c"},
		Cmd: []string{`echo "own $(cat version) PORT=$PORT $(wget -q -O - "$UPSTREAM")" > index.html || exit 1
exec httpd -f -p 8080 -h .`},
		Env:          []string{"PATH=/bin"},
		WorkingDir:   "/www",
		User:         "app",
		ExposedPorts: map[string]struct{}{"8080/tcp": {}},
	}, ocitest.BusyboxLayer(t), ocitest.Layer(t,
		ocitest.File{Name: "www/", UID: 1000, GID: 1000},
		ocitest.File{Name: "www/version", Body: version + "\n"}))
}

// ownPortImages: releases of an image that listens only on its own port
// (each runs in a network of its own, reached through the port the
// deploy gave web) follow each other and roll back under load with no
// failed request, and reach beyond their guest (a server in the lab's
// ctl namespace) from inside it.
func (l *deployLab) ownPortImages(reg string, tr *http.Transport) {
	t := l.t
	ln, err := inNamespace(l.c.lab.ctl, func() (net.Listener, error) { return net.Listen("tcp", l.c.lab.lan+":0") })
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "upstream ok") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	l.c.mustCLI("config", "set", "hello", "UPSTREAM=http://"+ln.Addr().String()+"/")
	for _, v := range []string{"a", "b"} {
		ocitest.Push(t, reg+"/team/own:"+v, ownPortImage(t, v), remote.WithTransport(tr))
	}
	for _, v := range []string{"a", "b"} {
		ld := l.startLoad(4)
		start := time.Now()
		out := l.c.mustCLI("deploy", "hello", "--image", reg+"/team/own:"+v)
		ld.end(t, "deploy of the own-port image "+v)
		t.Logf("corpus deploy --image own:%s (its own port, 8080) took %s", v, time.Since(start).Round(time.Millisecond))
		if !strings.Contains(out, "PORT=8080 in a network of its own") {
			t.Errorf("deploy of own:%s does not say its web runs in a network of its own:\n%s", v, out)
		}
		l.wantPage("own " + v + " PORT=8080 upstream ok")
	}
	ld := l.startLoad(4)
	l.c.mustCLI("rollback", "hello")
	ld.end(t, "rollback to the own-port image a")
	l.wantPage("own a PORT=8080 upstream ok")
}

// wantImageOnAll waits until n guests answer through the proxy, each
// with web of release rel running the image of digest.
func (l *deployLab) wantImageOnAll(n int, rel, digest string) {
	l.t.Helper()
	eventually(l.t, 30*time.Second, fmt.Sprintf("%d instances answering with %s of %s", n, rel, digest), func() error {
		webs := map[string]string{}
		for _, p := range l.ps() {
			if p.Name == "web" && p.State == "running" {
				webs[p.Guest] = p.Release + " " + p.Command
			}
		}
		if len(webs) != n {
			return fmt.Errorf("web runs on %d guests: %v", len(webs), webs)
		}
		for g, w := range webs {
			if !strings.HasPrefix(w, rel+" ") || !strings.Contains(w, "(image "+digest+")") {
				return fmt.Errorf("web of %s runs %q", g, w)
			}
		}
		count, bad := l.hosts(10 * n)
		for g := range webs {
			if count[g] == 0 {
				return fmt.Errorf("%s does not answer: answers by guest %v, %d failed", g, count, bad)
			}
		}
		return nil
	})
}
