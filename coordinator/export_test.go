package coordinator

import (
	"context"
	"sort"

	corpusv1 "corpus/proto/corpus/v1"
)

// PassOn proposes cmd as a follower does, by passing it to the leader,
// whatever this replica's role.
func PassOn(s *Server, ctx context.Context, cmd *corpusv1.Command) (uint64, error) {
	return s.passOn(ctx, cmd)
}

// AgentClientNodes lists the node ids the server keeps agent clients for.
func AgentClientNodes(s *Server) []string {
	s.agentsMu.Lock()
	defer s.agentsMu.Unlock()
	ids := make([]string, 0, len(s.agents))
	for id := range s.agents {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
