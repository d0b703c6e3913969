package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"corpus/agent/deploy/manifest"
	"corpus/agent/deploy/webcheck"
	"corpus/agent/runtime/supervisor"
	"corpus/drivers"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// Processes: a release's Procfile lines, run by the supervisor in the
// guest (agent/runtime). A deploy starts the new release's processes as a
// generation beside the old one, web on the other of the environment's two
// ports (http_port and http_port+1; the next free one when something else
// in the guest holds it), checks that web answers, points the
// routes at the new port, lets the old web's requests finish, and only
// then stops the old generation: a push never returns a 502 for a web
// process that honours PORT. Restarts and rollbacks roll the same way.

// settleOthers is how long an environment of several instances keeps an
// old web after its routes moved, before draining it: the watch reaches
// every node well within it.
const settleOthers = time.Second

// minUptime is how long a started process must stay up for its start to
// count. web is checked meanwhile, and its good answer ends its wait
// (supervisor.OpReady): only the processes nothing can ask (workers)
// wait the whole of it.
const minUptime = time.Second

// envDir holds a project's release environments and run specs in its
// guest: root-owned folder, files readable by the project's user only.
func envDir(project string) string { return projectDir(project) + "/.env" }

func envFile(project, release string) string { return envDir(project) + "/" + release + ".json" }

func runFile(project, release string) string { return envDir(project) + "/" + release + ".run.json" }

// ServingEnv names what a command run in a project's guest needs to get
// the environment the project's processes get there
// (supervisor.Environ): the serving release's folder and environment
// file. ok is false while no release serves in the guest.
func ServingEnv(ctx context.Context, drv drivers.Driver, guest, project string) (dir, env string, ok bool, err error) {
	n, err := currentRelease(ctx, drv, guest, project)
	if err != nil || n == 0 {
		return "", "", false, err
	}
	rel := corpusv1.ReleaseName(n)
	return projectDir(project) + "/releases/" + rel, envFile(project, rel), true, nil
}

// runSpec is how a release's processes run; it is kept in the guest
// beside the release's environment, so a restart or a rollback runs them
// as the deploy did.
type runSpec struct {
	Release   string               `json:"release"`
	Processes []supervisor.Process `json:"processes"`
	Grace     supervisor.Duration  `json:"grace"`
	UID       int                  `json:"uid"`
	GID       int                  `json:"gid"`
	// HealthPath is asked of web on its new port; Strict wants 2xx or
	// 3xx (a health check in corpus.yaml), else any answer below 500.
	HealthPath    string              `json:"health_path"`
	Strict        bool                `json:"strict"`
	HealthTimeout supervisor.Duration `json:"health_timeout"`
	// Root, for a release made from an image, is the image's tree in
	// the release's folder, which the processes run chrooted in, in Dir
	// (a folder of the image).
	Root string `json:"root,omitempty"`
	Dir  string `json:"dir,omitempty"`
}

func (s runSpec) web() bool {
	for _, p := range s.Processes {
		if p.Name == "web" {
			return true
		}
	}
	return false
}

// on is the spec with the processes instance runs when the environment
// is scaled so (all for an environment never scaled).
func (s runSpec) on(scale map[string]uint32, instance uint32) runSpec {
	var keep []supervisor.Process
	for _, p := range s.Processes {
		if corpusv1.RunsOn(scale, instance, p.Name) {
			keep = append(keep, p)
		}
	}
	s.Processes = keep
	return s
}

// specOf is the run spec of a deploy's release.
func (d *deploy) specOf() runSpec {
	s := runSpec{Release: d.name(), Grace: supervisor.Duration(d.man.Grace), UID: d.uid, GID: d.gid,
		HealthPath: "/", HealthTimeout: supervisor.Duration(manifest.DefaultHealthTimeout)}
	for _, name := range d.man.ProcessOrder() {
		s.Processes = append(s.Processes, supervisor.Process{Name: name, Command: d.man.Processes[name]})
	}
	if d.image != nil {
		s.Root, s.Dir = imageRoot, d.image.Workdir
		s.Processes[0].Argv = d.image.Argv
		s.Processes[0].StopSignal = int(d.image.StopSignal)
		s.Processes[0].InnerPort = d.image.Image.WebPort()
	}
	if h := d.man.Health; h != nil && h.HTTP != nil {
		s.HealthPath, s.Strict, s.HealthTimeout = h.HTTP.Path, true, supervisor.Duration(h.HTTP.Timeout)
	}
	return s
}

// writeReleaseFiles puts a release's environment (config included) and
// run spec in the guest; the environment travels on stdin, never on a
// command line, and only the project's user and root can read it.
func (p *Pipeline) writeReleaseFiles(ctx context.Context, drv drivers.Driver, guest, project string, env map[string]string, spec runSpec) error {
	b, err := json.Marshal(spec) // one line: JSON escapes newlines in strings
	if err != nil {
		return err
	}
	// One exec: the folder (the project user's), the run spec, the
	// environment.
	return p.runtime.WriteEnvAfter(ctx, drv, guest, envFile(project, spec.Release), spec.UID, spec.GID, env,
		`mkdir -p "$4"; chown "$2:$3" "$4"; chmod 700 "$4"; IFS= read -r spec; printf '%s' "$spec" > "$5.tmp"; mv -f "$5.tmp" "$5"`,
		b, envDir(project), runFile(project, spec.Release))
}

// readRunSpec reads a release's run spec from the guest; ok is false for
// a release without processes.
func readRunSpec(ctx context.Context, drv drivers.Driver, guest, project, release string) (runSpec, bool, error) {
	out, err := runIn(ctx, drv, guest, nil, "sh", "-c", `cat "$1" 2>/dev/null || true`, "sh", runFile(project, release))
	if err != nil {
		return runSpec{}, false, err
	}
	return parseRunSpec(release, out)
}

// parseRunSpec reads a release's run spec from its file's content out
// (none when empty).
func parseRunSpec(release string, out []byte) (runSpec, bool, error) {
	if len(bytes.TrimSpace(out)) == 0 {
		return runSpec{}, false, nil
	}
	var s runSpec
	if err := json.Unmarshal(out, &s); err != nil {
		return runSpec{}, false, fmt.Errorf("run spec of %s: %w", release, err)
	}
	return s, len(s.Processes) > 0, nil
}

// runIn execs argv in a guest; a non-zero exit is an error with the output.
func runIn(ctx context.Context, drv drivers.Driver, guest string, stdin io.Reader, argv ...string) ([]byte, error) {
	var out bytes.Buffer
	code, err := drv.Exec(ctx, guest, drivers.ExecRequest{Argv: argv, Stdin: stdin, Stdout: &out, Stderr: &out})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit status %d: %s", code, strings.TrimSpace(out.String()))
	}
	return out.Bytes(), err
}

// rollout is a generation started beside the serving one, not yet
// taking traffic.
type rollout struct {
	p       *Pipeline
	drv     drivers.Driver
	guest   *corpusv1.Guest
	project string
	env     string
	gen     string
	spec    runSpec
	// instance is the environment's instance the guest is (0 or 1: the
	// first); its web port is its own.
	instance uint32
	// settle is how long the old web keeps getting nothing new before it
	// is retired: other nodes' proxies balance over the environment's
	// instances too, and hear of the new port a moment later than this
	// node's. It counts from movedAt, so a deploy's roll through the
	// other instances spends it.
	settle  time.Duration
	port    int       // web's new port, 0 without web
	oldPort int32     // the port the routes had
	moved   bool      // the routes point at port
	movedAt time.Time // when they were pointed there
	say     func(format string, args ...any)
	// names limits retireOthers to these process types (a restart of
	// some); nil retires whole generations.
	names []string
	// others are the project's generations that ran beside this one
	// when it started, with their releases: what retireOthers stops.
	// What starts later (the next deploy's, once the environment's lock
	// let go) is not this rollout's to retire.
	others map[string]string
}

// webPorts are the ports a new web process may take, best first: the
// environment's http_port and those after it, except the one web serves
// on now. Two alternate, unless something else in the guest holds one.
func webPorts(env *corpusv1.ProjectEnv) (candidates []int, current int32) {
	p := env.GetHttpPort()
	if p == 0 {
		p = 80
	}
	current = p
	if env.GetWebPort() != 0 {
		current = env.WebPort
	}
	for port := int(p); port < int(p)+10 && port <= 65535; port++ {
		if int32(port) != current {
			candidates = append(candidates, port)
		}
	}
	return candidates, current
}

// errStart is a start that failed, with the process's last output.
type errStart struct {
	msg  string
	tail []string
}

func (e *errStart) Error() string { return e.msg }

// startGeneration starts a release's processes as generation gen and,
// when there is a web process, waits until it answers on its new port.
func (p *Pipeline) startGeneration(ctx context.Context, drv drivers.Driver, g *corpusv1.Guest, project string, env *corpusv1.ProjectEnv, instance uint32, spec runSpec, gen string, say func(string, ...any)) (*rollout, error) {
	spec = spec.on(env.GetScale(), instance)
	r := &rollout{p: p, drv: drv, guest: g, project: project, env: env.GetName(), instance: instance, gen: gen, spec: spec, say: say}
	if len(env.GetInstances()) > 0 {
		r.settle = settleOthers
	}
	procs := append([]supervisor.Process(nil), spec.Processes...)
	if spec.web() {
		// The supervisor started (if need be) and asked for a port by
		// one run of it.
		var ports []int
		ports, r.oldPort = webPorts(env)
		res, err := p.runtime.EnsureCall(ctx, drv, g.Name, supervisor.Request{Op: supervisor.OpFreePort, Ports: ports})
		if err != nil {
			return nil, err
		}
		if res.Error != "" {
			return nil, fmt.Errorf("finding a port for web: %s", res.Error)
		}
		r.port = res.Port
	} else if err := p.runtime.Ensure(ctx, drv, g.Name); err != nil {
		return nil, err
	}
	for i := range procs {
		if procs[i].Name == "web" {
			procs[i].Port = r.port
		}
	}
	for _, proc := range procs {
		desc := proc.Command
		switch {
		case proc.Port != 0 && proc.InnerPort != 0 && spec.Root != "":
			desc += fmt.Sprintf(" (PORT=%d in a network of its own, reached on %d)", proc.InnerPort, proc.Port)
		case proc.Port != 0:
			desc += " (PORT=" + strconv.Itoa(proc.Port) + ")"
		}
		say("       %s: %s", proc.Name, desc)
	}
	// The supervisor answers once every process stayed up minUptime or,
	// for web, answered its check, which runs meanwhile.
	started := make(chan error, 1)
	webCtx, cancelWeb := context.WithCancel(ctx)
	defer cancelWeb()
	go func() {
		dir, root := projectDir(project)+"/releases/"+spec.Release, ""
		if spec.Root != "" {
			dir, root = spec.Dir, dir+"/"+spec.Root
		}
		res, err := p.runtime.Call(ctx, drv, g.Name, supervisor.Request{Op: supervisor.OpStart, Generation: &supervisor.Generation{
			Project: project, ID: gen, Release: spec.Release, Dir: dir, Root: root,
			UID: spec.UID, GID: spec.GID, EnvFile: envFile(project, spec.Release), Processes: procs,
			Grace: spec.Grace, MinUptime: supervisor.Duration(minUptime),
		}})
		if err == nil && res.Error != "" {
			err = &errStart{msg: res.Error, tail: res.Output}
		}
		if err != nil {
			cancelWeb() // no use asking a web that did not start
		} else {
			r.others = map[string]string{}
			for _, st := range res.Processes {
				if st.Generation != gen {
					r.others[st.Generation] = st.Release
				}
			}
		}
		started <- err
	}()
	var webErr error
	if r.port != 0 {
		if webErr = r.checkWeb(webCtx); webErr == nil {
			// web answered: its minimum uptime has no more to prove. A
			// supervisor older than the ready operation refuses it and
			// the start answers after the minimum as before.
			res, err := p.runtime.Call(ctx, drv, g.Name, supervisor.Request{Op: supervisor.OpReady, Project: project, ID: gen, Names: []string{"web"}})
			if err == nil && res.Error != "" {
				err = errors.New(res.Error)
			}
			if err != nil {
				p.logger.Debug("marking web ready", "project", project, "generation", gen, "error", err)
			}
		}
	}
	if err := <-started; err != nil {
		return nil, err
	}
	if webErr != nil {
		r.abort(context.WithoutCancel(ctx))
		return nil, webErr
	}
	return r, nil
}

// checkWeb asks the new web process until it answers.
func (r *rollout) checkWeb(ctx context.Context) error {
	if r.guest.Address == "" {
		return errors.New("the guest has no address to check web on")
	}
	url := "http://" + net.JoinHostPort(r.guest.Address, strconv.Itoa(r.port)) + r.spec.HealthPath
	timeout := time.Duration(r.spec.HealthTimeout)
	if timeout <= 0 {
		timeout = manifest.DefaultHealthTimeout
	}
	accept := func(code int) bool { return code < 500 }
	if r.spec.Strict {
		accept = func(code int) bool { return code < 400 }
	}
	status, err := webcheck.Wait(ctx, url, timeout, accept)
	if err != nil {
		return err
	}
	r.say("       GET %s: %s", url, status)
	return nil
}

// switchTraffic points the environment's routes at the new web port and
// waits until this node's proxy sends new requests there.
func (r *rollout) switchTraffic(ctx context.Context) error {
	if r.port == 0 || int32(r.port) == r.oldPort {
		return nil
	}
	if err := r.p.setWebPort(ctx, r.project, r.env, r.instance, int32(r.port)); err != nil {
		return fmt.Errorf("pointing the routes at port %d: %w", r.port, err)
	}
	r.markMoved()
	return r.waitMoved()
}

// settling says whether the routes moved from the old web less than
// settle ago: retiring it waits for the rest.
func (r *rollout) settling() bool {
	return r != nil && r.moved && time.Since(r.movedAt) < r.settle
}

// markMoved records that the routes point at the new port from now.
func (r *rollout) markMoved() { r.moved, r.movedAt = true, time.Now() }

// waitMoved waits until this node's proxy sends new requests to the new
// web port rather than the old one.
func (r *rollout) waitMoved() error {
	old := net.JoinHostPort(r.guest.Address, strconv.Itoa(int(r.oldPort)))
	if r.p.proxy == nil || r.guest.Address == "" {
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.p.proxyTargets(old) {
		if time.Now().After(deadline) {
			return errors.New("this node's proxy did not take the new port within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.say("       routes -> port %d", r.port)
	return nil
}

func (p *Pipeline) setWebPort(ctx context.Context, project, env string, instance uint32, port int32) error {
	_, err := coordCall(p, func(c corpusv1connect.AgentServiceClient) (*connect.Response[corpusv1.SetWebPortResponse], error) {
		return c.SetWebPort(ctx, connect.NewRequest(&corpusv1.SetWebPortRequest{Project: project, Env: env, Port: port, Instance: instance}))
	})
	return err
}

// proxyTargets says whether a route of this node's proxy still sends
// requests to target.
func (p *Pipeline) proxyTargets(target string) bool {
	for _, hr := range p.proxy.Routes().HTTP {
		for _, t := range hr.Targets {
			if t == target {
				return true
			}
		}
	}
	return false
}

// retireOthers stops the project's generations that ran beside this
// one when it started, once the requests the old web was serving have
// finished (up to the grace period); those of release standby, which
// stands by (a blue-green deploy's release before), keep running and
// serving.
//
// The supervisor's answer to the start listed them: they are not asked
// for again (a generation another call stopped since is no work for the
// supervisor's stop).
func (r *rollout) retireOthers(ctx context.Context, standby string) {
	if standby == "" {
		r.drained()
	}
	for _, gen := range slices.Sorted(maps.Keys(r.others)) {
		if standby != "" && r.others[gen] == standby {
			continue
		}
		res, err := r.p.runtime.Call(ctx, r.drv, r.guest.Name, supervisor.Request{Op: supervisor.OpStop, Project: r.project, ID: gen, Names: r.names})
		if err == nil && res.Error != "" {
			err = errors.New(res.Error)
		}
		if err != nil {
			r.say("       warning: stopping the processes of %s: %v", gen, err)
			continue
		}
		r.say("       stopped the processes of %s", gen)
	}
}

// drained waits, once the routes moved, until the old web has had
// settle to get nothing new and has answered what this node's proxy had
// in flight to it (up to the grace period).
func (r *rollout) drained() {
	if !r.moved {
		return
	}
	time.Sleep(r.settle - time.Since(r.movedAt)) // none when spent
	r.p.waitInFlight(net.JoinHostPort(r.guest.Address, strconv.Itoa(int(r.oldPort))), time.Duration(r.spec.Grace))
}

// waitInFlight waits until the web at target (host:port), which the
// routes left, has answered the requests this node's proxy has in
// flight to it, up to grace.
func (p *Pipeline) waitInFlight(target string, grace time.Duration) {
	if p.proxy == nil {
		return
	}
	deadline := time.Now().Add(grace)
	for p.proxy.InFlight(target) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
}

// abort stops the new generation and points the routes back.
func (r *rollout) abort(ctx context.Context) {
	if r.moved && r.oldPort != 0 {
		if err := r.p.setWebPort(ctx, r.project, r.env, r.instance, r.oldPort); err != nil {
			r.say("       warning: pointing the routes back at port %d: %v", r.oldPort, err)
		}
	}
	res, err := r.p.runtime.Call(ctx, r.drv, r.guest.Name, supervisor.Request{Op: supervisor.OpStop, Project: r.project, ID: r.gen})
	if err == nil && res.Error != "" {
		err = errors.New(res.Error)
	}
	if err != nil {
		r.say("       warning: stopping the new processes: %v", err)
	}
}

// stopProcesses ends every process of a project in a guest (a project
// that no longer declares any).
func (p *Pipeline) stopProcesses(ctx context.Context, drv drivers.Driver, guest, project string) error {
	st, err := p.runtime.Status(ctx, drv, guest, project)
	if err != nil || len(st) == 0 {
		return err
	}
	res, err := p.runtime.Call(ctx, drv, guest, supervisor.Request{Op: supervisor.OpStop, Project: project})
	if err == nil && res.Error != "" {
		err = errors.New(res.Error)
	}
	return err
}

// stopGeneration ends one generation of a project's processes, if the
// guest runs it.
func (p *Pipeline) stopGeneration(ctx context.Context, drv drivers.Driver, guest, project, gen string) error {
	st, err := p.runtime.Status(ctx, drv, guest, project)
	if err != nil {
		return err
	}
	for _, proc := range st {
		if proc.Generation == gen {
			return p.stopRunning(ctx, drv, guest, project, gen)
		}
	}
	return nil
}

// stopRunning ends generation gen of a project's processes, which the
// guest runs (the caller asked it).
func (p *Pipeline) stopRunning(ctx context.Context, drv drivers.Driver, guest, project, gen string) error {
	res, err := p.runtime.Call(ctx, drv, guest, supervisor.Request{Op: supervisor.OpStop, Project: project, ID: gen})
	if err == nil && res.Error != "" {
		err = errors.New(res.Error)
	}
	return err
}

// nextGeneration names a new generation of release: the release's name,
// or with a count when that runs already ("r4.2").
func nextGeneration(release string, running []supervisor.Status) string {
	used := map[string]bool{}
	for _, p := range running {
		used[p.Generation] = true
	}
	if !used[release] {
		return release
	}
	for n := 2; ; n++ {
		if g := release + "." + strconv.Itoa(n); !used[g] {
			return g
		}
	}
}
