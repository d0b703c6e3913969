package coordinator

import "sort"

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
