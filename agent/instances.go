package agent

import (
	"context"

	"corpus/agent/instances"
	"corpus/drivers"
	corpusv1 "corpus/proto/corpus/v1"
)

// reconcileInstances has the instance guests of this node serve their
// releases (agent/instances).
func (a *Agent) reconcileInstances(ctx context.Context) {
	if a.deploys == nil {
		return
	}
	a.mu.Lock()
	if !a.known {
		a.mu.Unlock()
		return
	}
	assigned := a.instances
	guests := make(map[string]instances.Guest, len(assigned))
	for _, as := range assigned {
		g, o := a.desired[as.GuestId], a.observed[as.GuestId]
		if g == nil || o == nil {
			continue
		}
		_, waiting := a.guestWaiting[g.Id]
		guests[g.Id] = instances.Guest{Name: g.Name, PID: o.Pid, Waiting: waiting,
			Running: g.DesiredState == corpusv1.DesiredRunning && o.State == string(drivers.StateRunning)}
	}
	a.mu.Unlock()
	a.instSync.Reconcile(ctx, assigned, guests)
}
