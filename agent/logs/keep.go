package logs

import (
	"context"
	"time"

	"corpus/agent/runtime"
	"corpus/agent/runtime/supervisor"
	"corpus/drivers"
)

// followSlice is how long one follow lasts with a driver whose exec
// passes output on only at the end (a VM's guest agent): a line reaches
// the store within about that.
const followSlice = 2 * time.Second

// Target is a guest the node is told to run, as the logs loop sees it.
type Target struct {
	ID, Name string
	// Driver is the guest's driver, nil when it is not on this node.
	Driver drivers.Driver
	// Running: the guest was last observed running.
	Running bool
	// Project: the guest runs a project's processes.
	Project bool
}

// Targets are the guests the node is told to run; known is false until
// the coordinator has named this node (absent guests are then gone).
type Targets func() (ts []Target, known bool)

// Keep keeps one collector per running project guest whose driver can
// exec (following its supervisor through rt) and one console tail per
// running guest whose driver writes one, stops those of guests that
// stopped or left, and drops the logs of guests no longer on this node,
// until ctx ends.
func (s *Store) Keep(ctx context.Context, targets Targets, rt *runtime.Runtime) {
	collecting := map[string]context.CancelFunc{}
	consoles := map[string]context.CancelFunc{} // every running guest's console
	defer func() {
		for _, cancel := range collecting {
			cancel()
		}
		for _, cancel := range consoles {
			cancel()
		}
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	prune := time.NewTicker(time.Hour)
	defer prune.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-prune.C:
			s.Prune()
			continue
		case <-tick.C:
		}
		want := map[string]Target{}
		console := map[string]string{} // guest id → its console file
		present := map[string]bool{}
		ts, known := targets()
		for _, t := range ts {
			present[t.ID] = true
			if !t.Running {
				continue
			}
			if cl, ok := t.Driver.(drivers.ConsoleLogger); ok {
				console[t.ID] = cl.ConsoleLog(t.Name)
			}
			if t.Project && t.Driver != nil && t.Driver.Capabilities().Exec {
				want[t.ID] = t
			}
		}
		for id, cancel := range collecting {
			if _, ok := want[id]; !ok {
				cancel()
				delete(collecting, id)
			}
		}
		for id, cancel := range consoles {
			if _, ok := console[id]; !ok {
				cancel()
				delete(consoles, id)
			}
		}
		for id, path := range console {
			if consoles[id] == nil {
				cctx, cancel := context.WithCancel(ctx)
				consoles[id] = cancel
				go s.TailConsole(cctx, id, path)
			}
		}
		for id, t := range want {
			if collecting[id] != nil {
				continue
			}
			cctx, cancel := context.WithCancel(ctx)
			collecting[id] = cancel
			slice := time.Duration(0)
			if !t.Driver.Capabilities().ExecStreams {
				slice = followSlice
			}
			name, d := t.Name, t.Driver
			go s.Collect(cctx, id, func(ctx context.Context, epoch string, after uint64, each func(*supervisor.FollowHeader, []supervisor.Record)) error {
				return rt.Follow(ctx, d, name, epoch, after, slice, each)
			})
		}
		for _, id := range s.Guests() {
			if known && !present[id] {
				if err := s.Delete(id); err != nil {
					s.cfg.Logger.Warn("dropping the logs of a guest gone from this node", "guest_id", id, "error", err)
				}
			}
		}
	}
}
