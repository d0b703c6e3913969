package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"corpus/drivers/libvirt/libvirttest"
	"corpus/internal/procfs"
	"corpus/internal/testrun"
)

// corpusBin is the binary under test, built once in TestMain.
var corpusBin string

// enterNodeNS runs a command in a node's network namespace (see the script).
var enterNodeNS, _ = filepath.Abs(filepath.Join("..", "enter-node-ns"))

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(helperMain(spec))
	}
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	defer libvirttest.Stop() // a libvirtd the VM tests had to start
	if why := skipReason(); why != "" {
		fmt.Fprintln(os.Stderr, "e2e: skipping:", why)
		// Still run, so each test reports its own skip.
		return m.Run()
	}
	if dir := os.Getenv("CORPUS_E2E_BIN_DIR"); dir != "" {
		// Built beforehand (test/run builds them once for all its
		// test processes).
		corpusBin = filepath.Join(dir, "corpus")
		for _, f := range []string{corpusBin, filepath.Join(dir, "corpus-supervisor")} {
			if _, err := os.Stat(f); err != nil {
				fmt.Fprintln(os.Stderr, "e2e: CORPUS_E2E_BIN_DIR:", err)
				return 1
			}
		}
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "corpus-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	race, err := daemonRace()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if err := buildBinaries(dir, race); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	corpusBin = filepath.Join(dir, "corpus")
	return m.Run()
}

// buildBinaries builds corpus (with the race detector when race) and,
// beside it where the agent looks, the process supervisor: static, as it
// runs inside guests (no cgo, hence no -race).
func buildBinaries(dir string, race bool) error {
	args := []string{"build", "-o", filepath.Join(dir, "corpus")}
	if race {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "corpus/cmd/corpus")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building corpus: %w", err)
	}
	build = exec.Command("go", "build", "-ldflags", "-s -w", "-o", filepath.Join(dir, "corpus-supervisor"), "corpus/cmd/corpus-supervisor")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building corpus-supervisor: %w", err)
	}
	return nil
}

// daemonRace says whether the corpus daemons under test are built with
// the race detector: as the tests themselves are, unless CORPUS_E2E_RACE
// says otherwise. Instrumented daemons run 2.5 to 4 times slower (a git
// push deploy takes 37 s instead of 9 s here), so CI keeps them for the
// tests whose point is concurrency between the daemons (the coordinator
// group, failover, outages, the shell relay) and runs the others with
// plain builds; every package's own tests still run under -race.
func daemonRace() (bool, error) {
	switch v := os.Getenv("CORPUS_E2E_RACE"); v {
	case "":
		return raceEnabled, nil
	case "0", "1":
		return v == "1", nil
	default:
		return false, fmt.Errorf("CORPUS_E2E_RACE=%q: want 0 or 1", v)
	}
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

// proc is a corpus daemon started by a test.
type proc struct {
	name string
	bin  string // the corpus binary it runs
	ns   string // network namespace it runs in; "" for the test's own
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

// startIn runs corpus inside network namespace ns ("" for the test's
// own). `ip netns exec` execs corpus, so the PID is corpus's.
func startIn(t *testing.T, ns, name string, env []string, args ...string) *proc {
	t.Helper()
	return startBinIn(t, corpusBin, ns, name, env, args...)
}

// startBinIn is startIn with another corpus binary (a previous release's).
func startBinIn(t *testing.T, bin, ns, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, bin: bin, ns: ns, env: env, args: args, log: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	if ns != "" {
		p.cmd = exec.Command(enterNodeNS, append([]string{ns, bin}, args...)...)
	}
	// GOTRACEBACK=all: a daemon that crashes, or is asked for its
	// stacks (quit), shows every goroutine.
	p.cmd.Env = append(append(os.Environ(), "GOTRACEBACK=all"), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	// Own process group: a signal to the test does not reach the daemon
	// by accident, and the daemon's children are not ours to kill.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if t.Failed() {
			p.quit() // its goroutines in its log: what it waited on
		}
		p.kill()
		switch {
		case len(args) > 0 && args[0] == "agent":
			stopProxy(t, agentStateDir(args))
		case len(args) > 0 && args[0] == "dev" && agentStateDir(args) != "":
			// corpus dev's agent keeps its state in STATE/agent.
			stopProxy(t, filepath.Join(agentStateDir(args), "agent"))
		}
		// A race-built daemon reports a data race on its stderr and
		// goes on: the test fails on it here.
		if log := p.log.String(); strings.Contains(log, "WARNING: DATA RACE") {
			t.Errorf("%s reported a data race:\n%s", name, log)
			return
		}
		if t.Failed() || os.Getenv("CORPUS_E2E_LOGS") == "always" {
			t.Logf("--- log of %s ---\n%s", name, p.log.String())
		}
	})
	return p
}

// agentStateDir is the state folder of an agent started with args: its
// --state-dir, or its --config file's state-dir.
func agentStateDir(args []string) string {
	for i, a := range args {
		switch {
		case a == "--state-dir" && i+1 < len(args):
			return args[i+1]
		case a == "--config" && i+1 < len(args):
			b, _ := os.ReadFile(args[i+1])
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(strings.Replace(line, "state_dir:", "state-dir:", 1), "state-dir:"); ok {
					return strings.Trim(strings.TrimSpace(v), `"'`)
				}
			}
		}
	}
	return ""
}

// stopProxy ends the proxy process an agent started in stateDir, which
// outlives the agent by design, by the PID it wrote (checked against
// its command line), or, when it wrote none yet, by its command line.
func stopProxy(t *testing.T, stateDir string) {
	if stateDir == "" {
		return
	}
	dir := filepath.Join(stateDir, "proxy")
	pid := 0
	if b, err := os.ReadFile(filepath.Join(dir, "proxy.pid")); err == nil {
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if pid <= 1 || err != nil || !strings.Contains(string(cmdline), "proxy\x00--dir\x00"+dir+"\x00") {
		if pid = proxyOf(dir); pid == 0 {
			return
		}
	}
	syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 200; i++ {
		if !procfs.Running(pid) {
			return // gone, or dead and waiting for its reaper
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("proxy process %d of %s did not end", pid, stateDir)
}

// proxyOf is the PID of a proxy process serving dir, 0 when none runs.
func proxyOf(dir string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && strings.Contains(string(b), "proxy\x00--dir\x00"+dir+"\x00") {
			return pid
		}
	}
	return 0
}

func (p *proc) kill() {
	select {
	case <-p.done:
	default:
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
}

// quit ends a running daemon with SIGQUIT, on which the Go runtime
// writes every goroutine's stack to its log, and waits a while for it.
func (p *proc) quit() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.done:
	case <-time.After(testrun.D(5 * time.Second)):
	}
}

// restart starts a stopped or killed daemon again with the same arguments.
func (p *proc) restart(t *testing.T) *proc {
	t.Helper()
	p.kill()
	return startBinIn(t, p.bin, p.ns, p.name, p.env, p.args...)
}

// stop sends SIGINT and waits for a clean exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(testrun.D(30 * time.Second)):
		t.Fatalf("%s did not stop within 30s of SIGINT", p.name)
	}
}

// cluster is a coordinator and its agents, all real processes, each in
// its own network namespace of the test's lab (see netLab).
type cluster struct {
	t       *testing.T
	lab     *netLab
	dir     string
	api     string
	token   string
	cfgHome string
	// ca is the cluster CA certificate file the CLI trusts.
	ca     string
	coord  *proc
	agents map[string]*agentProc
	// bin is the corpus binary agents start with ("" for corpusBin).
	bin string
}

type agentProc struct {
	*proc
	name     string
	node     *labNode
	stateDir string
	apiAddr  string
	lxc      lxcHost
}

func newCluster(t *testing.T, coordinatorArgs ...string) *cluster {
	t.Helper()
	requireE2E(t)
	dir := tempDir(t)
	lab := newNetLab(t)
	c := &cluster{t: t, lab: lab, dir: dir, api: "127.0.0.1:7400", cfgHome: filepath.Join(dir, "cfg"), agents: map[string]*agentProc{},
		ca: filepath.Join(dir, "coordinator", "tls", "ca.crt")}
	c.coord = startIn(t, lab.ctl, "coordinator", nil, append([]string{"coordinator",
		"--data-dir", filepath.Join(dir, "coordinator"), "--api-addr", "0.0.0.0:7400", "--raft-addr", "127.0.0.1:7401",
		"--dns-addr", "0.0.0.0:8600", "--gossip-addr", lab.lan + ":7403"}, coordinatorArgs...)...)
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
	t.Cleanup(func() {
		// A loop device bound to an image under dir after the agents'
		// own cleanup (a late attach) would outlive the folder.
		detachVolumes(t, dir)
		os.RemoveAll(dir)
	})
	return dir
}

// addAgent enrolls and starts an agent in a namespace of its own, with
// its own state folder and lxcpath.
func (c *cluster) addAgent(name string, extra ...string) *agentProc {
	c.t.Helper()
	return c.addAgentEnv(name, nil, extra...)
}

// addAgentEnv is addAgent with extra environment variables.
func (c *cluster) addAgentEnv(name string, env []string, extra ...string) *agentProc {
	c.t.Helper()
	tok := strings.TrimSpace(c.mustCLI("node", "token"))
	node := c.lab.addNode(name)
	a := &agentProc{name: name, node: node, stateDir: filepath.Join(c.dir, "agent-"+name), apiAddr: node.addr + ":7402"}
	a.lxc = lxcHost{ns: node.ns, path: filepath.Join(a.stateDir, "lxc")}
	// Registered after the namespace's cleanup, so it runs first.
	c.t.Cleanup(func() {
		a.lxc.destroyAll(c.t)
		unmountUnder(c.t, a.stateDir)
		detachVolumes(c.t, filepath.Join(a.stateDir, "volumes", "images"))
		detachVolumes(c.t, filepath.Join(a.stateDir, "lxc", ".disks")) // guests' root disks
	})
	args := append([]string{"--join-token", tok}, extra...)
	a.proc = c.startAgentEnv(a, env, args...)
	c.agents[name] = a
	c.waitNodeReady(name)
	return a
}

// waitNodeReady waits until the cluster has node name ready.
func (c *cluster) waitNodeReady(name string) { c.t.Helper(); c.waitNodeStatus(name, "ready") }

// waitAgentBack waits, after agent a was started again, until its new
// process joined the gossip pool and then until its node is ready. Its
// predecessor may be found dead before the new process joined (the node
// is then marked down, and ready again at the new process's report) but
// not after: the coordinators take that death for the predecessor's
// alone. So once the new process joined, ready means ready.
func (c *cluster) waitAgentBack(a *agentProc) {
	c.t.Helper()
	eventually(c.t, 30*time.Second, "agent "+a.name+" joining the gossip pool", func() error {
		if !strings.Contains(a.log.String(), "joined the coordinators' gossip") {
			return errors.New("not yet")
		}
		return nil
	})
	c.waitNodeReady(a.name)
}

// waitNodeDown waits until the cluster has node name down. A test that
// keeps an agent killed for a while (to build an image in its state
// folder) waits for it before starting the agent again: until then the
// node shows its killed agent's last report (ready), and it may yet be
// found down a moment after the new agent started.
func (c *cluster) waitNodeDown(name string) { c.t.Helper(); c.waitNodeStatus(name, "down") }

func (c *cluster) waitNodeStatus(name, status string) {
	c.t.Helper()
	eventually(c.t, 30*time.Second, "node "+name+" "+status, func() error {
		var n struct {
			Node struct {
				Node struct{ Status string } `json:"node"`
			} `json:"node"`
		}
		if err := c.json(&n, "node", "show", name); err != nil {
			return err
		}
		if n.Node.Node.Status != status {
			return fmt.Errorf("status %q", n.Node.Node.Status)
		}
		return nil
	})
}

// waitAgentListening waits until agent a's API accepts connections from
// the coordinator's side: after a restart, the sign that the new process
// is the one there. The node's status is not: the coordinator keeps the
// killed agent's last report (node ready, guests running) until the
// heartbeat deadline or gossip finds it dead.
func (c *cluster) waitAgentListening(a *agentProc) {
	c.t.Helper()
	ns := ""
	if c.lab != nil {
		ns = c.lab.ctl
	}
	eventually(c.t, 30*time.Second, "agent "+a.name+" listening at "+a.apiAddr, func() error {
		conn, err := dialIn(ns)(context.Background(), "tcp", a.apiAddr)
		if err != nil {
			return err
		}
		return conn.Close()
	})
}

func (c *cluster) startAgent(a *agentProc, args ...string) *proc {
	return c.startAgentEnv(a, nil, args...)
}

// startAgentEnv starts an agent with extra environment variables
// (failpoints, say).
func (c *cluster) startAgentEnv(a *agentProc, env []string, args ...string) *proc {
	base := []string{"agent", "--state-dir", a.stateDir, "--name", a.name,
		"--api-addr", a.apiAddr, "--resync-interval", "2s", "--report-interval", "1s", "--stop-timeout", "3s"}
	if !slices.Contains(args, "--coordinator") {
		base = append(base, "--coordinator", a.node.ctlSide+":7400")
	}
	bin := c.bin
	if bin == "" {
		bin = corpusBin
	}
	return startBinIn(c.t, bin, a.node.ns, "agent "+a.name, env, append(base, args...)...)
}

// restartAgent starts a killed agent again from its state folder.
func (c *cluster) restartAgent(a *agentProc) {
	c.t.Helper()
	a.proc = c.startAgent(a)
}

// cli runs a client command against the cluster, from the coordinator's
// namespace.
func (c *cluster) cli(args ...string) (stdout, stderr string, code int) {
	return c.cliStdin("", args...)
}

// cliIn runs a client command in namespace ns with extra environment
// variables.
func (c *cluster) cliIn(ns string, env []string, args ...string) (stdout, stderr string, code int) {
	return c.cliInput(ns, env, "", args...)
}

// cliStdin runs a client command against the cluster as cli does, with
// stdin as its standard input.
func (c *cluster) cliStdin(stdin string, args ...string) (stdout, stderr string, code int) {
	ns := "" // a cluster without a lab runs on the test's own loopback
	if c.lab != nil {
		ns = c.lab.ctl
	}
	return c.cliInput(ns, []string{"XDG_CONFIG_HOME=" + c.cfgHome, "CORPUS_ENV=", "CORPUS_ADDR=", "CORPUS_TOKEN=", "CORPUS_CA_CERT="}, stdin,
		append([]string{"--address", c.api, "--token", c.token, "--ca-cert", c.ca}, args...)...)
}

// cliInput runs a client command in namespace ns with extra environment
// variables and stdin as its standard input.
func (c *cluster) cliInput(ns string, env []string, stdin string, args ...string) (stdout, stderr string, code int) {
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(5*time.Minute))
	defer cancel()
	cmd := exec.CommandContext(ctx, corpusBin, args...)
	if ns != "" {
		cmd = exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/" + ns, corpusBin}, args...)...)
	}
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &o, &e
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
		ID      string `json:"id"`
		NodeID  string `json:"node_id"`
		IDRange uint32 `json:"id_range"`
		Spec    struct {
			Image string `json:"image"`
		} `json:"spec"`
		Observed struct {
			State   string `json:"state"`
			Pid     string `json:"pid"`
			Message string `json:"message"`
		} `json:"observed"`
	} `json:"guest"`
	NodeName string `json:"node_name"`
	Status   string `json:"status"`
}

// String is where the guest stands, as a wait reports it: its status,
// node and the agent's last message, which changes while the guest is
// made (an image building, a rootfs copying): the progress
// testrun.Wait waits on.
func (v guestView) String() string {
	s := fmt.Sprintf("%s on %q", v.Status, v.NodeName)
	if m := v.Guest.Observed.Message; m != "" {
		s += ": " + m
	}
	return s
}

func (c *cluster) guest(name string) guestView {
	c.t.Helper()
	var v guestView
	if err := c.json(&v, "guest", "show", name); err != nil {
		c.t.Fatal(err)
	}
	return v
}

// eventually retries f until it returns nil: see testrun.Wait, which
// scales timeout by the runner's factor and keeps waiting while f's
// error shows progress.
func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	testrun.Wait(t, timeout, what, f)
}

// lxcHost is an lxcpath seen from the network namespace its agent runs
// in: LXC reaches a container's monitor through an abstract socket, which
// is per network namespace.
type lxcHost struct {
	ns   string // "" for the test's own
	path string
}

// command builds an lxc tool invocation inside the host's namespace.
func (h lxcHost) command(tool string, args ...string) *exec.Cmd {
	args = append([]string{"-P", h.path}, args...)
	if h.ns == "" {
		return exec.Command(tool, args...)
	}
	return exec.Command("nsenter", append([]string{"--net=/run/netns/" + h.ns, tool}, args...)...)
}

// info returns a container's state and init PID as LXC's own tool sees it.
func (h lxcHost) info(name string) (state string, pid int, err error) {
	out, err := h.command("lxc-info", "-n", name, "-s", "-p", "-H").CombinedOutput()
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

// list returns the containers of the lxcpath (LXC's view).
func (h lxcHost) list() []string {
	out, err := h.command("lxc-ls", "-1").Output()
	if err != nil {
		return nil
	}
	return strings.Fields(string(out))
}

// destroyAll removes every container under the lxcpath, then the image
// caches in folders below it (clones before the images they may depend
// on), so nothing a test made outlives it.
func (h lxcHost) destroyAll(t *testing.T) {
	entries, err := os.ReadDir(h.path)
	if err != nil {
		return
	}
	var nested []string
	for _, e := range entries {
		// Guests' image mounts hold no containers (unmountUnder
		// removes them).
		if !e.IsDir() || e.Name() == ".image-mounts" {
			continue
		}
		sub := filepath.Join(h.path, e.Name())
		if _, err := os.Stat(filepath.Join(sub, "config")); err != nil {
			nested = append(nested, sub)
			continue
		}
		h.command("lxc-stop", "-n", e.Name(), "-k").Run()
		if out, err := h.command("lxc-destroy", "-n", e.Name(), "-f").CombinedOutput(); err != nil {
			t.Logf("cleanup: lxc-destroy %s: %v: %s", sub, err, out)
		}
	}
	for _, sub := range nested {
		lxcHost{ns: h.ns, path: sub}.destroyAll(t)
	}
}

// detachVolumes detaches the loop devices backed by the volume images in
// dir, once nothing mounts them any more (the agent and its guests are
// gone, and with them the mount namespace that held the mounts).
// unmountUnder unmounts (lazily) whatever is still mounted under dir,
// deepest first: a killed agent's guests' disks and volumes.
func unmountUnder(t *testing.T, dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
			t.Logf("cleanup: unmounting %s: %v", p, err)
		}
	}
}

func detachVolumes(t *testing.T, dir string) {
	// Every loop device backed by a file under dir, the deleted ones too
	// (an image removed while its device was still bound).
	out, err := exec.Command("losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE").Output()
	if err != nil {
		t.Logf("cleanup: losetup --list: %v", err)
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		dev, back := f[0], strings.TrimSuffix(strings.Join(f[1:], " "), " (deleted)")
		if !strings.HasPrefix(back, dir+"/") {
			continue
		}
		for range 50 { // the namespace holding the mount may take a moment to go
			if err = exec.Command("losetup", "-d", dev).Run(); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Logf("cleanup: losetup -d %s (%s): %v", dev, back, err)
		}
	}
}
