package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"corpus/agent/cache"
	"corpus/internal/rpc"
	"corpus/internal/version"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// enroll loads the agent's identity, or trades the join token for one and
// stores it. A refused token is final; an unreachable coordinator is
// retried until ctx ends.
func (a *Agent) enroll(ctx context.Context) error {
	id, err := a.cache.Identity()
	if err == nil {
		a.id = id
		if a.cfg.Name != "" && id.NodeName != a.cfg.Name {
			a.logger.Warn("node name differs from enrolled name; keeping the enrolled one", "enrolled", id.NodeName, "configured", a.cfg.Name)
		}
		return nil
	}
	if !errors.Is(err, cache.ErrNoIdentity) {
		return fmt.Errorf("reading identity: %w", err)
	}
	if a.cfg.JoinToken == "" {
		return errors.New("this agent is not enrolled: pass --join-token (create one with `corpus node token`)")
	}
	req := &corpusv1.EnrollRequest{
		JoinToken:    a.cfg.JoinToken,
		Name:         a.cfg.Name,
		Labels:       a.cfg.Labels,
		Capacity:     a.capacity(ctx),
		Drivers:      a.driverInfo(ctx),
		AgentAddress: a.advertise(),
		AgentVersion: version.Version,
	}
	backoff := 500 * time.Millisecond
	for {
		for _, addr := range a.cfg.Coordinators {
			c := corpusv1connect.NewAgentServiceClient(rpc.HTTPClient(), "http://"+addr)
			res, err := c.Enroll(ctx, connect.NewRequest(req))
			if err == nil {
				id := cache.Identity{
					NodeID: res.Msg.NodeId, NodeName: a.cfg.Name, NodeSecret: res.Msg.NodeSecret,
					ClusterID: res.Msg.ClusterId, AgentKey: res.Msg.AgentKey, Coordinator: addr, EnrolledAt: time.Now(),
				}
				if err := a.cache.SetIdentity(id); err != nil {
					return fmt.Errorf("storing identity: %w", err)
				}
				a.id = id
				a.logger.Info("enrolled", "node", id.NodeName, "node_id", id.NodeID, "cluster_id", id.ClusterID)
				return nil
			}
			switch connect.CodeOf(err) {
			case connect.CodePermissionDenied, connect.CodeInvalidArgument, connect.CodeAlreadyExists, connect.CodeUnauthenticated:
				return fmt.Errorf("enrolling with %s: %w", addr, err)
			}
			a.logger.Warn("coordinator unreachable for enrollment", "coordinator", addr, "error", err, "retry_in", backoff)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}
