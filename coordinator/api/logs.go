package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// Logs are kept on the guests' nodes (agent/logs); these calls pass a
// node's stream on. A follow outlives the node's stream: when it ends
// (the guest moved, the agent restarted) it opens again where the guest
// is now, from the last line passed on, and it ends when the guest is
// deleted, saying so.

// maxLogTail bounds a logs request's tail.
const maxLogTail = 100000

func ValidLogFilter(m *corpusv1.GuestLogsRequest) error {
	for _, src := range m.Sources {
		switch src {
		case "app", "deploy", "system":
		default:
			return ToConnect(Invalidf("log source %.40q: want app, deploy or system", src))
		}
	}
	if m.Process != "" {
		if err := ValidProcessName(m.Process); err != nil {
			return ToConnect(err)
		}
	}
	if m.Tail < 0 || m.Tail > maxLogTail {
		return ToConnect(Invalidf("tail %d: want 0 (every line kept) to %d", m.Tail, maxLogTail))
	}
	return nil
}

// StreamLogs passes on the log lines of guest id from its node, and with
// m.Follow goes on across the node's streams ending until the guest is
// deleted or ctx ends.
func (b *Backend) StreamLogs(ctx context.Context, id string, m *corpusv1.GuestLogsRequest, send func(*corpusv1.LogLine) error) error {
	req := proto.Clone(m).(*corpusv1.GuestLogsRequest)
	var last time.Time
	opened := false
	name := ""
	delay := 200 * time.Millisecond
	for {
		view := b.Store.Read()
		g := view.Guest(id)
		if opened && (g == nil || g.DesiredState == state.DesiredDeleted) {
			return send(&corpusv1.LogLine{Time: timestamppb.Now(), Guest: name, Source: "system", Line: "[corpus] the guest was deleted; its log ends here"})
		}
		if g == nil {
			return ToConnect(fmt.Errorf("guest %s: %w", id, state.ErrNotFound))
		}
		opened, name = true, g.Name
		n := view.Node(g.GetNodeId())
		var err error
		switch {
		case n == nil || n.AgentAddress == "":
			err = connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("guest %s is not placed on a node, so it has no log yet", g.Name))
		default:
			req.Name = g.Name
			if !last.IsZero() {
				// Again after a break: from the line after the last one.
				req.Since, req.Tail = timestamppb.New(last.Add(time.Nanosecond)), 0
			}
			var up *connect.ServerStreamForClient[corpusv1.LogLine]
			up, err = b.AgentClient(n).Logs(ctx, connect.NewRequest(req))
			err = RelayFromAgent(n, "log", up, err, func(l *corpusv1.LogLine) error {
				last = l.Time.AsTime()
				delay = 200 * time.Millisecond
				return send(l)
			})
		}
		if !m.Follow || ctx.Err() != nil {
			return err
		}
		var ce *connect.Error
		if err != nil && errors.As(err, &ce) && ce.Code() == connect.CodeInvalidArgument {
			return err
		}
		if last.IsZero() {
			last = time.Now().Add(-time.Nanosecond) // what the first stream had is passed on
			if m.Since != nil && m.Since.AsTime().After(last) {
				last = m.Since.AsTime()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}
