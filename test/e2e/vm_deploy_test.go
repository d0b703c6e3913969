package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// vmSiteInstall is siteInstall for a Debian VM, where busybox's applets
// are not installed as commands of their own.
const vmSiteInstall = `#!/bin/sh
set -e
echo "building $CORPUS_PROJECT/$CORPUS_ENV $CORPUS_RELEASE from $CORPUS_COMMIT"
sed "s/@RELEASE@/$CORPUS_RELEASE/" page.tmpl > index.html
if [ ! -e /tmp/site.pid ] || ! kill -0 "$(cat /tmp/site.pid)" 2>/dev/null; then
	busybox nc -ll -p 80 -e busybox httpd -i -h "$CORPUS_CURRENT" </dev/null >/dev/null 2>&1 &
	echo $! > /tmp/site.pid
	echo "server started"
fi
`

// TestVMGitPushDeploy: a project environment whose guest is a VM takes
// git push deploys and rollbacks as a container's does. The pipeline runs
// through the QEMU guest agent, the environment's data volume is the
// VM's virtio disk, and the proxy serves the domain from the VM.
func TestVMGitPushDeploy(t *testing.T) {
	q := startQEMUCluster(t)
	undefineOnCleanup(t, q.hand, "hello-dev")
	l := deployLabOn(t, q.c, q.a, q.client, q.nodeAddr,
		[]string{"--driver", "libvirt", "--image", "debian/bookworm", "--memory", "512M", "--cpus", "1"})
	c := l.c
	eventually(t, 5*time.Minute, "guest agent of hello-dev answers", func() error {
		out, errOut, code := c.cli("guest", "exec", "hello-dev", "--", "true")
		if code != 0 {
			return fmt.Errorf("exit %d: %s%s (%s)", code, out, errOut, q.booting("hello-dev"))
		}
		return nil
	})

	commit := func(version string) {
		l.write("page.tmpl", "version "+version+" (@RELEASE@)\n", 0o644)
		l.write(".corpus/install.d/10-site", vmSiteInstall, 0o755)
		l.write(".corpus/archive", "#!/bin/sh\nset -e\necho \"$CORPUS_RELEASE\" >> \"$CORPUS_DATA/deploys\"\n", 0o755)
		l.git("add", "-A")
		l.git("commit", "-q", "-m", "site "+version)
	}
	commit("one")
	start := time.Now()
	out := l.mustPush()
	t.Logf("first push into the VM took %s", time.Since(start).Round(time.Millisecond))
	for _, want := range []string{"remote: -----> release-sync", "remote: -----> install 10-site", "building hello/dev r1", "r1 is live"} {
		if !strings.Contains(out, want) {
			t.Errorf("push output lacks %q:\n%s", want, out)
		}
	}
	l.wantPage("version one (r1)")

	commit("two")
	l.mustPush()
	l.wantPage("version two (r2)")
	// The archive hook of r1 wrote to the data folder, which is the
	// VM's volume disk.
	if got := l.guestSh("wc -l < /srv/projects/hello/data/deploys; findmnt -n -o SOURCE /srv/projects/hello/data"); !strings.HasPrefix(got, "1\n/dev/vd") {
		t.Errorf("data folder of hello-dev = %q, want the archive hook's line on a virtio disk", got)
	}

	out = c.mustCLI("rollback", "hello")
	t.Logf("rollback:\n%s", out)
	l.wantPage("version one (r1)")
	if cur, _ := l.releases(); cur != 1 {
		t.Errorf("current release after rollback = r%d, want r1", cur)
	}

	// Processes and config in the VM: the supervisor goes in through the
	// guest agent, web takes over from the install step's server on the
	// other port, a config change reaches it, a crash is restarted.
	os.Remove(filepath.Join(l.work, ".corpus/install.d/10-site"))
	l.write("index.html", "version procs\n", 0o644)
	l.write("Procfile", "web: echo \"greeting=$GREETING\" > greeting.txt; exec busybox httpd -f -p \"$PORT\" -h .\n", 0o644)
	l.git("add", "-A")
	l.git("commit", "-q", "-m", "procs")
	start = time.Now()
	out = l.mustPush()
	t.Logf("push with a web process into the VM took %s", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(out, "routes -> port 81") {
		t.Errorf("push output:\n%s", out)
	}
	l.wantPage("version procs")
	ld := l.startLoad(2)
	c.mustCLI("config", "set", "hello", "GREETING=from-config")
	ld.end(t, "config set in the VM")
	if got := l.pageAt("/greeting.txt"); got != "200 greeting=from-config" {
		t.Errorf("greeting in the VM = %q", got)
	}
	web := l.proc("web")
	l.guestSh(fmt.Sprintf("kill -9 %d", web.Pid))
	eventually(t, 10*time.Second, "web restarted in the VM", func() error {
		if w := l.proc("web"); w.Pid == web.Pid || w.State != "running" || w.Restarts != 1 {
			return fmt.Errorf("web = %+v", w)
		}
		return nil
	})
	l.wantPage("version procs")
}
