package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"corpus/agent/cache"
	"corpus/agent/deploy/manifest"
	"corpus/agent/runtime/supervisor"
	"corpus/drivers"
	"corpus/internal/rpc"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// projectGuest is the name of a project environment's guest, as the
// coordinator names it.
func projectGuest(project, env string) string { return project + "-" + env }

// Rollback makes a kept release current again: one rename of current, then
// the release's own rollback hook with its archive, then the record. It
// serves the agent's API (NodeAgentService.Rollback, its caller checked):
// what it says goes out through send, the last message says it is done.
// Errors are connect errors.
func (p *Pipeline) Rollback(ctx context.Context, m *corpusv1.RollbackRequest, send func(*corpusv1.RollbackOutput) error) error {
	if err := p.rollback(ctx, m, send); err != nil {
		return err
	}
	// Said once the environment is free again: a caller that goes on at
	// once finds it so.
	return send(&corpusv1.RollbackOutput{Done: true, Current: m.To})
}

func (p *Pipeline) rollback(ctx context.Context, m *corpusv1.RollbackRequest, send func(*corpusv1.RollbackOutput) error) error {
	if err := checkEnvRequest(m.Project, m.Env); err != nil {
		return err
	}
	if m.To == 0 {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("no release to roll back to"))
	}
	key := m.Project + "/" + m.Env
	if holder, ok := p.envLocks.Lock(ctx, key, "a rollback since "+time.Now().Format(time.TimeOnly)); !ok {
		return connect.NewError(connect.CodeAborted, fmt.Errorf("%s is busy (%s); try again when it ends", key, holder))
	}
	defer p.envLocks.Unlock(key)
	g, drv, err := p.guestForExec(projectGuest(m.Project, m.Env))
	if err != nil {
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	out := rpc.StreamWriter(func(b []byte) error { return send(&corpusv1.RollbackOutput{Output: b}) })
	target := corpusv1.ReleaseName(m.To)
	prev, err := currentRelease(ctx, drv, g.Name, m.Project)
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	j := cache.Deploy{Kind: "rollback", Project: m.Project, Env: m.Env, Guest: g.Name, Number: m.To, Previous: prev, Step: stepSwitch, Started: time.Now()}
	if err := p.cache.SetDeploy(j); err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	defer p.cache.EndDeploy(j)
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	// The release's processes start first, beside the serving ones, with
	// the environment (config) that release ran with.
	gen, err := p.rollbackProcesses(ctx, drv, g, m, say)
	if err != nil {
		return err
	}
	abort := func() {
		if gen != nil {
			gen.abort(context.WithoutCancel(ctx))
		}
	}
	say("-----> switch")
	if err := switchCurrent(ctx, drv, g.Name, m.Project, target); err != nil {
		abort()
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("release %s is not in the guest: %w", target, err))
	}
	say("       current -> releases/%s", target)
	if err := p.recordCurrent(ctx, m.Project, m.Env, m.To); err != nil {
		// The record failed: go back, so the cluster's word stays true.
		if prev != 0 {
			switchCurrent(context.WithoutCancel(ctx), drv, g.Name, m.Project, corpusv1.ReleaseName(prev))
		}
		abort()
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("recording the rollback: %w", err))
	}
	if gen != nil {
		if err := gen.switchTraffic(ctx); err != nil {
			say("       warning: %v", err)
		}
		gen.retireOthers(context.WithoutCancel(ctx), "")
	} else if err := p.stopProcesses(context.WithoutCancel(ctx), drv, g.Name, m.Project); err != nil {
		say("       warning: stopping the processes of the release before: %v", err)
	}
	d := &deploy{p: p, ctx: ctx, guest: g, driver: drv, project: m.Project, env: &corpusv1.ProjectEnv{Name: m.Env},
		release: &corpusv1.Release{Number: m.To}, man: &manifest.Manifest{Timeout: manifest.DefaultStepTimeout}, out: out, log: &bytes.Buffer{}}
	fmt.Fprintf(out, "-----> rollback hook\n")
	dir := projectDir(m.Project)
	if err := d.hook(dir+"/releases/"+target, "rollback", map[string]string{"CORPUS_ARCHIVE": dir + "/archives/" + target}); err != nil {
		fmt.Fprintf(out, "       warning: the rollback hook failed: %v\n", err)
	}
	return nil
}

func (p *Pipeline) recordCurrent(ctx context.Context, project, env string, n uint32) error {
	_, err := coordCall(p, func(c corpusv1connect.AgentServiceClient) (*connect.Response[corpusv1.SetCurrentReleaseResponse], error) {
		return c.SetCurrentRelease(ctx, connect.NewRequest(&corpusv1.SetCurrentReleaseRequest{Project: project, Env: env, Number: n}))
	})
	return err
}

// currentRelease reads which release current points at (0 for none).
func currentRelease(ctx context.Context, drv drivers.Driver, guest, project string) (uint32, error) {
	var out bytes.Buffer
	code, err := drv.Exec(ctx, guest, drivers.ExecRequest{
		Argv: []string{"sh", "-c", `readlink "$1/current" || true`, "sh", projectDir(project)}, Stdout: &out,
	})
	if err != nil {
		return 0, err
	}
	if code != 0 {
		return 0, fmt.Errorf("reading %s/current: exit status %d", projectDir(project), code)
	}
	return parseCurrent(project, out.String())
}

// parseCurrent reads the release of current's target, link (0 for none).
func parseCurrent(project, link string) (uint32, error) {
	link = strings.TrimSpace(link)
	if link == "" {
		return 0, nil
	}
	var n uint32
	if _, err := fmt.Sscanf(link, "releases/r%d", &n); err != nil {
		return 0, fmt.Errorf("%s/current points at %q, not a release", projectDir(project), link)
	}
	return n, nil
}

// lookScript prints current's target, then, when it points at release
// $2 (set), points it at release $3 and says "switched"; then each file
// named after (a run spec: one line), on a line of its own.
const lookScript = `dir=$1 from=$2 to=$3; shift 3
link=$(readlink "$dir/current") || link=
printf '%s\n' "$link"
if [ -n "$from" ] && [ "$link" = "releases/$from" ] && cd "$dir" && test -d "releases/$to"; then
	rm -f current.new && ln -s "releases/$to" current.new && mv -T current.new current && printf switched
fi
for f; do printf '\n'; cat "$f" 2>/dev/null; done
true`

// sight is what one look at an instance's guest saw.
type sight struct {
	cur      uint32 // the release current pointed at
	switched bool   // current moved from it (look's from, to)
	running  []supervisor.Status
	specs    map[uint32][]byte // run specs read, by release
}

// runSpec is release rel's run spec as the look read it (readRunSpec
// reads it when the look did not).
func (s sight) runSpec(ctx context.Context, drv drivers.Driver, guest, project string, rel uint32) (runSpec, bool, error) {
	if raw, ok := s.specs[rel]; ok {
		return parseRunSpec(corpusv1.ReleaseName(rel), raw)
	}
	return readRunSpec(ctx, drv, guest, project, corpusv1.ReleaseName(rel))
}

// look reads which release current points at, the run specs of the
// releases specs (those not zero) and the project's processes, in one
// exec. With from set, that exec first switches current from release
// from to release to, when it points at from (switched; cur is what it
// pointed at before). On an error current is as it was.
func (p *Pipeline) look(ctx context.Context, drv drivers.Driver, guest, project string, from, to uint32, specs ...uint32) (sight, error) {
	args := []string{projectDir(project), "", ""}
	if from != 0 {
		args[1], args[2] = corpusv1.ReleaseName(from), corpusv1.ReleaseName(to)
	}
	specs = slices.DeleteFunc(slices.Compact(specs), func(n uint32) bool { return n == 0 })
	for _, n := range specs {
		args = append(args, runFile(project, corpusv1.ReleaseName(n)))
	}
	pre, running, err := p.runtime.StatusAfter(ctx, drv, guest, project, lookScript, args...)
	lines := strings.SplitN(string(pre), "\n", 2+len(specs))
	s := sight{running: running, switched: len(lines) > 1 && lines[1] == "switched"}
	if err == nil {
		s.cur, err = parseCurrent(project, lines[0])
	}
	if len(lines) == 2+len(specs) {
		// (Else a spec of more than one line: runSpec reads it.)
		s.specs = map[uint32][]byte{}
		for i, n := range specs {
			s.specs[n] = []byte(lines[2+i])
		}
	}
	if err != nil && s.switched {
		// Nothing else moves: current goes back.
		if rerr := restoreCurrent(context.WithoutCancel(ctx), drv, guest, project, corpusv1.ReleaseName(to), from); rerr != nil {
			err = errors.Join(err, fmt.Errorf("pointing current back at %s: %w", corpusv1.ReleaseName(from), rerr))
		}
	}
	return s, err
}

// recoverDeploys resolves deploys and rollbacks a crash interrupted,
// retrying until each is resolved: a deploy that did not finish is rolled
// back (its push was never accepted) and recorded as failed; a rollback
// is recorded as whatever current now says.
func (p *Pipeline) recoverDeploys(ctx context.Context) {
	for {
		entries, err := p.cache.Deploys()
		if err != nil {
			p.logger.Error("reading the deploy journal", "error", err)
			return
		}
		if len(entries) == 0 {
			return
		}
		for _, j := range entries {
			if err := p.recoverDeploy(ctx, j); err != nil {
				p.logger.Warn("resolving an interrupted deploy; will retry", "project", j.Project, "env", j.Env, "step", j.Step, "error", err)
				continue
			}
			p.cache.EndDeploy(j)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

func (p *Pipeline) recoverDeploy(ctx context.Context, j cache.Deploy) error {
	key := j.Key()
	if !p.envLocks.TryBackground(key, "recovery") {
		return errors.New("busy")
	}
	defer p.envLocks.Unlock(key)
	_, drv, err := p.guestForExec(j.Guest)
	if err != nil {
		if !p.agent.DesiredKnown() {
			return err // the desired state is not loaded yet
		}
		// The guest is gone: only the record is left to settle.
		if j.Kind == "deploy" && j.Step != stepFinished {
			return p.failRelease(ctx, j, "interrupted: the agent stopped during "+j.Step+" and the guest is gone")
		}
		return nil
	}
	name := corpusv1.ReleaseName(j.Number)
	switch {
	case j.Kind == "rollback":
		cur, err := currentRelease(ctx, drv, j.Guest, j.Project)
		if err != nil {
			return err
		}
		if cur == j.Number {
			return p.recordCurrent(ctx, j.Project, j.Env, cur)
		}
		return nil
	case j.Step == stepFinished:
		return nil // recorded; only the journal entry was left
	case j.Step == stepRecord:
		// Every step passed and the new release serves: its success was
		// being recorded. It stays; the record is made again (a second
		// one is refused as settled).
		p.logger.Info("recording an interrupted deploy's success", "project", j.Project, "env", j.Env, "release", name)
		return p.settleRelease(ctx, j, corpusv1.ReleaseSucceeded, "succeeded; recorded when the agent restarted")
	case j.Step == stepBegin:
		// Nothing ran in the guest; the release, if it was recorded at
		// all, is failed (NotFound if not: nothing to settle).
		serving := "nothing"
		if j.Previous != 0 {
			serving = corpusv1.ReleaseName(j.Previous)
		}
		return p.failRelease(ctx, j, "interrupted: the agent stopped as the deploy began; "+serving+" serves")
	default:
		// The deploy's processes go, and the routes back to the old ones.
		if err := p.stopGeneration(ctx, drv, j.Guest, j.Project, name); err != nil {
			return err
		}
		if j.OldWebPort != 0 {
			if err := p.setWebPort(ctx, j.Project, j.Env, j.Instance, j.OldWebPort); err != nil {
				return err
			}
		}
		if err := restoreCurrent(ctx, drv, j.Guest, j.Project, name, j.Previous); err != nil {
			return err
		}
		if err := removeRelease(ctx, drv, j.Guest, j.Project, name); err != nil {
			return err
		}
		p.logger.Info("rolled back an interrupted deploy", "project", j.Project, "env", j.Env, "release", name, "step", j.Step)
		if j.Kind == "instance" {
			return nil // the instance's agent tries again; the release is the first instance's to record
		}
		serving := "nothing"
		if j.Previous != 0 {
			serving = corpusv1.ReleaseName(j.Previous)
		}
		return p.failRelease(ctx, j, fmt.Sprintf("interrupted: the agent stopped during %s; rolled back, %s serves", j.Step, serving))
	}
}

func (p *Pipeline) failRelease(ctx context.Context, j cache.Deploy, msg string) error {
	return p.settleRelease(ctx, j, corpusv1.ReleaseFailed, msg)
}

// settleRelease records a journalled release's outcome; one settled
// already (or forgotten with its project) is left as it is.
func (p *Pipeline) settleRelease(ctx context.Context, j cache.Deploy, status, msg string) error {
	failed := ""
	if status == corpusv1.ReleaseFailed {
		failed = j.Step
	}
	_, err := coordCall(p, func(c corpusv1connect.AgentServiceClient) (*connect.Response[corpusv1.FinishReleaseResponse], error) {
		return c.FinishRelease(ctx, connect.NewRequest(&corpusv1.FinishReleaseRequest{
			Id: j.ReleaseID, Status: status, FailedStep: failed, Message: msg,
		}))
	})
	if connect.CodeOf(err) == connect.CodeFailedPrecondition || connect.CodeOf(err) == connect.CodeNotFound {
		return nil // already settled (or forgotten with its project)
	}
	return err
}

// rollbackProcesses starts the processes of the release rolled back to,
// when it has any: nil when it has none.
func (p *Pipeline) rollbackProcesses(ctx context.Context, drv drivers.Driver, g *corpusv1.Guest, m *corpusv1.RollbackRequest, say func(string, ...any)) (*rollout, error) {
	target := corpusv1.ReleaseName(m.To)
	spec, ok, err := readRunSpec(ctx, drv, g.Name, m.Project, target)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	if !ok {
		return nil, nil
	}
	running, err := p.runtime.Status(ctx, drv, g.Name, m.Project)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	env := m.GetProjectEnv()
	if env == nil {
		env = &corpusv1.ProjectEnv{Name: m.Env}
	}
	say("-----> start")
	gen, err := p.startGeneration(ctx, drv, g, m.Project, env, 1, spec, nextGeneration(target, running), say)
	if err != nil {
		var es *errStart
		if errors.As(err, &es) {
			for _, l := range es.tail {
				say("       | %s", l)
			}
		}
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("starting the processes of %s: %w; nothing changed", target, err))
	}
	return gen, nil
}
