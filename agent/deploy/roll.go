package deploy

import (
	"errors"
	"sync"
	"time"

	"connectrpc.com/connect"

	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// rollWait bounds how long one instance may take to serve a release.
const rollWait = 10 * time.Minute

// roll brings the environment's other instances to the release once the
// first serves it: max_parallel at a time (one by default), each started
// beside its old processes and checked by its agent before the next
// batch. When one fails, every instance rolled so far (and the failed
// one) goes back to the release before, and so does the first (the
// deploy fails).
func (d *deploy) roll() error {
	ins := d.env.GetInstances()
	if d.instance > 1 || len(ins) == 0 {
		return nil
	}
	return d.step(stepRoll, func() (bool, error) {
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
				d.unroll(touched)
				return false, err
			}
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

func (d *deploy) rollInstance(index, release uint32) (*corpusv1.RollInstanceResponse, error) {
	return coordCall(d.p, func(c corpusv1connect.AgentServiceClient) (*connect.Response[corpusv1.RollInstanceResponse], error) {
		return c.RollInstance(d.ctx, connect.NewRequest(&corpusv1.RollInstanceRequest{
			Project: d.project, Env: d.env.Name, Instance: index, Release: release, WaitSeconds: int64(rollWait / time.Second),
		}))
	})
}
