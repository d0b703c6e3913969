package agent

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/internal/version"
	corpusv1 "corpus/proto/corpus/v1"
)

// reportSpacing is the least time between two reports the agent's
// changes ask for (the periodic report aside).
const reportSpacing = 10 * time.Millisecond

// reportLoop sends the node's facts and its guests' observed states every
// ReportInterval (the heartbeat), and soon after any observed change.
func (a *Agent) reportLoop(ctx context.Context) {
	tick := time.NewTicker(a.cfg.ReportInterval)
	defer tick.Stop()
	failing := false
	var sent time.Time
	for {
		sent = time.Now()
		err := a.sendReport(ctx)
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			a.logger.Warn("reporting to coordinator failed; will retry", "error", err)
			failing = true
		case err == nil && failing:
			a.logger.Info("reporting to coordinator again")
			failing = false
			a.restartWatch()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-a.report:
			// A change is reported at once, and a burst of changes in
			// at most one report every reportSpacing.
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(sent.Add(reportSpacing))):
			}
		}
	}
}

func (a *Agent) sendReport(ctx context.Context) error {
	req := &corpusv1.ReportRequest{
		Capacity:     a.capacity(ctx),
		Drivers:      a.driverInfo(ctx),
		AgentAddress: a.advertise(),
		AgentVersion: version.Version,
		Address:      a.address(),
	}
	if a.ssh != nil {
		req.GitPort = a.ssh.Port()
	}
	if a.net != nil {
		req.MinHostPort = int32(a.cfg.MinHostPort)
		req.ReservedPorts = a.net.ReservedPorts()
	}
	a.mu.Lock()
	for id, o := range a.observed {
		req.Guests = append(req.Guests, &corpusv1.ReportedGuest{GuestId: id, Observed: a.instSync.Observed(id, proto.Clone(o).(*corpusv1.GuestObserved))})
	}
	a.mu.Unlock()
	req.Orphans = a.orphanList()
	req.Volumes = a.vols.Observed()
	req.Services = a.services.Services.Report()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	addr, client := a.coords.current()
	_, err := client.Report(rctx, connect.NewRequest(req))
	if err != nil {
		a.coords.failed(addr, err)
	}
	return err
}
