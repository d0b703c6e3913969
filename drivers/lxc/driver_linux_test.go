//go:build linux && cgo

package lxc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	golxc "github.com/lxc/go-lxc"

	"corpus/drivers"
	"corpus/drivers/lxc/forkstart"
	"corpus/internal/testrun"
)

func TestLifecycle(t *testing.T) {
	t.Parallel()
	d := newTestDriver(t)
	ctx := t.Context()
	spec := busybox("life")
	spec.Env = map[string]string{"GREETING": "hello", "SPACED": "a b"}

	if err := d.Create(ctx, spec, nil); err != nil {
		t.Fatalf("Create = %v", err)
	}
	st, err := d.Inspect(ctx, spec.Name)
	if err != nil {
		t.Fatalf("Inspect = %v", err)
	}
	want := drivers.GuestStatus{ID: spec.ID, Name: spec.Name, Image: "busybox", State: drivers.StateStopped}
	if !reflect.DeepEqual(st, want) {
		t.Fatalf("Inspect after Create = %+v, want %+v", st, want)
	}

	if err := d.Start(ctx, spec.Name); err != nil {
		t.Fatalf("Start = %v", err)
	}
	st = mustInspect(t, d, spec.Name)
	if st.State != drivers.StateRunning || st.PID <= 0 {
		t.Fatalf("Inspect after Start = %+v, want running with a PID", st)
	}
	if err := d.Start(ctx, spec.Name); err != nil {
		t.Fatalf("second Start = %v, want nil", err)
	}
	if again := mustInspect(t, d, spec.Name); again.PID != st.PID {
		t.Fatalf("second Start changed init PID from %d to %d", st.PID, again.PID)
	}

	t.Run("exec", func(t *testing.T) {
		for _, tc := range []struct {
			name       string
			req        drivers.ExecRequest
			stdin      string
			wantCode   int
			wantStdout string
			wantStderr string
		}{
			{name: "stdout", req: drivers.ExecRequest{Argv: []string{"echo", "hi"}}, wantStdout: "hi\n"},
			{name: "stderr", req: drivers.ExecRequest{Argv: []string{"sh", "-c", "echo oops >&2"}}, wantStderr: "oops\n"},
			{name: "exit code", req: drivers.ExecRequest{Argv: []string{"sh", "-c", "exit 3"}}, wantCode: 3},
			{name: "signal", req: drivers.ExecRequest{Argv: []string{"sh", "-c", "kill -9 $$"}}, wantCode: 128 + 9},
			{
				name:       "env",
				req:        drivers.ExecRequest{Argv: []string{"sh", "-c", `echo "$GREETING/$SPACED/$EXTRA/$container"`}, Env: map[string]string{"EXTRA": "x"}},
				wantStdout: "hello/a b/x/lxc\n",
			},
			{name: "no host env", req: drivers.ExecRequest{Argv: []string{"sh", "-c", `echo "[$GOPATH$HOSTNAME_OF_TEST]"`}}, wantStdout: "[]\n"},
			{name: "stdin", req: drivers.ExecRequest{Argv: []string{"cat"}}, stdin: "ping\npong\n", wantStdout: "ping\npong\n"},
			{name: "dir", req: drivers.ExecRequest{Argv: []string{"pwd"}, Dir: "/etc"}, wantStdout: "/etc\n"},
			{name: "default dir", req: drivers.ExecRequest{Argv: []string{"pwd"}}, wantStdout: "/\n"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				var stdout, stderr bytes.Buffer
				req := tc.req
				req.Stdout, req.Stderr = &stdout, &stderr
				if tc.stdin != "" {
					req.Stdin = strings.NewReader(tc.stdin)
				}
				code, err := d.Exec(ctx, spec.Name, req)
				if err != nil {
					t.Fatalf("Exec(%q) = %v", req.Argv, err)
				}
				if code != tc.wantCode {
					t.Errorf("Exec(%q) = %d, want %d", req.Argv, code, tc.wantCode)
				}
				if stdout.String() != tc.wantStdout {
					t.Errorf("Exec(%q) stdout = %q, want %q", req.Argv, stdout.String(), tc.wantStdout)
				}
				if stderr.String() != tc.wantStderr {
					t.Errorf("Exec(%q) stderr = %q, want %q", req.Argv, stderr.String(), tc.wantStderr)
				}
			})
		}
		t.Run("shared writer", func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			code, err := d.Exec(ctx, spec.Name, drivers.ExecRequest{
				Argv:   []string{"sh", "-c", "echo a; echo b >&2; echo c"},
				Stdout: &out, Stderr: &out,
			})
			if err != nil || code != 0 || out.String() != "a\nb\nc\n" {
				t.Errorf("Exec = %d, %v, output %q; want 0, nil, %q", code, err, out.String(), "a\nb\nc\n")
			}
		})
		t.Run("nil streams", func(t *testing.T) {
			t.Parallel()
			code, err := d.Exec(ctx, spec.Name, drivers.ExecRequest{Argv: []string{"sh", "-c", "cat; echo x; echo y >&2"}})
			if err != nil || code != 0 {
				t.Errorf("Exec = %d, %v; want 0, nil", code, err)
			}
		})
		t.Run("empty argv", func(t *testing.T) {
			t.Parallel()
			if _, err := d.Exec(ctx, spec.Name, drivers.ExecRequest{}); err == nil {
				t.Error("Exec(empty argv) = nil error, want an error")
			}
		})
	})

	if err := d.Stop(ctx, spec.Name, 10*time.Second); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	if st := mustInspect(t, d, spec.Name); st.State != drivers.StateStopped || st.PID != 0 {
		t.Fatalf("Inspect after Stop = %+v, want stopped without PID", st)
	}
	if err := d.Stop(ctx, spec.Name, time.Second); err != nil {
		t.Fatalf("second Stop = %v, want nil", err)
	}
	if _, err := d.Exec(ctx, spec.Name, drivers.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, drivers.ErrNotRunning) {
		t.Fatalf("Exec on stopped guest = %v, want ErrNotRunning", err)
	}

	if err := d.Start(ctx, spec.Name); err != nil {
		t.Fatalf("Start after Stop = %v", err)
	}
	if st := mustInspect(t, d, spec.Name); st.State != drivers.StateRunning {
		t.Fatalf("Inspect after restart = %+v, want running", st)
	}
	var out bytes.Buffer
	if code, err := d.Exec(ctx, spec.Name, drivers.ExecRequest{Argv: []string{"echo", "back"}, Stdout: &out}); err != nil || code != 0 || out.String() != "back\n" {
		t.Fatalf("Exec after restart = %d, %v, %q", code, err, out.String())
	}

	if err := d.Destroy(ctx, spec.Name); err != nil {
		t.Fatalf("Destroy of running guest = %v", err)
	}
	if _, err := d.Inspect(ctx, spec.Name); !errors.Is(err, drivers.ErrNotFound) {
		t.Fatalf("Inspect after Destroy = %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(filepath.Join(d.path, spec.Name)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("guest directory after Destroy: stat = %v, want not exist", err)
	}
	if err := d.Destroy(ctx, spec.Name); err != nil {
		t.Fatalf("second Destroy = %v, want nil", err)
	}
	if l, err := d.List(ctx); err != nil || len(l) != 0 {
		t.Fatalf("List after Destroy = %v, %v; want empty", l, err)
	}
}

func mustInspect(t *testing.T, d *Driver, name string) drivers.GuestStatus {
	t.Helper()
	st, err := d.Inspect(t.Context(), name)
	if err != nil {
		t.Fatalf("Inspect(%s) = %v", name, err)
	}
	return st
}

func mustStart(t *testing.T, d *Driver, spec drivers.GuestSpec) {
	t.Helper()
	if err := d.Create(t.Context(), spec, nil); err != nil {
		t.Fatalf("Create(%s) = %v", spec.Name, err)
	}
	if err := d.Start(t.Context(), spec.Name); err != nil {
		t.Fatalf("Start(%s) = %v", spec.Name, err)
	}
}

func TestCreateErrors(t *testing.T) {
	t.Parallel()
	d := newTestDriver(t)
	ctx := t.Context()
	spec := busybox("one")
	if err := d.Create(ctx, spec, nil); err != nil {
		t.Fatalf("Create = %v", err)
	}
	for _, tc := range []struct {
		name string
		spec drivers.GuestSpec
		want error // nil: no error; errAny: some error
	}{
		{"same id", spec, nil},
		{"same id, other spec", drivers.GuestSpec{ID: spec.ID, Name: spec.Name, Image: "busybox", MemoryBytes: 1 << 30}, nil},
		{"other id", drivers.GuestSpec{ID: "other", Name: spec.Name, Image: "busybox"}, drivers.ErrExists},
		{"unknown image", drivers.GuestSpec{ID: "x", Name: "two", Image: "plan9"}, drivers.ErrUnknownImage},
		{"bad name", drivers.GuestSpec{ID: "x", Name: "../two", Image: "busybox"}, errAny},
		{"upper case", drivers.GuestSpec{ID: "x", Name: "Two", Image: "busybox"}, errAny},
		{"empty id", drivers.GuestSpec{Name: "two", Image: "busybox"}, errAny},
		{"tiny cpu", drivers.GuestSpec{ID: "x", Name: "two", Image: "busybox", CPUMillis: 5}, errAny},
		{"env newline", drivers.GuestSpec{ID: "x", Name: "two", Image: "busybox", Env: map[string]string{"A": "1\nlxc.hook.pre-start = /bin/false"}}, errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := d.Create(ctx, tc.spec, nil)
			switch {
			case tc.want == nil && err != nil:
				t.Errorf("Create(%+v) = %v, want nil", tc.spec, err)
			case tc.want == errAny && err == nil:
				t.Errorf("Create(%+v) = nil, want an error", tc.spec)
			case tc.want != nil && tc.want != errAny && !errors.Is(err, tc.want):
				t.Errorf("Create(%+v) = %v, want %v", tc.spec, err, tc.want)
			}
		})
	}
	if st := mustInspect(t, d, spec.Name); st.MemoryBytes != 0 {
		t.Errorf("idempotent Create changed the guest: %+v", st)
	}
	if l, err := d.List(ctx); err != nil || len(l) != 1 {
		t.Errorf("List = %+v, %v; want only %s", l, err, spec.Name)
	}

	for _, op := range []struct {
		name string
		f    func(string) error
	}{
		{"Start", func(n string) error { return d.Start(ctx, n) }},
		{"Stop", func(n string) error { return d.Stop(ctx, n, time.Second) }},
		{"Inspect", func(n string) error { _, err := d.Inspect(ctx, n); return err }},
		{"Exec", func(n string) error {
			_, err := d.Exec(ctx, n, drivers.ExecRequest{Argv: []string{"true"}})
			return err
		}},
	} {
		for _, n := range []string{"missing", "../one", ""} {
			if err := op.f(n); !errors.Is(err, drivers.ErrNotFound) {
				t.Errorf("%s(%q) = %v, want ErrNotFound", op.name, n, err)
			}
		}
	}
	if err := d.Destroy(ctx, "missing"); err != nil {
		t.Errorf("Destroy(missing) = %v, want nil", err)
	}
}

// errAny stands for "some error" in tables.
var errAny = errors.New("any error")

// TestLeftoverContainer checks that a container without metadata, as an
// interrupted Create leaves, is not a guest, and that Create replaces it.
func TestLeftoverContainer(t *testing.T) {
	t.Parallel()
	d := newTestDriver(t)
	ctx := t.Context()
	spec := busybox("left")
	if err := d.Create(ctx, spec, nil); err != nil {
		t.Fatalf("Create = %v", err)
	}
	if err := os.Remove(filepath.Join(d.path, spec.Name, metadataFile)); err != nil {
		t.Fatal(err)
	}
	if l, err := d.List(ctx); err != nil || len(l) != 0 {
		t.Fatalf("List with a container lacking %s = %+v, %v; want empty", metadataFile, l, err)
	}
	if _, err := d.Inspect(ctx, spec.Name); !errors.Is(err, drivers.ErrNotFound) {
		t.Fatalf("Inspect of container lacking metadata = %v, want ErrNotFound", err)
	}
	spec.ID = "new-id"
	if err := d.Create(ctx, spec, nil); err != nil {
		t.Fatalf("Create over leftover = %v", err)
	}
	if st := mustInspect(t, d, spec.Name); st.ID != "new-id" {
		t.Fatalf("Inspect after Create over leftover = %+v, want ID new-id", st)
	}
}

func TestListIsolation(t *testing.T) {
	t.Parallel()
	a, b := newTestDriver(t), newTestDriver(t)
	ctx := t.Context()
	for _, g := range []struct {
		d    *Driver
		name string
	}{{a, "alpha"}, {a, "beta"}, {b, "gamma"}} {
		if err := g.d.Create(ctx, busybox(g.name), nil); err != nil {
			t.Fatalf("Create(%s) = %v", g.name, err)
		}
	}
	if err := a.Start(ctx, "beta"); err != nil {
		t.Fatalf("Start = %v", err)
	}
	// A container made behind the driver's back has no metadata.
	foreign, err := golxc.NewContainer("foreign", a.path)
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Release()
	if err := foreign.Create(golxc.TemplateOptions{Template: "busybox"}); err != nil {
		t.Fatalf("creating foreign container: %v", err)
	}

	for _, tc := range []struct {
		d    *Driver
		want []string
	}{{a, []string{"alpha", "beta"}}, {b, []string{"gamma"}}} {
		l, err := tc.d.List(ctx)
		if err != nil {
			t.Fatalf("List = %v", err)
		}
		var got []string
		for _, st := range l {
			got = append(got, st.Name)
			if st.ID != "id-"+st.Name || st.Image != "busybox" {
				t.Errorf("List entry %+v lacks its metadata", st)
			}
			if wantState := map[string]drivers.State{"beta": drivers.StateRunning}[st.Name]; wantState != "" && st.State != wantState {
				t.Errorf("List entry %+v, want state %s", st, wantState)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("List(%s) = %v, want %v", tc.d.path, got, tc.want)
		}
	}
	if _, err := b.Inspect(ctx, "alpha"); !errors.Is(err, drivers.ErrNotFound) {
		t.Errorf("Inspect of another instance's guest = %v, want ErrNotFound", err)
	}
	if err := b.Destroy(ctx, "alpha"); err != nil {
		t.Errorf("Destroy of another instance's guest = %v, want nil", err)
	}
	if _, err := a.Inspect(ctx, "alpha"); err != nil {
		t.Errorf("another instance's Destroy removed alpha: Inspect = %v", err)
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	d := newTestDriver(t)
	spec := busybox("limited")
	spec.MemoryBytes = 96 << 20
	spec.CPUMillis = 250
	mustStart(t, d, spec)
	st := mustInspect(t, d, spec.Name)
	if st.MemoryBytes != spec.MemoryBytes || st.CPUMillis != spec.CPUMillis {
		t.Errorf("Inspect limits = %d bytes, %d millis; want %d, %d", st.MemoryBytes, st.CPUMillis, spec.MemoryBytes, spec.CPUMillis)
	}
	mem := strconv.FormatInt(spec.MemoryBytes, 10)
	checks := []struct{ controller, file, want string }{
		{"memory", "memory.limit_in_bytes", mem},
		{"cpu", "cpu.cfs_quota_us", "25000"},
		{"cpu", "cpu.cfs_period_us", "100000"},
	}
	if d.cgroup == 2 {
		checks = []struct{ controller, file, want string }{
			{"", "memory.max", mem},
			{"", "cpu.max", "25000 100000"},
		}
	}
	for _, c := range checks {
		if got := cgroupFile(t, d.cgroup, st.PID, c.controller, c.file); got != c.want {
			t.Errorf("cgroup v%d %s of init = %q, want %q", d.cgroup, c.file, got, c.want)
		}
	}

	unlimited := busybox("free")
	mustStart(t, d, unlimited)
	if st := mustInspect(t, d, unlimited.Name); st.MemoryBytes != 0 || st.CPUMillis != 0 {
		t.Errorf("Inspect of unlimited guest = %+v, want no limits", st)
	}
}

// TestSurvivesStarter starts a guest from a child process, kills that
// process with SIGKILL and checks that the guest runs on with the same init.
func TestSurvivesStarter(t *testing.T) {
	t.Parallel()
	d := newTestDriver(t)
	spec := busybox("survivor")
	if err := d.Create(t.Context(), spec, nil); err != nil {
		t.Fatalf("Create = %v", err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStart$", "-test.v")
	cmd.Env = append(os.Environ(), "CORPUS_LXC_HELPER_PATH="+d.path, "CORPUS_LXC_HELPER_NAME="+spec.Name)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "started "); ok {
			pid, _ = strconv.Atoi(n)
			break
		}
	}
	if pid == 0 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper did not start the guest: %v", sc.Err())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(testrun.D(10 * time.Second)):
		t.Fatal("helper output stayed open after SIGKILL: the guest holds the starter's files")
	}

	time.Sleep(200 * time.Millisecond)
	st := mustInspect(t, d, spec.Name)
	if st.State != drivers.StateRunning || st.PID != pid {
		t.Fatalf("after the starter was killed: %+v, want running with init PID %d", st, pid)
	}
	var buf bytes.Buffer
	if code, err := d.Exec(t.Context(), spec.Name, drivers.ExecRequest{Argv: []string{"echo", "alive"}, Stdout: &buf}); err != nil || code != 0 || buf.String() != "alive\n" {
		t.Fatalf("Exec after the starter was killed = %d, %v, %q", code, err, buf.String())
	}
}

// TestHelperStart is TestSurvivesStarter's child process, not a test.
func TestHelperStart(t *testing.T) {
	path, name := os.Getenv("CORPUS_LXC_HELPER_PATH"), os.Getenv("CORPUS_LXC_HELPER_NAME")
	if path == "" {
		t.Skip("helper process for TestSurvivesStarter")
	}
	d, err := New(Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	st, err := d.Inspect(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("started %d\n", st.PID)
	select {} // wait for SIGKILL
}

func TestExecStreaming(t *testing.T) {
	t.Parallel()
	d := newTestDriver(t)
	spec := busybox("stream")
	mustStart(t, d, spec)

	t.Run("output while running", func(t *testing.T) {
		t.Parallel()
		w := newNotifyWriter()
		done := make(chan error, 1)
		go func() {
			_, err := d.Exec(t.Context(), spec.Name, drivers.ExecRequest{
				Argv: []string{"sh", "-c", "echo first; sleep 3; echo second"}, Stdout: w,
			})
			done <- err
		}()
		select {
		case <-w.first:
		case err := <-done:
			t.Fatalf("Exec returned (%v) before any output was delivered", err)
		case <-time.After(2500 * time.Millisecond):
			t.Fatal("no output while the command runs")
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := w.String(); got != "first\nsecond\n" {
			t.Errorf("stdout = %q, want %q", got, "first\nsecond\n")
		}
	})
	t.Run("cancel", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := d.Exec(ctx, spec.Name, drivers.ExecRequest{Argv: []string{"sleep", "60"}})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Exec with expiring ctx = %v, want DeadlineExceeded", err)
		}
		if took := time.Since(start); took > testrun.D(5*time.Second) {
			t.Errorf("Exec with 500ms ctx returned after %s", took)
		}
	})
	t.Run("background holds stdout", func(t *testing.T) {
		t.Parallel()
		var out bytes.Buffer
		start := time.Now()
		code, err := d.Exec(t.Context(), spec.Name, drivers.ExecRequest{
			Argv: []string{"sh", "-c", "sleep 60 & echo started"}, Stdout: &out,
		})
		if err != nil || code != 0 || out.String() != "started\n" {
			t.Errorf("Exec = %d, %v, %q; want 0, nil, %q", code, err, out.String(), "started\n")
		}
		if took := time.Since(start); took > execWaitDelay+3*time.Second {
			t.Errorf("Exec waited %s for a background process", took)
		}
	})
}

func TestStop(t *testing.T) {
	t.Parallel()
	d := newTestDriver(t)
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		max     time.Duration
	}{
		// Under the timeout: Stop right after Start must still halt cleanly.
		{"clean", 30 * time.Second, 10 * time.Second},
		{"forced at once", 0, 5 * time.Second},
		{"forced after timeout", time.Millisecond, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := busybox(strings.ReplaceAll(tc.name, " ", "-"))
			mustStart(t, d, spec)
			start := time.Now()
			if err := d.Stop(t.Context(), spec.Name, tc.timeout); err != nil {
				t.Fatalf("Stop(%s) = %v", tc.timeout, err)
			}
			took := time.Since(start)
			if st := mustInspect(t, d, spec.Name); st.State != drivers.StateStopped {
				t.Fatalf("after Stop(%s): %+v, want stopped", tc.timeout, st)
			}
			if took > tc.max {
				t.Errorf("Stop(%s) took %s, want under %s", tc.timeout, took, tc.max)
			}
			t.Logf("Stop(%s) took %s", tc.timeout, took)
		})
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	d := newTestDriver(t)
	fp := d.Fingerprint(t.Context())
	if !fp.Healthy {
		t.Fatalf("Fingerprint = %+v, want healthy", fp)
	}
	if fp.Attributes["lxc.version"] == "" {
		t.Errorf("Fingerprint attributes %v lack lxc.version", fp.Attributes)
	}
	if v := fp.Attributes["cgroup.version"]; v != "1" && v != "2" {
		t.Errorf("Fingerprint cgroup.version = %q, want 1 or 2", v)
	}
	if got := d.Capabilities(); !got.Exec || !slices.Equal(got.Images, []string{"busybox", "debian/bookworm"}) || got.Volumes != drivers.HostVolumes {
		t.Errorf("Capabilities = %+v", got)
	}

	bad, err := New(Config{Path: filepath.Join(t.TempDir(), "gone")})
	if err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(bad.path)
	if fp := bad.Fingerprint(t.Context()); fp.Healthy || fp.Detail == "" {
		t.Errorf("Fingerprint with a missing lxcpath = %+v, want unhealthy with detail", fp)
	}
}

// TestStartLeavesCaller checks that starting a guest neither moves the
// driver's process into the guest's monitor cgroups nor leaks them, and
// that the guest's init gets none of the caller's environment.
func TestStartLeavesCaller(t *testing.T) {
	t.Parallel()
	before, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	d := newTestDriver(t)
	spec := busybox(fmt.Sprintf("caller-%d", os.Getpid()))
	spec.Env = map[string]string{"GUEST_VAR": "1"}
	mustStart(t, d, spec)
	if after, _ := os.ReadFile("/proc/self/cgroup"); !bytes.Equal(before, after) {
		t.Errorf("Start moved the calling process:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	st := mustInspect(t, d, spec.Name)
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", st.PID))
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Split(strings.TrimRight(string(environ), "\x00"), "\x00")
	if !slices.Contains(env, "GUEST_VAR=1") || !slices.Contains(env, "container=lxc") {
		t.Errorf("init environment %q lacks GUEST_VAR=1 or container=lxc", env)
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, forkstart.Env) || strings.HasPrefix(kv, "GOPATH=") {
			t.Errorf("init environment %q leaks %s", env, kv)
		}
	}

	if err := d.Stop(t.Context(), spec.Name, 0); err != nil {
		t.Fatal(err)
	}
	var left []string
	for range 40 {
		left = monitorCgroups(t, spec.Name)
		if len(left) == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("monitor cgroups left after Stop: %v", left)
}

// monitorCgroups returns the lxc.monitor cgroups of container name.
func monitorCgroups(t *testing.T, name string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(cgroupRoot, func(p string, e os.DirEntry, err error) error {
		if err != nil || !e.IsDir() {
			return nil
		}
		if rest, ok := strings.CutPrefix(e.Name(), "lxc.monitor."+name); ok {
			if _, err := strconv.Atoi(strings.TrimPrefix(rest, "-")); rest == "" || err == nil {
				found = append(found, p)
			}
			return filepath.SkipDir
		}
		if strings.Count(strings.TrimPrefix(p, cgroupRoot), "/") >= 3 {
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestConsoleLog: what the guest's console shows (busybox init's prompt)
// lands in the file ConsoleLog names.
func TestConsoleLog(t *testing.T) {
	t.Parallel()
	d := newTestDriver(t)
	spec := busybox(fmt.Sprintf("console-%d", os.Getpid()))
	mustStart(t, d, spec)
	deadline := time.Now().Add(testrun.D(10 * time.Second))
	for {
		b, _ := os.ReadFile(d.ConsoleLog(spec.Name))
		if strings.Contains(string(b), "activate this console") {
			return
		}
		if time.Now().After(deadline) {
			cfg, _ := os.ReadFile(filepath.Join(d.guestDir(spec.Name), "config"))
			t.Fatalf("console log %q; config:\n%s", b, grepConfig(string(cfg), "console"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func grepConfig(cfg, word string) string {
	var out []string
	for _, l := range strings.Split(cfg, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
