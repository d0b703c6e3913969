package coordinator

import (
	"context"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator/api/backups"
	"corpus/coordinator/api/projects"
	"corpus/coordinator/autoscale"
	"corpus/coordinator/backupschedule"
	"corpus/coordinator/carotation"
	"corpus/coordinator/clusterversion"
	"corpus/coordinator/leader"
	"corpus/coordinator/scheduler"
	"corpus/coordinator/snapshotschedule"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// leaderRunner runs the leader duties while this replica leads: once it
// made sure the cluster is bootstrapped, the scheduler, the liveness
// checker, the scheduled backups, the autoscaler, the certificate
// orderer, the cluster version's raiser and the CA rotation's mover. (The series sampler, the
// zone, gossip and registration run on every replica: Serve starts them.)
func (s *Server) leaderRunner() *leader.Runner {
	return leader.New(leader.Config{
		Establish: s.establishLeadership,
		Logger:    s.logger,
		Loops: []leader.Loop{
			leader.Func(func(ctx context.Context) {
				scheduler.Loop(ctx, s.store, s.replica.propose, s.logger.With("component", "scheduler"), s.sched)
			}),
			leader.Func(func(ctx context.Context) {
				s.liveness.run(ctx, s.store, s.replica.propose, s.logger.With("component", "liveness"))
			}),
			&backupschedule.Loop{Store: s.store, Clock: s.cfg.Clock, Backups: backups.NewScheduled(s.api), Logger: s.logger},
			&autoscale.Loop{Store: s.store, Loads: agentLoads(s.agentClient), Scaler: projects.NewScaler(s.api), Interval: s.cfg.AutoscaleInterval, Logger: s.logger},
			leader.Func(s.api.CertificateLoop),
			&snapshotschedule.Loop{Config: s.cfg.Snapshots, Take: s.Take, Clock: s.cfg.Clock, Metrics: s.snaps, Logger: s.logger},
			&clusterversion.Loop{Store: s.store, Voters: s.voters, Propose: s.replica.propose, Logger: s.logger},
			&carotation.Loop{Rotator: s.caRotator, TrustPeriod: s.cfg.CATrustPeriod, Logger: s.logger},
		},
	})
}

// establishLeadership runs on gaining leadership, before the leader's
// loops: the log applied up to the new term, the cluster bootstrapped,
// and every node given a full timeout from now.
func (s *Server) establishLeadership(ctx context.Context) error {
	if err := s.replica.barrier(10 * time.Second); err != nil {
		return err
	}
	if err := s.ensureBootstrapped(ctx); err != nil {
		return err
	}
	s.liveness.reset()
	return nil
}

// agentLoads reads nodes' loads from their agents (dialled by the
// function): what the autoscaler and the series sampler sample.
type agentLoads func(*corpusv1.Node) corpusv1connect.NodeAgentServiceClient

func (dial agentLoads) Load(ctx context.Context, n *corpusv1.Node) (*corpusv1.LoadResponse, error) {
	res, err := dial(n).Load(ctx, connect.NewRequest(&corpusv1.LoadRequest{}))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}
