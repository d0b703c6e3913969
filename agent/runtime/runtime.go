// Package runtime is the agent's side of the process supervisor
// (agent/runtime/supervisor): it installs the supervisor into a guest,
// starts it, hands it what to run and asks how it is, all through the
// guest driver's exec, so it works the same in LXC containers and VMs.
//
// The agent's loops use it through Runtime's methods only: Ensure before a
// deploy starts processes, Call to start, stop and list them, WriteEnv to
// put a release's environment in the guest, and Revive from the reconcile
// loop, so a guest that restarted runs its processes again.
package runtime

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"corpus/agent/runtime/supervisor"
	"corpus/drivers"
	"corpus/internal/keylock"
)

// Execer runs a command in a guest: what a driver with the exec ability
// offers.
type Execer interface {
	Exec(ctx context.Context, guest string, req drivers.ExecRequest) (int, error)
}

// Runtime drives the supervisors of this node's guests.
type Runtime struct {
	// Binary is corpus-supervisor on this host, copied into guests.
	Binary string

	once sync.Once
	hash string
	err  error

	gzOnce sync.Once
	gz     []byte
	gzErr  error

	// installs serialises installs per guest: concurrent ones would
	// write the same files (50 terminals opened at once, say).
	installs keylock.Map
}

// ErrNoBinary is returned (wrapped) when this host has no supervisor to
// install.
var ErrNoBinary = errors.New("corpus-supervisor is not installed beside corpus")

// FindBinary looks for corpus-supervisor beside the running binary, then
// where the package installs it.
func FindBinary() string {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "corpus-supervisor")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	for _, p := range []string{"/usr/lib/corpus/corpus-supervisor", "/usr/local/lib/corpus/corpus-supervisor"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

func (r *Runtime) binaryHash() (string, error) {
	r.once.Do(func() {
		if r.Binary == "" {
			r.err = fmt.Errorf("%w (build it with make build, or install the corpus package)", ErrNoBinary)
			return
		}
		f, err := os.Open(r.Binary)
		if err != nil {
			r.err = fmt.Errorf("%w: %v", ErrNoBinary, err)
			return
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			r.err = err
			return
		}
		r.hash = hex.EncodeToString(h.Sum(nil))
	})
	return r.hash, r.err
}

// run execs argv in the guest and returns its output; a non-zero exit is
// an error with the output.
func run(ctx context.Context, x Execer, guest string, stdin io.Reader, argv ...string) ([]byte, error) {
	var out, errOut bytes.Buffer
	code, err := x.Exec(ctx, guest, drivers.ExecRequest{Argv: argv, Stdin: stdin, Stdout: &out, Stderr: &errOut})
	if err != nil {
		return nil, err
	}
	if code != 0 {
		msg := strings.TrimSpace(errOut.String())
		if msg == "" {
			msg = strings.TrimSpace(out.String())
		}
		return out.Bytes(), fmt.Errorf("exit status %d: %s", code, msg)
	}
	return out.Bytes(), nil
}

// Ensure installs the supervisor in the guest when it is missing or
// another build, and starts it when it is not running. Where the binary
// is in place (every deploy but a guest's first), one exec looks and
// starts it; else the install's last exec starts it.
func (r *Runtime) Ensure(ctx context.Context, x Execer, guest string) error {
	_, err := r.place(ctx, x, guest, "start", nil)
	return err
}

// EnsureCall is Ensure, then Call with req: where the binary is in
// place, one exec looks, and one run of it starts the supervisor (when
// it is not running) and asks (corpus-supervisor start-ctl).
func (r *Runtime) EnsureCall(ctx context.Context, x Execer, guest string, req supervisor.Request) (*supervisor.Response, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	out, err := r.place(ctx, x, guest, "start-ctl", b)
	if err != nil {
		return nil, err
	}
	if out == nil { // installed (and started) just now
		return r.Call(ctx, x, guest, req)
	}
	return answer(guest, out)
}

// Install puts the supervisor binary in the guest when it is missing or
// another build, without starting it (corpus-supervisor tty needs only
// the binary).
func (r *Runtime) Install(ctx context.Context, x Execer, guest string) error {
	_, err := r.place(ctx, x, guest, "", nil)
	return err
}

// lookScript prints "absent" unless the binary ($1) is the build with
// sha256 $2; when it is and $3 is a command (start, start-ctl), it runs
// it. It reads the sum placeScript checked and wrote beside the binary
// ($1.sum), not the binary: hashing it (or reading it at all) on every
// deploy took 70 to 270 ms of each start step in a guest held to a
// tenth of a CPU. A binary placed without a sum file (an older agent) is
// absent; one placed by an older or newer build has that build's sum.
const lookScript = `read -r sum 2>/dev/null <"$1.sum" && [ "$sum" = "$2" ] && [ -x "$1" ] || { echo absent; exit 0; }
[ -n "$3" ] || exit 0
exec "$1" "$3"`

// place makes sure the guest holds this host's supervisor binary and,
// with command, runs it (start, or start-ctl with the request in) and
// returns its output; that output is nil when the binary was installed
// now (started when command is not empty, not asked).
func (r *Runtime) place(ctx context.Context, x Execer, guest, command string, in []byte) ([]byte, error) {
	defer r.installs.Lock(guest)()
	want, err := r.binaryHash()
	if err != nil {
		return nil, err
	}
	doing := "looking for"
	if command != "" {
		doing = "starting"
	}
	var stdin io.Reader
	if in != nil {
		stdin = bytes.NewReader(in)
	}
	out, err := run(ctx, x, guest, stdin, "sh", "-c", lookScript, "sh", supervisor.Binary, want, command)
	if err != nil {
		return nil, fmt.Errorf("%s the supervisor in guest %s: %w", doing, guest, err)
	}
	if strings.TrimSpace(string(out)) != "absent" {
		return out, nil
	}
	startArg := ""
	if command != "" {
		startArg = "start"
	}
	if err := r.install(ctx, x, guest, want, startArg); err != nil {
		return nil, fmt.Errorf("installing the supervisor in guest %s: %w", guest, err)
	}
	return nil, nil
}

// placeScript follows a copy of the binary at $1: it checks the copy has
// sha256 $3, moves it to $2, records the sum for lookScript, and starts
// it when $4 is "start".
const placeScript = `
sum=$(sha256sum "$1")
if [ "${sum%% *}" != "$3" ]; then
  rm -f "$1"
  echo "the copy in the guest does not match (sha256 ${sum%% *}, want $3)" >&2
  exit 1
fi
chmod 755 "$1"
mv -f "$1" "$2"
echo "$3" >"$2.sum"
[ "$4" = start ] || exit 0
exec "$2" start`

// installChunk is how much of the (gzipped) binary one exec carries
// where the driver's exec does not stream: a VM's guest agent takes a
// command's input in one JSON message, which it parses slowly under
// emulation; small messages keep each call short. Where it streams (LXC,
// Kubernetes), one exec carries all of it, as it is (a pipe into the
// guest costs less than the guest's gunzip): 27 execs of 64 KiB each
// were most of a new instance's start when nine started at once.
const installChunk = 64 << 10

// streams says whether x's exec takes its input as a stream
// (drivers.Capabilities.ExecStreams).
func streams(x Execer) bool {
	c, ok := x.(interface{ Capabilities() drivers.Capabilities })
	return ok && c.Capabilities().ExecStreams
}

// gzipped is the supervisor binary, compressed once (about half its size:
// fewer chunks to send).
func (r *Runtime) gzipped() ([]byte, error) {
	r.gzOnce.Do(func() {
		raw, err := os.ReadFile(r.Binary)
		if err != nil {
			r.gzErr = err
			return
		}
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		zw.Write(raw)
		if r.gzErr = zw.Close(); r.gzErr == nil {
			r.gz = b.Bytes()
		}
	})
	return r.gz, r.gzErr
}

// install copies the supervisor into the guest, and checks, places and
// (with start "start") starts it in the copy's last exec: one exec where
// the driver's exec streams, else installChunk of the gzipped binary at
// a time. The binary is read from disk at each install where it streams
// (not kept in memory); its hash, once: a binary replaced under a running
// agent (an upgrade, which restarts it) fails the check until then.
func (r *Runtime) install(ctx context.Context, x Execer, guest, want, start string) error {
	args := []string{"sh", supervisor.Binary + ".new", supervisor.Binary, want, start}
	if streams(x) {
		f, err := os.Open(r.Binary)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = run(ctx, x, guest, f, append([]string{"sh", "-c", `set -e; mkdir -p "${1%/*}"; cat > "$1"` + placeScript}, args...)...)
		return err
	}
	gz, err := r.gzipped()
	if err != nil {
		return err
	}
	if _, err := run(ctx, x, guest, nil, append([]string{"sh", "-c", `set -e; mkdir -p "${1%/*}"; : > "$1.gz"`}, args...)...); err != nil {
		return err
	}
	for off := 0; off < len(gz); off += installChunk {
		chunk := gz[off:min(off+installChunk, len(gz))]
		if _, err := run(ctx, x, guest, bytes.NewReader(chunk), append([]string{"sh", "-c", `cat >> "$1.gz"`}, args...)...); err != nil {
			return err
		}
	}
	_, err = run(ctx, x, guest, nil, append([]string{"sh", "-c", `set -e; gzip -dc "$1.gz" > "$1"; rm -f "$1.gz"` + placeScript}, args...)...)
	return err
}

// Boot is how a guest whose driver runs an image's command starts its
// supervisor (drivers.GuestSpec.Boot): BootScript as the main command,
// the supervisor's binary, state and logs kept across its restarts,
// with keep (the project's tree).
func Boot(keep ...string) *drivers.Boot {
	return &drivers.Boot{
		Command: []string{"/bin/sh", "-c", supervisor.BootScript, "corpus-boot", supervisor.Binary, supervisor.BootMarker},
		Keep:    append([]string{filepath.Dir(supervisor.Binary), supervisor.StateDir, supervisor.LogDir}, keep...),
	}
}

// Revive starts the supervisor of a guest that has processes to run (a
// state file) and whose supervisor is not running: after the guest
// restarted. It does nothing in a guest without processes.
func (r *Runtime) Revive(ctx context.Context, x Execer, guest string) error {
	_, err := run(ctx, x, guest, nil, "sh", "-c",
		`test -f "$1" || exit 0; test -x "$2" || exit 0; exec "$2" start`, "sh", supervisor.StateFile, supervisor.Binary)
	return err
}

// Call sends one request to the guest's supervisor.
func (r *Runtime) Call(ctx context.Context, x Execer, guest string, req supervisor.Request) (*supervisor.Response, error) {
	out, err := ask(ctx, x, guest, req, supervisor.Binary, "ctl")
	if err != nil {
		return nil, err
	}
	return answer(guest, out)
}

// ask sends req on the input of argv (the supervisor's ctl, or a script
// that runs it) and returns what came out, also with an error (what a
// script wrote before the supervisor failed).
func ask(ctx context.Context, x Execer, guest string, req supervisor.Request, argv ...string) ([]byte, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	out, err := run(ctx, x, guest, bytes.NewReader(b), argv...)
	if err != nil {
		return out, fmt.Errorf("the supervisor of guest %s: %w", guest, err)
	}
	return out, nil
}

// answer decodes the supervisor's response.
func answer(guest string, out []byte) (*supervisor.Response, error) {
	var res supervisor.Response
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("the supervisor of guest %s answered %q: %w", guest, out, err)
	}
	return &res, nil
}

// Status lists a project's processes in the guest; none when the guest
// runs no supervisor (no socket). One exec looks and asks.
func (r *Runtime) Status(ctx context.Context, x Execer, guest, project string) ([]supervisor.Status, error) {
	_, st, err := r.StatusAfter(ctx, x, guest, project, "")
	return st, err
}

// statusMark ends what StatusAfter's script wrote.
const statusMark = "\n--corpus-status--\n"

// StatusAfter runs the shell script before in the guest, then lists a
// project's processes as Status does, in one exec; it returns what
// before wrote (its standard output) too, also with an error when the
// supervisor failed after it. before must exit 0, and must
// neither exec nor read its input (the request); its positional
// parameters are args.
func (r *Runtime) StatusAfter(ctx context.Context, x Execer, guest, project, before string, args ...string) ([]byte, []supervisor.Status, error) {
	script := `test -S "$1" || exit 0; exec "$2" ctl`
	if before != "" {
		script = `sock=$1 bin=$2; shift 2
` + before + `
printf '` + strings.ReplaceAll(statusMark, "\n", `\n`) + `'
test -S "$sock" || exit 0; exec "$bin" ctl`
	}
	out, err := ask(ctx, x, guest, supervisor.Request{Op: supervisor.OpStatus, Project: project},
		append([]string{"sh", "-c", script, "sh", supervisor.Socket, supervisor.Binary}, args...)...)
	var pre []byte
	if before != "" {
		// What before said, also when the supervisor failed after it.
		var ok bool
		if pre, out, ok = bytes.Cut(out, []byte(statusMark)); !ok && err == nil {
			err = fmt.Errorf("the script in guest %s ended early: %q", guest, pre)
		}
	}
	if err != nil {
		return pre, nil, err
	}
	if len(bytes.TrimSpace(out)) == 0 {
		return pre, nil, nil
	}
	res, err := answer(guest, out)
	if err != nil {
		return pre, nil, err
	}
	if res.Error != "" {
		return pre, nil, errors.New(res.Error)
	}
	return pre, res.Processes, nil
}

// WriteEnv puts env in the guest at path as JSON, readable by uid only:
// it travels on the exec's stdin, never on a command line.
func (r *Runtime) WriteEnv(ctx context.Context, x Execer, guest, path string, uid, gid int, env map[string]string) error {
	return r.WriteEnvAfter(ctx, x, guest, path, uid, gid, env, "", nil)
}

// WriteEnvAfter runs the shell script before and then writes env as
// WriteEnv does, in one exec. before may read line (one line, given
// without its newline) from its input with read; its positional
// parameters are path, uid and gid, then args.
func (r *Runtime) WriteEnvAfter(ctx context.Context, x Execer, guest, path string, uid, gid int, env map[string]string, before string, line []byte, args ...string) error {
	if bytes.IndexByte(line, '\n') >= 0 {
		return errors.New("writing the environment: the line before it holds a newline")
	}
	b, err := json.Marshal(env)
	if err != nil {
		return err
	}
	in := b
	if before != "" {
		in = slices.Concat(line, []byte{'\n'}, b)
		before += "\n"
	}
	argv := append([]string{"sh", "-c",
		"set -e\n" + before + `umask 077; mkdir -p "${1%/*}"; cat > "$1.tmp"; chown "$2:$3" "$1.tmp"; chmod 600 "$1.tmp"; mv -f "$1.tmp" "$1"`,
		"sh", path, strconv.Itoa(uid), strconv.Itoa(gid)}, args...)
	if _, err = run(ctx, x, guest, bytes.NewReader(in), argv...); err != nil {
		return fmt.Errorf("writing the environment in guest %s: %w", guest, err)
	}
	return nil
}
