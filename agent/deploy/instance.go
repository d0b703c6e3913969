package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/agent/cache"
	"corpus/agent/deploy/githook"
	"corpus/drivers"
	"corpus/internal/rpc"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// Instances past the first. A push (or a redeploy) runs on the node of
// the environment's first instance, which records the release; once it
// serves there, the "roll" step sets each other instance's release in
// the state, a few at a time (max_parallel), and waits until that
// instance's agent says it serves it. That agent (SyncInstance, run by
// the agent whenever the desired state changes) fetches the commit's
// objects from the first node's repository (ReleaseSource, relayed by the
// coordinator) into its own, or pulls a release's image by the digest it
// recorded (never its tag), and runs the same pipeline on its guest as
// a redeploy does, with the release and config the coordinator gives
// (InstanceRelease): build, start beside the old processes, check, switch,
// point its share of the routes at the new port. A release the guest
// already holds (a rollback) only starts and switches. Each instance runs
// the process types its index runs (corpusv1.RunsOn). Every instance
// builds for itself: install steps may change the guest beyond the
// release's folder, and each guest then holds what a restart or a
// rollback needs without its first instance.

// Instance is a project instance past the first on this node, as the
// watch says.
type Instance struct {
	GuestID string
	Guest   string
	Project string
	Env     string
	Index   uint32
	// Release is what it should serve (0: nothing yet).
	Release uint32
	Scale   map[string]uint32
	// Staged is started beside Release (a blue-green deploy); Standby
	// keeps running until StandbyUntil.
	Staged       uint32
	Standby      uint32
	StandbyUntil time.Time
	// From is what the instance served when its last sync staged
	// Release (0: it did not): the sync expects to switch from it, and
	// does so in the exec that looks (a rolling deploy's switch).
	From uint32
}

func (in Instance) key() string { return fmt.Sprintf("%s/%s#%d", in.Project, in.Env, in.Index) }

// ErrBusy: the instance is being deployed already.
var ErrBusy = errors.New("the instance is being deployed already")

// Outcome is what an instance serves and stages after a sync.
type Outcome struct {
	Serving uint32
	// Staged runs beside (a blue-green deploy), web on StagedPort.
	Staged     uint32
	StagedPort int32
	// TidyAt, when set, asks for another sync then: processes the
	// instance no longer needs wait until then to stop (see tidy).
	TidyAt time.Time
}

// SyncInstance makes an instance serve its release with the processes
// its index runs, and start its staged release beside. It returns what
// serves and stands staged there afterwards; an error says why not what
// it should (prefixed with the release's name). serving hears of the
// release as soon as it takes the traffic, before the old processes are
// drained and stopped (which the deploy rolling through the instances
// need not wait for). The first instance only follows a switch (back) and
// retires a standby that expired: its deploys are the pipeline's.
func (p *Pipeline) SyncInstance(ctx context.Context, in Instance, serving func(uint32)) (Outcome, error) {
	g, drv, err := p.guestForExec(in.Guest)
	if err != nil {
		return Outcome{}, err
	}
	key := in.key()
	if in.Index <= 1 {
		// The environment's own lock, which its deploys take. Most
		// passes here come after a deploy or a switch that did all
		// there was to do: a look without the lock finds that, and a
		// deploy asked for meanwhile is not kept waiting.
		if idle, cur, err := p.firstIdle(ctx, drv, g.Name, in); err != nil || idle {
			return Outcome{Serving: cur}, err
		}
		key = in.Project + "/" + in.Env
	}
	if !p.envLocks.TryBackground(key, "an instance's sync") {
		return Outcome{}, ErrBusy
	}
	defer p.envLocks.Unlock(key)
	from := in.From
	if in.Index <= 1 || from == in.Release {
		from = 0
	}
	seen, err := p.look(ctx, drv, g.Name, in.Project, from, in.Release, in.Release, in.Staged)
	if err != nil {
		return Outcome{}, err
	}
	cur, switched, running := seen.cur, seen.switched, seen.running
	out := Outcome{Serving: cur}
	if switched && !runs(running, in.Release) {
		// Its staged processes are gone: it deploys as below.
		if err := restoreCurrent(ctx, drv, g.Name, in.Project, corpusv1.ReleaseName(in.Release), cur); err != nil {
			return out, fmt.Errorf("pointing current back at %s: %w", corpusv1.ReleaseName(cur), err)
		}
		switched = false
	}
	switch {
	case in.Release != 0 && cur != in.Release && runs(running, in.Release):
		// A switch (back): the release's processes run already, staged
		// or standing by; current moves (the look did that when it was
		// the switch expected), and the routes if they are not at its
		// web yet (a switch moved them already).
		if !switched {
			if err := switchCurrent(ctx, drv, g.Name, in.Project, corpusv1.ReleaseName(in.Release)); err != nil {
				return out, err
			}
		}
		if port := webPort(running, in.Release); port != 0 {
			if err := p.setWebPort(ctx, in.Project, in.Env, in.Index, port); err != nil {
				return out, err
			}
			p.left.add(g.Id, running, cur)
		}
		out.Serving = in.Release
		serving(in.Release)
	case in.Index <= 1 || in.Release == 0:
		// The first instance's deploys are the pipeline's.
	default:
		ok := false
		if cur == in.Release {
			if ok, err = p.runsAsScaled(ctx, drv, g.Name, in, seen); err != nil {
				return out, err
			}
		}
		if !ok {
			if out.Serving, _, err = p.serveRelease(ctx, g, drv, in, seen, in.Release, cur, serving); err != nil {
				return out, err
			}
		}
	}
	if in.Staged != 0 && in.Index > 1 {
		out.Staged = in.Staged
		// Staged already (a rolling deploy's instance switched to it
		// since, or web-less processes): nothing to start again.
		if out.StagedPort = webPort(running, in.Staged); !runs(running, in.Staged) {
			if _, out.StagedPort, err = p.serveRelease(ctx, g, drv, in, seen, in.Staged, out.Serving, nil); err != nil {
				out.Staged = 0
				return out, err
			}
		}
	}
	out.TidyAt, err = p.tidy(ctx, drv, g, in, out, running)
	return out, err
}

// serveRelease deploys release rel on an instance (cur serving): it
// starts the release's processes beside the others from the tree the
// guest holds, or builds that tree first from the commit's source (or
// the release's image, pulled by its digest). With
// serving nil it stages: the processes start, their web answers, nothing
// else moves (the port is returned). Otherwise rel takes the traffic and
// the others are retired.
func (p *Pipeline) serveRelease(ctx context.Context, g *corpusv1.Guest, drv drivers.Driver, in Instance, seen sight, rel, cur uint32, serving func(uint32)) (uint32, int32, error) {
	want := corpusv1.ReleaseName(rel)
	fail := func(err error) (uint32, int32, error) { return cur, 0, fmt.Errorf("%s: %w", want, err) }
	res, err := coordCall(p, func(c corpusv1connect.AgentServiceClient) (*connect.Response[corpusv1.InstanceReleaseResponse], error) {
		return c.InstanceRelease(ctx, connect.NewRequest(&corpusv1.InstanceReleaseRequest{Project: in.Project, Env: in.Env, Instance: in.Index, Staged: serving == nil}))
	})
	if err != nil {
		return cur, 0, err
	}
	if res.Release.GetNumber() != rel {
		p.logger.Info("an instance's release changed before it was deployed; the next pass takes it", "guest", g.Name, "release", want, "now", corpusv1.ReleaseName(res.Release.GetNumber()))
		return cur, 0, nil
	}
	env := instanceEnv(res.Env, in.Index)
	spec, held, err := seen.runSpec(ctx, drv, g.Name, in.Project, rel)
	if err != nil {
		return fail(err)
	}
	if held || (cur == rel && !held) {
		// The guest has the release (a rollback, a scale change): its
		// processes start beside the others and take over.
		return p.activate(ctx, drv, g, in, env, spec, held, rel, cur, serving)
	}
	d := &deploy{p: p, ctx: context.WithoutCancel(ctx), guest: g, driver: drv, project: in.Project, env: env,
		out: io.Discard, log: &bytes.Buffer{}, known: res.Releases, release: res.Release, config: res.Config, instance: in.Index, stage: serving == nil}
	for _, r := range res.Releases {
		if r.Number == cur && cur != 0 {
			d.prev = r
		}
	}
	var src quarantineGit
	what := short(res.Release.Commit)
	if res.Release.ImageDigest != "" {
		// A release from an image: the image the first pulled, by the
		// digest it recorded.
		d.man, d.tree = imageDeploy()
		img, err := p.pullRecorded(d)
		if err != nil {
			return fail(err)
		}
		defer img.Close()
		what = d.source()
	} else if src, err = p.instanceSource(ctx, d, in); err != nil {
		return fail(err)
	}
	d.journal = cache.Deploy{Kind: "instance", Project: in.Project, Env: in.Env, Guest: g.Name, Instance: in.Index,
		Number: rel, Previous: cur, Started: time.Now()}
	d.say("-----> Deploying %s/%s %s on instance %d (%s)", in.Project, in.Env, want, in.Index, what)
	if err := d.run(src, res.Release.Commit); err != nil {
		d.say("-----> %v", err)
		d.rollback()
		d.discard()
		p.cache.EndDeploy(d.journal)
		return fail(err)
	}
	d.journal.Step = stepFinished
	p.cache.EndDeploy(d.journal)
	if serving == nil {
		d.prune()
		d.say("-----> %s staged on instance %d, web on port %d (%.1fs)", want, in.Index, d.gen.webPort(), time.Since(d.journal.Started).Seconds())
		return cur, d.gen.webPort(), nil
	}
	serving(rel)
	d.retire()
	d.prune()
	d.say("-----> %s serves on instance %d (%.1fs)", want, in.Index, time.Since(d.journal.Started).Seconds())
	return rel, 0, nil
}

// instanceSource brings the commit of an instance's release into the
// node's repository of the environment and reads its tree, manifest and
// user into d.
func (p *Pipeline) instanceSource(ctx context.Context, d *deploy, in Instance) (quarantineGit, error) {
	if p.git == nil {
		return quarantineGit{}, errors.New("this node's git endpoint is off, so it keeps no repository to deploy from")
	}
	repo, err := p.git.ensureRepo(in.Project, d.env)
	if err != nil {
		return quarantineGit{}, err
	}
	commit := d.release.Commit
	if err := p.fetchSource(ctx, in, repo, commit); err != nil {
		return quarantineGit{}, fmt.Errorf("fetching the source: %w", err)
	}
	src := quarantineGit{repo: repo, req: &githook.Request{}}
	if d.tree, d.man, _, err = inspectPush(src, commit, p.maxPushBytes*4); err != nil {
		return quarantineGit{}, err
	}
	return src, d.resolveUser()
}

// instanceEnv is env as instance index sees it: its web port is its own.
func instanceEnv(env *corpusv1.ProjectEnv, index uint32) *corpusv1.ProjectEnv {
	env = proto.Clone(env).(*corpusv1.ProjectEnv)
	env.WebPort = 0
	for _, in := range env.Instances {
		if in.Index == index {
			env.WebPort = in.WebPort
		}
	}
	return env
}

// runsAsScaled says whether the guest's processes of its release
// (running) are those its index runs.
func (p *Pipeline) runsAsScaled(ctx context.Context, drv drivers.Driver, guest string, in Instance, seen sight) (bool, error) {
	rel := corpusv1.ReleaseName(in.Release)
	spec, ok, err := seen.runSpec(ctx, drv, guest, in.Project, in.Release)
	if err != nil || !ok {
		return !ok, err
	}
	var want, have []string
	for _, proc := range spec.on(in.Scale, in.Index).Processes {
		want = append(want, proc.Name)
	}
	for _, st := range seen.running {
		if st.Release == rel {
			have = append(have, st.Name)
		}
	}
	slices.Sort(want)
	slices.Sort(have)
	return slices.Equal(want, slices.Compact(have)), nil
}

// activate starts the processes of a release the guest holds and makes
// it current there.
func (p *Pipeline) activate(ctx context.Context, drv drivers.Driver, g *corpusv1.Guest, in Instance, env *corpusv1.ProjectEnv, spec runSpec, held bool, number, cur uint32, serving func(uint32)) (uint32, int32, error) {
	rel := corpusv1.ReleaseName(number)
	say := func(format string, args ...any) { p.logger.Debug(fmt.Sprintf(format, args...), "guest", g.Name) }
	if held {
		running, err := p.runtime.Status(ctx, drv, g.Name, in.Project)
		if err != nil {
			return cur, 0, fmt.Errorf("%s: %w", rel, err)
		}
		r, err := p.startGeneration(ctx, drv, g, in.Project, env, in.Index, spec, nextGeneration(rel, running), say)
		if err != nil {
			return cur, 0, fmt.Errorf("%s: starting its processes: %w", rel, err)
		}
		if serving == nil {
			return cur, int32(r.port), nil // staged
		}
		if err := switchCurrent(ctx, drv, g.Name, in.Project, rel); err != nil {
			r.abort(context.WithoutCancel(ctx))
			return cur, 0, fmt.Errorf("%s: %w", rel, err)
		}
		if err := r.switchTraffic(ctx); err != nil {
			r.abort(context.WithoutCancel(ctx))
			restoreCurrent(context.WithoutCancel(ctx), drv, g.Name, in.Project, rel, cur)
			return cur, 0, fmt.Errorf("%s: %w", rel, err)
		}
		serving(number)
		r.retireOthers(context.WithoutCancel(ctx), "")
		return number, 0, nil
	}
	// Current, but its run spec is gone: nothing to run.
	return number, 0, p.stopProcesses(ctx, drv, g.Name, in.Project)
}

// The source of a release: the objects of its commit (its tree, not its
// history), packed on the first instance's node from the environment's
// repository, or from a push's quarantine while that push deploys.

// sources are the pushes deploying now, by environment: their objects
// are not in the repository until they succeed.
type sources struct {
	mu     sync.Mutex
	active map[string]quarantineGit
}

func (s *sources) set(key string, g quarantineGit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active == nil {
		s.active = map[string]quarantineGit{}
	}
	s.active[key] = g
}

func (s *sources) drop(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.active, key)
}

func (s *sources) get(key string) (quarantineGit, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.active[key]
	return g, ok
}

// ReleaseSource streams a pack of commit's objects (the commit and its
// tree) from this node's repository of the environment.
func (p *Pipeline) ReleaseSource(ctx context.Context, m *corpusv1.ReleaseSourceRequest, send func(*corpusv1.SourceChunk) error) error {
	if err := checkEnvRequest(m.Project, m.Env); err != nil {
		return err
	}
	if len(m.Commit) != 40 || strings.Trim(m.Commit, "0123456789abcdef") != "" {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("commit %.50q is not a full hex object name", m.Commit))
	}
	if p.git == nil {
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("this node's git endpoint is off: it keeps no repository"))
	}
	g, ok := p.sources.get(m.Project + "/" + m.Env)
	if !ok {
		g = quarantineGit{repo: filepath.Join(p.git.root, m.Project+"-"+m.Env+".git"), req: &githook.Request{}}
	}
	list, err := g.output("rev-list", "--objects", "--no-walk", m.Commit)
	if err != nil {
		return connect.NewError(connect.CodeNotFound, err)
	}
	cmd := g.cmd(ctx, "pack-objects", "--stdout", "-q")
	cmd.Stdin = bytes.NewReader(list)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Stdout = rpc.StreamWriter(func(b []byte) error { return send(&corpusv1.SourceChunk{Data: b}) })
	if err := cmd.Run(); err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("git pack-objects: %v: %s", err, strings.TrimSpace(stderr.String())))
	}
	return nil
}

// fetchSource brings a commit's objects into repo, unless it has them.
// Instances of one environment on one node share the repository: one
// fetches at a time, the others find the objects there.
func (p *Pipeline) fetchSource(ctx context.Context, in Instance, repo, commit string) error {
	defer p.fetches.Lock(repo)()
	local := quarantineGit{repo: repo, req: &githook.Request{}}
	if _, err := local.output("cat-file", "-e", commit+"^{tree}"); err == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var pack bytes.Buffer
	err := p.agent.CallCoordinator(func(c corpusv1connect.AgentServiceClient) error {
		pack.Reset()
		st, err := c.ReleaseSource(ctx, connect.NewRequest(&corpusv1.ReleaseSourceRequest{Project: in.Project, Env: in.Env, Commit: commit}))
		if err != nil {
			return err
		}
		defer st.Close()
		for st.Receive() {
			if int64(pack.Len()+len(st.Msg().Data)) > p.maxPushBytes*4 {
				return fmt.Errorf("the source is larger than %d bytes", p.maxPushBytes*4)
			}
			pack.Write(st.Msg().Data)
		}
		return st.Err()
	})
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "git", "--git-dir", repo, "index-pack", "--stdin", "--fix-thin")
	cmd.Env = local.cmd(ctx).Env
	cmd.Stdin = &pack
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git index-pack: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
