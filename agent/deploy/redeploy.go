package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/agent/deploy/githook"
	"corpus/agent/deploy/imagetree"
	"corpus/agent/deploy/manifest"
	"corpus/agent/runtime/supervisor"
	"corpus/drivers"
	"corpus/internal/names"
	"corpus/internal/rpc"
	corpusv1 "corpus/proto/corpus/v1"
)

// Releases of the current commit without a push (a config change, corpus
// deploy), restarts of the processes, and what they are.

// checkEnvRequest validates the project and environment a call names.
func checkEnvRequest(project, env string) error {
	if err := names.Validate("project", project); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	switch env {
	case corpusv1.EnvDev, corpusv1.EnvStaging, corpusv1.EnvProd:
		return nil
	}
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("environment %q", env))
}

// serving is the release an environment serves, from the coordinator's
// word.
func serving(env *corpusv1.ProjectEnv, rels []*corpusv1.Release) *corpusv1.Release {
	for _, r := range rels {
		if r.Number == env.GetCurrentRelease() && r.Status == corpusv1.ReleaseSucceeded {
			return r
		}
	}
	return nil
}

// Redeploy runs the pipeline on the serving release's commit (trigger
// config or deploy), or rolls the serving release's processes (restart).
// It serves the agent's API (NodeAgentService.Redeploy, its caller
// checked): what it says goes out through send, and the last message
// says it is done. A restart runs under ctx, a release under life (the
// agent's run), so it ends as a push does even if the caller goes away.
// Errors are connect errors.
func (p *Pipeline) Redeploy(ctx, life context.Context, m *corpusv1.AgentRedeployRequest, send func(*corpusv1.DeployOutput) error) error {
	current, err := p.redeploy(ctx, life, m, send)
	if err != nil {
		return err
	}
	// Said once the environment is free again: a caller that goes on at
	// once finds it so.
	return send(&corpusv1.DeployOutput{Done: true, Current: current})
}

func (p *Pipeline) redeploy(ctx, life context.Context, m *corpusv1.AgentRedeployRequest, send func(*corpusv1.DeployOutput) error) (uint32, error) {
	r, env := m.GetRequest(), m.GetEnv()
	if r == nil || env == nil {
		return 0, connect.NewError(connect.CodeInvalidArgument, errors.New("a redeploy without its request or environment"))
	}
	if err := checkEnvRequest(r.Project, r.Env); err != nil {
		return 0, err
	}
	key := r.Project + "/" + r.Env
	if m.Instance > 1 {
		if r.Trigger != corpusv1.TriggerRestart {
			return 0, connect.NewError(connect.CodeInvalidArgument, errors.New("an instance past the first is only restarted: its releases come from the first"))
		}
		key = Instance{Project: r.Project, Env: r.Env, Index: m.Instance}.key()
		env = instanceEnv(env, m.Instance)
	}
	if holder, ok := p.envLocks.Lock(ctx, key, fmt.Sprintf("a %s by %s since %s", r.Trigger, m.Author, time.Now().Format(time.TimeOnly))); !ok {
		return 0, connect.NewError(connect.CodeAborted, fmt.Errorf("%s is busy (%s); try again when it ends", key, holder))
	}
	var d *deploy
	defer func() { p.endLock(key, d) }()
	g, drv, err := p.guestForExec(corpusv1.InstanceGuestName(r.Project, r.Env, m.Instance))
	if err != nil {
		return 0, connect.NewError(connect.CodeFailedPrecondition, err)
	}
	cur := serving(env, m.Releases)
	if cur == nil && r.Image == "" {
		return 0, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%s serves no release yet: push first", key))
	}
	out := rpc.StreamWriter(func(b []byte) error { return send(&corpusv1.DeployOutput{Output: b}) })
	if r.Trigger == corpusv1.TriggerRestart {
		if err := p.restart(ctx, drv, g, r.Project, env, max(m.Instance, 1), cur, r.Processes, out); err != nil {
			return 0, err
		}
		return cur.Number, nil
	}
	if ref, pull, err := imagetree.ToDeploy(r.Image, cur.GetImage(), cur.GetImageDigest()); err != nil {
		return 0, connect.NewError(connect.CodeInvalidArgument, err)
	} else if ref != "" {
		man, t := imageDeploy()
		d = &deploy{p: p, ctx: life, guest: g, driver: drv, project: r.Project, env: env, man: man, tree: t,
			out: out, log: &bytes.Buffer{}, known: m.Releases, prev: cur, only: r.Only}
		d.strategy, d.keepFor = man.Strategy(r.Strategy, r.KeepSeconds)
		return p.deployImage(d, r, m.Author, ref, pull)
	}
	if p.git == nil {
		return 0, connect.NewError(connect.CodeFailedPrecondition, errors.New("this node's git endpoint is off, so it keeps no repository to deploy from"))
	}
	repo := quarantineGit{repo: filepath.Join(p.git.root, r.Project+"-"+r.Env+".git"), req: &githook.Request{}}
	start := time.Now()
	t, man, subject, err := inspectPush(repo, cur.Commit, p.maxPushBytes*4)
	if err != nil {
		return 0, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("reading %s's commit %s: %w", corpusv1.ReleaseName(cur.Number), short(cur.Commit), err))
	}
	// The deploy runs to its end even if the caller goes away, as a push
	// does; what it says is then lost, not the deploy.
	d = &deploy{p: p, ctx: life, guest: g, driver: drv, project: r.Project, env: env, tree: t, man: man,
		out: out, log: &bytes.Buffer{}, known: m.Releases, prev: cur, only: r.Only}
	d.strategy, d.keepFor = man.Strategy(r.Strategy, r.KeepSeconds)
	if err := d.resolveUser(); err != nil {
		return 0, connect.NewError(connect.CodeFailedPrecondition, err)
	}
	if err := d.begin(cur.Commit, m.Author, subject, r.Trigger); err != nil {
		return 0, connect.NewError(connect.CodeUnavailable, fmt.Errorf("recording the release: %w", err))
	}
	what := "config change"
	if r.Trigger == corpusv1.TriggerDeploy {
		what = "deploy"
		if d.strategy == strategyBlueGreen {
			what = "blue-green deploy"
		}
		if len(r.Only) > 0 {
			what += " of " + strings.Join(r.Only, ", ") + " only"
		}
	}
	d.say("-----> Deploying %s/%s %s (%s of %s, %s by %s)", r.Project, r.Env, d.name(), what, corpusv1.ReleaseName(cur.Number), short(cur.Commit), m.Author)
	code := d.finish(d.run(repo, cur.Commit))
	outcome := "succeeded"
	if code != 0 {
		outcome = "failed"
	}
	p.metrics.deployed(r.Project, outcome, time.Since(start))
	if code != 0 {
		return 0, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%s failed; %s still serves", d.name(), corpusv1.ReleaseName(cur.Number)))
	}
	return d.release.Number, nil
}

// endLock lets an environment's lock go at the end of a user's call.
// When its deploy left its end for later (retireLater: the old web
// settles while other nodes' proxies hear of the move), that end waits
// for the settle without the lock, so a push meanwhile is not kept
// waiting, then takes the lock as background work to stop what the
// deploy's processes started beside (nothing a later call started).
func (p *Pipeline) endLock(key string, d *deploy) {
	if d == nil || !d.retireLater {
		p.envLocks.Unlock(key)
		return
	}
	d.detach() // the caller has its answer: its stream may be gone
	calls := p.envLocks.Calls(key)
	p.envLocks.Unlock(key)
	go func() {
		d.gen.drained()
		if !p.envLocks.Wait(context.WithoutCancel(d.ctx), key, "the processes before a deploy retiring") {
			return
		}
		defer p.envLocks.Unlock(key)
		d.retire()
		if p.envLocks.Calls(key) == calls {
			// Pruning goes by the releases the deploy knew: a call since
			// (a rollback to one it would drop) leaves it to the next.
			d.prune()
		}
	}()
}

// restart rolls the serving release's processes (only those named, when
// some are): new ones beside the old, web on the other port, then the old
// ones stopped.
func (p *Pipeline) restart(ctx context.Context, drv drivers.Driver, g *corpusv1.Guest, project string, env *corpusv1.ProjectEnv, instance uint32, cur *corpusv1.Release, only []string, out io.Writer) error {
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	rel := corpusv1.ReleaseName(cur.Number)
	spec, ok, err := readRunSpec(ctx, drv, g.Name, project, rel)
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	if !ok {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%s of %s/%s runs no processes (a Procfile, or processes: in %s)", rel, project, env.Name, manifest.File))
	}
	if len(only) > 0 {
		var keep []supervisor.Process
		for _, name := range only {
			i := slices.IndexFunc(spec.Processes, func(p supervisor.Process) bool { return p.Name == name })
			if i < 0 {
				return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s has no process %s (it has %s)", rel, name, processNames(spec.Processes)))
			}
			keep = append(keep, spec.Processes[i])
		}
		spec.Processes = keep
	}
	running, err := p.runtime.Status(ctx, drv, g.Name, project)
	if err != nil {
		return connect.NewError(connect.CodeUnavailable, err)
	}
	gen := nextGeneration(rel, running)
	say("-----> Restarting %s of %s/%s %s on %s", processNames(spec.on(env.GetScale(), instance).Processes), project, env.Name, rel, g.Name)
	r, err := p.startGeneration(ctx, drv, g, project, env, instance, spec, gen, say)
	if err != nil {
		var es *errStart
		if errors.As(err, &es) {
			for _, l := range es.tail {
				say("       | %s", l)
			}
		}
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("restarting: %w; the processes before keep running", err))
	}
	if err := r.switchTraffic(ctx); err != nil {
		r.abort(context.WithoutCancel(ctx))
		return connect.NewError(connect.CodeUnavailable, err)
	}
	r.names = only
	r.retireOthers(context.WithoutCancel(ctx), "")
	say("-----> %s restarted", processNames(spec.Processes))
	return nil
}

func processNames(ps []supervisor.Process) string {
	n := make([]string, len(ps))
	for i, p := range ps {
		n[i] = p.Name
	}
	return strings.Join(n, ", ")
}

// Processes says how a project environment's processes are, for the
// agent's API (NodeAgentService.Processes, its caller checked). Errors
// are connect errors.
func (p *Pipeline) Processes(ctx context.Context, m *corpusv1.ListProcessesRequest) (*corpusv1.ListProcessesResponse, error) {
	if err := checkEnvRequest(m.Project, m.Env); err != nil {
		return nil, err
	}
	g, drv, err := p.guestForExec(corpusv1.InstanceGuestName(m.Project, m.Env, m.Instance))
	if err != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	}
	st, err := p.runtime.Status(ctx, drv, g.Name, m.Project)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	res := &corpusv1.ListProcessesResponse{}
	for _, proc := range st {
		ps := &corpusv1.ProcessStatus{Name: proc.Name, State: proc.State, Pid: int32(proc.PID), Restarts: int32(proc.Restarts),
			Release: proc.Release, Port: int32(proc.Port), LastExit: proc.LastExit, Command: proc.Command, Instance: max(m.Instance, 1), Guest: g.Name}
		if !proc.StartedAt.IsZero() {
			ps.StartedAt = timestamppb.New(proc.StartedAt)
		}
		res.Processes = append(res.Processes, ps)
	}
	return res, nil
}
