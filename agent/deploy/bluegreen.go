package deploy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	"corpus/agent/deploy/manifest"
	"corpus/agent/runtime/supervisor"
	"corpus/drivers"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// Blue-green deploys (corpus deploy --strategy blue-green). The first
// instance builds and starts the release beside the serving one as a
// rolling deploy does, then every other instance stages it (starts it
// beside, web checked, routes untouched), then one SwitchEnv write moves
// every instance's web port at once: every domain goes to the new set
// together. The set that served keeps running as the standby until
// --keep expires, so `corpus switch back` is one write too; each agent
// then stops the standby's processes (tidy). A release that stood by
// when a deploy began stops once that deploy is live (retire).

// strategyBlueGreen is RedeployRequest.strategy's blue-green.
const strategyBlueGreen = manifest.StrategyBlueGreen

// runs says whether processes of release number run.
func runs(running []supervisor.Status, number uint32) bool {
	name := corpusv1.ReleaseName(number)
	for _, st := range running {
		if st.Release == name && st.State == "running" {
			return true
		}
	}
	return false
}

// webPort is the port the web process of release number listens on, 0
// when none runs.
func webPort(running []supervisor.Status, number uint32) int32 {
	name := corpusv1.ReleaseName(number)
	for _, st := range running {
		if st.Release == name && st.Name == "web" && st.State == "running" {
			return int32(st.Port)
		}
	}
	return 0
}

func (r *rollout) webPort() int32 {
	if r == nil {
		return 0
	}
	return int32(r.port)
}

// tidy stops the generations of releases an instance no longer needs
// (unneeded), each once the requests its web has in flight through this
// node's proxy are answered (up to its grace). A web the routes left
// (left) keeps running until settleOthers has passed since, for the
// proxies of other nodes that had not heard of the move yet: later is
// when the first of those may stop, zero when nothing waits (each stops
// as soon as it may, not in the next deploy's staging: pushes a second
// apart leave two such webs). The sync that switched does
// not wait for that with the environment's lock held: the next deploy's
// staging may begin meanwhile. running is what ran when the sync began:
// what it started since is needed.
func (p *Pipeline) tidy(ctx context.Context, drv drivers.Driver, g *corpusv1.Guest, in Instance, out Outcome, running []supervisor.Status) (later time.Time, err error) {
	if out.Serving == 0 {
		return later, nil
	}
	for _, gen := range unneeded(running, in, out) {
		if at, ok := p.left.at(g.Id, gen); ok {
			if until := at.Add(settleOthers); time.Now().Before(until) {
				if later.IsZero() || until.Before(later) {
					later = until // the first to settle: a sync then stops it
				}
				continue
			}
		}
		p.drainInFlight(ctx, drv, g, in.Project, running, gen)
		if err := p.stopRunning(ctx, drv, g.Name, in.Project, gen); err != nil {
			return later, fmt.Errorf("stopping the processes of %s: %w", gen, err)
		}
		p.left.drop(g.Id, gen)
	}
	return later, nil
}

// drainInFlight waits until the web of generation gen (if it has one)
// answered the requests this node's proxy sent it, up to its release's
// grace.
func (p *Pipeline) drainInFlight(ctx context.Context, drv drivers.Driver, g *corpusv1.Guest, project string, running []supervisor.Status, gen string) {
	if p.proxy == nil {
		return
	}
	for _, st := range running {
		if st.Generation != gen || st.Name != "web" || st.Port == 0 {
			continue
		}
		target := net.JoinHostPort(g.Address, strconv.Itoa(st.Port))
		if p.proxy.InFlight(target) == 0 {
			return
		}
		grace := supervisor.DefaultGrace
		if spec, ok, err := readRunSpec(ctx, drv, g.Name, project, st.Release); err == nil && ok && spec.Grace > 0 {
			grace = time.Duration(spec.Grace)
		}
		p.waitInFlight(target, grace)
		return
	}
}

// leftWebs are the web generations of instance guests the routes moved
// away from (a switch), and when: they stop once settled (tidy).
type leftWebs struct {
	mu sync.Mutex
	m  map[string]time.Time // by guest id + "/" + generation
}

// add records that the routes left the web of release number in guest
// id (running) now.
func (l *leftWebs) add(id string, running []supervisor.Status, number uint32) {
	name := corpusv1.ReleaseName(number)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]time.Time{}
	}
	now := time.Now()
	for k, at := range l.m {
		if now.Sub(at) > time.Minute {
			delete(l.m, k) // stopped otherwise, or its guest gone
		}
	}
	for _, st := range running {
		if st.Release == name && st.Name == "web" {
			l.m[id+"/"+st.Generation] = now
		}
	}
}

func (l *leftWebs) at(id, gen string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.m[id+"/"+gen]
	return at, ok
}

func (l *leftWebs) drop(id, gen string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, id+"/"+gen)
}

// unneeded are the generations of running an instance no longer needs:
// of releases neither serving, nor staged, nor a standby that has not
// expired.
func unneeded(running []supervisor.Status, in Instance, out Outcome) []string {
	keep := map[string]bool{corpusv1.ReleaseName(out.Serving): true}
	if out.Staged != 0 {
		keep[corpusv1.ReleaseName(out.Staged)] = true
	}
	if in.Standby != 0 && time.Now().Before(in.StandbyUntil) {
		keep[corpusv1.ReleaseName(in.Standby)] = true
	}
	var gens []string
	for _, st := range running {
		if !keep[st.Release] && !slices.Contains(gens, st.Generation) {
			gens = append(gens, st.Generation)
		}
	}
	return gens
}

// firstIdle says, looking without the environment's lock, whether an
// environment's first instance has nothing to do: no switch (back) to
// follow, no generation to stop. cur is the release it serves.
func (p *Pipeline) firstIdle(ctx context.Context, drv drivers.Driver, guest string, in Instance) (idle bool, cur uint32, err error) {
	seen, err := p.look(ctx, drv, guest, in.Project, 0, 0)
	if err != nil {
		return false, 0, err
	}
	cur, running := seen.cur, seen.running
	follow := in.Release != 0 && cur != in.Release && runs(running, in.Release)
	return !follow && (cur == 0 || len(unneeded(running, in, Outcome{Serving: cur})) == 0), cur, nil
}

// blueGreen stages the release on every other instance, then moves every
// domain to it at once: the first instance's new web (already checked)
// and each instance's staged one. When an instance cannot stage it, the
// others' staged processes stop and nothing moved.
func (d *deploy) blueGreen() error {
	if err := d.step(stepStage, func() (bool, error) {
		if d.gen == nil || d.gen.port == 0 {
			return false, errors.New("a blue-green deploy needs a web process (Procfile web:) to switch")
		}
		ins := d.env.GetInstances()
		if len(ins) == 0 {
			d.say("       one instance: the new web runs beside the old one")
			return true, nil
		}
		errs := make([]error, len(ins))
		var wg sync.WaitGroup
		for i, in := range ins {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				res, err := d.stageInstance(d.ctx, in.Index, d.release.Number)
				if err != nil {
					errs[i] = err
					return
				}
				d.say("       instance %d (%s on %s) staged %s (%.1fs)", in.Index, res.Guest, res.Node, d.name(), time.Since(start).Seconds())
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			d.unstage(false)
			return false, err
		}
		return false, nil
	}); err != nil {
		return err
	}
	return d.step(stepSwitch, func() (bool, error) {
		if err := d.switchTo(d.name()); err != nil {
			return false, err
		}
		// Journalled first: a crash from here on puts the first
		// instance's routes back.
		d.journal.OldWebPort = d.gen.oldPort
		if err := d.p.cache.SetDeploy(d.journal); err != nil {
			return false, fmt.Errorf("journal: %w", err)
		}
		_, err := coordCall(d.p, func(c corpusv1connect.AgentServiceClient) (*connect.Response[corpusv1.SwitchEnvResponse], error) {
			return c.SwitchEnv(d.ctx, connect.NewRequest(&corpusv1.SwitchEnvRequest{
				Project: d.project, Env: d.env.Name, Release: d.release.Number, WebPort: int32(d.gen.port), KeepSeconds: d.keepFor,
			}))
		})
		if err != nil {
			return false, fmt.Errorf("moving the domains: %w", err)
		}
		d.gen.markMoved()
		d.say("       every domain -> %s; %s stands by (corpus switch back %s)", d.name(), d.serving(), d.project)
		return false, d.gen.waitMoved()
	})
}
