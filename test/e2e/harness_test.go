package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// corpusBin is the binary under test, built once in TestMain.
var corpusBin string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if why := skipReason(); why != "" {
		fmt.Fprintln(os.Stderr, "e2e: skipping:", why)
		// Still run, so each test reports its own skip.
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "corpus-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	corpusBin = filepath.Join(dir, "corpus")
	args := []string{"build", "-o", corpusBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "corpus/cmd/corpus")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building corpus:", err)
		return 1
	}
	return m.Run()
}

// skipReason says why end-to-end tests cannot run here, or "".
func skipReason() string {
	if os.Geteuid() != 0 {
		return "needs root (LXC containers, cgroups); run as root or through .ci/run"
	}
	for _, tool := range []string{"lxc-info", "lxc-ls"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "needs LXC (apt-get install lxc lxc-dev busybox-static); " + tool + " not found"
		}
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		return "needs busybox-static for the busybox image (apt-get install busybox-static)"
	}
	return ""
}

func requireE2E(t *testing.T) {
	t.Helper()
	if why := skipReason(); why != "" {
		t.Skip(why)
	}
}

// freeAddr returns a loopback address with a port nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// proc is a corpus daemon started by a test.
type proc struct {
	name string
	env  []string
	args []string
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs corpus with args; the test's cleanup kills it (by its PID).
func start(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, env: env, args: args, log: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(corpusBin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	// Own process group: a signal to the test does not reach the daemon
	// by accident, and the daemon's children are not ours to kill.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("--- log of %s ---\n%s", name, p.log.String())
		}
	})
	return p
}

func (p *proc) kill() {
	select {
	case <-p.done:
	default:
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
}

// restart starts a stopped or killed daemon again with the same arguments.
func (p *proc) restart(t *testing.T) *proc {
	t.Helper()
	p.kill()
	return start(t, p.name, p.env, p.args...)
}

// stop sends SIGINT and waits for a clean exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not stop within 30s of SIGINT", p.name)
	}
}

// cluster is a coordinator and its agents, all real processes.
type cluster struct {
	t       *testing.T
	dir     string
	api     string
	token   string
	cfgHome string
	coord   *proc
	agents  map[string]*agentProc
}

type agentProc struct {
	*proc
	name     string
	stateDir string
	apiAddr  string
	lxcPath  string
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	requireE2E(t)
	dir := tempDir(t)
	c := &cluster{t: t, dir: dir, api: freeAddr(t), cfgHome: filepath.Join(dir, "cfg"), agents: map[string]*agentProc{}}
	c.coord = start(t, "coordinator", nil, "coordinator",
		"--data-dir", filepath.Join(dir, "coordinator"), "--api-addr", c.api, "--raft-addr", freeAddr(t))
	c.waitReady()
	return c
}

// waitReady waits until the coordinator is up, leading and bootstrapped.
func (c *cluster) waitReady() {
	c.t.Helper()
	tokFile := filepath.Join(c.dir, "coordinator", "ops-token")
	eventually(c.t, 20*time.Second, "coordinator ready", func() error {
		b, err := os.ReadFile(tokFile)
		if err != nil {
			return err
		}
		c.token = strings.TrimSpace(string(b))
		if id := c.clusterID(); id == "" {
			return errors.New("not bootstrapped yet")
		}
		return nil
	})
}

// clusterID is the cluster id `corpus status` reports, "" if none.
func (c *cluster) clusterID() string {
	var st struct {
		ClusterID string `json:"cluster_id"`
		Leader    string `json:"leader"`
	}
	if err := c.json(&st, "status"); err != nil || st.Leader == "" {
		return ""
	}
	return st.ClusterID
}

// tempDir is a short folder under /tmp (LXC paths stay short), removed
// after the test's containers are destroyed.
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ce2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// addAgent enrolls and starts an agent with its own state folder and lxcpath.
func (c *cluster) addAgent(name string, extra ...string) *agentProc {
	c.t.Helper()
	tok := strings.TrimSpace(c.mustCLI("node", "token"))
	a := &agentProc{name: name, stateDir: filepath.Join(c.dir, "agent-"+name), apiAddr: freeAddr(c.t)}
	a.lxcPath = filepath.Join(a.stateDir, "lxc")
	c.t.Cleanup(func() { destroyContainers(c.t, a.lxcPath) })
	args := append([]string{"--join-token", tok}, extra...)
	a.proc = c.startAgent(a, args...)
	c.agents[name] = a
	eventually(c.t, 30*time.Second, "node "+name+" ready", func() error {
		var n struct {
			Node struct {
				Node struct{ Status string } `json:"node"`
			} `json:"node"`
		}
		if err := c.json(&n, "node", "show", name); err != nil {
			return err
		}
		if n.Node.Node.Status != "ready" {
			return fmt.Errorf("status %q", n.Node.Node.Status)
		}
		return nil
	})
	return a
}

func (c *cluster) startAgent(a *agentProc, args ...string) *proc {
	base := []string{"agent", "--state-dir", a.stateDir, "--coordinator", c.api, "--name", a.name,
		"--api-addr", a.apiAddr, "--resync-interval", "2s", "--report-interval", "1s", "--stop-timeout", "3s"}
	return start(c.t, "agent "+a.name, nil, append(base, args...)...)
}

// restartAgent starts a killed agent again from its state folder.
func (c *cluster) restartAgent(a *agentProc) {
	c.t.Helper()
	a.proc = c.startAgent(a)
}

// cli runs a client command against the cluster.
func (c *cluster) cli(args ...string) (stdout, stderr string, code int) {
	return c.cliWith([]string{"XDG_CONFIG_HOME=" + c.cfgHome, "CORPUS_ENV=", "CORPUS_ADDR=", "CORPUS_TOKEN="},
		append([]string{"--address", c.api, "--token", c.token}, args...)...)
}

// cliWith runs a client command with extra environment variables.
func (c *cluster) cliWith(env []string, args ...string) (stdout, stderr string, code int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, corpusBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		c.t.Fatalf("running corpus %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

func (c *cluster) mustCLI(args ...string) string {
	c.t.Helper()
	out, errOut, code := c.cli(args...)
	if code != 0 {
		c.t.Fatalf("corpus %s = exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// json runs a command with --json and decodes its output into v.
func (c *cluster) json(v any, args ...string) error {
	out, errOut, code := c.cli(append(args, "--json")...)
	if code != 0 {
		return fmt.Errorf("corpus %s: exit %d: %s", strings.Join(args, " "), code, strings.TrimSpace(errOut))
	}
	return json.Unmarshal([]byte(out), v)
}

// guestView is the part of `guest show --json` the tests read.
type guestView struct {
	Guest struct {
		ID       string `json:"id"`
		NodeID   string `json:"node_id"`
		Observed struct {
			State string `json:"state"`
			Pid   string `json:"pid"`
		} `json:"observed"`
	} `json:"guest"`
	NodeName string `json:"node_name"`
	Status   string `json:"status"`
}

func (c *cluster) guest(name string) guestView {
	c.t.Helper()
	var v guestView
	if err := c.json(&v, "guest", "show", name); err != nil {
		c.t.Fatal(err)
	}
	return v
}

// eventually retries f until it returns nil or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s: %v", what, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// lxcInfo returns a container's state and init PID as LXC's own tool sees it.
func lxcInfo(lxcPath, name string) (state string, pid int, err error) {
	out, err := exec.Command("lxc-info", "-P", lxcPath, "-n", name, "-s", "-p", "-H").CombinedOutput()
	if err != nil {
		return "", 0, fmt.Errorf("lxc-info %s: %v: %s", name, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		k, v, _ := strings.Cut(line, ":")
		switch strings.TrimSpace(k) {
		case "State":
			state = strings.TrimSpace(v)
		case "PID":
			pid, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if state == "" {
		return "", 0, fmt.Errorf("lxc-info %s: no state in %q", name, out)
	}
	return state, pid, nil
}

// containers lists the containers in an lxcpath (LXC's view, images included).
func containers(lxcPath string) []string {
	out, err := exec.Command("lxc-ls", "-P", lxcPath, "-1").Output()
	if err != nil {
		return nil
	}
	return strings.Fields(string(out))
}

// destroyContainers removes every container under an lxcpath, then the
// image caches in folders below it (clones before the images they may
// depend on), so nothing a test made outlives it.
func destroyContainers(t *testing.T, lxcPath string) {
	entries, err := os.ReadDir(lxcPath)
	if err != nil {
		return
	}
	var nested []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		sub := filepath.Join(lxcPath, e.Name())
		if _, err := os.Stat(filepath.Join(sub, "config")); err != nil {
			nested = append(nested, sub)
			continue
		}
		exec.Command("lxc-stop", "-P", lxcPath, "-n", e.Name(), "-k").Run()
		if out, err := exec.Command("lxc-destroy", "-P", lxcPath, "-n", e.Name(), "-f").CombinedOutput(); err != nil {
			t.Logf("cleanup: lxc-destroy %s: %v: %s", sub, err, out)
		}
	}
	for _, sub := range nested {
		destroyContainers(t, sub)
	}
}
