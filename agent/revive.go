package agent

import (
	"context"
	"time"

	"corpus/drivers"
	corpusv1 "corpus/proto/corpus/v1"
)

// reviveLoop starts the supervisor again in project guests that
// restarted (a new init PID): their processes run again without a deploy.
// A guest is checked once per start; one whose driver reports no PID (a
// Kubernetes pod) every reviveEvery.
func (a *Agent) reviveLoop(ctx context.Context) {
	const reviveEvery = 30 * time.Second
	revived := map[string]int64{} // guest id → init PID revived for
	checked := map[string]time.Time{}
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		type target struct {
			g   *corpusv1.Guest
			pid int64
		}
		var todo []target
		a.mu.Lock()
		for id, g := range a.desired {
			o := a.observed[id]
			if _, ok := a.guestProjects[id]; !ok || o == nil || o.State != string(drivers.StateRunning) {
				continue
			}
			if _, seen := revived[id]; seen && revived[id] == o.Pid && (o.Pid != 0 || time.Since(checked[id]) < reviveEvery) {
				continue
			}
			todo = append(todo, target{g, o.Pid})
		}
		for id := range revived {
			if a.desired[id] == nil {
				delete(revived, id)
				delete(checked, id)
			}
		}
		a.mu.Unlock()
		for _, t := range todo {
			checked[t.g.Id] = time.Now()
			d, ok := a.drivers[t.g.Spec.GetDriver()]
			if !ok || !d.Capabilities().Exec {
				revived[t.g.Id] = t.pid
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			err := a.runtime.Revive(cctx, d, t.g.Name)
			cancel()
			if err != nil {
				a.logger.Warn("starting the process supervisor of a restarted guest; will retry", "guest", t.g.Name, "error", err)
				continue
			}
			revived[t.g.Id] = t.pid
		}
	}
}
