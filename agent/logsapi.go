package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/agent/logs"
	"corpus/agent/runtime/supervisor"
	"corpus/drivers"
	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
)

// The node's guest logs (agent/logs): the processes' output comes from
// each project guest's supervisor through one follow stream per guest,
// the deploys' lines from the pipeline (agent/deploy); the Logs call
// reads them.

// followSlice is how long one follow lasts with a driver whose exec
// passes output on only at the end (a VM's guest agent): a line reaches
// the store within about that.
const followSlice = 2 * time.Second

// logsLoop keeps one collector per running project guest whose driver
// can exec, stops those of guests that stopped or left, and drops the
// logs of guests no longer on this node.
func (a *Agent) logsLoop(ctx context.Context) {
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
			a.logs.Prune()
			continue
		case <-tick.C:
		}
		type target struct {
			g *corpusv1.Guest
			d drivers.Driver
		}
		want := map[string]target{}
		console := map[string]string{} // guest id → its console file
		present := map[string]bool{}
		a.mu.Lock()
		known := a.node != nil // the desired state came: absent guests are gone
		for id, g := range a.desired {
			present[id] = true
			o := a.observed[id]
			if o == nil || o.State != string(drivers.StateRunning) {
				continue
			}
			if cl, ok := a.drivers[g.Spec.GetDriver()].(drivers.ConsoleLogger); ok {
				console[id] = cl.ConsoleLog(g.Name)
			}
			if _, ok := a.guestProjects[id]; !ok {
				continue
			}
			if d, ok := a.drivers[g.Spec.GetDriver()]; ok && d.Capabilities().Exec {
				want[id] = target{g, d}
			}
		}
		a.mu.Unlock()
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
				go a.logs.TailConsole(cctx, id, path)
			}
		}
		for id, t := range want {
			if collecting[id] != nil {
				continue
			}
			cctx, cancel := context.WithCancel(ctx)
			collecting[id] = cancel
			slice := time.Duration(0)
			if !t.d.Capabilities().ExecStreams {
				slice = followSlice
			}
			name, d := t.g.Name, t.d
			go a.logs.Collect(cctx, id, func(ctx context.Context, epoch string, after uint64, each func(*supervisor.FollowHeader, []supervisor.Record)) error {
				return a.runtime.Follow(ctx, d, name, epoch, after, slice, each)
			})
		}
		for _, id := range a.logs.Guests() {
			if known && !present[id] {
				if err := a.logs.Delete(id); err != nil {
					a.logger.Warn("dropping the logs of a guest gone from this node", "guest_id", id, "error", err)
				}
			}
		}
	}
}

// Logs streams a guest's stored lines, then (with follow) new ones until
// the guest leaves this node or the caller goes.
func (s *agentAPI) Logs(ctx context.Context, req *connect.Request[corpusv1.GuestLogsRequest], stream *connect.ServerStream[corpusv1.LogLine]) error {
	a := s.a
	if err := a.checkCaller(req.Header()); err != nil {
		return err
	}
	m := req.Msg
	if err := names.Validate("guest", m.Name); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	q, err := logQuery(m)
	if err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	g := a.desiredByName(m.Name)
	if g == nil {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("guest %q is not on node %s", m.Name, a.id.NodeName))
	}
	send := func(es []logs.Entry) error {
		for _, e := range es {
			if err := stream.Send(&corpusv1.LogLine{Time: timestamppb.New(e.Time), Guest: g.Name, Source: e.Source,
				Process: e.Process, Release: e.Release, Line: e.Line}); err != nil {
				return err
			}
		}
		return nil
	}
	es, cur, err := a.logs.Read(g.Id, q)
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	if err := send(es); err != nil || !m.Follow {
		return err
	}
	q.Tail, q.Since = 0, time.Time{}
	for {
		es, next, changed, err := a.logs.After(g.Id, cur, q, 1024)
		if err != nil {
			return connect.NewError(connect.CodeInternal, err)
		}
		cur = next
		if err := send(es); err != nil {
			return err
		}
		if len(es) > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-time.After(time.Second):
			// The guest deleted or moved away: the stream ends, and the
			// coordinator says which.
			if cur := a.desiredByName(m.Name); cur == nil || cur.Id != g.Id {
				return nil
			}
		}
	}
}

// logQuery checks a logs request's filters.
func logQuery(m *corpusv1.GuestLogsRequest) (logs.Query, error) {
	q := logs.Query{Process: m.Process, Tail: int(m.Tail)}
	for _, src := range m.Sources {
		if !slices.Contains([]string{logs.SourceApp, logs.SourceDeploy, logs.SourceSystem}, src) {
			return q, fmt.Errorf("log source %q: want app, deploy or system", src)
		}
		q.Sources = append(q.Sources, src)
	}
	if m.Process != "" && !names.Process(m.Process) {
		return q, fmt.Errorf("process %q is not a process type name", m.Process)
	}
	if m.Tail < 0 {
		return q, errors.New("tail must not be negative")
	}
	if m.Since != nil {
		q.Since = m.Since.AsTime()
	}
	return q, nil
}

// desiredByName is the guest of that name this node runs, nil if none.
func (a *Agent) desiredByName(name string) *corpusv1.Guest {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, g := range a.desired {
		if g.Name == name {
			return g
		}
	}
	return nil
}

// guestNames gives a guest id's name and project, for shipped lines.
func (a *Agent) guestNames(id string) (guest, project string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if g := a.desired[id]; g != nil {
		guest = g.Name
	}
	return guest, a.guestProjects[id]
}
