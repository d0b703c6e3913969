// Package clusterversion raises the group's cluster version, as etcd's
// leader does: while this replica leads, it watches the voters' records
// and, once the lowest server version among them is past the cluster
// version, proposes SetClusterVersion with it. It never lowers it (the
// state machine refuses that). Package compat says what the cluster
// version gates.
package clusterversion

import (
	"context"
	"log/slog"
	"time"

	"corpus/coordinator/compat"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// recheck is how often the loop looks again without a state change:
// the group's voters change outside the replicated state.
const recheck = 2 * time.Second

// Loop raises the cluster version while this replica leads.
type Loop struct {
	Store *state.Store
	// Voters lists the ids of the group's voters.
	Voters func() ([]string, error)
	// Propose commits a command through Raft.
	Propose func(context.Context, *corpusv1.Command) (uint64, error)
	Logger  *slog.Logger
}

// Run raises the cluster version until ctx ends.
func (l *Loop) Run(ctx context.Context) {
	logger := l.Logger.With("component", "cluster_version")
	for ctx.Err() == nil {
		v := l.Store.Read()
		v.WatchIndex()
		cur := v.ClusterVersion()
		if voters, err := l.Voters(); err != nil {
			logger.Debug("listing the voters", "error", err)
		} else if low, waiting := Lowest(v, voters); waiting == "" && cur.Less(low) {
			cmd := &corpusv1.Command{Cmd: &corpusv1.Command_SetClusterVersion{SetClusterVersion: &corpusv1.SetClusterVersion{Version: low.String()}}}
			if _, err := l.Propose(ctx, cmd); err != nil {
				logger.Warn("raising the cluster version", "from", cur.String(), "to", low.String(), "error", err)
			} else {
				logger.Info("cluster version raised: every voter runs it", "from", cur.String(), "to", low.String())
				continue
			}
		}
		wctx, cancel := context.WithTimeout(ctx, recheck)
		_ = v.Wait(wctx)
		cancel()
	}
}

// Lowest is the lowest server version the voters registered in the
// state v. waiting names a voter whose server version is not known (it
// has not registered since it joined: it may run an older release);
// the lowest is then not known either.
func Lowest(v *state.Snap, voters []string) (low compat.Version, waiting string) {
	for i, id := range voters {
		sv, err := compat.Parse(v.Coordinator(id).GetServerVersion())
		if err != nil || sv.IsZero() {
			return compat.Version{}, id
		}
		if i == 0 || sv.Less(low) {
			low = sv
		}
	}
	return low, ""
}
