package cli

import (
	"strings"
	"testing"
)

// TestRefusalNamesWhoRefused: when the coordinator cannot reach a
// node's agent, the CLI says which node, at which address, and what to
// check, and does not send the user to look at the coordinator, which
// answered; only a refusal of the coordinator's own address gets that
// hint.
func TestRefusalNamesWhoRefused(t *testing.T) {
	c := startCoordinator(t)
	c.startNodes("vm") // its agent "listens" at 127.0.0.1:1, where nothing does
	c.want("guest create web --image busybox --memory 64M", "guest web is running on node vm")
	const agentDown = "node vm (127.0.0.1:1) did not answer: connection refused; is its agent running? `corpus node list`"
	for _, args := range []string{"guest exec web -- true", "guest logs web"} {
		out, err := c.run("", strings.Fields(args)...)
		if err == nil {
			t.Errorf("corpus %s = %q, want an error", args, out)
			continue
		}
		if msg := describe(err); !strings.Contains(msg, agentDown) || strings.Contains(msg, "coordinator running") {
			t.Errorf("corpus %s printed %q; want %q, and no word of the coordinator", args, msg, agentDown)
		}
	}

	const closed = "127.0.0.1:1" // nothing listens on port 1
	_, err := c.run("", "--address", closed, "guest", "list")
	if msg := describe(err); err == nil || !strings.Contains(msg, closed) || !strings.Contains(msg, "connection refused") || !strings.Contains(msg, "is the coordinator running?") {
		t.Errorf("corpus guest list at %s (nothing listens) = %v, printed %q; want the address refused and the hint about the coordinator", closed, err, msg)
	}
}
