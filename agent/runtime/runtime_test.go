package runtime

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"corpus/agent/runtime/supervisor"
	"corpus/drivers"
	"corpus/internal/testrun"
)

// chrootExec runs a guest's commands in a busybox root folder of the
// host (chroot), recording how much input each took.
type chrootExec struct {
	root   string
	inputs []int // bytes of input of each exec
}

func (c *chrootExec) Exec(ctx context.Context, _ string, req drivers.ExecRequest) (int, error) {
	var in []byte
	if req.Stdin != nil {
		var err error
		if in, err = io.ReadAll(req.Stdin); err != nil {
			return 0, err
		}
	}
	c.inputs = append(c.inputs, len(in))
	cmd := exec.CommandContext(ctx, "chroot", append([]string{c.root}, req.Argv...)...)
	cmd.Env = []string{"PATH=/bin"}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), req.Stdout, req.Stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), nil
	}
	return 0, err
}

// guestRoot is a busybox root folder with /dev/null, for chrootExec.
func guestRoot(t *testing.T) string {
	t.Helper()
	root := testrun.BusyboxRoot(t, t.TempDir(), "dev")
	if err := unix.Mknod(filepath.Join(root, "dev/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chroot", root, "/bin/busybox", "--install", "-s", "/bin").CombinedOutput(); err != nil {
		t.Fatalf("busybox --install: %v: %s", err, out)
	}
	return root
}

// streamingExec is a chrootExec whose driver streams exec input (LXC,
// Kubernetes).
type streamingExec struct{ *chrootExec }

func (streamingExec) Capabilities() drivers.Capabilities {
	return drivers.Capabilities{Exec: true, ExecStreams: true}
}

// TestInstall puts a supervisor binary into a guest and starts it
// (Ensure) through a driver whose exec streams its input (one exec
// carries all of it, and starts it) and through one whose exec does not
// (a VM's guest agent: installChunk at a time); once the binary is in
// place, Ensure is one exec and Install looks only.
func TestInstall(t *testing.T) {
	// A script that says it started, then bytes gzip cannot shrink below
	// four chunks, which the shell never reads.
	bin := []byte("#!/bin/sh\n[ \"$1\" = start ] && echo started >> /started\nexit 0\n")
	noise := make([]byte, 3*installChunk+1000)
	rand.Read(noise)
	bin = append(bin, noise...)
	src := filepath.Join(t.TempDir(), "corpus-supervisor")
	if err := os.WriteFile(src, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		stream bool
		execs  int // of a first Ensure
	}{{"streaming", true, 2}, {"chunked", false, 7}} {
		t.Run(tc.name, func(t *testing.T) {
			root := guestRoot(t)
			c := &chrootExec{root: root}
			var x Execer = c
			if tc.stream {
				x = streamingExec{c}
			}
			starts := func() int {
				b, _ := os.ReadFile(filepath.Join(root, "started"))
				return bytes.Count(b, []byte("started"))
			}
			r := &Runtime{Binary: src}
			ctx := context.Background()
			if err := r.Ensure(ctx, x, "g"); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(root, supervisor.Binary))
			if err != nil || !bytes.Equal(got, bin) {
				t.Fatalf("installed binary: %d bytes, %v; want the %d bytes given", len(got), err, len(bin))
			}
			if fi, _ := os.Stat(filepath.Join(root, supervisor.Binary)); fi.Mode().Perm() != 0o755 {
				t.Errorf("installed binary mode %v, want 0755", fi.Mode().Perm())
			}
			if n := starts(); n != 1 {
				t.Errorf("Ensure started the supervisor %d times, want 1", n)
			}
			if n := len(c.inputs); n != tc.execs {
				t.Errorf("a first Ensure took %d execs (inputs %v), want %d", n, c.inputs, tc.execs)
			}
			for _, n := range c.inputs {
				if !tc.stream && n > installChunk {
					t.Errorf("an exec carried %d bytes, more than a chunk (%d)", n, installChunk)
				}
			}
			before := len(c.inputs)
			if err := r.Ensure(ctx, x, "g"); err != nil {
				t.Fatal(err)
			}
			if err := r.Install(ctx, x, "g"); err != nil {
				t.Fatal(err)
			}
			if n := len(c.inputs) - before; n != 2 || starts() != 2 {
				t.Errorf("Ensure then Install with the binary in place: %d execs and %d starts in all, want 1 exec each and 2 starts", n, starts())
			}
			// Another build in the guest (placed by an agent of that
			// build, with its sum) is replaced.
			if err := os.WriteFile(filepath.Join(root, supervisor.Binary), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, supervisor.Binary+".sum"), []byte(strings.Repeat("1", 64)+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := r.Install(ctx, x, "g"); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(filepath.Join(root, supervisor.Binary)); !bytes.Equal(got, bin) {
				t.Errorf("Install over another build left %d bytes, want the %d given", len(got), len(bin))
			}
			// The look reads the sum the install wrote (not the binary's
			// own hash); a guest an older agent placed the binary in,
			// without it, gets it again.
			want, _ := r.binaryHash()
			if got, _ := os.ReadFile(filepath.Join(root, supervisor.Binary+".sum")); strings.TrimSpace(string(got)) != want {
				t.Errorf("sum file %q, want %s", got, want)
			}
			os.Remove(filepath.Join(root, supervisor.Binary+".sum"))
			before = len(c.inputs)
			if err := r.Install(ctx, x, "g"); err != nil {
				t.Fatal(err)
			}
			if n := len(c.inputs) - before; n < 2 {
				t.Errorf("Install without the sum file took %d exec, want the look and an install", n)
			}
			// A copy that does not arrive whole is not put in place.
			bad := &Runtime{Binary: src}
			bad.once.Do(func() { bad.hash = strings.Repeat("0", 64) })
			if err := bad.Install(ctx, x, "g"); err == nil || !strings.Contains(err.Error(), "does not match") {
				t.Errorf("Install of a copy with another sum = %v, want it refused", err)
			}
			if got, _ := os.ReadFile(filepath.Join(root, supervisor.Binary)); !bytes.Equal(got, bin) {
				t.Errorf("a refused copy replaced the binary in place")
			}
		})
	}
}

// TestWriteEnvAfter writes a line of its own and an environment in one
// exec: the line first, as given (backslashes, percent signs, spaces),
// the environment whole, 0600 for its owner, with no secret on a
// command line.
func TestWriteEnvAfter(t *testing.T) {
	root := guestRoot(t)
	c := &chrootExec{root: root}
	var r Runtime
	env := map[string]string{"DATABASE_URL": "postgres://app:s3cret@db/app", "MULTI": "a\nb", "PCT": "100% \\n"}
	line := []byte(` {"cmd": "echo \\"%s\\" \\n done"} `)
	err := r.WriteEnvAfter(context.Background(), c, "g", "/srv/.env/r1.json", 1000, 1000, env,
		`mkdir -p "$4"; IFS= read -r l; printf '%s' "$l" > "$4/line"`, line, "/srv/other")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "srv/other/line")); !bytes.Equal(got, line) {
		t.Errorf("the line written: %q, want %q", got, line)
	}
	raw, err := os.ReadFile(filepath.Join(root, "srv/.env/r1.json"))
	var got map[string]string
	if err != nil || json.Unmarshal(raw, &got) != nil || !maps.Equal(got, env) {
		t.Errorf("the environment written: %q, %v; want %v", raw, err, env)
	}
	fi, err := os.Stat(filepath.Join(root, "srv/.env/r1.json"))
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Errorf("the environment file: %v, %v; want 0600 for uid 1000", fi.Mode(), err)
	}
	if err := r.WriteEnvAfter(context.Background(), c, "g", "/srv/.env/r2.json", 0, 0, env, "true", []byte("a\nb")); err == nil {
		t.Error("a line with a newline in it was taken")
	}
}

// TestStatus asks for a project's processes in one exec: none where no
// supervisor listens, the supervisor's answer where one does (here a
// script in its place that answers as it would).
func TestStatus(t *testing.T) {
	root := guestRoot(t)
	c := &chrootExec{root: root}
	var r Runtime
	got, err := r.Status(context.Background(), c, "g", "site")
	if err != nil || got != nil || len(c.inputs) != 1 {
		t.Fatalf("Status without a supervisor = %v, %v in %d execs; want none in 1", got, err, len(c.inputs))
	}
	bin := filepath.Join(root, supervisor.Binary)
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\n[ \"$1\" = ctl ] && grep -q '\"project\":\"site\"' && echo '{\"processes\":[{\"name\":\"web\",\"release\":\"r3\",\"state\":\"running\"}]}'\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(root, supervisor.Socket)
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got, err = r.Status(context.Background(), c, "g", "site")
	if err != nil || len(got) != 1 || got[0].Name != "web" || got[0].Release != "r3" || len(c.inputs) != 2 {
		t.Errorf("Status with a supervisor = %+v, %v in %d execs in all; want web of r3 in 1 more", got, err, len(c.inputs))
	}
	// A script before, its arguments, and the answer after, in one exec.
	pre, got, err := r.StatusAfter(context.Background(), c, "g", "site", `printf '%s\n%s' "$1" "$2"; cd /`, "a b", "c")
	if err != nil || string(pre) != "a b\nc" || len(got) != 1 || got[0].Release != "r3" || len(c.inputs) != 3 {
		t.Errorf("StatusAfter = %q, %+v, %v in %d execs in all; want \"a b\\nc\", web of r3 in 1 more", pre, got, err, len(c.inputs))
	}
	ln.Close()
	pre, got, err = r.StatusAfter(context.Background(), c, "g", "site", `echo "$1"`, "x")
	if err != nil || string(pre) != "x\n" || got != nil {
		t.Errorf("StatusAfter without a supervisor = %q, %+v, %v; want \"x\\n\" and none", pre, got, err)
	}
	if _, _, err := r.StatusAfter(context.Background(), c, "g", "site", `exit 3`); err == nil {
		t.Error("StatusAfter took a script that failed")
	}
}

// TestEnsureCall starts the supervisor and asks it in one exec where the
// binary is in place (corpus-supervisor start-ctl); where it is not, the
// install starts it and a ctl asks.
func TestEnsureCall(t *testing.T) {
	root := guestRoot(t)
	c := &chrootExec{root: root}
	bin := filepath.Join(t.TempDir(), "corpus-supervisor")
	script := `#!/bin/sh
case "$1" in
start) echo started >> /started ;;
start-ctl) echo started >> /started; cat > /request; echo '{"port":8081}' ;;
ctl) cat > /request; echo '{"port":8082}' ;;
esac
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &Runtime{Binary: bin}
	req := supervisor.Request{Op: supervisor.OpFreePort, Ports: []int{80, 81}}
	ctx := context.Background()
	res, err := r.EnsureCall(ctx, streamingExec{c}, "g", req)
	if err != nil || res.Port != 8082 || len(c.inputs) != 3 {
		t.Fatalf("EnsureCall without the binary = %+v, %v in %d execs; want the ctl's answer after the look and the install", res, err, len(c.inputs))
	}
	res, err = r.EnsureCall(ctx, streamingExec{c}, "g", req)
	if err != nil || res.Port != 8081 || len(c.inputs) != 4 {
		t.Fatalf("EnsureCall with the binary in place = %+v, %v in %d execs in all; want start-ctl's answer in 1 more", res, err, len(c.inputs))
	}
	got, _ := os.ReadFile(filepath.Join(root, "request"))
	var sent supervisor.Request
	if json.Unmarshal(got, &sent) != nil || sent.Op != supervisor.OpFreePort || len(sent.Ports) != 2 {
		t.Errorf("the request start-ctl read: %q", got)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "started")); bytes.Count(b, []byte("started")) != 2 {
		t.Errorf("started %q, want twice (the install, then start-ctl)", b)
	}
}
