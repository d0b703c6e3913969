package logs

import (
	"context"
	"strings"
	"time"

	"corpus/agent/runtime/supervisor"
)

// FollowFunc streams a guest supervisor's journal from after (of run
// epoch) on, as runtime.Runtime.Follow does, until the stream ends.
type FollowFunc func(ctx context.Context, epoch string, after uint64, each func(*supervisor.FollowHeader, []supervisor.Record)) error

// Collect stores the app lines of guest id that follow streams, going
// on from the last one stored, until ctx ends. A stream that breaks or
// cannot open (no supervisor yet: the project has no processes) is
// opened again, after a wait that grows to a few seconds.
func (s *Store) Collect(ctx context.Context, id string, follow FollowFunc) {
	last, _ := s.LastApp(id)
	epoch, after := last.Epoch, last.Seq
	wait := 500 * time.Millisecond
	for ctx.Err() == nil {
		got := false
		err := follow(ctx, epoch, after, func(h *supervisor.FollowHeader, recs []supervisor.Record) {
			if h != nil {
				if h.Gap && epoch != "" {
					s.Append(id, Entry{Source: SourceSystem, Line: "[corpus] process output was lost here: the guest's supervisor restarted, " +
						"or printed more than it keeps while the agent was away"})
				}
				epoch = h.Epoch
				return
			}
			got = true
			es := make([]Entry, len(recs))
			for i, r := range recs {
				rel, _, _ := strings.Cut(r.Gen, ".")
				es[i] = Entry{Time: r.Time, Source: SourceApp, Process: r.Name, Release: rel, Line: r.Line, Epoch: epoch, Seq: r.Seq}
				after = r.Seq
			}
			if err := s.Append(id, es...); err != nil {
				s.cfg.Logger.Warn("storing a guest's log lines", "guest", id, "error", err)
			}
		})
		if ctx.Err() != nil {
			return
		}
		if got || err == nil {
			wait = 500 * time.Millisecond
		} else {
			wait = min(2*wait, 5*time.Second)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}
