package logs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/drivers"
	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
)

// Guests finds the guests of this node by name.
type Guests interface {
	// Guest returns the guest of that name this node runs and its
	// driver (nil, nil when there is none).
	Guest(name string) (*corpusv1.Guest, drivers.Driver)
}

// Reader serves the Logs procedure of the agent's API from the store; the
// caller is checked before.
type Reader struct {
	Store  *Store
	Guests Guests
	// Node is this node's name, for errors.
	Node string
}

// Logs streams a guest's stored lines, then (with follow) new ones until
// the guest leaves this node or the caller goes.
func (s Reader) Logs(ctx context.Context, req *connect.Request[corpusv1.GuestLogsRequest], stream *connect.ServerStream[corpusv1.LogLine]) error {
	m := req.Msg
	if err := names.Validate("guest", m.Name); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	q, err := logQuery(m)
	if err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	g, _ := s.Guests.Guest(m.Name)
	if g == nil {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("guest %q is not on node %s", m.Name, s.Node))
	}
	send := func(es []Entry) error {
		for _, e := range es {
			if err := stream.Send(&corpusv1.LogLine{Time: timestamppb.New(e.Time), Guest: g.Name, Source: e.Source,
				Process: e.Process, Release: e.Release, Line: e.Line}); err != nil {
				return err
			}
		}
		return nil
	}
	es, cur, err := s.Store.Read(g.Id, q)
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	if err := send(es); err != nil || !m.Follow {
		return err
	}
	q.Tail, q.Since = 0, time.Time{}
	for {
		es, next, changed, err := s.Store.After(g.Id, cur, q, 1024)
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
			if cur, _ := s.Guests.Guest(m.Name); cur == nil || cur.Id != g.Id {
				return nil
			}
		}
	}
}

// logQuery checks a logs request's filters.
func logQuery(m *corpusv1.GuestLogsRequest) (Query, error) {
	q := Query{Process: m.Process, Tail: int(m.Tail)}
	for _, src := range m.Sources {
		if !slices.Contains([]string{SourceApp, SourceDeploy, SourceSystem}, src) {
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
