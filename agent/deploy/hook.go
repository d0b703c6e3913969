package deploy

import (
	"context"
	"fmt"
	"io"

	"corpus/agent/deploy/githook"
)

// handleHook deploys the push a pre-receive hook hands over (the agent's
// end of githook's protocol).
func (s *gitServer) handleHook(ctx context.Context, req *githook.Request, out io.Writer) int {
	sess := s.lookup(req.Session)
	if sess == nil {
		fmt.Fprintln(out, "corpus: unknown push session")
		return 1
	}
	return s.p.push(ctx, sess, req, out)
}
