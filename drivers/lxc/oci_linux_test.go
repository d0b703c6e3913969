//go:build linux && cgo

package lxc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"corpus/drivers"
	"corpus/images/oci/ocitest"
	"corpus/internal/testrun"
)

// TestOCIImage runs a guest from an image pulled from a registry on
// loopback: the image's command runs as init, as the image's user, in
// its working folder, with its env under the guest's; the digest is
// observed; a second guest reuses the unpacked image; a reference the
// registry lacks fails Create and leaves no container.
func TestOCIImage(t *testing.T) {
	t.Parallel()
	d := newTestDriver(t)
	ctx := t.Context()
	reg := ocitest.Registry(t)
	digest := ocitest.Push(t, reg+"/test/app:1", ocitest.Image(t, v1.Config{
		Entrypoint:   []string{"/bin/sh", "-c", `echo "$(id -u):$(id -g) $GREETING|$FROM_SPEC|$(pwd)" > /tmp/out; exec sleep 1000`},
		Cmd:          []string{"ignored-arg"},
		Env:          []string{"PATH=/bin", "GREETING=hello world", "FROM_SPEC=image"},
		WorkingDir:   "/home/app",
		User:         "app",
		StopSignal:   "SIGKILL",
		ExposedPorts: map[string]struct{}{"8080/tcp": {}, "53/udp": {}},
	}, ocitest.BusyboxLayer(t)))

	spec := drivers.GuestSpec{ID: "id-app", Name: "app", Image: reg + "/test/app:1", Env: map[string]string{"FROM_SPEC": "spec"}}
	var progress progressLog
	if err := d.Create(ctx, spec, progress.add); err != nil {
		t.Fatalf("Create = %v", err)
	}
	if !progress.contains("pulled layer 1/1") {
		t.Errorf("progress = %q, want the pulled layer", progress.msgs)
	}
	if err := d.Start(ctx, spec.Name); err != nil {
		t.Fatalf("Start = %v", err)
	}
	st := mustInspect(t, d, spec.Name)
	if st.ImageDigest != digest || st.Image != spec.Image || st.State != drivers.StateRunning || !slices.Equal(st.ImagePorts, []string{"53/udp", "8080/tcp"}) {
		t.Errorf("Inspect = %+v, want running from %s with digest %s and the image's ports 53/udp, 8080/tcp", st, spec.Image, digest)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, f := range []string{"lxc.log", "console.log", "config"} {
				b, _ := os.ReadFile(filepath.Join(d.guestDir(spec.Name), f))
				t.Logf("%s:\n%s", f, b)
			}
		}
	})
	// written is what a guest's command wrote to its /tmp/out.
	written := func(guest string) string {
		var out string
		testrun.Wait(t, testrun.D(30e9), guest+"'s command wrote /tmp/out", func() error {
			var buf bytes.Buffer
			code, err := d.Exec(ctx, guest, drivers.ExecRequest{Argv: []string{"/bin/cat", "/tmp/out"}, Stdout: &buf})
			if err != nil || code != 0 {
				return fmt.Errorf("cat /tmp/out: exit %d, %v", code, err)
			}
			out = buf.String()
			return nil
		})
		return out
	}
	out := written(spec.Name)
	if want := "1000:1000 hello world|spec|/home/app\n"; out != want {
		t.Errorf("the image's command wrote %q, want %q", out, want)
	}
	// On the host, init runs as the guest's user 1000 in its id range.
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", mustInspect(t, d, spec.Name).PID))
	if err != nil {
		t.Fatal(err)
	}
	m, err := d.ids.idmap(0)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("Uid:\t%d\t", m.UID+1000); !strings.Contains(string(status), want) {
		t.Errorf("init's status has no %q:\n%s", want, status)
	}
	cfg, err := os.ReadFile(filepath.Join(d.guestDir(spec.Name), "config"))
	if err != nil {
		t.Fatal(err)
	}
	if got := grepConfig(string(cfg), "lxc.signal.halt"); !strings.Contains(got, "SIGKILL") {
		t.Errorf("lxc.signal.halt = %q, want the image's SIGKILL", got)
	}

	if err := d.Stop(ctx, spec.Name, testrun.D(10e9)); err != nil {
		t.Errorf("Stop = %v", err)
	}

	// A second guest of the image reuses its unpacked cache, and runs
	// its own command in place of the image's entrypoint and cmd.
	built := d.built.Load()
	app2 := drivers.GuestSpec{ID: "id-app2", Name: "app2", Image: reg + "/test/app@" + digest,
		Command: []string{"/bin/sh", "-c"}, Args: []string{`echo "$0 $1 $GREETING" > /tmp/out; exec sleep 1000`, "own words"}}
	if err := d.Create(ctx, app2, nil); err != nil {
		t.Fatalf("Create(app2) = %v", err)
	}
	if got := d.built.Load(); got != built {
		t.Errorf("the second guest built %d images, want none", got-built)
	}
	if err := d.Start(ctx, app2.Name); err != nil {
		t.Fatalf("Start(app2) = %v", err)
	}
	if out, want := written(app2.Name), "own words  hello world\n"; out != want {
		t.Errorf("app2's command wrote %q, want %q", out, want)
	}
	if err := d.Stop(ctx, app2.Name, testrun.D(10e9)); err != nil {
		t.Errorf("Stop(app2) = %v", err)
	}
	// An image the node builds has no entrypoint to replace.
	err = d.Create(ctx, drivers.GuestSpec{ID: "id-bb", Name: "bb", Image: "busybox", Args: []string{"x"}}, nil)
	if !errors.Is(err, drivers.ErrInvalidSpec) {
		t.Errorf("Create of busybox with args = %v, want ErrInvalidSpec", err)
	}

	// An image the registry lacks: no guest, and the reason.
	err = d.Create(ctx, drivers.GuestSpec{ID: "id-none", Name: "none", Image: reg + "/test/none:1"}, nil)
	if err == nil || !strings.Contains(err.Error(), "NAME_UNKNOWN") {
		t.Errorf("Create from a missing image = %v, want NAME_UNKNOWN", err)
	}
	list, _ := d.List(ctx)
	if slices.ContainsFunc(list, func(s drivers.GuestStatus) bool { return s.Name == "none" }) {
		t.Errorf("a guest was left after a failed pull: %+v", list)
	}
	if err := d.Create(ctx, drivers.GuestSpec{ID: "id-pkg", Name: "pkg", Image: reg + "/test/app:1", Packages: []string{"curl"}}, nil); err == nil {
		t.Errorf("Create of an OCI image with packages = nil error, want one")
	}
}
