package deploy

import (
	"context"
	"errors"
	"sync"
	"time"

	"connectrpc.com/connect"

	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// rollWait bounds how long one instance may take to serve a release.
const rollWait = 10 * time.Minute

// A rolling deploy of several instances. While the first instance builds
// and starts the release, every other instance stages it (stageEarly):
// its agent builds it from the same commit and starts its processes
// beside the old ones, web checked, routes untouched. Once the first
// serves it, the "roll" step moves the others' traffic, max_parallel at a
// time (one by default): each one's current and routes go to the staged
// processes (which already run), and its agent drains and stops the old
// ones after. When the first fails, nothing of the others moved: their
// staged processes stop. When one fails to stage or switch, every
// instance switched so far goes back to the release before, and so does
// the first (the deploy fails). A deploy of some steps only (--only)
// rolls the old way: each instance deploys in turn.

// staging is the other instances staging the release meanwhile.
type staging struct {
	cancel context.CancelFunc
	done   chan struct{} // closed once every instance answered
	res    []staged
}

type staged struct {
	index uint32
	res   *corpusv1.RollInstanceResponse
	err   error
	took  time.Duration
}

// stageEarly has the environment's other instances stage the release
// while this (the first) builds it, when the deploy rolls.
func (d *deploy) stageEarly() {
	ins := d.env.GetInstances()
	if d.instance > 1 || d.stage || d.strategy == strategyBlueGreen || len(d.only) > 0 || len(ins) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(d.ctx)
	s := &staging{cancel: cancel, done: make(chan struct{}), res: make([]staged, len(ins))}
	var wg sync.WaitGroup
	for i, in := range ins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			res, err := d.stageInstance(ctx, in.Index, d.release.Number)
			s.res[i] = staged{index: in.Index, res: res, err: err, took: time.Since(start)}
		}()
	}
	go func() {
		wg.Wait()
		close(s.done)
	}()
	d.staging = s
}

// dropStaging stops the staging of a deploy that failed before its
// roll: the instances keep serving what they served, and their staged
// processes stop.
func (d *deploy) dropStaging() {
	s := d.staging
	if s == nil {
		return
	}
	d.staging = nil
	s.cancel()
	<-s.done
	d.unstage(true)
}

// unstage clears the staged mark of every other instance (its agent then
// stops the staged processes, unless they serve); loud says so for each.
func (d *deploy) unstage(loud bool) {
	ctx := context.WithoutCancel(d.ctx)
	var wg sync.WaitGroup
	for _, in := range d.env.GetInstances() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := d.stageInstance(ctx, in.Index, 0); err != nil {
				d.say("       warning: instance %d: %v", in.Index, err)
			} else if loud {
				d.say("       instance %d still serves %s", in.Index, d.serving())
			}
		}()
	}
	wg.Wait()
}

// roll brings the environment's other instances to the release once the
// first serves it (see above).
func (d *deploy) roll() error {
	ins := d.env.GetInstances()
	if d.instance > 1 || len(ins) == 0 {
		return nil
	}
	return d.step(stepRoll, func() (bool, error) {
		s := d.staging
		if s != nil {
			d.staging = nil
			<-s.done
			var errs []error
			for _, r := range s.res {
				if r.err != nil {
					errs = append(errs, r.err)
					continue
				}
				d.say("       instance %d (%s on %s) staged %s (%.1fs)", r.index, r.res.Guest, r.res.Node, d.name(), r.took.Seconds())
			}
			if err := errors.Join(errs...); err != nil {
				d.unstage(true)
				return false, err
			}
		}
		par := max(1, int(d.env.GetMaxParallel()))
		var touched []uint32
		for i := 0; i < len(ins); i += par {
			batch := ins[i:min(i+par, len(ins))]
			errs := make([]error, len(batch))
			var wg sync.WaitGroup
			for j, in := range batch {
				touched = append(touched, in.Index)
				wg.Add(1)
				go func() {
					defer wg.Done()
					start := time.Now()
					res, err := d.rollInstance(in.Index, d.release.Number)
					if err != nil {
						errs[j] = err
						return
					}
					d.say("       instance %d (%s on %s) serves %s (%.1fs)", in.Index, res.Guest, res.Node, d.name(), time.Since(start).Seconds())
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				if s != nil {
					d.unstage(false)
				}
				d.unroll(touched)
				return false, err
			}
		}
		if s != nil {
			d.unstage(false) // every instance serves it: nothing stands staged
		}
		return false, nil
	})
}

// unroll sets the instances back to the release serving before.
func (d *deploy) unroll(indexes []uint32) {
	prev := d.prevNumber()
	var wg sync.WaitGroup
	for _, idx := range indexes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := d.rollInstance(idx, prev); err != nil {
				d.say("       warning: instance %d back to %s: %v", idx, corpusv1.ReleaseName(prev), err)
				return
			}
			d.say("       instance %d serves %s again", idx, corpusv1.ReleaseName(prev))
		}()
	}
	wg.Wait()
}

// rollInstance sets the release instance index serves and waits until
// it does.
func (d *deploy) rollInstance(index, release uint32) (*corpusv1.RollInstanceResponse, error) {
	return d.setInstance(d.ctx, index, release, false)
}

// stageInstance has instance index stage release beside what it serves
// (0: nothing staged), and waits until it has.
func (d *deploy) stageInstance(ctx context.Context, index, release uint32) (*corpusv1.RollInstanceResponse, error) {
	return d.setInstance(ctx, index, release, true)
}

func (d *deploy) setInstance(ctx context.Context, index, release uint32, stage bool) (*corpusv1.RollInstanceResponse, error) {
	return coordCall(d.p, func(c corpusv1connect.AgentServiceClient) (*connect.Response[corpusv1.RollInstanceResponse], error) {
		return c.RollInstance(ctx, connect.NewRequest(&corpusv1.RollInstanceRequest{
			Project: d.project, Env: d.env.Name, Instance: index, Release: release, Stage: stage, WaitSeconds: int64(rollWait / time.Second),
		}))
	})
}
