package robustness

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/internal/pki"
	"corpus/internal/rpc"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// group is three coordinator processes, one per lab namespace.
type group struct {
	t     *testing.T
	lab   *lab
	dir   string
	ca    string
	token string
	pool  *x509.CertPool
	http  *http.Client
	reps  []*replica
}

// replica is one coordinator process, restartable.
type replica struct {
	id   string
	ns   string
	api  string
	args []string
	log  *os.File
	cmd  *exec.Cmd
	done chan struct{}
	// paused is true between SIGSTOP and SIGCONT.
	paused bool
}

const apiPort = 7400

func startGroup(t *testing.T, l *lab, dir string) *group {
	t.Helper()
	g := &group{t: t, lab: l, dir: dir}
	caDir := filepath.Join(dir, "ca")
	if out, err := exec.Command(corpusBin, "tls", "ca-create", "--dir", caDir).CombinedOutput(); err != nil {
		t.Fatalf("corpus tls ca-create: %v\n%s", err, out)
	}
	g.ca = filepath.Join(caDir, "ca.crt")
	for i := range l.ns {
		var join []string
		for j, a := range l.addr {
			if j != i {
				join = append(join, fmt.Sprintf("%s:%d", a, apiPort))
			}
		}
		r := &replica{id: fmt.Sprintf("r%d", i+1), ns: l.ns[i], api: fmt.Sprintf("%s:%d", l.addr[i], apiPort)}
		r.args = []string{"coordinator", "--id", r.id, "--data-dir", filepath.Join(l.data[i], "state"),
			"--api-addr", r.api, "--raft-addr", fmt.Sprintf("%s:%d", l.addr[i], apiPort+1),
			"--gossip-addr", fmt.Sprintf("%s:%d", l.addr[i], apiPort+3),
			"--dns-addr", "127.0.0.1:8600", "--metrics-addr", "127.0.0.1:9464",
			"--bootstrap-expect", fmt.Sprint(len(l.ns)), "--join", strings.Join(join, ","),
			"--raft-snapshot-threshold", "256", "--raft-trailing-logs", "64", "--node-timeout", nodeTimeout.String(),
			"--cluster-ca", g.ca, "--cluster-ca-key", filepath.Join(caDir, "ca.key")}
		f, err := os.Create(filepath.Join(dir, r.id+".log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		r.log = f
		g.reps = append(g.reps, r)
		g.start(r)
	}
	t.Cleanup(func() {
		for _, r := range g.reps {
			r.kill()
		}
	})
	b, err := os.ReadFile(g.ca)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCert(b)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	g.pool = pool
	g.http = &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: pki.ClientConfig(pool, nil, pki.RoleCoordinator, ""),
		MaxIdleConnsPerHost: 32}}
	deadline := time.Now().Add(testrun.D(60 * time.Second))
	for {
		err := g.ready()
		if err == nil {
			return g
		}
		if time.Now().After(deadline) {
			g.dumpLogs()
			t.Fatalf("the group did not form within 60s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ready says whether the token exists and every replica knows a leader.
func (g *group) ready() error {
	if g.token == "" {
		b, err := os.ReadFile(filepath.Join(g.lab.data[0], "state", "ops-token"))
		if err != nil {
			return err
		}
		g.token = strings.TrimSpace(string(b))
	}
	for _, r := range g.reps {
		ctx, cancel := context.WithTimeout(context.Background(), testrun.D(2*time.Second))
		st, err := g.cluster(r).Status(ctx, connect.NewRequest(&corpusv1.StatusRequest{}))
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", r.id, err)
		}
		if st.Msg.LeaderApi == "" {
			return fmt.Errorf("%s knows no leader", r.id)
		}
	}
	return nil
}

func (g *group) start(r *replica) {
	r.cmd = exec.Command("nsenter", append([]string{"--net=/run/netns/" + r.ns, corpusBin}, r.args...)...)
	// The replica's time of day follows its clock file (stepClock).
	r.cmd.Env = append(os.Environ(), "CORPUS_FAILPOINT_CLOCK="+g.clockFile(r))
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	fmt.Fprintf(r.log, "--- start %s ---\n", time.Now().Format(time.RFC3339Nano))
	if err := r.cmd.Start(); err != nil {
		g.t.Fatalf("starting %s: %v", r.id, err)
	}
	r.done = make(chan struct{})
	r.paused = false
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(r.cmd, r.done)
}

func (g *group) clockFile(r *replica) string { return filepath.Join(g.dir, r.id+".clock") }

// stepClock steps replica i's time of day to d from the host's (0: back
// to the host's), as NTP or an operator would; the replica reads its
// clock file within 100 ms (clock.System).
func (g *group) stepClock(i int, d time.Duration) {
	path := g.clockFile(g.reps[i])
	if err := os.WriteFile(path+".new", []byte(d.String()), 0o644); err != nil {
		g.t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		g.t.Fatal(err)
	}
}

// resetClocks puts every replica's clock back on the host's.
func (g *group) resetClocks() {
	for i := range g.reps {
		g.stepClock(i, 0)
	}
}

// kill sends SIGKILL (to a paused process too) and waits for the end.
func (r *replica) kill() {
	if r.cmd == nil {
		return
	}
	select {
	case <-r.done:
	default:
		r.cmd.Process.Signal(syscall.SIGKILL)
		<-r.done
	}
}

func (r *replica) alive() bool {
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

func (r *replica) signal(sig syscall.Signal) {
	if r.alive() {
		r.cmd.Process.Signal(sig)
		r.paused = sig == syscall.SIGSTOP
	}
}

func (g *group) cluster(r *replica) corpusv1connect.ClusterServiceClient {
	return corpusv1connect.NewClusterServiceClient(g.http, "https://"+r.api, connect.WithInterceptors(rpc.Bearer(g.token)))
}

func (g *group) dns(r *replica, opts ...connect.Interceptor) corpusv1connect.DnsServiceClient {
	return corpusv1connect.NewDnsServiceClient(g.http, "https://"+r.api, connect.WithInterceptors(append([]connect.Interceptor{rpc.Bearer(g.token)}, opts...)...))
}

func (g *group) projects(r *replica, opts ...connect.Interceptor) corpusv1connect.ProjectServiceClient {
	return corpusv1connect.NewProjectServiceClient(g.http, "https://"+r.api, connect.WithInterceptors(append([]connect.Interceptor{rpc.Bearer(g.token)}, opts...)...))
}

// labProject is the project whose dev environment's config the workload
// writes and reads, and whose deploys the lab's node records. Its image
// is one only the lab's node takes, so the workload's other guests (of
// busybox) are placed nowhere.
const (
	labProject = "lab"
	labImage   = "lab-app"
)

// createProject creates labProject, through any replica, waiting out
// elections.
func (g *group) createProject() {
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(30*time.Second))
	defer cancel()
	for _, r := range g.reps {
		_, err := g.projects(r, rpc.RetryWithoutLeader(testrun.D(20*time.Second))).CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{
			Name: labProject, Env: corpusv1.EnvDev, Image: labImage}))
		if err == nil || connect.CodeOf(err) == connect.CodeAlreadyExists {
			return
		}
		g.t.Logf("creating project %s through %s: %v", labProject, r.id, err)
	}
	g.t.Fatalf("project %s could not be created", labProject)
}

func (g *group) guests(r *replica, opts ...connect.Interceptor) corpusv1connect.GuestServiceClient {
	return corpusv1connect.NewGuestServiceClient(g.http, "https://"+r.api, connect.WithInterceptors(append([]connect.Interceptor{rpc.Bearer(g.token)}, opts...)...))
}

// leader is the replica that says it leads, by its own word; -1 when
// none does within timeout.
func (g *group) leader(timeout time.Duration) int {
	deadline := time.Now().Add(testrun.D(timeout))
	for {
		for i, r := range g.reps {
			if !r.alive() || r.paused {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), testrun.D(time.Second))
			p, err := g.cluster(r).Peer(ctx, connect.NewRequest(&corpusv1.PeerRequest{}))
			cancel()
			if err == nil && p.Msg.Leader == r.id {
				return i
			}
		}
		if time.Now().After(deadline) {
			return -1
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// restartDead starts every replica that is not running and resumes
// every paused one: the state an operator would bring the group back to.
func (g *group) restartDead() {
	for _, r := range g.reps {
		if r.paused {
			r.signal(syscall.SIGCONT)
		}
		if !r.alive() {
			g.start(r)
		}
	}
}

// logCount counts the lines of every replica's log that contain s.
func (g *group) logCount(s string) int {
	n := 0
	for _, r := range g.reps {
		b, _ := os.ReadFile(r.log.Name())
		n += strings.Count(string(b), s)
	}
	return n
}

// dumpLogs prints, of every replica's log, the lines on starts,
// leadership, snapshots and node liveness, and the tail, runs of lines
// with the same message (a leader walking back a follower's log, one
// line an entry) cut to their first and last.
func (g *group) dumpLogs() {
	for _, r := range g.reps {
		b, _ := os.ReadFile(r.log.Name())
		lines := strings.Split(string(b), "\n")
		var marks []string
		for _, line := range lines {
			for _, m := range []string{"--- start", "leadership changed", "node marked down", "marking node down", "went unchecked", "entering leader state", "snapshot"} {
				if strings.Contains(line, m) {
					marks = append(marks, line)
					break
				}
			}
		}
		g.t.Logf("--- %s (%s), its starts, leadership, snapshot and liveness lines ---\n%s", r.id, r.log.Name(), strings.Join(marks, "\n"))
		tail := strings.Join(squeeze(lines), "\n")
		if len(tail) > 6000 {
			tail = tail[len(tail)-6000:]
		}
		g.t.Logf("--- %s, its log's end ---\n%s", r.id, tail)
	}
}

// squeeze cuts each run of three or more lines with the same msg= to
// its first and last, with a count between.
func squeeze(lines []string) []string {
	msg := func(l string) string {
		_, m, ok := strings.Cut(l, " msg=")
		if !ok {
			return ""
		}
		if strings.HasPrefix(m, `"`) {
			if end := strings.Index(m[1:], `"`); end >= 0 {
				return m[:end+2]
			}
		}
		m, _, _ = strings.Cut(m, " ")
		return m
	}
	var out []string
	for i := 0; i < len(lines); {
		j := i + 1
		for m := msg(lines[i]); m != "" && j < len(lines) && msg(lines[j]) == m; j++ {
		}
		if j-i >= 3 {
			out = append(out, lines[i], fmt.Sprintf("        ... %d more lines with msg=%s ...", j-i-2, msg(lines[i])), lines[j-1])
		} else {
			out = append(out, lines[i:j]...)
		}
		i = j
	}
	return out
}
